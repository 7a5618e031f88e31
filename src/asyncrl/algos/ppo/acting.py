"""How PPO acts in an actor: it samples from its policy and records each action's log-prob
under the acting version, and the value of the final observation where a time limit cut an
episode (its bootstrap)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from asyncrl.core import SlotField


def slot_fields(spec: Any, rollout: int, num_envs: int) -> tuple[SlotField, ...]:
    T, K = rollout, num_envs
    return (
        ("logp", (T, K), "float32"),  # behaviour log-prob of each action
        ("trunc_values", (T, K), "float32"),  # V(final obs) where truncated
    )


class PPOActing:
    def __init__(self, module: Any, generator: torch.Generator, obs_dtype: np.dtype):
        self.module, self.generator, self.obs_dtype = module, generator, obs_dtype

    def start_rollout(self, slot: Any, version: int) -> None:
        slot.trunc_values.fill(0.0)

    def act(self, obs: torch.Tensor, t: int, slot: Any) -> torch.Tensor:
        action, logp = self.module.act(obs, generator=self.generator)
        slot.logp[t] = logp.numpy()
        return action

    def episodes_ended(
        self, slot: Any, t: int, ended: np.ndarray, truncated: np.ndarray, final_obs: Any
    ) -> None:
        cut = ended[truncated[ended] & ~slot.terminated[t, ended]]
        if cut.size:
            final = np.stack([final_obs[i] for i in cut]).astype(self.obs_dtype, copy=False)
            slot.trunc_values[t, cut] = self.module.value(torch.from_numpy(final)).numpy()
