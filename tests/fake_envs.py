"""Tiny envs with known behaviour for the runtime tests (importable as ``fake_envs:...``)."""

from __future__ import annotations

import os
import time

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


class RaiseOnce(Countdown):
    """The first env of this process to reach step 20 raises there, once: an env error that a
    recreated env does not repeat (``--on-env-error restart`` can carry on)."""

    fired = False

    def step(self, action):
        if self.t >= 20 and not RaiseOnce.fired:
            RaiseOnce.fired = True
            raise RuntimeError("boom once: simulated env failure")
        return super().step(action)


class BadObsOnce(Countdown):
    """The first env of this process to reach step 20 returns an observation of the wrong shape,
    once: the env itself does not raise, the actor's batching does (an actor crash, not an env
    error), and a fresh actor does not repeat it. With $ASYNCRL_TEST_BADOBS_FLAG set, "once" is
    across processes: whichever first creates that file (a fresh Ray actor is a fresh process)."""

    fired = False

    def step(self, action):
        obs, *rest = super().step(action)
        if (
            self.t >= 20
            and not BadObsOnce.fired
            and _first(os.environ.get("ASYNCRL_TEST_BADOBS_FLAG"))
        ):
            BadObsOnce.fired = True
            obs = np.zeros(5, dtype=np.float32)
        return (obs, *rest)


def _first(flag: str | None) -> bool:
    """True for the one caller that creates ``flag`` (always True without a flag)."""
    if not flag:
        return True
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


class HangOnce(Countdown):
    """Sleeps for a minute at step 20 if the file named by $ASYNCRL_TEST_HANG_FLAG does not exist
    yet (and creates it): one hang per test, whichever process meets it first."""

    def step(self, action):
        flag = os.environ.get("ASYNCRL_TEST_HANG_FLAG")
        if self.t >= 20 and flag and not os.path.exists(flag):
            open(flag, "w").close()
            time.sleep(60)
        return super().step(action)


gym.register("RaiseOnce-v0", entry_point=RaiseOnce, max_episode_steps=50)
gym.register("BadObsOnce-v0", entry_point=BadObsOnce, max_episode_steps=50)
gym.register("HangOnce-v0", entry_point=HangOnce, max_episode_steps=50)


class SlowSteps(Countdown):
    """5 ms per step: an iteration long enough to signal a run in the middle of one."""

    def step(self, action):
        time.sleep(0.005)
        return super().step(action)


gym.register("SlowSteps-v0", entry_point=SlowSteps, max_episode_steps=50)
