"""Making envs: one as evaluations step it (:func:`make_env`), and the K an actor steps as one
same-step autoreset vector env (:func:`make_vector_env`): when an episode ends, ``step`` returns
the first observation of the next one and puts the last in ``info["final_obs"]``."""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from asyncrl.config import ConfigError
from asyncrl.envs.atari import AtariTraining, make_atari
from asyncrl.envs.envpool import EnvPoolVectorEnv, envpool_task
from asyncrl.envs.mujoco import make_mujoco
from asyncrl.envs.pettingzoo import SeatVectorEnv, is_pettingzoo
from asyncrl.envs.registry import MUJOCO_MODULE, entry_module, is_atari, resolve_id


class EnvError(RuntimeError):
    """An env's ``step`` or ``reset`` raised; the message names the env index in its actor."""


class GuardedEnv(gym.Wrapper):
    """One of an actor's K envs, with what ``--on-env-error`` says to do when it raises.

    ``raise``: the error propagates as an EnvError naming the env index (the actor reports it
    and the run ends: an env that raises is usually a bug the user must see). ``restart``: the
    env is closed and made anew, with a seed no env of the run has had; the step that raised
    returns the last observation with reward 0 as a *truncation*, so the episode ends there and
    is bootstrapped from that observation, and the vector env's autoreset then starts the new
    env. Each kind of error is printed once per actor; every restart is counted
    (:attr:`restarts`).
    """

    def __init__(self, make: Any, index: int, restart: bool, seeds: Any, label: str, seen: set):
        super().__init__(make())
        self.make, self.index, self.restart = make, index, restart
        self.seeds, self.label, self.seen = seeds, label, seen
        self.restarts = 0
        self.last_obs: Any = None
        self.next_seed: int | None = None

    def _recreate(self, what: str, err: Exception) -> None:
        if not self.restart:
            raise EnvError(
                f"env {self.index} raised in {what}: {type(err).__name__}: {err}"
            ) from err
        kind = (what, type(err).__name__, str(err).splitlines()[0] if str(err) else "")
        if kind not in self.seen:
            self.seen.add(kind)
            print(
                f"asyncrl: {self.label} env {self.index} raised in {what}: "
                f"{type(err).__name__}: {err}; env recreated (--on-env-error restart; "
                "further errors of this kind are counted, not printed)",
                file=sys.stderr,
                flush=True,
            )
        self.restarts += 1
        try:
            self.env.close()
        except Exception:  # a broken env may not close cleanly; it is dropped either way
            pass
        self.env = self.make()
        self.next_seed = self.seeds(self.index, self.restarts)

    def step(self, action: Any) -> Any:
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as e:
            self._recreate("step", e)
            return self.last_obs, 0.0, False, True, {}
        self.last_obs = obs
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        for attempt in range(3):
            if self.next_seed is not None:
                seed, self.next_seed = self.next_seed, None
            try:
                obs, info = self.env.reset(seed=seed, options=options)
            except Exception as e:
                if attempt == 2:
                    raise EnvError(f"env {self.index} raised in reset 3 times in a row") from e
                self._recreate("reset", e)
                continue
            self.last_obs = obs
            return obs, info
        raise AssertionError("unreachable")


