"""How a run stops and ends: one lifecycle for the actor-learner pipeline and Hogwild!.

Signals do not interrupt the work. SIGINT and SIGTERM set a flag (:class:`StopSignals`) that
the training loop reads at its iteration boundary, so a run never stops half-way through a PPO
update or a replay insert, and what the final checkpoint stores is a state the learner really
was in. A second signal aborts at once (:class:`Aborted`): no final checkpoint is written then,
and the line printed says which checkpoint is the newest instead.

Every way a run can end goes through :class:`RunEnd`:

=============  ======================================  =====================================
``ended``      what happened                           final checkpoint
=============  ======================================  =====================================
budget         ``total_steps`` env steps taken         written
time_limit     ``max_seconds`` passed                  written
callback       the caller's callback returned False    written
signal         SIGINT or SIGTERM                        written, then Interrupted is raised
aborted        a second signal                          not written (the newest one stands)
actor_error    an actor or worker failed               written (the learner is between
                                                       iterations), then the error is raised
learner_lost   a population's learner process died     written for the other learners (their
                                                       state is consistent; the dead one's
                                                       newest stands), then the error raised
learner_error  the learner raised during an update     not written: its state is half-updated;
                                                       the newest periodic one stands
io_error       checkpoints failed twice in a row       tried once more, then the error raised
error          anything else, between iterations       written, then the error is raised
=============  ======================================  =====================================

A run that has not completed an iteration since it started or resumed writes no final
checkpoint, whatever ended it: it would hold nothing new, and rotation would drop the oldest
one kept -- after a resume that fell back from a damaged newest, the good one it came from.

And each ends with one line saying what happened and where the checkpoint is, and with
summary.json (its ``ended`` and ``checkpoint`` fields say the same).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from asyncrl.core import NonFiniteError
from asyncrl.rundir import CheckpointWriteError, save_summary
from asyncrl.runtime.faults import ActorError, LearnerLost


class Interrupted(KeyboardInterrupt):
    """The run stopped on SIGINT or SIGTERM at an iteration boundary; its final checkpoint
    was written. A KeyboardInterrupt, so that callers that stop on Ctrl+C stop on it."""


class StopRequested(KeyboardInterrupt):
    """A wait for actors ended because the run's stop flag was set (a first SIGINT or SIGTERM):
    the run ends as a signal ending, with its final checkpoint."""


class Aborted(KeyboardInterrupt):
    """A second SIGINT or SIGTERM: the run stops at once, wherever it was, without a final
    checkpoint."""


class StopSignals:
    """SIGINT and SIGTERM as a flag: the first sets :attr:`signal` (its name), the second
    raises :class:`Aborted` in the main thread, and any later one is ignored while the abort
    cleans up (stopping the actors, freeing shared memory). Inside :meth:`abort_deferred` (a
    learner update) the second one's abort waits for the block's end and a third raises at once.

    Only the main thread can install signal handlers, and only it receives signals: on any
    other thread :meth:`installed` changes nothing, and a run there stops through its callback.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    # After the final checkpoint (or the abort) only cleanup is left -- stopping actors,
    # freeing shared memory -- and a signal raising in there would leave those behind.

    def __init__(self) -> None:
        self.signal: str | None = None
        self.aborted = False
        self.ending = False  # the run has ended: signals may no longer cut its cleanup short
        self.deferring = False  # in abort_deferred
        self.deferred: str | None = None  # the signal whose abort waits there

    def __bool__(self) -> bool:
        return self.signal is not None

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signal is None:
            self.signal = name
            return
        if self.deferring and self.deferred is None:
            self.deferred = name
            return
        if not (self.aborted or self.ending):
            self._abort(name)

    def _abort(self, name: str) -> None:
        self.aborted = True
        raise Aborted(f"second signal ({self.signal}, then {name})")

    @contextlib.contextmanager
    def abort_deferred(self) -> Iterator[None]:
        """A second signal's abort waits for the end of this block (unless a third comes):
        an exception raised at an arbitrary point of torch's code can leave torch broken for
        the process (a torch.compile cut short left its fake-tensor mode on)."""
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
        if self.deferred is not None and not (self.aborted or self.ending):
            self._abort(self.deferred)

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopSignals]:
        """Handle the signals meanwhile (main thread only); the handlers before are put back."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, signal.SIG_DFL if handler is None else handler)


def _first_line(e: BaseException) -> str:
    """``e`` in one line; an error carrying a traceback ("actor 0 ... failed:\n<traceback>")
    as its first line and the traceback's last, the error itself."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    text = lines[0]
    if text.endswith(":") and len(lines) > 1:
        text = f"{text} {lines[-1]}"
    return text if isinstance(e, ActorError | LearnerLost) else f"{type(e).__name__}: {text}"


