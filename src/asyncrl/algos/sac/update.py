"""Soft Actor-Critic (Haarnoja et al. 2018, with automatic temperature): the update rule alone.

Read top to bottom: one gradient step (critic, actor, temperature, Polyak) over the networks of
``networks.py``. Tensors in, statistics out as tensors: no processes, no logging, no host
synchronisation inside an update.

Cost is what matters here (the update is the bottleneck of SAC on a CPU), so:
* both Q networks run as one ensemble: weights stacked [2, in, out], one batched matmul a layer,
  computed feature-major (see QEnsemble.forward);
* the actor loss reads Q with *detached* critic weights, so its backward pass never computes
  gradients for the critic;
* Adam steps are fused kernels; the Polyak update is one ``_foreach`` call; the temperature's
  gradient is written down (it is one mean), not back-propagated.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from asyncrl.algos.sac.config import SACConfig
from asyncrl.algos.sac.fused import NAMES, SACStep, supports
from asyncrl.algos.sac.networks import QEnsemble, SquashedGaussianActor
from asyncrl.nets import autocast, floating_state


def _fused_adam(params, lr: float) -> torch.optim.Adam:
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, foreach=True)


class SAC:
    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        low,
        high,
        cfg: SACConfig,
        device: str | torch.device = "cpu",
        generator: torch.Generator | None = None,
        encoder: Callable[[], nn.Module] | None = None,
        hidden: tuple[int, ...] = (256, 256),
        target_entropy: float | None = None,
        precision: str = "fp32",
        fused: bool = True,
    ):
        """``encoder()`` makes a fresh observation encoder (one for the actor, one shared by the
        critics, one for the target critics); None: observations are flattened vectors of
        ``obs_dim``. ``precision`` bf16: the networks' passes under a bfloat16 autocast,
        their outputs, losses, gradients, weights and Adam's state float32. ``fused``: the step
        with its gradients written out (fused.py: the same bits, in either precision) where it
        applies; False: the autograd step, its reference."""
        self.cfg = cfg
        self.precision = precision
        # draws the policy's samples in updates (None: torch's global generator); a learner
        # passes its own, so that training leaves the global random state alone
        self.generator = generator
        # initialised on the CPU, then moved: the same initial networks on any device
        enc = encoder or (lambda: None)
        self.actor = SquashedGaussianActor(obs_dim, act_dim, hidden, low, high, encoder=enc()).to(
            device
        )
        self.q = QEnsemble(obs_dim, act_dim, hidden, encoder=enc()).to(device)
        self.q_target = QEnsemble(obs_dim, act_dim, hidden, encoder=enc()).to(device)
        self.q_target.load_state_dict(self.q.state_dict())
        self.q_target.requires_grad_(False)
        self.log_alpha = torch.zeros((), device=device, requires_grad=True)
        self.target_entropy = -float(act_dim) if target_entropy is None else target_entropy
        self.q_opt = _fused_adam(self.q.parameters(), cfg.q_lr)
        self.actor_opt = _fused_adam(self.actor.parameters(), cfg.policy_lr)
        self.alpha_opt = _fused_adam([self.log_alpha], cfg.policy_lr)
        self._q_params = list(self.q.parameters())
        self._target_params = list(self.q_target.parameters())
        # critics read actions, and the temperature log-probs, in tanh's [-1, 1] coordinates;
        # a checkpoint saved before (no "action_units") trained in the env's: it goes on so
        self.env_units = False
        self.fused = SACStep(self) if fused and supports(self) else None

    def _critic_action(self, a: torch.Tensor) -> torch.Tensor:
        return a if self.env_units else self.actor.unit(a)

    def _sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A policy action as the critics read it, and its log-prob."""
        a, logp = self.actor(obs, generator=self.generator)
        if self.env_units:
            return a, logp - self.actor.log_scale()
        return self.actor.unit(a), logp

    @torch.no_grad()
    def critic_target(self, b: dict[str, torch.Tensor], alpha: torch.Tensor) -> torch.Tensor:
        """r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s')."""
        next_a, next_logp = self._sample(b["next_obs"])
        next_q = self.q_target(b["next_obs"], next_a).min(0).values - alpha * next_logp
        return b["reward"] + self.cfg.gamma * (1.0 - b["terminated"]) * next_q

    def update(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        """One gradient step on a batch (obs, action, reward, next_obs, terminated).

        Returns [critic loss, actor loss, alpha, entropy estimate, mean Q] as one tensor.
        A truncated transition bootstraps like any other (its next_obs is the final obs);
        only ``terminated`` cuts the target.
        """
        if self.fused is not None and not self.env_units:  # an old checkpoint's units: autograd
            return self.fused(b)
        cfg = self.cfg
        alpha = self.log_alpha.detach().exp()
        device = self.log_alpha.device
        # --- critic
        with autocast(self.precision, device):
            target = self.critic_target(b, alpha)
            q = self.q(b["obs"], self._critic_action(b["action"]))
        q_loss = 0.5 * (q - target).square().mean(1).sum()
        self.q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        self.q_opt.step()
        # --- actor: alpha log pi(a|s) - min_i Q_i(s, a), critic weights detached
        with autocast(self.precision, device):
            a, logp = self._sample(b["obs"])
            q_pi = self.q(b["obs"], a, frozen=True).min(0).values
        actor_loss = (alpha * logp - q_pi).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        # --- temperature: keep the policy's entropy near target_entropy. The loss
        # -log_alpha * mean(log pi + target_entropy) has the gradient -mean(log pi + target_entropy)
        logp = logp.detach()
        self.log_alpha.grad = -(logp + self.target_entropy).mean()
        self.alpha_opt.step()
        # --- Polyak averaging of the target critics
        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._q_params, cfg.tau)
        return torch.stack(
            [q_loss.detach(), actor_loss.detach(), alpha, -logp.mean(), q.detach().mean()]
        )

    def take_nonfinite(self) -> dict[str, tuple[int, float]]:
        """Per optimizer, the fused steps not applied (NaN or inf gradient) since the last call
        and their mean gradient norm (one host sync: call it where the statistics are read)."""
        if self.fused is None:
            return {}
        counts = self.fused.nonfinite.tolist()
        self.fused.nonfinite.zero_()
        pairs = zip(NAMES, counts, strict=True)
        return {name: (round(bad), norm / max(bad, 1.0)) for name, (bad, norm) in pairs}

    def state_tensors(self) -> list[torch.Tensor]:
        """Every float an update changes: actor, critics, target critics and log-temperature."""
        return [
            *floating_state(self.actor),
            *floating_state(self.q),
            *floating_state(self.q_target),
            self.log_alpha,
        ]

    STATS = ("loss/q", "loss/actor", "charts/alpha", "charts/entropy", "charts/q_mean")
    LOSSES = ("loss/q", "loss/actor")

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"critic": self.q_opt, "actor": self.actor_opt, "temperature": self.alpha_opt}

    def state_dict(self) -> dict:
        extra = {} if self.generator is None else {"generator": self.generator.get_state()}
        return {
            **extra,
            "action_units": "env" if self.env_units else "unit",
            "actor": self.actor.state_dict(),
            "q": self.q.state_dict(),
            "q_target": self.q_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "q_opt": self.q_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        if self.generator is not None and "generator" in state:  # older checkpoints: none
            self.generator.set_state(state["generator"])
        self.env_units = state.get("action_units", "env") == "env"
        self.actor.load_state_dict(state["actor"])
        self.q.load_state_dict(state["q"])
        self.q_target.load_state_dict(state["q_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.q_opt.load_state_dict(state["q_opt"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
