"""Double DQN (van Hasselt et al. 2016) with a target network and the Huber loss: the update
rule alone, tensors in and statistics out (no host synchronisation inside an update on an
accelerator; on the CPU, where it waits for nothing, the fused step reads its gradient norm).
An MLP Q-network takes the step with its gradients written out (fused.py); others, and
``fused=False`` (the reference it is tested and benchmarked against), take autograd's. With an
action mask (the observation's tail) the next action is picked among the legal ones only, as
masked DQN does (RLlib's, MaskablePPO's logits): an illegal action's value never enters a
target."""

from __future__ import annotations

import copy

import torch
from torch import nn

from asyncrl.algos.dqn.config import DQNConfig
from asyncrl.algos.dqn.fused import QStep, supports
from asyncrl.algos.dqn.networks import masked_argmax


class DQN:
    STATS = ("loss/td", "charts/q_mean", "grad_norm")
    LOSSES = ("loss/td",)  # checked for NaN and inf after each update

    def __init__(
        self,
        q: nn.Module,
        cfg: DQNConfig,
        target_updates_every: int,
        fused: bool = True,
        compile: bool = False,
    ):
        self.q = q
        self.q_target = copy.deepcopy(q).requires_grad_(False)
        self.params = [p for p in q.parameters() if p.requires_grad]
        self._q_state = _learned(q)
        self._target_state = _learned(self.q_target)
        try:
            self.optimizer = torch.optim.Adam(self.params, lr=cfg.lr, fused=True)
        except (RuntimeError, TypeError):
            self.optimizer = torch.optim.Adam(self.params, lr=cfg.lr, foreach=True)
        self.target_updates_every = target_updates_every
        self.updates = 0
        self.fused = (
            QStep(q, self.q_target, cfg, self.optimizer, compile) if fused and supports(q) else None
        )
        self.cfg = cfg
        # the fused step's steps not applied (NaN or inf gradient) and the sum of their norms,
        # since taken (take_nonfinite); the autograd step's are caught by the optimizer's hook
        self._nonfinite = torch.zeros(2, device=self.params[0].device)
        # the fused step's lr, a tensor: a compiled step does not recompile when it moves
        self._lr = torch.zeros((), device=self.params[0].device)

    @property
    def cfg(self) -> DQNConfig:
        return self._cfg

    @cfg.setter
    def cfg(self, cfg: DQNConfig) -> None:  # PBT's and the learner's new settings reach both
        self._cfg = cfg
        if self.fused is not None:
            self.fused.cfg = cfg

    def update(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        """One gradient step on a batch (obs, action, reward, next_obs, discount: gamma^steps
        where the episode goes on, 0 where it terminated). Returns [TD loss, mean Q, grad
        norm] as one tensor."""
        if self.fused is not None:
            stats = self._fused_step(b)
        else:
            stats = self._autograd_step(b)
        self.updates += 1
        if self.updates % self.target_updates_every == 0:
            with torch.no_grad():
                torch._foreach_lerp_(self._target_state, self._q_state, self.cfg.tau)
        return stats

    def _fused_step(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        self.fused.pack()  # cheap when packed; a loaded checkpoint or Hogwild! may move state
        if self.fused.compiled or not self.fused.fused_adam:  # else Adam reads the float
            self._lr.fill_(self.optimizer.param_groups[0]["lr"])
        keys = ("obs", "action", "reward", "next_obs", "discount")
        out = self.fused(self._lr, *(b[k] for k in keys))
        self._nonfinite += out[3:]
        return out[:3]

    def take_nonfinite(self) -> tuple[int, float]:
        """The fused steps not applied since the last call and their mean gradient norm (one
        host sync: call it where the statistics are read)."""
        bad, norm = self._nonfinite.tolist()
        self._nonfinite.zero_()
        return round(bad), norm / max(bad, 1.0)

    def _autograd_step(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        cfg = self.cfg
        with torch.no_grad():
            next_q = self.q_target(b["next_obs"])
            legal = self.q.legal(b["next_obs"])  # None without an action mask
            if cfg.double:  # the online network picks the action, the target one values it
                pick = masked_argmax(self.q(b["next_obs"]), legal).unsqueeze(-1)
                next_v = next_q.gather(-1, pick).squeeze(-1)
            elif legal is None:
                next_v = next_q.max(-1).values
            else:  # the max over the legal next actions only
                next_v = next_q.masked_fill(~legal, float("-inf")).max(-1).values
            target = b["reward"] + b["discount"] * next_v
        q = self.q(b["obs"]).gather(-1, b["action"].long().unsqueeze(-1)).squeeze(-1)
        if cfg.td_loss == "huber":
            loss = nn.functional.smooth_l1_loss(q, target)
        else:
            loss = nn.functional.mse_loss(q, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.max_grad_norm > 0:
            norm = nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm, foreach=True)
        else:
            norm = torch.zeros(())
        self.optimizer.step()
        return torch.stack([loss.detach(), q.detach().mean(), norm.detach()])

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"q": self.optimizer}

    def state_tensors(self) -> list[torch.Tensor]:
        """Every float an update changes: the online and target networks (not epsilon, which
        each Hogwild! worker keeps on its own schedule)."""
        return [*self._q_state, *self._target_state]

    def state_dict(self) -> dict:
        return {
            "q": self.q.state_dict(),
            "q_target": self.q_target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        self.q.load_state_dict(state["q"])
        self.q_target.load_state_dict(state["q_target"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr  # the rate given now (it may change on resume)
        self.updates = int(state["updates"])


def _learned(q: nn.Module) -> list[torch.Tensor]:
    """The network's floating-point state but its exploration probability."""
    state = q.state_dict(keep_vars=True)
    return [t for name, t in state.items() if name != "epsilon" and t.is_floating_point()]
