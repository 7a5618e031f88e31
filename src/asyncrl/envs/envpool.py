"""EnvPool's C++ batched envs (``--vectorizer envpool``) behind the semantics of a same-step
autoreset Gymnasium vector env."""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np

from asyncrl.config import ConfigError
from asyncrl.envs.atari import ATARI_FRAME_SKIP, ATARI_NOOP_MAX, ATARI_SCREEN, ATARI_STACK
from asyncrl.envs.registry import MUJOCO_MODULE, entry_module, is_atari, resolve_id

ENVPOOL_ATARI = {
    "episodic_life": False,
    "reward_clip": False,
    "use_fire_reset": False,
    "noop_max": ATARI_NOOP_MAX,
    "frame_skip": ATARI_FRAME_SKIP,
    "stack_num": ATARI_STACK,
    "img_height": ATARI_SCREEN,
    "img_width": ATARI_SCREEN,
    "gray_scale": True,
}


def import_envpool() -> Any:
    """``import envpool``, without the frames it would otherwise keep alive.

    EnvPool 1.2.5's ``envpool.procgen`` keeps the ImportError of its Qt-linked extension (no Qt
    here) in a module global, for a later, clearer error. That exception's traceback holds the
    import's frames, and through their ``f_back`` every frame that was running when envpool was
    first imported -- in an actor process, ``Actor.__init__`` with its status row, a numpy view
    of a shared-memory segment -- until the interpreter exits, when the segment's ``__del__``
    then fails with ``BufferError: cannot close exported pointers exist``. Dropping the
    tracebacks of exceptions envpool's modules hold (their messages stay) frees those frames.
    """
    try:
        import envpool
    except ImportError as e:
        raise ConfigError(
            "vectorizer: envpool is not installed: pip install 'asyncrl[envpool]'"
        ) from e
    for name, module in list(sys.modules.items()):
        if name == "envpool" or name.startswith("envpool."):
            for value in list(vars(module).values()):
                seen = set()
                while isinstance(value, BaseException) and id(value) not in seen:
                    seen.add(id(value))
                    value.__traceback__ = None
                    value = value.__cause__ or value.__context__
    return envpool


def envpool_task(env_id: str, atari_preprocessing: bool = True) -> tuple[str, dict[str, Any]]:
    """EnvPool's task id for the Gymnasium id ``env_id`` and the options that make it match
    (for MuJoCo v5 ids: the same id; for ``ALE/Name-v5``: ``Name-v5`` with the preprocessing
    above); a ConfigError naming ``vectorizer`` for an id EnvPool does not provide."""
    envpool = import_envpool()
    env_id = resolve_id(env_id)
    known = set(envpool.list_all_envs())
    module = entry_module(env_id)
    refuse = (
        f"vectorizer: envpool provides MuJoCo v5 and Atari v5 ids; {env_id} is not one of them "
        "(use --vectorizer gymnasium)"
    )
    if module.startswith(MUJOCO_MODULE):
        if not env_id.endswith("-v5") or env_id not in known:
            raise ConfigError(refuse)
        return env_id, {}
    if is_atari(env_id) and env_id.startswith("ALE/") and env_id.endswith("-v5"):
        if not atari_preprocessing:
            raise ConfigError(
                "atari_preprocessing: envpool always preprocesses Atari frames; with "
                "--no-atari-preprocessing use --vectorizer gymnasium"
            )
        task = env_id.removeprefix("ALE/")
        kwargs = gym.spec(env_id).kwargs
        if task not in known or kwargs.get("obs_type", "rgb") != "rgb":
            raise ConfigError(refuse)
        return task, {
            **ENVPOOL_ATARI,
            "repeat_action_probability": kwargs.get("repeat_action_probability", 0.25),
            "full_action_space": kwargs.get("full_action_space", False),
        }
    raise ConfigError(refuse)


class EnvPoolVectorEnv:
    """EnvPool's batched env with the semantics of a same-step autoreset Gymnasium vector env.

    EnvPool resets an ended env on its *next* step (that step's action is ignored and it
    returns the reset observation with reward 0: a dead step). Here the ended envs are reset
    at once instead, in the same call (EnvPool resets a subset of envs in sync mode), so that
    ``step`` returns the first observation of the next episode, with the last one in
    ``info["final_obs"]`` (and ``info["final_info"]["lives"]`` for Atari) -- what actors rely on:
    no dead steps, terminated vs truncated as EnvPool reports them, and the final observation of
    a truncated episode for its bootstrap.

    The pool is made by the first :meth:`reset`, whose seeds it takes (env ``i`` is seeded with
    ``seed[i]``; EnvPool cannot reseed an env later, so later seeds make a new pool). One
    thread steps the K envs, as Gymnasium's SyncVectorEnv steps them in the actor's process.
    """

    def __init__(self, task: str, num_envs: int, kwargs: dict[str, Any] | None = None):
        self.task, self.num_envs, self.kwargs = task, num_envs, dict(kwargs or {})
        self.pool: Any = None

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict]:
        envpool = import_envpool()
        K = self.num_envs
        if seed is None:
            seeds = list(range(K))
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(K)]
        else:
            seeds = [int(x) for x in seed]
        if self.pool is not None:
            self.pool.close()
        self.pool = envpool.make(
            self.task,
            env_type="gymnasium",
            num_envs=K,
            batch_size=K,
            num_threads=1,
            seed=seeds[0],
            env_seed=seeds,
            **self.kwargs,
        )
        obs, info = self.pool.reset()
        order = np.argsort(info["env_id"])
        return obs[order], self._info(info, order)

    @staticmethod
    def _info(info: dict, order: np.ndarray) -> dict:
        return {"lives": np.asarray(info["lives"])[order]} if "lives" in info else {}

    def step(self, actions: np.ndarray) -> tuple:
        K = self.num_envs
        obs, reward, terminated, truncated, info = self.pool.step(
            np.asarray(actions), np.arange(K, dtype=np.int32)
        )
        order = np.argsort(info["env_id"])
        obs, reward = np.array(obs[order]), np.asarray(reward)[order]
        terminated = np.asarray(terminated, bool)[order]
        truncated = np.asarray(truncated, bool)[order]
        out = self._info(info, order)
        done = terminated | truncated
        if done.any():
            idx = np.flatnonzero(done)
            final = np.empty(K, dtype=object)
            for i in idx:
                final[i] = obs[i].copy()
            out["final_obs"], out["_final_obs"] = final, done
            if "lives" in out:
                out["final_info"] = {"lives": out["lives"].copy(), "_lives": done}
            reset_obs, reset_info = self.pool.reset(idx.astype(np.int32))
            ids = np.asarray(reset_info["env_id"])
            obs[ids] = reset_obs
            if "lives" in out:
                out["lives"][ids] = np.asarray(reset_info["lives"])
        return obs, reward, terminated, truncated, out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
