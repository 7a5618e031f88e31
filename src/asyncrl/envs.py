"""Environments: what an actor steps, and what the learner must know about it beforehand.

Every actor steps a vector env of K copies in *same-step* autoreset mode: when an episode ends,
``step`` returns the first observation of the next episode and puts the last one in
``info["final_obs"]``, so a rollout never contains a dead step and a time-limit truncation can be
bootstrapped from the final observation. The vector env is Gymnasium's ``SyncVectorEnv``
(``--vectorizer gymnasium``) or EnvPool's C++ batched env behind :class:`EnvPoolVectorEnv`, which
gives it the same semantics (``--vectorizer envpool``).

ALE ids (``ALE/Breakout-v5``, ...; ``asyncrl[atari]``) get the standard preprocessing unless
``--no-atari-preprocessing``: Gymnasium's ``AtariPreprocessing`` (no-op starts up to 30, frame
skip 4 with the max of the last two frames, 84x84 grayscale) on the id made with ``frameskip=1``,
then ``FrameStackObservation`` of 4 frames: uint8 observations of shape (4, 84, 84). Training envs
add, over the whole vector env, episodic life (a lost life ends the training episode, not the
game) and reward clipping to -1, 0, 1 (:class:`AtariTraining`); the returns logged are the
games' scores, unclipped, over all lives.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from asyncrl.config import ConfigError

# Env ids that an optional extra registers on import, the module that registers them and the
# extra that installs it. PyBullet's own ``pybullet_envs`` no longer imports with Gymnasium; the
# maintained port ``pybullet_envs_gymnasium`` registers the same locomotion envs.
OPTIONAL_ENV_PACKAGES = (
    ("BulletEnv-", "pybullet_envs_gymnasium", "pybullet"),
    # ale-py registers the ALE/... ids (and the older v0/v4 ones) on import; it ships the ROMs
    ("ALE/", "ale_py", "atari"),
    ("NoFrameskip-v4", "ale_py", "atari"),
)

# Env families by the package that implements the env (its registered entry point): the preset
# ``--preset auto`` chooses (config.PRESETS). MuJoCo's and PyBullet's envs are continuous-control
# robots, which CleanRL, SB3 and Sample Factory all train with one PPO recipe; any other env
# takes the classic-control values.
MUJOCO_MODULE = "gymnasium.envs.mujoco"  # Gymnasium's MuJoCo envs (see also _make_mujoco)
ENV_FAMILIES = (
    (MUJOCO_MODULE, "mujoco"),
    ("pybullet_envs_gymnasium", "mujoco"),
    ("ale_py", "atari"),
)

# The standard Atari preprocessing (Machado et al. 2018; CleanRL, SB3, Sample Factory, EnvPool)
ATARI_FRAME_SKIP = 4
ATARI_NOOP_MAX = 30
ATARI_SCREEN = 84
ATARI_STACK = 4


@dataclass(frozen=True)
class EnvSpec:
    """The shapes the networks and the rollout buffers are built for."""

    env_id: str
    obs_shape: tuple[int, ...]
    discrete: bool
    action_shape: tuple[int, ...]  # () for discrete actions
    n_actions: int  # number of discrete actions, or the action dimension
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None
    # the dtype observations travel and rest in (slots, replay): uint8 for an env whose
    # observations are uint8 (pixels), float32 for every other
    obs_dtype: str = "float32"

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))


def _resolve_id(env_id: str) -> str:
    """The registered id for ``env_id``, importing ``module`` first for ``module:EnvId`` (how a
    package that registers envs on import is named); a clear message if nothing answers."""
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"env: cannot import module {module!r} to register envs: {e}") from e
    if env_id in gym.registry:
        return env_id
    for marker, module, extra in OPTIONAL_ENV_PACKAGES:
        if marker in env_id:
            try:
                importlib.import_module(module)
            except ImportError as e:
                raise ConfigError(
                    f"env: {env_id} comes from the package {module}, which is not installed; "
                    f'install it with: pip install "asyncrl[{extra}]"'
                ) from e
            if env_id in gym.registry:
                return env_id
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"env: {env_id!r} is not a registered Gymnasium env id{hint}")


def _entry_module(env_id: str) -> str:
    entry = gym.spec(env_id).entry_point
    return entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")


def env_family(env_id: str) -> str:
    """The family of ``env_id`` (a key of config.PRESETS): from its registration alone, so no
    env is made; an id nothing registers is a ConfigError naming ``env``."""
    module = _entry_module(_resolve_id(env_id))
    for package, family in ENV_FAMILIES:
        if module == package or module.startswith(package + "."):
            return family
    return "classic"


def spec_from_spaces(env_id: str, obs_space: gym.Space, act_space: gym.Space) -> EnvSpec:
    if not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(
            f"env: {env_id} has observation space {obs_space}; PPO here needs a Box observation"
        )
    obs_dtype = "uint8" if obs_space.dtype == np.uint8 else "float32"
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpec(
            env_id, tuple(obs_space.shape), True, (), int(act_space.n), obs_dtype=obs_dtype
        )
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        return EnvSpec(
            env_id,
            tuple(obs_space.shape),
            False,
            tuple(act_space.shape),
            int(act_space.shape[0]),
            act_space.low.astype(np.float32),
            act_space.high.astype(np.float32),
            obs_dtype,
        )
    raise ConfigError(
        f"env: {env_id} has action space {act_space}; PPO handles Discrete and 1-D Box actions"
    )


def is_atari(env_id: str) -> bool:
    """An ALE env with image observations (what the Atari preprocessing applies to)."""
    env_id = _resolve_id(env_id)
    module = _entry_module(env_id)
    return (module == "ale_py" or module.startswith("ale_py.")) and gym.spec(env_id).kwargs.get(
        "obs_type", "rgb"
    ) in ("rgb", "grayscale")


def check_env(
    env_id: str,
    algo: str = "ppo",
    atari_preprocessing: bool = True,
    vectorizer: str = "gymnasium",
) -> EnvSpec:
    """Make one env to learn its spaces (as an actor's env has them: preprocessed, for an ALE
    id); every env problem surfaces here as a ConfigError. ``vectorizer envpool``: also that
    EnvPool provides the id (:func:`envpool_task`)."""
    env_id = _resolve_id(env_id)
    if vectorizer == "envpool":
        envpool_task(env_id, atari_preprocessing)
    try:
        env = make_env(env_id, atari_preprocessing=atari_preprocessing)
    except gym.error.DependencyNotInstalled as e:
        raise ConfigError(f"env: {env_id} needs a package that is not installed: {e}") from e
    except Exception as e:
        gl = os.environ.get("MUJOCO_GL")
        if gl is None or "mujoco" not in str(gym.spec(env_id).entry_point):
            raise
        # mujoco loads the OpenGL library MUJOCO_GL names when it is imported
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise ConfigError(
            f"env: {env_id} cannot be made with MUJOCO_GL={gl!r} ({type(e).__name__}: "
            f"{lines[0] if lines else 'no detail'}); egl needs libEGL, osmesa needs libOSMesa; "
            "training needs no MUJOCO_GL (unset it)"
        ) from e
    try:
        spec = spec_from_spaces(env_id, env.observation_space, env.action_space)
    finally:
        env.close()
    if algo == "sac" and spec.discrete:
        raise ConfigError(
            f"algo: sac needs a continuous (Box) action space; {env_id} has "
            f"{spec.n_actions} discrete actions (use --algo ppo)"
        )
    return spec


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


def make_env(
    env_id: str, render_mode: str | None = None, atari_preprocessing: bool = True
) -> gym.Env:
    """One env, as evaluations step it (``render_mode="rgb_array"`` for videos): an ALE id
    preprocessed as training sees it, but without episodic life or reward clipping, so that an
    evaluation's return is the game's score. Training actors step vector envs
    (:func:`make_vector_env`)."""
    env_id = _resolve_id(env_id)
    kwargs = {} if render_mode is None else {"render_mode": render_mode}
    if atari_preprocessing and is_atari(env_id):
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

        _need_cv2(env_id)
        env = gym.make(env_id, frameskip=1, **kwargs)  # the wrapper skips frames
        env = AtariPreprocessing(
            env,
            noop_max=ATARI_NOOP_MAX,
            frame_skip=ATARI_FRAME_SKIP,
            screen_size=ATARI_SCREEN,
            terminal_on_life_loss=False,  # AtariTraining does it without resetting the game
            grayscale_obs=True,
            scale_obs=False,  # uint8; the network scales
        )
        return FrameStackObservation(env, ATARI_STACK)
    # not passed at all: an env need not take the argument
    if _entry_module(env_id).startswith(MUJOCO_MODULE):
        return _make_mujoco(env_id, **kwargs)
    return gym.make(env_id, **kwargs)


_MUJOCO_WARNING_HOOK = threading.Lock()  # the hook is the process's: one make at a time sets it


def _make_mujoco(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` for a MuJoCo env, with what MuJoCo warns while it compiles the model
    issued as Python warnings. MuJoCo's own handler prints each warning to stderr and appends
    it to MUJOCO_LOG.TXT in the working directory: Gymnasium's HalfCheetah model uses an XML
    attribute MuJoCo has deprecated (``settotalmass``), so every HalfCheetah env printed it and
    each run left that file wherever it was started. A deprecation there is for Gymnasium's
    model, not for the user (a DeprecationWarning: hidden unless asked for); any other warning
    is a UserWarning, shown once per process. The hook is MuJoCo's process-wide one, set only
    around the make and put back as it was."""
    import mujoco

    if not hasattr(mujoco, "get_mju_user_warning"):  # older bindings: MuJoCo's own handler
        return gym.make(env_id, **kwargs)
    said: list[str] = []
    with _MUJOCO_WARNING_HOOK:
        before = mujoco.get_mju_user_warning()
        mujoco.set_mju_user_warning(said.append)
        try:
            env = gym.make(env_id, **kwargs)
        finally:
            mujoco.set_mju_user_warning(before)
    for message in said:
        category = DeprecationWarning if "deprecated" in message else UserWarning
        warnings.warn(f"MuJoCo ({env_id}): {message}", category, stacklevel=3)
    return env


