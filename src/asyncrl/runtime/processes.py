"""Child processes a run owns (actors, Hogwild! workers, the evaluator): spawned, watched,
told to stop, and always joined; each reports to its parent on a pipe of its own."""

from __future__ import annotations

import collections
import ctypes
import multiprocessing.connection
import multiprocessing.resource_tracker
import os
import queue
import signal
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, NamedTuple

from asyncrl.runtime.faults import actor_label

if TYPE_CHECKING:
    from asyncrl.settings import TrainConfig

POLL = 0.2  # seconds between liveness checks of a blocked actor or an idle supervisor
PR_SET_PDEATHSIG = 1


class Stopped(Exception):
    """Raised in a child by :func:`wait_for` when the run stops or its parent is gone."""


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` (SIGKILL; a sweep's trial: SIGTERM, a clean end) to this
    process when the thread that started it ends (the learner's):
    an actor busy in a long rollout then goes with a learner that was killed, instead of
    noticing only at its next wait. Elsewhere a no-op; the waits' parent check remains. The
    thread, not the process: a thread that starts children must outlive them (join them
    before it ends), or they are killed mid-cleanup."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


def wait_for(get: Any, stop: Any, parent: int) -> Any:
    """Block on ``get(timeout)`` until it succeeds, the run stops or the parent dies."""
    while True:
        if stop.is_set() or os.getppid() != parent:
            raise Stopped
        try:
            return get(POLL)
        except queue.Empty:
            continue


class ChildFailure(NamedTuple):
    """What a child sends its parent before it exits on an error (:func:`report_failure`)."""

    traceback: str
    fatal: bool


def report_failure(outbox: Connection, fatal: bool) -> None:
    """Send the exception being handled, with its traceback, to the parent. ``outbox`` is this
    child's own pipe (:class:`ChildProcesses`): the send is done when it returns, and the parent
    reads it before it reports the child's death."""
    outbox.send(ChildFailure(traceback.format_exc(), fatal))
    outbox.close()


def describe_exit(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with code {exitcode}"


class ChildProcesses:
    """Processes this one owns: spawned, watched, and always joined.

    Each child gets an *outbox* as its target's first argument: the write end of a pipe that no
    other process writes to. Its messages (Hogwild! reports, evaluation results) come out of
    :meth:`receive` as ``(index, message)`` in the order sent; a failure it reports before
    exiting (:func:`report_failure`) comes with its death from :meth:`dead`, which lists a
    child only once every message it sent has been received. Why a pipe each and not one
    ``multiprocessing.Queue``: a queue's writers share a lock, and a child SIGKILLed while its
    feeder thread held it would leave it held for good -- every other child's messages would
    stop, and those children could not exit (each joins its feeder first). A child killed
    mid-message here spoils only its own pipe. :meth:`close` joins, then terminates, then
    kills: nothing is left running.
    """

    def __init__(self, ctx: Any, role: str, cfg: TrainConfig):
        self.ctx, self.role, self.cfg = ctx, role, cfg
        self.procs: dict[int, Any] = {}  # index -> the live process of that index
        self.generation: dict[int, int] = {}
        self.inbox: dict[int, Connection] = {}  # index -> the read end of its child's outbox
        self.messages: collections.deque[tuple[int, Any]] = collections.deque()
        self.failures: dict[int, ChildFailure] = {}  # index -> what its child reported

    def start(self, target: Any, args: tuple, index: int, generation: int = 0) -> None:
        reader, outbox = self.ctx.Pipe(duplex=False)
        try:
            p = self.ctx.Process(
                target=target,
                name=f"asyncrl-{self.role.replace(' ', '-')}-{index}",
                args=(outbox, *args),
                daemon=True,
            )
            # A child inherits this thread's signal mask: a Ctrl+C that reaches the process
            # group while the child is still importing stays pending there (the child ignores
            # it once it runs) instead of printing a KeyboardInterrupt traceback. The resource
            # tracker is started first: starting it unblocks SIGINT (multiprocessing's own
            # code), which inside the window would leave the first child of a process exposed.
            if self.ctx.get_start_method() != "fork":
                multiprocessing.resource_tracker.ensure_running()
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
            try:
                p.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        except BaseException:
            reader.close()
            raise
        finally:
            outbox.close()  # the child's alone now: the pipe ends (EOF) when the child does
        self.procs[index] = p
        self.generation[index] = generation
        self.inbox[index] = reader

    def label(self, index: int) -> str:
        return actor_label(self.cfg, index, self.role)

    def indices(self) -> list[int]:
        """The children not yet reported dead (:meth:`dead`)."""
        return list(self.procs)

    def sentinels(self) -> list[int]:
        return [p.sentinel for p in self.procs.values()]

    def pid(self, index: int) -> int | None:
        p = self.procs.get(index)
        return p.pid if p is not None else None

    def receive(self, timeout: float) -> tuple[int, Any]:
        """The next message from a child, as ``(index, message)``, waiting at most ``timeout``
        seconds for one; ``queue.Empty`` if none came. Every call empties the pipes that hold
        something, so a child waits on a full pipe only while the caller does not call."""
        wait = 0.0 if self.messages else timeout
        ready = multiprocessing.connection.wait(list(self.inbox.values()), wait)
        for index, reader in list(self.inbox.items()):
            if reader in ready:
                self._take(index)
        if not self.messages:
            raise queue.Empty
        return self.messages.popleft()

    def _take(self, index: int) -> None:
        """Read what the child of ``index`` has sent so far; at the end of its pipe (the child
        is gone), close it. A message cut off by the child's death is lost, nothing else."""
        reader = self.inbox[index]
        try:
            while reader.poll():
                message = reader.recv()
                if isinstance(message, ChildFailure):
                    self.failures[index] = message
                else:
                    self.messages.append((index, message))
        except (EOFError, OSError):
            reader.close()
            del self.inbox[index]

    def dead(self) -> list[tuple[int, str, str, bool]]:
        """Children that died since the last call, each after all it sent was received:
        ``(index, cause, traceback, fatal)``; each is joined and forgotten (a replacement may
        take its index)."""
        for index in [i for i, reader in self.inbox.items() if reader.poll()]:
            self._take(index)  # read as it comes: a child blocked on a full pipe cannot exit
        out = []
        for index, p in list(self.procs.items()):
            if p.is_alive():
                continue
            if index in self.inbox:  # all it wrote is in its pipe now, then the end
                self._take(index)
            if any(i == index for i, _ in self.messages):
                continue  # its messages first: a goodbye among them may explain the exit
            p.join()
            reader = self.inbox.pop(index, None)  # open only if another process holds its end
            if reader is not None:
                reader.close()
            tb, fatal = self.failures.pop(index, ChildFailure("", False))
            cause = "raised" if tb else describe_exit(p.exitcode)
            out.append((index, cause, tb, fatal))
            del self.procs[index]
        return out

    def kill(self, index: int) -> None:
        """SIGKILL the child of ``index`` through its own handle: not reaped yet (that is
        :meth:`dead`'s join), so its pid cannot have been reused by another process."""
        p = self.procs.get(index)
        if p is not None and p.is_alive():
            p.kill()

    def close(self, queues: tuple = ()) -> None:
        procs = list(self.procs.values())
        for p in procs:
            p.join(timeout=5)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
        self.procs = {}
        for reader in self.inbox.values():
            reader.close()
        self.inbox = {}
        for q in queues:
            q.cancel_join_thread()
            q.close()
