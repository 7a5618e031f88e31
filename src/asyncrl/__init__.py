"""asyncrl: actor-learner RL training measured for throughput.

The Python API, as Stable-Baselines3 and CleanRL users work::

    import asyncrl

    result = asyncrl.train("CartPole-v1", total_steps=100_000, eval_every=10_000)
    policy = result.load("best")            # or asyncrl.load(result.run_dir)
    action = policy.act(obs)                # one observation -> one action; a batch -> a batch
    print(policy.evaluate(episodes=10).mean_return)

Settings are those of ``asyncrl train``, by their Python names. Importing ``asyncrl`` is light:
torch and the envs are imported when :func:`train` or :func:`load` is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asyncrl.config import ConfigError
from asyncrl.settings import TrainConfig

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "EvalResult",
    "Policy",
    "TrainConfig",
    "TrainResult",
    "load",
    "train",
]

if TYPE_CHECKING:
    from asyncrl.api import TrainResult, train
    from asyncrl.policy import EvalResult, Policy, load

_LAZY = {
    "train": "asyncrl.api",
    "TrainResult": "asyncrl.api",
    "load": "asyncrl.policy",
    "Policy": "asyncrl.policy",
    "EvalResult": "asyncrl.policy",
}


def __getattr__(name: str) -> Any:
    """The torch-heavy names, imported on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'asyncrl' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
