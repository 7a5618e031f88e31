"""Environments: id resolution and families, making the envs an actor steps (Gymnasium or
EnvPool, Atari preprocessing, MuJoCo's warnings), the spec the networks are built for, seeds,
and an env's state for exact resume."""

from asyncrl.envs.atari import AtariTraining
from asyncrl.envs.envpool import EnvPoolVectorEnv, envpool_task, import_envpool
from asyncrl.envs.make import EnvError, GuardedEnv, env_restarts, make_env, make_vector_env
from asyncrl.envs.partial import (
    MASKED_CARTPOLE,
    MASKED_LUNARLANDER,
    MaskObservation,
    masked_velocity_cartpole,
)
from asyncrl.envs.partial import register as _register_partial
from asyncrl.envs.registry import ENV_FAMILIES, MUJOCO_MODULE, is_atari, resolve_id
from asyncrl.envs.seeds import actor_seed, eval_seeds, restart_seed
from asyncrl.envs.spec import EnvSpec, check_env, env_family, is_image, spec_from_spaces
from asyncrl.envs.state import env_state, set_env_state

_register_partial()

__all__ = [
    "ENV_FAMILIES",
    "MASKED_CARTPOLE",
    "MASKED_LUNARLANDER",
    "MUJOCO_MODULE",
    "AtariTraining",
    "EnvError",
    "EnvPoolVectorEnv",
    "EnvSpec",
    "GuardedEnv",
    "MaskObservation",
    "actor_seed",
    "check_env",
    "env_family",
    "env_restarts",
    "env_state",
    "envpool_task",
    "eval_seeds",
    "import_envpool",
    "is_atari",
    "is_image",
    "make_env",
    "make_vector_env",
    "masked_velocity_cartpole",
    "resolve_id",
    "restart_seed",
    "set_env_state",
    "spec_from_spaces",
]