def _need_cv2(env_id: str) -> None:
    if importlib.util.find_spec("cv2") is None:
        raise ConfigError(
            f"env: the Atari preprocessing of {env_id} resizes frames with OpenCV, which is not "
            'installed: pip install "asyncrl[atari]" (or --no-atari-preprocessing)'
        )


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
    SyncVectorEnv of :class:`GuardedEnv` (``seeds(index, restart)`` gives a recreated env's
    seed), or EnvPool's batched env (:class:`EnvPoolVectorEnv`). ALE ids, preprocessed, are
    wrapped in :class:`AtariTraining`. Either is seeded by its first ``reset(seed=[...])``."""
    env_id = _resolve_id(env_id)
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
        envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    if atari_preprocessing and is_atari(env_id):
        envs = AtariTraining(envs)
    return envs


def env_restarts(envs: Any) -> int:
    """Envs recreated so far by ``--on-env-error restart`` in a vector env of GuardedEnvs."""
    envs = getattr(envs, "inner", envs)
    return sum(getattr(e, "restarts", 0) for e in getattr(envs, "envs", ()))


def _final_values(info: dict, key: str, done: np.ndarray, now: np.ndarray) -> np.ndarray:
    """Per env, ``info[key]`` as the step left it: for an env whose episode ended (and was
    reset in the same step) from ``info["final_info"]``, else the value now."""
    out = np.array(now, copy=True)
    final = info.get("final_info")
    if final is not None and key in final:
        mask = np.asarray(final.get(f"_{key}", done)) & done
        out[mask] = np.asarray(final[key])[mask]
    return out


class AtariTraining:
    """What training adds to preprocessed Atari envs, over a whole same-step vector env (so
    both vectorisers share it): *episodic life*, a lost life ends the training episode
    (``terminated``: no value is bootstrapped across it) while the game goes on, without a reset;
    and *reward clipping* to its sign. The game's own score is what gets logged: when a game
    ends (game over, or the time limit) ``info["episode_score"]`` holds its unclipped return
    over all lives and ``info["episode_steps"]`` its length in agent steps (NaN and 0 for envs
    whose game goes on), and actors log those instead of summing the rewards they see.

    The wrapped env must report ``info["lives"]`` (ALE envs do); ``inner`` is the wrapped env.
    """

    def __init__(self, envs: Any):
        self.inner = envs
        self.num_envs = envs.num_envs
        self.lives = np.zeros(self.num_envs, np.int64)
        self.score = np.zeros(self.num_envs, np.float64)
        self.steps = np.zeros(self.num_envs, np.int64)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict]:
        obs, info = self.inner.reset(seed=seed, options=options)
        self.lives[:] = info["lives"]
        self.score[:] = 0.0
        self.steps[:] = 0
        return obs, info

    def step(self, actions: np.ndarray) -> tuple:
        obs, reward, terminated, truncated, info = self.inner.step(actions)
        reward = np.asarray(reward, np.float64)
        game_over = np.asarray(terminated) | np.asarray(truncated)
        lives_now = np.asarray(info["lives"])  # of the next game, where one ended
        lives = _final_values(info, "lives", game_over, lives_now)
        life_lost = (lives < self.lives) & ~game_over
        self.lives[:] = lives_now
        self.score += reward
        self.steps += 1
        info = dict(info)
        info["episode_score"] = np.where(game_over, self.score, np.nan)
        info["episode_steps"] = np.where(game_over, self.steps, 0)
        self.score[game_over] = 0.0
        self.steps[game_over] = 0
        if life_lost.any():  # the training episode ends here, its last obs is this one
            final = np.empty(self.num_envs, dtype=object)
            if "final_obs" in info:
                final[:] = list(info["final_obs"])
            for i in np.flatnonzero(life_lost):
                final[i] = obs[i]
            info["final_obs"] = final
            info["_final_obs"] = game_over | life_lost
        return obs, np.sign(reward).astype(np.float32), terminated | life_lost, truncated, info

    def close(self) -> None:
        self.inner.close()


# ------------------------------------------------------------------------------- EnvPool
# EnvPool's defaults that differ from the Gymnasium ids of the same name, set here to
# Gymnasium's: Atari v5 ids have sticky actions (repeat_action_probability 0.25, which EnvPool
# leaves at 0), and Gymnasium's AtariPreprocessing presses no FIRE on reset (EnvPool does for
# games that have it). Episodic life and reward clipping stay off: AtariTraining does them for
# both vectorisers.
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
    env_id = _resolve_id(env_id)
    known = set(envpool.list_all_envs())
    module = _entry_module(env_id)
    refuse = (
        f"vectorizer: envpool provides MuJoCo v5 and Atari v5 ids; {env_id} is not one of them "
        "(use --vectorizer gymnasium)"
    )
    if module.startswith("gymnasium.envs.mujoco"):
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


_PLAIN = (type(None), bool, int, float, str)
# attributes that are configuration or bookkeeping of gym itself, not an episode's state
_NOT_STATE = {"_saved_kwargs", "spec", "metadata", "render_mode", "_cached_spec"}


def env_state(env: gym.Env) -> list[dict[str, Any]]:
    """What an env's episode so far consists of, as plain data (numbers, strings, arrays): one
    dict per layer of its wrapper chain, outermost first, of the attributes that are plain
    values or arrays, with each random generator's state (``np_random``), and for a MuJoCo env
    its simulation state. Enough to continue the episode exactly in a fresh env of the same id
    (:func:`set_env_state`) for envs that keep their state in such attributes -- classic
    control, MuJoCo, and most simple envs; an env whose state lives elsewhere continues from
    what was captured. Nothing here is pickled: a checkpoint stays tensors and plain data."""
    layers = []
    layer: Any = env
    while layer is not None:
        state: dict[str, Any] = {}
        for key, value in vars(layer).items():
            if key in _NOT_STATE:
                continue
            if isinstance(value, _PLAIN) or (
                isinstance(value, np.ndarray) and value.dtype.kind in "biuf"
            ):
                state[key] = value.copy() if isinstance(value, np.ndarray) else value
            elif isinstance(value, np.random.Generator):
                state[key] = {"bit_generator_state": value.bit_generator.state}
        data = getattr(layer, "data", None)
        if data is not None and hasattr(data, "qpos") and hasattr(data, "qvel"):
            state["mujoco_data"] = {
                k: np.array(getattr(data, k))
                for k in ("qpos", "qvel", "act", "qacc_warmstart", "ctrl")
                if hasattr(data, k)
            } | {"time": float(data.time)}
        layers.append(state)
        layer = getattr(layer, "env", None) if isinstance(layer, gym.Wrapper) else None
    return layers


def set_env_state(env: gym.Env, layers: list[dict[str, Any]]) -> None:
    """Put back what :func:`env_state` captured, into an env made with the same id."""
    layer: Any = env
    for state in layers:
        if layer is None:
            break
        for key, value in state.items():
            if key == "mujoco_data":
                for name, arr in value.items():
                    if name == "time":
                        layer.data.time = arr
                    else:
                        getattr(layer.data, name)[...] = np.asarray(arr)
                continue
            current = getattr(layer, key, None)
            if isinstance(value, dict) and "bit_generator_state" in value:
                if isinstance(current, np.random.Generator):
                    current.bit_generator.state = value["bit_generator_state"]
            elif hasattr(value, "numpy"):  # arrays come back from a checkpoint as tensors
                setattr(layer, key, value.numpy().copy())
            elif isinstance(value, np.ndarray):
                setattr(layer, key, value.copy())
            else:
                setattr(layer, key, value)
        layer = getattr(layer, "env", None) if isinstance(layer, gym.Wrapper) else None


def actor_seed(
    seed: int, actor_id: int, envs_per_actor: int, actors: int = 1, generation: int = 0
) -> int:
    """First env seed of an actor; its K envs take consecutive seeds, so no two envs share one.
    A replacement actor (generation g > 0) takes the seeds after every earlier generation's, so
    a restart never replays an env's episodes."""
    return seed * 1_000_003 + (generation * actors + actor_id) * envs_per_actor


def restart_seed(seed: int, actor_id: int, generation: int, index: int, restart: int) -> int:
    """Seed of env ``index`` of an actor when ``--on-env-error restart`` recreates it for the
    ``restart``-th time: drawn from its own stream, apart from the consecutive actor seeds."""
    entropy = [seed, 1, actor_id, generation, index, restart]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def eval_seeds(seed: int, episodes: int) -> list[int]:
    """Reset seeds of the episodes of every evaluation during training: the same episodes each
    time, so evaluations of successive policies compare like with like, drawn from their own
    stream, apart from the seeds of the training envs (:func:`actor_seed`)."""
    return [int(s) for s in np.random.SeedSequence([seed, 2]).generate_state(episodes)]
