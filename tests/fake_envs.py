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


def _hang(flag: str) -> None:
    """Sleep a minute, then create ``<flag>-woke``: a hung env whose actor was killed, as it
    should be, never wakes, so the file shows the run waited the hang out instead."""
    time.sleep(60)
    open(flag + "-woke", "w").close()


class HangOnce(Countdown):
    """Sleeps for a minute at step 20 if the file named by $ASYNCRL_TEST_HANG_FLAG does not exist
    yet (and creates it): one hang per test, whichever process meets it first."""

    def step(self, action):
        flag = os.environ.get("ASYNCRL_TEST_HANG_FLAG")
        if self.t >= 20 and flag and not os.path.exists(flag):
            open(flag, "w").close()
            _hang(flag)
        return super().step(action)


class HangInReset(Countdown):
    """Sleeps for two minutes in its first reset -- an env that hangs while its actor starts --
    once across processes: in whichever first creates the file $ASYNCRL_TEST_HANG_FLAG names."""

    def reset(self, *, seed=None, options=None):
        flag = os.environ.get("ASYNCRL_TEST_HANG_FLAG")
        if flag and _first(flag):
            time.sleep(120)
        return super().reset(seed=seed, options=options)


class HangFirst(Countdown):
    """Sleeps for a minute at step 20 in whichever process first creates the file
    ``$ASYNCRL_TEST_HANG_FLAG-first`` (atomically: of actors that reach step 20 together, one
    hangs and the others go on)."""

    def step(self, action):
        flag = os.environ.get("ASYNCRL_TEST_HANG_FLAG")
        if self.t >= 20 and flag and _first(flag + "-first"):
            _hang(flag + "-first")
        return super().step(action)


class CrashIfFlag(Countdown):
    """Raises at every step while the file named by $ASYNCRL_TEST_CRASH_FLAG exists: an env
    that trained fine and fails from the first step of a later (resumed) run."""

    def step(self, action):
        flag = os.environ.get("ASYNCRL_TEST_CRASH_FLAG")
        if flag and os.path.exists(flag):
            raise RuntimeError("boom: the crash flag is set")
        return super().step(action)


gym.register("RaiseOnce-v0", entry_point=RaiseOnce, max_episode_steps=50)
gym.register("HangFirst-v0", entry_point=HangFirst, max_episode_steps=50)
gym.register("HangInReset-v0", entry_point=HangInReset, max_episode_steps=50)
gym.register("CrashIfFlag-v0", entry_point=CrashIfFlag, max_episode_steps=50)
gym.register("BadObsOnce-v0", entry_point=BadObsOnce, max_episode_steps=50)
gym.register("HangOnce-v0", entry_point=HangOnce, max_episode_steps=50)


class DotSide(gym.Env):
    """A pixel task that needs the pixels: a 12x12 one-channel image, black but for one white
    dot at a random place in its left or right half; action 0 says left, 1 right, and earns 1
    when right. Every step shows a new dot; 8 steps an episode (a TimeLimit truncates), so a
    random policy returns 4 and a perfect one 8. ``hwc``: the image as 12x12x1 instead of
    1x12x12. ``continuous``: one action in [-1, 1], its sign says the side (for SAC)."""

    SIZE = 12

    def __init__(self, hwc: bool = False, continuous: bool = False):
        shape = (self.SIZE, self.SIZE, 1) if hwc else (1, self.SIZE, self.SIZE)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        if continuous:
            self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        else:
            self.action_space = gym.spaces.Discrete(2)
        self.hwc, self.continuous = hwc, continuous
        self.side = 0

    def _obs(self):
        self.side = int(self.np_random.integers(2))
        half = self.SIZE // 2
        img = np.zeros((self.SIZE, self.SIZE), np.uint8)
        row = int(self.np_random.integers(self.SIZE))
        col = int(self.np_random.integers(half)) + half * self.side
        img[row, col] = 255
        return img[:, :, None] if self.hwc else img[None]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        said = int(np.asarray(action).reshape(-1)[0] > 0) if self.continuous else int(action)
        reward = float(said == self.side)
        return self._obs(), reward, False, False, {}


