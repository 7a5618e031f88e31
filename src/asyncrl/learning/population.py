"""What a population of policies shares below the runtime: which envs of an actor each policy
acts on under the fixed mapping, and PBT's perturbation of
hyperparameters (docs: Guides, populations)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from asyncrl.core import Mutable

FACTORS = (0.8, 1.2)  # PBT's multiplicative perturbation (Jaderberg et al. 2017; Sample Factory)


def policy_envs(envs_per_actor: int, policies: int, policy: int) -> slice:
    """The envs of an actor the fixed mapping gives ``policy``: env k goes to policy k mod P.
    One policy has them all (``slice(None)``: no copy anywhere)."""
    return slice(None) if policies == 1 else slice(policy, None, policies)


def envs_of_policy(envs_per_actor: int, policies: int, policy: int) -> int:
    """How many of an actor's K envs the fixed mapping gives ``policy``."""
    return len(range(envs_per_actor)[policy_envs(envs_per_actor, policies, policy)])


def _clip(value: float, low: float, high: float) -> float:
    return float(min(max(value, low), high))


def perturb_value(
    value: float, bounds: Mutable, rng: np.random.Generator, resample: float
) -> float:
    """One mutable setting perturbed as PBT does: with probability ``resample`` drawn anew
    within its bounds (log-uniform for log and complement scales), else multiplied by 0.8 or
    1.2 (a complement scale: 1 - value is), then kept within its bounds."""
    low, high, scale = bounds
    if rng.random() < resample:
        if scale == "log":
            return float(math.exp(rng.uniform(math.log(low), math.log(high))))
        if scale == "complement":
            return 1.0 - float(math.exp(rng.uniform(math.log(1 - high), math.log(1 - low))))
        return float(rng.uniform(low, high))
    factor = FACTORS[int(rng.integers(2))]
    if scale == "complement":
        return _clip(1.0 - (1.0 - value) * factor, low, high)
    return _clip(value * factor, low, high)


def perturb(
    values: Mapping[str, Any],
    mutable: Mapping[str, Mutable],
    rng: np.random.Generator,
    resample: float,
) -> dict[str, float]:
    """Every mutable setting of ``values`` perturbed (see :func:`perturb_value`), in the order
    the algorithm declares them (a fixed order of draws: a seeded run repeats)."""
    return {
        name: perturb_value(float(values[name]), bounds, rng, resample)
        for name, bounds in mutable.items()
    }
