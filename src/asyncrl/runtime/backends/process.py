"""Actors as processes on one machine, supervised; trajectories and policies in shared memory.

Messages carry slot indices only: the learner grants an actor a slot through the actor's own
one-way pipe, the actor fills it and sends its index back on the one pipe every actor writes to.
Which slot may be granted when -- sync's lockstep, async's ``--max-batches-waiting`` -- is decided
on the learner's side (:class:`SlotBook`), so an actor that dies holds nothing anyone waits for:
no lock (the policy store is a seqlock), no semaphore permit.

A supervisor thread in the learner's process waits on the filled-slot pipe and on every actor's
process sentinel at once, and looks at every actor's status row (ActorStatus) at least every
``POLL`` seconds: a death is seen the moment it happens and a hung env step within ``POLL`` of
``--env-step-timeout``, whatever the learner and the other actors are doing. A lost actor's
partial rollout is dropped, its slot reclaimed, and a fresh actor with the same id, the next
generation's env seeds and the newest policy takes its place, within the ``--actor-restarts``
budget (:class:`Restarts`). An env error under ``--on-env-error raise``, or a fault past the
budget, ends the run with an ActorError naming the actor and its traceback.
"""

from __future__ import annotations

import collections
import ctypes
import multiprocessing as mp
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

import torch

from asyncrl.config import TrainConfig
from asyncrl.envs import EnvSpec
from asyncrl.runtime.actor import ActorStatus
from asyncrl.runtime.backends.base import (
    ActorError,
    OwnedTransport,
    Restarts,
    SlotBook,
    actor_label,
    is_env_error,
)
from asyncrl.runtime.transport import IdChannel, PolicyStore, SharedArray, SlotStore, StopFlag

POLL = 0.2  # seconds between liveness checks of a blocked actor or an idle supervisor
PR_SET_PDEATHSIG = 1


