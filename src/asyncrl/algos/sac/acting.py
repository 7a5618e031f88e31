"""How SAC acts in an actor: uniformly at random until the learner publishes its first update
(the warm-up of ``learning_starts`` transitions), then a sample of its squashed Gaussian."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from asyncrl.learning.offpolicy import FinalObsActing


class SACActing(FinalObsActing):
    def __init__(self, module: Any, generator: torch.Generator, low: np.ndarray, high: np.ndarray):
        self.module, self.generator = module, generator
        self.low, self.high = low, high
        self.warmup = True

    def start_rollout(self, slot: Any, version: int) -> None:
        self.warmup = version == 0

    def act(self, obs: torch.Tensor, t: int, slot: Any) -> torch.Tensor:
        if self.warmup:
            u = torch.rand((obs.shape[0], self.low.shape[0]), generator=self.generator).numpy()
            return torch.from_numpy(self.low + u * (self.high - self.low))
        action, _ = self.module.act(obs, generator=self.generator)
        return action