class SameStepVectorEnv(gym.vector.SyncVectorEnv):
    """Gymnasium's SyncVectorEnv with same-step autoreset, whose ``step`` for a Box observation
    space with a Box, MultiDiscrete or MultiBinary batched action space does what Gymnasium's
    does without its generic per-step machinery: the same env calls, arrays and infos (each
    action ``actions[i]``, as ``iterate`` gives it; each observation written into its row with
    ``np.stack``'s casting; ``_add_info`` where an env returned an info). At one cheap env per
    actor that machinery was most of the vector env's time (docs: DQN benchmark). Other spaces
    step through Gymnasium's own ``step``."""

    def __init__(self, env_fns: list) -> None:
        super().__init__(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
        self._rows = (
            isinstance(self.single_observation_space, gym.spaces.Box)
            and isinstance(self._observations, np.ndarray)
            and isinstance(
                self.action_space,
                (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary),
            )
        )

    def step(self, actions: Any) -> tuple:
        if not self._rows:
            return super().step(actions)
        infos: dict = {}
        obs, env_obs = self._observations, self._env_obs
        rewards, terminations, truncations = self._rewards, self._terminations, self._truncations
        for i, (action, env) in enumerate(zip(actions, self.envs, strict=True)):
            o, rewards[i], terminations[i], truncations[i], info = env.step(action)
            if terminations[i] or truncations[i]:
                infos = self._add_info(infos, {"final_obs": o, "final_info": info}, i)
                o, info = env.reset()
            if info:
                infos = self._add_info(infos, info, i)
            env_obs[i] = o
            row = obs[i]
            if type(o) is np.ndarray and o.shape == row.shape and o.dtype == row.dtype:
                row[...] = o
            else:  # as np.stack writes it (its casting, its errors)
                np.stack([o], axis=0, out=obs[i : i + 1])
        self._autoreset_envs = np.logical_or(terminations, truncations)
        return (
            obs.copy() if self.copy else obs,
            rewards.copy(),
            terminations.copy(),
            truncations.copy(),
            infos,
        )


def make_env(
    env_id: str, render_mode: str | None = None, atari_preprocessing: bool = True
) -> gym.Env:
    """One env, as evaluations step it (``render_mode="rgb_array"`` for videos): an ALE id
    preprocessed as training sees it, but without episodic life or reward clipping, so that an
    evaluation's return is the game's score. Training actors step vector envs
    (:func:`make_vector_env`)."""
    if is_pettingzoo(env_id):
        raise ConfigError(
            f"env: {env_id} is a multi-agent env, which train and eval take but not yet "
            "check-env, --video or export (docs: Guides, multi-agent)"
        )
    env_id = resolve_id(env_id)
    kwargs = {} if render_mode is None else {"render_mode": render_mode}
    if atari_preprocessing and is_atari(env_id):
        return make_atari(env_id, **kwargs)
    # not passed at all: an env need not take the argument
    if entry_module(env_id).startswith(MUJOCO_MODULE):
        return make_mujoco(env_id, **kwargs)
    return gym.make(env_id, **kwargs)


def make_vector_env(
    env_id: str,
    num_envs: int,
    on_error: str = "raise",
    seeds: Any = None,
    label: str = "actor",
    vectorizer: str = "gymnasium",
    atari_preprocessing: bool = True,
) -> Any:
    """K envs stepped in this process (the actor is already the unit of parallelism): a
    SameStepVectorEnv of :class:`GuardedEnv` (``seeds(index, restart)`` gives a recreated env's
    seed), or EnvPool's batched env (:class:`EnvPoolVectorEnv`). ALE ids, preprocessed, are
    wrapped in :class:`AtariTraining`. Either is seeded by its first ``reset(seed=[...])``. A
    PettingZoo env: its (env, agent) seats as ``num_envs`` rows (:class:`SeatVectorEnv`)."""
    if is_pettingzoo(env_id):
        return SeatVectorEnv(env_id, num_envs)
    env_id = resolve_id(env_id)
    if vectorizer == "envpool":
        task, kwargs = envpool_task(env_id, atari_preprocessing)
        envs: Any = EnvPoolVectorEnv(task, num_envs, kwargs)
    else:
        seen: set = set()
        seeds = seeds or (lambda index, restart: None)

        def make() -> gym.Env:
            return make_env(env_id, atari_preprocessing=atari_preprocessing)

        fns = [
            (lambda i=i: GuardedEnv(make, i, on_error == "restart", seeds, label, seen))
            for i in range(num_envs)
        ]
        envs = SameStepVectorEnv(fns)
    if atari_preprocessing and is_atari(env_id):
        envs = AtariTraining(envs)
    return envs


def env_restarts(envs: Any) -> int:
    """Envs recreated so far by ``--on-env-error restart`` in a vector env of GuardedEnvs."""
    envs = getattr(envs, "inner", envs)
    return sum(getattr(e, "restarts", 0) for e in getattr(envs, "envs", ()))
