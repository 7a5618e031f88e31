"""Env ids: resolving one (importing the package that registers it) and telling its family,
from its registration alone (no env is made)."""

from __future__ import annotations

import difflib
import importlib

import gymnasium as gym

from asyncrl.config import ConfigError
from asyncrl.envs.pettingzoo import is_pettingzoo

# Env ids that an optional extra registers on import, the module that registers them and the
# extra that installs it. PyBullet's own ``pybullet_envs`` no longer imports with Gymnasium; the
# maintained port ``pybullet_envs_gymnasium`` registers the same locomotion envs.
OPTIONAL_ENV_PACKAGES = (
    ("BulletEnv-", "pybullet_envs_gymnasium", "pybullet"),
    # ale-py registers the ALE/... ids (and the older v0/v4 ones) on import; it ships the ROMs
    ("ALE/", "ale_py", "atari"),
    ("NoFrameskip-v4", "ale_py", "atari"),
)

# Env families by what the env is, told from its registration (the package that implements it,
# or the class it is made from): the preset ``--preset auto`` chooses (settings.PRESETS; docs,
# Guides: presets). MuJoCo's and PyBullet's robots take one continuous-control recipe, as in
# CleanRL, SB3 and Sample Factory; an env no family claims takes the generic preset.
MUJOCO_MODULE = "gymnasium.envs.mujoco"  # Gymnasium's MuJoCo envs (see also make_mujoco)
ENV_FAMILIES = (
    ("gymnasium.envs.classic_control", "classic"),
    ("gymnasium.envs.box2d", "box2d"),
    (MUJOCO_MODULE, "mujoco"),
    ("pybullet_envs_gymnasium", "mujoco"),
    ("ale_py", "atari"),
)
GENERIC = "generic"  # the family of an env no other claims
PIXELS = "pixels"  # image observations outside ALE: told by the spec, once the env is made
GAME = "game"  # a two-player turn-based PettingZoo game with action masks: told by the spec


def resolve_id(env_id: str) -> str:
    """The registered id for ``env_id``, importing ``module`` first for ``module:EnvId`` (how a
    package that registers envs on import is named); a clear message if nothing answers. A
    ``pettingzoo:<module>`` env is named by its module, as it is (envs.pettingzoo)."""
    if is_pettingzoo(env_id):
        return env_id
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


def entry_module(env_id: str) -> str:
    entry = gym.spec(env_id).entry_point
    return entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")


def _mujoco_class(env_id: str) -> bool:
    """A MuJoCo robot registered by another package (e.g. Gymnasium-Robotics): its class is
    Gymnasium's MujocoEnv. Importing the class makes no env."""
    entry = gym.spec(env_id).entry_point
    try:
        cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        from gymnasium.envs.mujoco import MujocoEnv
    except Exception:  # a package that fails to import, or no mujoco: not told here
        return False
    return isinstance(cls, type) and issubclass(cls, MujocoEnv)


def registered_family(env_id: str) -> str:
    """The family of ``env_id`` from its registration alone (no env is made; see
    :func:`asyncrl.envs.spec.env_family`, which knows images too); an id nothing registers is
    a ConfigError naming ``env``."""
    env_id = resolve_id(env_id)
    if is_pettingzoo(env_id):
        return GENERIC  # a game is told by its spec, once the env is made (spec.env_family)
    module = entry_module(env_id)
    for package, name in ENV_FAMILIES:
        if module == package or module.startswith(package + "."):
            return name
    return "mujoco" if _mujoco_class(env_id) else GENERIC


def is_atari(env_id: str) -> bool:
    """An ALE env with image observations (what the Atari preprocessing applies to)."""
    env_id = resolve_id(env_id)
    if is_pettingzoo(env_id):
        return False
    module = entry_module(env_id)
    return (module == "ale_py" or module.startswith("ale_py.")) and gym.spec(env_id).kwargs.get(
        "obs_type", "rgb"
    ) in ("rgb", "grayscale")
