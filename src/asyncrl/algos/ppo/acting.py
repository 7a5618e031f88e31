"""How PPO acts in an actor: it samples from its policy and records each action's log-prob
under the acting version, and the value of the final observation where a time limit cut an
episode (its bootstrap). A recurrent policy also carries each env's hidden state across
rollouts, resets it where an episode ends, and records it at the start of every chunk of
``recurrence`` steps (the learner's sequences start there)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.algos.ppo.config import recurrence, state_rows
from asyncrl.core import SlotField
from asyncrl.nets import LOG_2PI, as_float

if TYPE_CHECKING:
    from asyncrl.config import Settings


def slot_fields(
    spec: Any, rollout: int, num_envs: int, cfg: Settings | None = None
) -> tuple[SlotField, ...]:
    T, K = rollout, num_envs
    fields: tuple[SlotField, ...] = (
        ("logp", (T, K), "float32"),  # behaviour log-prob of each action
        ("trunc_values", (T, K), "float32"),  # V(final obs) where truncated
    )
    if cfg is not None and cfg.recurrent != "none":
        chunks = T // recurrence(cfg)
        # the hidden state each env acted with at the first step of every chunk
        fields += (("rnn_states", (chunks, K, state_rows(cfg.recurrent), cfg.rnn_size), "float32"),)
    return fields


class PPOActing:
    def __init__(
        self, module: Any, generator: torch.Generator, obs_dtype: np.dtype, recurrence: int = 0
    ):
        self.module, self.generator, self.obs_dtype = module, generator, obs_dtype
        self.recurrence = recurrence  # > 0: a recurrent policy, chunks of this many steps
        self.state: torch.Tensor | None = None  # [K, S, H], made at the first step

    def start_rollout(self, slot: Any, version: int) -> None:
        slot.trunc_values.fill(0.0)

    def act(self, obs: torch.Tensor, t: int, slot: Any) -> torch.Tensor:
        if not self.recurrence:
            action, logp = self.module.act(obs, generator=self.generator)
        else:
            if self.state is None:
                self.state = self.module.initial_state(obs.shape[0])
            if t % self.recurrence == 0:
                slot.rnn_states[t // self.recurrence] = self.state.numpy()
            action, logp, self.state = self.module.act(
                obs, generator=self.generator, state=self.state
            )
        slot.logp[t] = logp.numpy()
        return action

    def episodes_ended(
        self, slot: Any, t: int, ended: np.ndarray, truncated: np.ndarray, final_obs: Any
    ) -> None:
        cut = ended[truncated[ended] & ~slot.terminated[t, ended]]
        if cut.size:
            final = torch.from_numpy(
                np.stack([final_obs[i] for i in cut]).astype(self.obs_dtype, copy=False)
            )
            if self.recurrence:  # the core reads the final observation after step t's state
                values = self.module.value(final, self.state[cut])
            else:
                values = self.module.value(final)
            slot.trunc_values[t, cut] = values.numpy()
        if self.recurrence and self.state is not None:
            self.state[ended] = 0.0  # the next episode starts from zeros

    def state_dict(self) -> dict[str, Any]:
        """The envs' hidden states (a recurrent policy's), for an exact resume."""
        return {} if self.state is None else {"rnn_state": self.state.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "rnn_state" in state:
            self.state = torch.as_tensor(state["rnn_state"]).clone()


class JointPPOActing:
    """A population's feed-forward MLP policies acting in one batched forward: their layers
    stacked (one ``baddbmm`` per layer for all policies), each policy's envs gathered into its
    row of the batch, then each policy samples with its own generator as
    :meth:`ActorCritic.act` does. Recurrent and image policies act in turn, one policy alone
    (``of`` gives None)."""

    def __init__(self, actings: list[PPOActing]):
        self.actings = actings
        self.modules = [a.module for a in actings]
        first = self.modules[0]
        self.discrete, self.norm = first.discrete, first.obs_norm.enabled
        self.clip = first.obs_norm.clip
        self.steps = list(first.pi)  # Linear layers and the activations between them

    @classmethod
    def of(cls, actings: list[PPOActing]) -> JointPPOActing | None:
        # one policy has nothing to join (its own forward is the exact one); policies with an
        # action mask act in turn (the mask's entries are no input of the layers stacked here)
        recurrent = any(a.recurrence for a in actings)
        first = actings[0].module
        if len(actings) < 2 or recurrent or first.encoder is not None or first.n_mask:
            return None
        return cls(actings)

    @torch.no_grad()
    def refresh(self) -> None:
        ms = self.modules
        if self.norm:  # as RunningNorm.forward computes them
            self.mean = torch.stack([m.obs_norm.mean.float() for m in ms]).unsqueeze(1)
            self.std_obs = torch.stack([m.obs_norm.scale().float() for m in ms]).unsqueeze(1)
            self.std_obs += 1e-8
        self.layers = []
        for i, step in enumerate(self.steps):
            if isinstance(step, torch.nn.Linear):
                w = torch.stack([m.pi[i].weight for m in ms]).transpose(1, 2).contiguous()
                self.layers.append((w, torch.stack([m.pi[i].bias for m in ms]).unsqueeze(1)))
            else:
                self.layers.append(step)
        if not self.discrete:
            log_std = torch.stack([m.log_std for m in ms]).unsqueeze(1)  # [P, 1, A]
            self.std = (log_std.exp(), log_std)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, groups) -> list[torch.Tensor | None]:
        sizes = [len(envs) for envs, _, _ in groups]
        P, M = len(groups), max(sizes)
        index = np.zeros((P, M), dtype=np.int64)
        for p, (envs, _, _) in enumerate(groups):
            index[p, : sizes[p]] = envs
        h = as_float(obs)[torch.from_numpy(index)]  # [P, M, *obs_shape]
        if self.norm:
            h = torch.clamp((h - self.mean) / self.std_obs, -self.clip, self.clip)
        h = h.flatten(2)
        for layer in self.layers:
            h = torch.baddbmm(layer[1], h, layer[0]) if isinstance(layer, tuple) else layer(h)
        gens = [a.generator for a in self.actings]
        if self.discrete:
            logits = h.log_softmax(-1)
            a = torch.zeros((P, M), dtype=torch.int64)
            for p in range(P):  # each policy draws from its own generator
                if sizes[p]:
                    probs = logits[p, : sizes[p]].exp()
                    a[p, : sizes[p]] = torch.multinomial(probs, 1, generator=gens[p]).squeeze(-1)
            logp = logits.gather(-1, a.unsqueeze(-1)).squeeze(-1)
        else:
            draws = [
                torch.randn((n, h.shape[-1]), generator=g) for n, g in zip(sizes, gens, strict=True)
            ]
            if min(sizes) == M:
                noise = torch.stack(draws)
            else:
                noise = torch.zeros_like(h)
                for p, draw in enumerate(draws):
                    noise[p, : sizes[p]] = draw
            std, log_std = self.std
            a = h + noise * std
            logp = (-0.5 * noise.square() - log_std - 0.5 * LOG_2PI).sum(-1)
        logp_np = logp.numpy()
        actions: list[torch.Tensor | None] = []
        for p, (_, slot, t) in enumerate(groups):
            if sizes[p]:
                slot.logp[t] = logp_np[p, : sizes[p]]
            actions.append(a[p, : sizes[p]] if sizes[p] else None)
        return actions
