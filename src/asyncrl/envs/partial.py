"""Partially observed envs: a wrapper that hides parts of an observation, and CartPole with
its velocities hidden (``asyncrl/CartPoleNoVel-v1``), the task a recurrent policy must
remember to solve (docs: Guides, recurrent policies)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

MASKED_CARTPOLE = "asyncrl/CartPoleNoVel-v1"


class MaskObservation(gym.ObservationWrapper):
    """Keeps only the entries ``keep`` of a flat Box observation: e.g. CartPole's cart
    position and pole angle (``keep=(0, 2)``), without their velocities."""

    def __init__(self, env: gym.Env, keep: Sequence[int]):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"MaskObservation needs a flat Box observation, got {space}")
        self.keep = np.asarray(keep, dtype=np.int64)
        self.observation_space = gym.spaces.Box(
            space.low[self.keep], space.high[self.keep], dtype=space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


def masked_velocity_cartpole(**kwargs: Any) -> gym.Env:
    """CartPole observing ``[x, theta]`` only (no cart or pole velocity)."""
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    return MaskObservation(CartPoleEnv(**kwargs), keep=(0, 2))


def register() -> None:
    if MASKED_CARTPOLE not in gym.registry:
        gym.register(
            MASKED_CARTPOLE,
            entry_point=masked_velocity_cartpole,
            max_episode_steps=500,
            reward_threshold=475.0,
        )
