"""Where NaN and inf are looked for on the training path: the fields of every rollout an actor
wrote, and the gradient of every optimizer step (``--on-nonfinite raise|skip``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def first_nonfinite(x: np.ndarray) -> tuple[int, ...] | None:
    """The index of the first NaN or inf in ``x``; None if there is none (or it holds no
    floats). One float64 sum decides in the common case: it is finite only if every element is."""
    if x.dtype.kind != "f" or x.size == 0:
        return None
    if math.isfinite(float(x.sum(dtype=np.float64))):
        return None
    bad = np.argwhere(~np.isfinite(x))
    return tuple(int(i) for i in bad[0]) if len(bad) else None


def nonfinite_in_rollout(
    slot: Any, fields: tuple[str, ...], at_ends: tuple[str, ...] = ()
) -> str | None:
    """Where the first NaN or inf in ``slot`` is, in words naming actor, env and step; None if
    every value is finite. ``fields`` are time-major ([T(+1), K, ...]); ``at_ends`` are read
    only at the steps where an episode ended (elsewhere they hold older rollouts' values)."""
    actor = int(slot.actor[0])
    own = getattr(slot, "own", None)  # --policy-mapping random: other cells hold stale values
    for name in fields:
        x = getattr(slot, name)
        if own is not None and x.dtype.kind == "f":
            x = x.copy()
            x[: own.shape[0]][~own] = 0
        idx = first_nonfinite(x)
        if idx is not None:
            return _where(actor, name, x[idx], idx[0], idx[1])
    if at_ends:
        ended = slot.terminated | slot.truncated
        if own is not None:
            ended = ended & own
        ends = np.argwhere(ended)
        for name in at_ends:
            x = getattr(slot, name)[ended]
            idx = first_nonfinite(x)
            if idx is not None:
                t, k = ends[idx[0]]
                return _where(actor, name, x[idx], int(t), int(k))
    return None


WORDS = {"obs": "observation", "rewards": "reward", "actions": "action"}


def _where(actor: int, field: str, value: Any, t: int, k: int) -> str:
    what = WORDS.get(field, field)
    return (
        f"actor {actor} env {k} wrote a non-finite {what} ({float(value)}) at step {t} of a rollout"
    )
