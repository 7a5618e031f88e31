"""Tiny envs with known behaviour for the runtime tests (importable as ``fake_envs:...``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class Countdown(gym.Env):
    """Obs is the step count; the episode terminates at step ``terminate_at`` (if set); a
    TimeLimit of ``max_episode_steps`` truncates it otherwise. Reward 1 per step."""

    def __init__(self, terminate_at: int | None = None):
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate_at = terminate_at
        self.t = 0

    def _obs(self):
        return np.array([self.t, 1.0], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return self._obs(), 1.0, terminated, False, {}


class CrashAfter(Countdown):
    """Raises inside ``step`` after a few hundred steps: an env bug in an actor."""

    def step(self, action):
        if self.t >= 300:
            raise RuntimeError("boom: simulated env failure")
        return super().step(action)


gym.register("Countdown-v0", entry_point=Countdown, max_episode_steps=5)
gym.register(
    "CountdownTerminates-v0", entry_point=Countdown, max_episode_steps=5, kwargs={"terminate_at": 3}
)
gym.register("CrashAfter-v0", entry_point=CrashAfter, max_episode_steps=1000)


class MultiDiscreteActions(Countdown):
    """An action space PPO here does not handle."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.MultiDiscrete([2, 3])


gym.register("MultiDiscreteActions-v0", entry_point=MultiDiscreteActions, max_episode_steps=5)