gym.register("DotSide-v0", entry_point=DotSide, max_episode_steps=8)
gym.register("DotSideHWC-v0", entry_point=DotSide, max_episode_steps=8, kwargs={"hwc": True})
gym.register(
    "DotSideContinuous-v0", entry_point=DotSide, max_episode_steps=8, kwargs={"continuous": True}
)


class FakeLives(gym.Env):
    """An Atari-like game with lives, for the Atari training wrapper: 3 lives, one lost every 5
    steps, game over after 15; reward 3 every step (clipped to 1 for training, a score of 45 a
    game); ``info["lives"]`` as ALE reports it. The observation is the step count."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 255, (1,), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def _lives(self):
        return 3 - self.t // 5

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], np.uint8), {"lives": self._lives()}

    def step(self, action):
        self.t += 1
        return (
            np.array([self.t], np.uint8),
            3.0,
            self._lives() == 0,
            False,
            {"lives": self._lives()},
        )


gym.register("FakeLives-v0", entry_point=FakeLives)


class SlowSteps(Countdown):
    """5 ms per step: an iteration long enough to signal a run in the middle of one."""

    def step(self, action):
        time.sleep(0.005)
        return super().step(action)


gym.register("SlowSteps-v0", entry_point=SlowSteps, max_episode_steps=50)


class NapSteps(Countdown):
    """Half a second per step, slept in 50-ms naps: a process stopped mid-step (SIGSTOP) and
    continued is still in that step for a while after, however long it was stopped."""

    def step(self, action):
        for _ in range(10):
            time.sleep(0.05)
        return super().step(action)


gym.register("NapSteps-v0", entry_point=NapSteps, max_episode_steps=50)


class RecordsClose(Countdown):
    """Leaves a file named by its process id in $ASYNCRL_TEST_CLOSED_DIR when closed: which
    actor processes closed their envs (ran their cleanup) before they ended."""

    def close(self):
        folder = os.environ.get("ASYNCRL_TEST_CLOSED_DIR")
        if folder:
            open(os.path.join(folder, str(os.getpid())), "a").close()
        super().close()


gym.register("RecordsClose-v0", entry_point=RecordsClose, max_episode_steps=50)


class ShiftedActions(Countdown):
    """Actions are Discrete(3, start=-1): -1, 0 and 1; anything else raises, as an env that
    indexes with its action would. Reward 1 for action 1, the last."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Discrete(3, start=-1)

    def step(self, action):
        if not self.action_space.contains(int(action)):
            raise ValueError(f"action {action} is not one of -1, 0, 1")
        obs, _, terminated, truncated, info = super().step(action)
        return obs, float(int(action) == 1), terminated, truncated, info


gym.register("ShiftedActions-v0", entry_point=ShiftedActions, max_episode_steps=5)


class UnboundedActions(Countdown):
    """One continuous action with infinite bounds; it must be a finite number."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def step(self, action):
        if not np.isfinite(action).all():
            raise ValueError(f"action {action} is not finite")
        return super().step(action)


gym.register("UnboundedActions-v0", entry_point=UnboundedActions, max_episode_steps=5)


class Poisoned(gym.Wrapper):
    """Classic-control env whose ``what`` (obs or reward) becomes ``value`` from its ``after``-th
    step on (counted over its episodes): a sensor that fails, a reward that overflows."""

    def __init__(self, env_id: str, what: str, value: float, after: int):
        super().__init__(gym.make(env_id).unwrapped)
        self.what, self.value, self.after = what, value, after
        self.steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps >= self.after:
            if self.what == "obs":
                obs = np.full_like(obs, self.value)
            else:
                reward = self.value
        return obs, reward, terminated, truncated, info


def _poisoned(name: str, env_id: str, what: str, value: float, after: int, limit: int) -> None:
    gym.register(
        name,
        entry_point=Poisoned,
        max_episode_steps=limit,
        kwargs={"env_id": env_id, "what": what, "value": value, "after": after},
    )


# CartPole whose observations turn NaN (the env), or inf; whose reward turns NaN; whose
# reward is a finite 3e38, whose discounted sums overflow float32 in the update
_poisoned("NaNObsCartPole-v0", "CartPole-v1", "obs", float("nan"), 300, 500)
_poisoned("InfObsCartPole-v0", "CartPole-v1", "obs", float("inf"), 300, 500)
_poisoned("NaNRewardCartPole-v0", "CartPole-v1", "reward", float("nan"), 300, 500)
_poisoned("HugeRewardCartPole-v0", "CartPole-v1", "reward", 3e38, 300, 500)
_poisoned("NaNRewardPendulum-v0", "Pendulum-v1", "reward", float("nan"), 150, 200)
_poisoned("HugeRewardPendulum-v0", "Pendulum-v1", "reward", 3e38, 150, 200)


class Tagged(Countdown):
    """Countdown whose observation also carries a tag of the env: the seed of its first reset
    modulo 997 (an actor's K envs are reset with consecutive seeds, so the tags tell the envs
    of a run apart). The population tests check that each learner sees its envs' tags only."""

    tag = -1.0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.tag = float(seed % 997)
        return super().reset(seed=seed, options=options)

    def _obs(self):
        return np.array([self.t, self.tag], dtype=np.float32)


