"""Partially observed envs: a wrapper that hides parts of an observation, and two tasks with
their velocities hidden that a recurrent policy must remember to solve (docs: Guides,
recurrent policies): CartPole (``asyncrl/CartPoleNoVel-v1``) and, harder, LunarLander
(``asyncrl/LunarLanderNoVel-v3``, Box2D; the "-P" variant of Ni et al. 2022)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

MASKED_CARTPOLE = "asyncrl/CartPoleNoVel-v1"
MASKED_LUNARLANDER = "asyncrl/LunarLanderNoVel-v3"


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


def masked_velocity_lunar_lander(**kwargs: Any) -> gym.Env:
    """LunarLander observing ``[x, y, angle, left leg, right leg]`` only (no linear or angular
    velocity); needs ``pip install 'asyncrl[box2d]'``."""
    from gymnasium.envs.box2d.lunar_lander import LunarLander

    return MaskObservation(LunarLander(**kwargs), keep=(0, 1, 4, 6, 7))


def register() -> None:
    for env_id, entry_point, steps, threshold in (
        (MASKED_CARTPOLE, masked_velocity_cartpole, 500, 475.0),
        (MASKED_LUNARLANDER, masked_velocity_lunar_lander, 1000, 200.0),
    ):
        if env_id not in gym.registry:
            gym.register(
                env_id,
                entry_point=entry_point,
                max_episode_steps=steps,
                reward_threshold=threshold,
            )
