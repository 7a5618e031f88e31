"""How DQN acts in an actor: epsilon-greedy on its action values, with the exploration
probability of the version it acts with (part of the published network)."""

from __future__ import annotations

from typing import Any

import torch

from asyncrl.learning.offpolicy import FinalObsActing


class DQNActing(FinalObsActing):
    def __init__(self, module: Any, generator: torch.Generator):
        self.module, self.generator = module, generator

    def act(self, obs: torch.Tensor, t: int, slot: Any) -> torch.Tensor:
        action, _ = self.module.act(obs, generator=self.generator)
        return action