gym.register("Tagged-v0", entry_point=Tagged, max_episode_steps=5)


class Leaky(Countdown):
    """Keeps 1 MB more at every step, in a list no one frees: an env with a leak. Only in
    whichever process first creates the file $ASYNCRL_TEST_LEAK_FLAG (one actor of a run
    leaks, the others do not); without the variable, in every process. The bytes are written,
    not just allocated, so that they are resident (untouched pages of a fresh mapping are not)."""

    kept: list[bytes] = []
    leaking: bool | None = None

    def step(self, action):
        if Leaky.leaking is None:
            Leaky.leaking = _first(os.environ.get("ASYNCRL_TEST_LEAK_FLAG"))
        if Leaky.leaking:
            Leaky.kept.append(b"\x01" * 2**20)
        return super().step(action)


gym.register("Leaky-v0", entry_point=Leaky, max_episode_steps=50)


# Faults ``asyncrl check-env`` must name (tests/test_envcheck.py); NaNObsCartPole-v0 above is the
# fourth, NaN observations.


class DictObs(Countdown):
    """A Dict observation (position and velocity apart), which no algorithm here takes."""

    def __init__(self):
        super().__init__()
        box = gym.spaces.Box(-1e6, 1e6, (1,), np.float32)
        self.observation_space = gym.spaces.Dict({"pos": box, "vel": box})

    def _obs(self):
        return {"pos": np.array([self.t], np.float32), "vel": np.array([1.0], np.float32)}


class UnseededReset(Countdown):
    """Passes the seed on, but starts each episode at a random step count from a generator of
    its own that no seed reaches: a seeded reset that does not repeat."""

    def __init__(self):
        super().__init__()
        self.own = np.random.default_rng()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = int(self.own.integers(1000))
        return self._obs(), {}


class LeavesBox(Countdown):
    """Declares observations in [-1, 1]; the first value is the step count / 10, so it leaves
    the box at step 11."""

    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _obs(self):
        return np.array([self.t / 10, 0.0], dtype=np.float32)


class ResidueReset(Countdown):
    """Each reset leaves 1e-7 more in the second value: float residue a simulator carries
    across resets, within Gymnasium's tolerance (a warning, not a fault)."""

    resets = 0

    def reset(self, *, seed=None, options=None):
        self.resets += 1
        return super().reset(seed=seed, options=options)

    def _obs(self):
        return np.array([self.t, 1.0 + 1e-7 * self.resets], dtype=np.float32)


gym.register("DictObs-v0", entry_point=DictObs, max_episode_steps=50)
gym.register("ResidueReset-v0", entry_point=ResidueReset, max_episode_steps=50)
gym.register("UnseededReset-v0", entry_point=UnseededReset, max_episode_steps=50)
gym.register("LeavesBox-v0", entry_point=LeavesBox, max_episode_steps=50)
