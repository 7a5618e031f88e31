"""Update rules, and what each algorithm needs of an env."""

from __future__ import annotations

from typing import Any

from asyncrl.config import ConfigError
from asyncrl.envs import EnvSpec, check_env


def env_spec(cfg: Any) -> EnvSpec:
    """The spec of ``cfg.env`` as its actors make it, checked against what ``cfg.algo`` can
    train: a ConfigError naming the setting otherwise."""
    spec = check_env(cfg.env, cfg.atari_preprocessing, cfg.vectorizer)
    if cfg.algo == "sac" and spec.discrete:
        raise ConfigError(
            f"algo: sac needs a continuous (Box) action space; {spec.env_id} has "
            f"{spec.n_actions} discrete actions (use --algo ppo)"
        )
    return spec
