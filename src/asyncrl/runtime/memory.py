"""Resident memory of a run's processes: in every metrics row (``memory/*``), and one
warning line per process whose memory keeps growing past what its buffers explain -- a leak
in an env, a wrapper or the learner, whose run the OOM killer otherwise ends hours in.

Linux only (``/proc/<pid>/statm``); elsewhere the figures are absent and nothing is watched.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NamedTuple

MB = 2**20
try:
    PAGE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):
    PAGE = 4096


def resident_bytes(pid: int) -> int | None:
    """Resident memory of process ``pid`` in bytes (its shared-memory pages included), or None
    where there is no ``/proc`` or the process is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return None


class Growth:
    """One process's resident memory less what its buffers explain (a replay that fills grows
    its process legitimately), sample by sample: :meth:`add` is true once, at the sample where
    it has kept growing.

    Baseline: the first sample after ``warmup`` (the first updates compile, import and
    allocate). Growing: above the baseline by more than ``max(min_mb, fraction x the baseline's
    resident memory)``, reached by at least ``rises`` new highs, each over the last by an
    eighth of that limit -- a leak climbs step by step; a one-off allocation (a checkpoint, an
    evaluation) is a single step, and noise of a few MB none.
    """

    WARMUP = 3
    MIN_MB = 128.0
    FRACTION = 0.25
    RISES = 4

    def __init__(
        self,
        warmup: int = WARMUP,
        min_mb: float = MIN_MB,
        fraction: float = FRACTION,
        rises: int = RISES,
    ):
        self.warmup, self.min_mb, self.fraction, self.rises_needed = warmup, min_mb, fraction, rises
        self.samples = 0
        self.base: tuple[int, int, int] | None = None  # (env steps, resident, excess)
        self.high = 0
        self.limit = 0.0
        self.rises = 0
        self.found = False

    def add(self, steps: int, resident: int, explained: int = 0) -> bool:
        """A sample at ``steps`` env steps: ``resident`` bytes, of which ``explained`` are its
        buffers'. True the first time the process is found growing."""
        excess = resident - explained
        self.samples += 1
        if self.samples <= self.warmup:
            return False
        if self.base is None:
            self.base = (steps, resident, excess)
            self.high = excess
            self.limit = max(self.min_mb * MB, self.fraction * resident)
            return False
        if excess > self.high + self.limit / 8:
            self.rises += 1
            self.high = excess
        if self.found or self.rises < self.rises_needed or excess - self.base[2] <= self.limit:
            return False
        self.found = True
        return True


class Process(NamedTuple):
    """A process to watch: its metrics key (``memory/<key>``, MB), the name a warning gives it,
    its pid, the bytes its buffers hold now, and what a leak there is likely to be."""

    key: str
    label: str
    pid: int | None
    explained: int = 0
    suspect: str = "the env or a wrapper"


class MemoryWatch:
    """The resident memory of a run's processes, sampled at each metrics row: the figures (MB)
    for the row, and one warning line per process (by label: a restarted actor is the same
    one) that keeps growing (:class:`Growth`; a new pid starts anew)."""

    def __init__(self, stream: Any = None, **growth: Any):
        self.stream = stream
        self.growth_settings = growth
        self.growth: dict[int, Growth] = {}  # pid -> its samples
        self.warned: set[str] = set()

    def sample(self, steps: int, processes: list[Process]) -> dict[str, float]:
        out: dict[str, float] = {}
        live = set()
        for proc in processes:
            if proc.pid is None:
                continue
            resident = resident_bytes(proc.pid)
            if resident is None:
                continue
            out[f"memory/{proc.key}"] = round(resident / MB, 1)
            live.add(proc.pid)
            growth = self.growth.get(proc.pid)
            if growth is None:
                growth = self.growth[proc.pid] = Growth(**self.growth_settings)
            if growth.add(steps, resident, proc.explained) and proc.label not in self.warned:
                self.warned.add(proc.label)
                self.warn(proc, growth, steps, resident)
        for pid in [p for p in self.growth if p not in live]:
            del self.growth[pid]  # ended (a replaced actor): its pid may come again
        return out

    def warn(self, proc: Process, growth: Growth, steps: int, resident: int) -> None:
        since, before, _ = growth.base or (steps, resident, 0)
        buffers = (
            f" (its replay holds {proc.explained / MB:,.0f} MB of it)" if proc.explained else ""
        )
        print(
            f"asyncrl: warning: {proc.label} (pid {proc.pid}) resident memory grew from "
            f"{before / MB:,.0f} MB to {resident / MB:,.0f} MB{buffers} over {steps - since:,} "
            f"env steps, past what its buffers explain: a leak in {proc.suspect}?",
            file=self.stream or sys.stderr,
            flush=True,
        )
