"""The algorithm registry: the one place an algorithm is chosen by name. Each entry is a
folder of its own whose package holds ``ALGORITHM`` (see :class:`asyncrl.core.Algorithm`)."""

from __future__ import annotations

import importlib
from functools import cache

from asyncrl.core import Algorithm

REGISTRY = {
    "ppo": "asyncrl.algos.ppo",
    "sac": "asyncrl.algos.sac",
    "dqn": "asyncrl.algos.dqn",
}


@cache
def algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name`` (settings have checked that it is one)."""
    return importlib.import_module(REGISTRY[name]).ALGORITHM


def algorithms() -> list[Algorithm]:
    return [algorithm(name) for name in REGISTRY]
