"""Environments: what an actor steps, and what the learner must know about it beforehand.

Every actor steps a Gymnasium vector env of K copies in *same-step* autoreset mode: when an
episode ends, ``step`` returns the first observation of the next episode and puts the last one in
``info["final_obs"]``, so a rollout never contains a dead step and a time-limit truncation can be
bootstrapped from the final observation.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from asyncrl.config import ConfigError

# Env ids that an optional extra registers on import, the module that registers them and the
# extra that installs it. PyBullet's own ``pybullet_envs`` no longer imports with Gymnasium; the
# maintained port ``pybullet_envs_gymnasium`` registers the same locomotion envs.
OPTIONAL_ENV_PACKAGES = (("BulletEnv-", "pybullet_envs_gymnasium", "pybullet"),)

# Env families by the package that implements the env (its registered entry point): the preset
# ``--preset auto`` chooses (config.PRESETS). MuJoCo's and PyBullet's envs are continuous-control
# robots, which CleanRL, SB3 and Sample Factory all train with one PPO recipe; any other env
# keeps the classic-control values asyncrl has always had.
ENV_FAMILIES = (("gymnasium.envs.mujoco", "mujoco"), ("pybullet_envs_gymnasium", "mujoco"))


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


def env_family(env_id: str) -> str:
    """The family of ``env_id`` (a key of config.PRESETS): from its registration alone, so no
    env is made; an id nothing registers is a ConfigError naming ``env``."""
    entry = gym.spec(_resolve_id(env_id)).entry_point
    module = entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
    for package, family in ENV_FAMILIES:
        if module == package or module.startswith(package + "."):
            return family
    return "classic"


def spec_from_spaces(env_id: str, obs_space: gym.Space, act_space: gym.Space) -> EnvSpec:
    if not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(
            f"env: {env_id} has observation space {obs_space}; PPO here needs a Box observation"
        )
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpec(env_id, tuple(obs_space.shape), True, (), int(act_space.n))
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        return EnvSpec(
            env_id,
            tuple(obs_space.shape),
            False,
            tuple(act_space.shape),
            int(act_space.shape[0]),
            act_space.low.astype(np.float32),
            act_space.high.astype(np.float32),
        )
    raise ConfigError(
        f"env: {env_id} has action space {act_space}; PPO handles Discrete and 1-D Box actions"
    )


def check_env(env_id: str, algo: str = "ppo") -> EnvSpec:
    """Make one env to learn its spaces; every env problem surfaces here as a ConfigError."""
    env_id = _resolve_id(env_id)
    try:
        env = gym.make(env_id)
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


def make_env(env_id: str, render_mode: str | None = None) -> gym.Env:
    """One env, as evaluations step it (``render_mode="rgb_array"`` for videos); training
    actors step vector envs (:func:`make_vector_env`)."""
    env_id = _resolve_id(env_id)
    if render_mode is None:  # not passed at all: an env need not take the argument
        return gym.make(env_id)
    return gym.make(env_id, render_mode=render_mode)


def make_vector_env(
    env_id: str,
    num_envs: int,
    on_error: str = "raise",
    seeds: Any = None,
    label: str = "actor",
) -> gym.vector.VectorEnv:
    """K envs stepped in this process (the actor is already the unit of parallelism), each a
    :class:`GuardedEnv`; ``seeds(index, restart)`` gives a recreated env's seed."""
    env_id = _resolve_id(env_id)
    seen: set = set()
    seeds = seeds or (lambda index, restart: None)
    fns = [
        (
            lambda i=i: GuardedEnv(
                lambda: gym.make(env_id), i, on_error == "restart", seeds, label, seen
            )
        )
        for i in range(num_envs)
    ]
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)


def env_restarts(envs: gym.vector.VectorEnv) -> int:
    """Envs recreated so far by ``--on-env-error restart`` in a vector env of GuardedEnvs."""
    return sum(getattr(e, "restarts", 0) for e in getattr(envs, "envs", ()))


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
