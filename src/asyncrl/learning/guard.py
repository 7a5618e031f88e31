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
    slot: Any,
    fields: tuple[str, ...],
    at_ends: tuple[str, ...] = (),
    seats_whole: tuple[str, ...] | None = None,
) -> str | None:
    """Where the first NaN or inf in ``slot`` is, in words naming actor, env and step; None if
    every value is finite. ``fields`` are time-major ([T(+1), K, ...]); ``at_ends`` are read
    only at the steps where an episode ended (elsewhere they hold older rollouts' values).
    ``seats_whole``: the slot's rows are a multi-agent env's seats, and these fields are read
    at every step, also those the seat waited (the cells checked are the cells the update reads)."""
    actor = int(slot.actor[0])
    own = getattr(slot, "own", None)  # --policy-mapping random: other cells hold stale values
    ended = slot.terminated | slot.truncated
    for name in fields:
        x = getattr(slot, name)
        if own is not None and name not in (seats_whole or ()):
            x = zero_unowned(x, own, ended, seats_whole is not None)
        idx = first_nonfinite(x)
        if idx is not None:
            return _where(actor, name, x[idx], idx[0], idx[1])
    for name in at_ends:
        cells = ended
        if own is not None and name not in (seats_whole or ()):
            cells = ended & own
        ends = np.argwhere(cells)
        x = getattr(slot, name)[cells]
        idx = first_nonfinite(x)
        if idx is not None:
            t, k = ends[idx[0]]
            return _where(actor, name, x[idx], int(t), int(k))
    return None


def owned_cells(own: np.ndarray, ended: np.ndarray, rows: int, seats: bool = False) -> np.ndarray:
    """[rows, K]: the cells of a time-major field that are this policy's under the random
    mapping (``own`` [T, K]: the steps it acted). A field of T + 1 rows (the observations) adds
    the row after the rollout where its episode goes on; where it ended the env drew a policy
    again, and the bootstrap is cut there: the row is not read."""
    if rows == own.shape[0]:
        return own
    if seats:  # a multi-agent env's seats: the row after the rollout is every seat's bootstrap
        return np.concatenate([own, np.ones_like(own[-1:])])
    return np.concatenate([own, (own[-1] & ~ended[-1])[None]])


def zero_unowned(
    x: np.ndarray, own: np.ndarray, ended: np.ndarray, seats: bool = False
) -> np.ndarray:
    """``x`` (a float field, [T(+1), K, ...]) with 0 in the cells that are not this policy's
    (a copy): what they hold, NaN or inf included, then reaches nothing computed from ``x``
    (in a scan, 0 x NaN is NaN). ``x`` itself where it holds no floats."""
    if x.dtype.kind != "f":
        return x
    x = x.copy()
    x[~owned_cells(own, ended, x.shape[0], seats)] = 0
    return x


WORDS = {"obs": "observation", "rewards": "reward", "actions": "action"}


def _where(actor: int, field: str, value: Any, t: int, k: int) -> str:
    what = WORDS.get(field, field)
    return (
        f"actor {actor} env {k} wrote a non-finite {what} ({float(value)}) at step {t} of a rollout"
    )
