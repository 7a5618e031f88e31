"""Environments: what an actor steps, and what the learner must know about it beforehand.

Every actor steps a Gymnasium vector env of K copies in *same-step* autoreset mode: when an
episode ends, ``step`` returns the first observation of the next episode and puts the last one in
``info["final_obs"]``, so a rollout never contains a dead step and a time-limit truncation can be
bootstrapped from the final observation.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from asyncrl.config import ConfigError

# Env ids that an optional extra registers on import, the module that registers them and the
# extra that installs it. PyBullet's own ``pybullet_envs`` no longer imports with Gymnasium; the
# maintained port ``pybullet_envs_gymnasium`` registers the same locomotion envs.
OPTIONAL_ENV_PACKAGES = (("BulletEnv-", "pybullet_envs_gymnasium", "pybullet"),)


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


def make_vector_env(env_id: str, num_envs: int) -> gym.vector.VectorEnv:
    """K envs stepped in this process (the actor is already the unit of parallelism)."""
    return gym.make_vec(
        _resolve_id(env_id),
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


def actor_seed(seed: int, actor_id: int, envs_per_actor: int) -> int:
    """First env seed of an actor; its K envs take consecutive seeds, so no two envs share one."""
    return seed * 1_000_003 + actor_id * envs_per_actor
