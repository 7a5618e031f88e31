"""One supervisor for every child a run owns: actors (process and Ray backends), Hogwild! workers
and learners in processes.

What it watches: each child's liveness (its owner's ``dead()``: exit codes, or a Ray call that
failed) and, where the child keeps a heartbeat (:class:`ActorStatus`), how long it has been in a
phase that waits on envs, less the stretches the supervisor itself was stopped
(:class:`Pauses`). What it does: kill a child hung past ``--env-step-timeout`` (through its
owner, who holds the process or the Ray handle: never a pid looked up again), report every lost
child once with its cause and traceback, and charge a replacement to the restart budget
(:class:`Restarts`) or end the run with an error naming the child and its env. The owner does
the rest of a restart: the slot ledger, and starting the child of the next generation (docs:
Concepts, architecture)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol

import numpy as np

from asyncrl.runtime.faults import ActorError


class ActorStatus:
    """What each actor is doing and since when: one row ``[phase, since]`` per actor, written by
    the actor (``since`` is ``time.monotonic()``, the same clock in every process), read by its
    supervisor. Backed by any float64 array of shape (actors, 2), or by a holder of one (its
    ``array``: a SharedArray, read at each look so that no view outlives the segment's close)."""

    WAITING, POLICY, ACTING, STEPPING, DONE, STARTING = range(6)
    # the phases that wait on envs, which may hang: what a supervisor times (--env-step-timeout)
    WATCHED = {STEPPING: "one env step", STARTING: "building and resetting its envs"}

    def __init__(self, rows: Any):
        self._rows = rows

    @property
    def rows(self) -> np.ndarray:
        return getattr(self._rows, "array", self._rows)

    @staticmethod
    def set(row: np.ndarray | None, phase: int) -> None:
        if row is not None:
            row[1] = time.monotonic()
            row[0] = phase

    def busy(self, actor: int, pauses: Pauses | None = None) -> tuple[int, float]:
        """``actor``'s phase and the seconds it has been in it, the ``pauses`` its supervisor
        saw not counted."""
        phase, since = self.rows[actor]
        now = time.monotonic()
        return int(phase), now - since - (pauses.within(since, now) if pauses is not None else 0.0)

    def phase(self, actor: int) -> int:
        return int(self.rows[actor][0])


class Pauses:
    """Stretches in which a supervisor did not run at all. A Ctrl+Z, a frozen container or a
    suspended job stops the actors with it while the monotonic clock runs on: the supervisor
    calls :meth:`tick` at least every ``POLL`` seconds, and a gap of more than ``GAP`` between
    two ticks is a pause, not charged to an actor as time spent in a step."""

    GAP = 1.0  # seconds; a supervisor that merely was busy or starved meanwhile is not charged

    def __init__(self) -> None:
        self.last: float | None = None
        self.seen: list[tuple[float, float]] = []  # (start, end) of each pause, newest last

    def tick(self) -> None:
        now = time.monotonic()
        if self.last is not None and now - self.last > self.GAP:
            self.seen = self.seen[-255:] + [(self.last, now)]
        self.last = now

    def within(self, since: float, now: float) -> float:
        """Seconds of pauses between ``since`` and ``now``."""
        return sum(max(0.0, min(end, now) - max(start, since)) for start, end in self.seen)


class Restarts:
    """The run's budget of restarts (``--actor-restarts``) and their one-line reports.

    ``charge`` is called once per lost child: it prints one line naming it, its envs, the cause
    and the last lines of its traceback, and counts it; past the budget it raises ActorError
    with the whole traceback instead."""

    def __init__(self, budget: int, role: str = "actor", stream: Any = None):
        self.budget, self.role = budget, role
        self.used = 0
        self.dropped = 0
        self.stream = stream

    def charge(self, label: str, cause: str, tb: str, dropped: int) -> None:
        self.dropped += dropped
        if self.used >= self.budget:
            raise ActorError(
                f"{label} {cause}; no restarts left (--actor-restarts {self.budget})"
                + (f":\n{tb}" if tb else "")
            )
        self.used += 1
        tail = " | ".join(line.strip() for line in tb.strip().splitlines()[-3:]) if tb else ""
        print(
            f"asyncrl: {label} {cause}; restarting it ({self.used} of {self.budget} restarts, "
            f"{dropped} rollout(s) dropped)" + (f": {tail}" if tail else ""),
            file=self.stream or sys.stderr,
            flush=True,
        )


class Lost(NamedTuple):
    """A child that ended without being asked to: why (``cause``: "raised", "was killed by
    SIGKILL", "hung: ...; killed"), its traceback if it sent one, and whether that error must
    end the run (an env's error under ``--on-env-error raise``)."""

    index: int
    cause: str
    traceback: str
    fatal: bool


class Children(Protocol):
    """What a supervisor needs of the children's owner (``runtime.processes.ChildProcesses`` for
    processes; the Ray backend's adapter for Ray actors)."""

    def indices(self) -> Iterable[int]:
        """The children that are running (may be hung)."""

    def dead(self) -> list[tuple[int, str, str, bool]]:
        """The children that ended since the last call: ``(index, cause, traceback, fatal)``."""

    def kill(self, index: int) -> None:
        """Kill exactly that child (its own handle), if it still runs."""

    def label(self, index: int) -> str:
        """ "actor 3 (env CartPole-v1 x 8)": how messages name it."""


class Heartbeats(Protocol):
    def busy(self, index: int, pauses: Pauses) -> tuple[int, float] | None:
        """The child's phase and seconds in it (None: not known, e.g. nothing in flight)."""


class Supervisor:
    """Watches one owner's children; see the module doc.

    ``heartbeats``: where their phases are read (an :class:`ActorStatus`; None: no hang
    detection, as for learners). ``budget``: restarts allowed (``--actor-restarts``; 0: a lost
    child ends the run). ``restart(index)``: starts the replacement of a lost child,
    called by :meth:`replace` once the budget allows it. ``done`` holds the children that said
    goodbye: their exit is no fault."""

    def __init__(
        self,
        children: Children,
        timeout: float,
        heartbeats: Heartbeats | None = None,
        budget: int = 0,
        restart: Callable[[int], None] | None = None,
    ):
        self.children, self.timeout, self.heartbeats = children, timeout, heartbeats
        self.restarts = Restarts(budget)
        self.restart = restart
        self.pauses = Pauses()  # a stopped run (Ctrl+Z, a frozen container) is no hang
        self.hung: dict[int, str] = {}  # child -> what it was killed for
        self.done: set[int] = set()

    def find_hung(self) -> list[tuple[int, str, float]]:
        """The children past the hang timeout in a watched phase, not yet killed: ``(index,
        what it is doing in words, seconds it has been at it)``."""
        if self.heartbeats is None or not self.timeout:
            return []
        self.pauses.tick()
        out = []
        for i in list(self.children.indices()):
            if i in self.hung or i in self.done:
                continue
            seen = self.heartbeats.busy(i, self.pauses)
            if seen is not None and seen[0] in ActorStatus.WATCHED and seen[1] > self.timeout:
                out.append((i, ActorStatus.WATCHED[seen[0]], seen[1]))
        return out

    def kill_hung(self) -> None:
        for i, doing, busy in self.find_hung():
            self.hung[i] = f"{doing} took over {busy:.1f} s"
            self.children.kill(i)

    def lost(self) -> list[Lost]:
        """The children that ended since the last call and were not done: a hung one with the
        hang as its cause."""
        out = []
        for i, cause, tb, fatal in self.children.dead():
            if i in self.done and not tb and i not in self.hung:
                continue
            if i in self.hung:
                cause = f"hung: {self.hung.pop(i)} (--env-step-timeout {self.timeout:g}); killed"
            out.append(Lost(i, cause, tb, fatal))
        return out

    def check(self) -> list[Lost]:
        """Kill the hung, then report the lost (each once)."""
        self.kill_hung()
        return self.lost()

    def replace(self, lost: Lost, dropped: int) -> None:
        """Charge ``lost``'s replacement (``dropped`` rollouts lost with it) and start it; raise
        ActorError naming the child, with its traceback, if its error ends the run or the
        budget is spent."""
        label = self.children.label(lost.index)
        if lost.fatal:
            raise ActorError(f"{label} failed:\n{lost.traceback}")
        self.restarts.charge(label, lost.cause, lost.traceback, dropped)
        if self.restart is not None:
            self.restart(lost.index)

    def ended(self, lost: Lost) -> str:
        """``lost`` in words, for an owner that replaces none (a learner process)."""
        label = self.children.label(lost.index)
        return f"{label} {lost.cause}" + (f":\n{lost.traceback}" if lost.traceback else "")