class RunEnd:
    """The stop conditions, periodic checkpoints and ending of one run (see the module doc).

    The loop asks :meth:`should_stop` at every iteration boundary, wraps what changes the
    learner's state in :meth:`updating`, calls :meth:`periodic` after each iteration and, in
    the ``except`` of its loop, :meth:`failed`; then :meth:`conclude` does the rest.
    """

    def __init__(
        self,
        run_dir: Path,
        stop: StopSignals,
        checkpoint_every: float,
        resumed_from: Path | None,
        env_steps: int,
    ):
        self.run_dir = run_dir
        self.stop = stop
        self.checkpoint_every = checkpoint_every
        self.newest = resumed_from  # the newest checkpoint of the run so far
        self.newest_steps = env_steps
        self.failed_writes = 0
        self.last_write = time.perf_counter()
        self.kind: str | None = None
        self.error: BaseException | None = None
        self.in_update = False
        self.iterated = False  # an iteration completed since the run started or resumed

    # ---------------------------------------------------------------- during the run
    def should_stop(
        self, env_steps: int, total_steps: int, wall: float, max_seconds: float
    ) -> bool:
        """Whether the run ends at this iteration boundary (and why, in :attr:`kind`)."""
        if self.kind is None:
            if self.stop:
                self.kind = "signal"
            elif env_steps >= total_steps:
                self.kind = "budget"
            elif max_seconds and wall >= max_seconds:
                self.kind = "time_limit"
        return self.kind is not None

    def stopped_by_callback(self) -> None:
        self.kind = self.kind or "callback"
        self.iterated = True  # the callback is called after an iteration

    @contextlib.contextmanager
    def updating(self) -> Iterator[None]:
        """The learner's state changes in here: an error inside leaves it inconsistent. A
        second signal aborts at its end (StopSignals.abort_deferred)."""
        self.in_update = True
        with self.stop.abort_deferred():
            yield
            self.in_update = False

    def periodic(self, save: Callable[[], Path], env_steps: int) -> None:
        """Write a checkpoint if ``checkpoint_every`` seconds have passed since the last. A
        failed write is a warning and is retried at the next period; two in a row end the run
        (``io_error``) while a final checkpoint may still fit. Called after every iteration."""
        self.iterated = True
        now = time.perf_counter()
        if not self.checkpoint_every or now - self.last_write <= self.checkpoint_every:
            return
        self.last_write = now
        try:
            self.saved(save(), env_steps)
            self.failed_writes = 0
        except CheckpointWriteError as e:  # nothing half-written is left
            self.failed_writes += 1
            print(f"asyncrl: warning: {e}; will retry", file=sys.stderr, flush=True)
            if self.failed_writes >= 2 and self.kind is None:
                self.kind, self.error = "io_error", e

    def saved(self, path: Path, env_steps: int) -> None:
        self.newest, self.newest_steps = path, env_steps

    def failed(self, e: BaseException) -> None:
        """The loop raised ``e``: record how the run ends."""
        self.error = e
        if isinstance(e, Aborted):
            self.kind = "aborted"
        elif isinstance(e, NonFiniteError):  # the bad step was never applied
            self.kind = "nonfinite"
        elif isinstance(e, LearnerLost):
            self.kind = "learner_lost"
        elif self.in_update:
            self.kind = "learner_error"
        elif isinstance(e, ActorError):
            self.kind = "actor_error"
        elif isinstance(e, CheckpointWriteError):
            self.kind = "io_error"
        elif isinstance(e, KeyboardInterrupt):  # not through our handler (not the main thread)
            self.kind = "signal"
            self.stop.signal = self.stop.signal or "SIGINT"
        else:
            self.kind = "error"

    @property
    def consistent(self) -> bool:
        """Whether the learner's state may be saved as the final checkpoint."""
        return self.kind not in ("aborted", "learner_error")

    # ---------------------------------------------------------------- the end
    def conclude(
        self,
        env_steps: Callable[[], int],
        save: Callable[[], Path],
        summary: Callable[[dict[str, Any]], dict[str, Any]],
        before_save: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """End the run as :attr:`kind` says: the final checkpoint (if the state is consistent;
        ``before_save`` first, to stop what still changes it), summary.json, one line; then
        return the summary or raise what ended the run.

        ``summary(fields)`` builds the summary with ``fields`` added (and may wait for an
        evaluation in progress); on an error ending, a failure in it does not hide the error.
        """
        kind = self.kind or "budget"
        final: Path | None = None
        write_error: BaseException | None = None
        if self.consistent:
            try:
                if before_save is not None:
                    before_save()
                if self.iterated:
                    final = save()
                    self.saved(final, env_steps())
            except Aborted as e:  # a second signal while writing: the temp file is gone
                kind, self.kind, self.error = "aborted", "aborted", e
            except CheckpointWriteError as e:
                write_error = e
            except NonFiniteError as e:  # NaN weights are never saved: the newest kept stands
                write_error = e
                kind, self.kind, self.error = "nonfinite", "nonfinite", self.error or e
        self.stop.ending = True  # what is left is cleanup: no signal cuts it short
        steps = env_steps()
        fields = {
            "ended": kind,
            "checkpoint": str(final) if final is not None else None,
            "interrupted": kind in ("signal", "aborted"),
            "stopped_by_callback": kind == "callback",
            "time_limited": kind == "time_limit",
        }
        line = self._line(kind, steps, final, write_error)
        error_ending = kind not in ("budget", "time_limit", "callback", "signal")
        result: dict[str, Any] = {}
        try:
            result = summary(fields)
            save_summary(self.run_dir, result)
        except Exception:
            if not error_ending and write_error is None:
                raise
        print(line, file=sys.stderr if error_ending or kind == "signal" else sys.stdout, flush=True)
        if kind == "signal":
            raise Interrupted(line)
        if self.error is not None:
            raise self.error
        if write_error is not None:
            raise write_error
        return result

    def _line(
        self, kind: str, steps: int, final: Path | None, write_error: BaseException | None
    ) -> str:
        at = f"at {steps:,} env steps"
        what = {
            "budget": f"finished {at}",
            "time_limit": f"time limit reached {at}",
            "callback": f"stopped by the callback {at}",
            "signal": f"interrupted ({self.stop.signal}) {at}",
            "aborted": f"aborted by a second signal {at}",
            "actor_error": f"stopped {at}: {_first_line(self.error)}" if self.error else "",
            "learner_lost": f"stopped {at}: {_first_line(self.error)}" if self.error else "",
            "learner_error": f"the learner failed during an update {at}: "
            + (_first_line(self.error) if self.error else ""),
            "io_error": f"stopped {at}: checkpoints cannot be written ("
            + (_first_line(self.error) if self.error else "")
            + ")",
            "error": f"stopped {at} by an error: "
            + (_first_line(self.error) if self.error else ""),
            "nonfinite": f"stopped {at}: " + (_first_line(self.error) if self.error else ""),
        }[kind]
        if final is not None:
            return f"asyncrl: {what}; checkpoint saved: {final}"
        if kind == "aborted":
            why = "no final checkpoint written"
        elif kind == "learner_error":
            why = "its state is not consistent, so no final checkpoint was written"
        elif not self.iterated:
            why = "no iteration completed since the run started, so no checkpoint was written"
        elif isinstance(write_error, NonFiniteError):
            why = "its weights are not finite, so no final checkpoint was written"
        else:
            why = f"the final checkpoint could not be written ({write_error})"
        if self.newest is not None:
            older = f"the newest checkpoint is {self.newest} ({self.newest_steps:,} env steps)"
        else:
            older = "no checkpoint was written before"
        return f"asyncrl: {what}; {why}; {older}"
