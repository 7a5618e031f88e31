"""How PPO acts in an actor: it samples from its policy and records each action's log-prob
under the acting version, and the value of the final observation where a time limit cut an
episode (its bootstrap). A recurrent policy also carries each env's hidden state across
rollouts, resets it where an episode ends, and records it at the start of every chunk of
``recurrence`` steps (the learner's sequences start there)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from asyncrl.algos.ppo.config import recurrence, state_rows
from asyncrl.core import SlotField


def slot_fields(spec: Any, rollout: int, num_envs: int, cfg: Any = None) -> tuple[SlotField, ...]:
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