class Stopped(Exception):
    """Raised in a child by :func:`wait_for` when the run stops or its parent is gone."""


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the thread that started it ends (the learner's):
    an actor busy in a long rollout then goes with a learner that was killed, instead of
    noticing only at its next wait. Elsewhere a no-op; the waits' parent check remains."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
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


def actor_main(
    outbox: Connection,
    actor_id: int,
    generation: int,
    cfg: TrainConfig,
    spec: EnvSpec,
    slots: SlotStore,
    store: PolicyStore,
    status: SharedArray,
    todo: IdChannel,
    full: IdChannel,
    stop: Any,
    parent: int,
) -> None:
    """Entry point of an actor process: fill the slots it is granted until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how the run ends
    die_with_parent()
    if os.getppid() != parent:
        return
    torch.set_num_threads(cfg.threads_actor)
    from asyncrl.runtime.actor import Actor

    actor = None
    row = status.array[actor_id]
    try:
        actor = Actor(
            actor_id,
            cfg,
            spec,
            store,
            generation=generation,
            status=row,
        )
        while True:
            t0 = time.perf_counter()
            ActorStatus.set(row, ActorStatus.WAITING)
            slot_id = wait_for(todo.get, stop, parent)
            actor.collect(slots.slots[slot_id], waited=time.perf_counter() - t0)
            full.put(slot_id)
    except Stopped:
        pass
    except BaseException as e:
        report_failure(outbox, fatal=is_env_error(e))
        os._exit(1)  # the sentinel tells the supervisor at once
    finally:
        ActorStatus.set(row, ActorStatus.DONE)
        row = None
        if actor is not None:
            actor.close()
        slots.close()
        store.close()
        status.close()


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
            p.start()
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


class ProcessBackend(OwnedTransport):
    def __init__(self, cfg: TrainConfig, spec: EnvSpec, numel: int):
        self.cfg, self.spec = cfg, spec
        self.ctx = mp.get_context("spawn")
        sync = cfg.mode == "sync"
        per_actor = cfg.slots_per_actor
        self._own_transport(cfg, spec, numel, cfg.actors * per_actor, True, 1 if sync else 2)
        self.status = SharedArray((cfg.actors, 2), "float64")
        self.book = SlotBook(cfg.actors, per_actor, sync, cfg.max_batches_waiting)
        self.children = ChildProcesses(self.ctx, "actor", cfg)
        self.restarts = Restarts(cfg.actor_restarts)
        self.todo = [IdChannel(self.ctx) for _ in range(cfg.actors)]
        self.full = IdChannel(self.ctx)
        self.stop = StopFlag(self.ctx)
        self.failure: BaseException | None = None
        self.closing = False
        self.hung: dict[int, float] = {}
        self._wake_r, self._wake_w = self.ctx.Pipe(duplex=False)
        self.supervisor: threading.Thread | None = None

    # ------------------------------------------------------------ what the learner calls
    def start(self) -> None:
        for i in range(self.cfg.actors):
            self._spawn(i, self.first_generation)
        with self.book.cond:
            self._send_grants()
        self.supervisor = threading.Thread(
            target=self._supervise, name="asyncrl-supervisor", daemon=True
        )
        self.supervisor.start()

    def next_batch(self) -> list:
        with self.book.cond:  # the supervisor thread fills the book and watches the actors
            ids = self.book.wait_take(lambda: self.failure, lambda: None, POLL)
            self._send_grants()  # async: a batch left the queue, a held-back actor may go on
        return self._batch(ids)

    def release(self, slots: list) -> None:
        ids = [s.index for s in slots]
        with self.book.cond:
            self.book.release(ids)
            self._send_grants()

    def actor_pids(self) -> dict[int, int | None]:
        """Actor id -> pid of its live process (for tools and fault tests)."""
        return {i: self.children.pid(i) for i in range(self.cfg.actors)}

    def actor_phase(self, actor: int) -> int:
        return ActorStatus(self.status.array).phase(actor)

    def blocked(self, actor: int) -> bool:
        """Whether ``actor`` waits for a slot the learner has not granted (see SlotBook)."""
        with self.book.cond:
            return self.book.blocked(actor) and self.actor_phase(actor) == ActorStatus.WAITING

    def close(self) -> None:
        with self.book.cond:
            self.closing = True
        self.stop.set()
        if self.supervisor is not None:
            self._wake_w.send_bytes(b"x")
            self.supervisor.join(timeout=30)
            self.supervisor = None
        self.children.close()
        for channel in (*self.todo, self.full):
            channel.close()
        self._wake_r.close()
        self._wake_w.close()
        self._close_transport()
        self.status.close()

    # ------------------------------------------------------------ supervision
    def _generations(self) -> list[int]:
        return [self.children.generation.get(i, 0) for i in range(self.cfg.actors)]

    def _spawn(self, actor: int, generation: int) -> None:
        self.status.array[actor] = (ActorStatus.WAITING, time.monotonic())
        args = (
            actor,
            generation,
            self.cfg,
            self.spec,
            self.slots,
            self.store,
            self.status,
            self.todo[actor],
            self.full,
            self.stop,
            os.getpid(),
        )
        self.children.start(actor_main, args, actor, generation)

    def _send_grants(self) -> None:
        for actor, slot in self.book.grants():
            self.todo[actor].put(slot)

    def _supervise(self) -> None:
        try:
            checked = time.monotonic()
            while True:
                sentinels = self.children.sentinels()
                handles = [self.full.reader, self._wake_r, *sentinels]
                ready = multiprocessing.connection.wait(handles, timeout=POLL)
                # a delivery costs a drain and a grant; the rest only when an actor ended or
                # POLL has passed (sync SAC delivers every env step, beside the learner's update)
                look = time.monotonic() - checked >= POLL or any(h in ready for h in sentinels)
                lost = 0
                with self.book.cond:
                    if self.closing:
                        return
                    delivered = self._drain() if self.full.reader in ready or look else 0
                    if look:
                        lost = self._check_actors()
                        checked = time.monotonic()
                    if delivered or lost:
                        self._send_grants()
                        self.book.cond.notify_all()
                if lost == -1:
                    return
        except BaseException as e:  # a bug here must not leave the learner waiting
            with self.book.cond:
                self.failure = ActorError(f"actor supervisor failed:\n{traceback.format_exc()}")
                self.failure.__cause__ = e
                self.book.cond.notify_all()

    def _drain(self) -> int:
        n = 0
        while True:
            try:
                slot = self.full.get(0)
            except queue.Empty:
                return n
            self.book.delivered(slot)
            n += 1

    def _kill_hung(self) -> None:
        status = ActorStatus(self.status.array)
        for actor in range(self.cfg.actors):
            if actor in self.hung:
                continue
            busy = status.hung(actor, self.cfg.env_step_timeout)
            if busy is not None:
                self.hung[actor] = busy
                self.children.kill(actor)

    def _check_actors(self) -> int:
        """Handle dead and hung actors; the number replaced, or -1 if the run must end."""
        self._kill_hung()
        replaced = 0
        for actor, cause, tb, fatal in self.children.dead():
            if actor in self.hung:
                cause = (
                    f"hung: one env step took over {self.hung.pop(actor):.1f} s "
                    f"(--env-step-timeout {self.cfg.env_step_timeout:g}); killed"
                )
            label = self.children.label(actor)
            started = ActorStatus(self.status.array).phase(actor) != ActorStatus.WAITING
            dropped = self.book.lost(actor, started)
            if fatal:
                self.failure = ActorError(f"{label} failed:\n{tb}")
                return -1
            try:
                self.restarts.charge(label, cause, tb, dropped)
            except ActorError as e:
                # kept without this frame, whose locals view shared memory close() must free
                self.failure = e.with_traceback(None)
                return -1
            # a fresh pipe: the dead reader may have left half a message in the old one
            self.todo[actor].close()
            self.todo[actor] = IdChannel(self.ctx)
            self._spawn(actor, self.children.generation.get(actor, 0) + 1)
            self.book.resume(actor)
            replaced += 1
        return replaced
