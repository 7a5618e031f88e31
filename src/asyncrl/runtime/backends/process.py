"""Actors as processes on one machine, supervised; trajectories and policies in shared memory.

Messages carry slot indices only; which slot may be granted when is the learner's
:class:`SlotBook`'s to decide, so an actor that dies holds nothing anyone waits for. A
supervisor thread watches every actor's process and status row and replaces the dead and the
hung within the restart budget (docs: Internals, and Guides: faults)."""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import torch

from asyncrl.core import Algorithm
from asyncrl.envs import EnvSpec
from asyncrl.runtime.backends.base import OwnedTransport, SlotBooks
from asyncrl.runtime.faults import ActorError, is_env_error
from asyncrl.runtime.processes import (
    POLL,
    ChildProcesses,
    Stopped,
    die_with_parent,
    report_failure,
    wait_for,
)
from asyncrl.runtime.supervisor import ActorStatus, Supervisor
from asyncrl.runtime.transport import (
    IdChannel,
    PolicyStore,
    PoolStore,
    SharedArray,
    SlotStore,
    StopFlag,
)
from asyncrl.settings import Prepared, TrainConfig


def actor_main(
    outbox: Connection,
    actor_id: int,
    generation: int,
    cfg: TrainConfig,
    spec: EnvSpec,
    algo: Algorithm,
    slots: list[SlotStore],
    store: list[PolicyStore],
    status: SharedArray,
    todo: IdChannel,
    full: IdChannel,
    stop: Any,
    parent: int,
    pool: PoolStore | None = None,
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
        ActorStatus.set(row, ActorStatus.STARTING)  # timed like an env step: an env may hang here
        actor = Actor(
            actor_id,
            cfg,
            spec,
            algo,
            store,
            generation=generation,
            status=row,
            pool=pool,
        )
        while True:
            t0 = time.perf_counter()
            ActorStatus.set(row, ActorStatus.WAITING)
            slot_id = wait_for(todo.get, stop, parent)
            rollout = [policy_slots.slots[slot_id] for policy_slots in slots]
            actor.collect(rollout, waited=time.perf_counter() - t0)
            rollout = None
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
        for handle in (*slots, *store, *([pool] if pool is not None else [])):
            handle.close()
        status.close()


class ProcessBackend(OwnedTransport):
    def __init__(self, run: Prepared, numel: list[int]):
        cfg = run.cfg
        self.cfg, self.spec, self.algo = cfg, run.spec, run.algo
        self.ctx = mp.get_context("spawn")
        sync = cfg.mode == "sync"
        per_actor = cfg.slots_per_actor
        self._own_transport(run, numel, cfg.actors * per_actor, True, 1 if sync else 2)
        self.status = SharedArray((cfg.actors, 2), "float64")
        self.book = SlotBooks.of_run(cfg)
        self.children = ChildProcesses(self.ctx, "actor", cfg)
        self.supervisor = Supervisor(
            self.children,
            cfg.env_step_timeout,
            ActorStatus(self.status),
            cfg.actor_restarts,
            self._respawn,
        )
        self.restarts = self.supervisor.restarts
        self.todo = [IdChannel(self.ctx) for _ in range(cfg.actors)]
        self.full = IdChannel(self.ctx)
        self.stop = StopFlag(self.ctx)
        self.failure: BaseException | None = None
        self.closing = False
        self._wake_r, self._wake_w = self.ctx.Pipe(duplex=False)
        self.watcher: threading.Thread | None = None  # the thread that runs the supervisor
        self._children_closed = threading.Event()  # the supervisor thread may end (see close)

    # ------------------------------------------------------------ what the learner calls
    def start(self) -> None:
        for i in range(self.cfg.actors):
            self._spawn(i, self.first_generation)
        with self.book.cond:
            self._send_grants()
        self.watcher = threading.Thread(
            target=self._supervise, name="asyncrl-supervisor", daemon=True
        )
        self.watcher.start()

    def next_batch(self, stop: Any = None, policy: int = 0) -> list:
        with self.book.cond:  # the supervisor thread fills the book and watches the actors
            ids = self.book.wait_take(lambda: self.failure, lambda: None, POLL, stop, policy)
            self._send_grants()  # async: a batch left the queue, a held-back actor may go on
        return self._batch(ids, policy)

    def release(self, slots: list, policy: int = 0) -> None:
        ids = [s.index for s in slots]
        with self.book.cond:
            self.book.release(ids, policy)
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
            self.closing = True  # the supervisor starts no actor after this
        self.stop.set()
        # the actors first: those the supervisor thread started (replacements) get SIGKILL when
        # that thread ends (PR_SET_PDEATHSIG follows the thread that forked), cutting their
        # cleanup short; the thread waits for this
        self.children.close()
        self._children_closed.set()
        if self.watcher is not None:
            self._wake_w.send_bytes(b"x")
            self.watcher.join(timeout=30)
            self.watcher = None
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
            self.algo,
            self.slot_stores,
            self.stores,
            self.status,
            self.todo[actor],
            self.full,
            self.stop,
            os.getpid(),
            self.pool,
        )
        self.children.start(actor_main, args, actor, generation)

    def _send_grants(self) -> None:
        for actor, slot in self.book.grants():
            self.todo[actor].put(slot)

    def _supervise(self) -> None:
        try:
            self._watch()
        finally:  # it outlives the actors it started: see close
            self._children_closed.wait()

    def _watch(self) -> None:
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

    def _check_actors(self) -> int:
        """Handle dead and hung actors; the number replaced, or -1 if the run must end."""
        lost = self.supervisor.check()
        for one in lost:
            started = self.actor_phase(one.index) not in (ActorStatus.WAITING, ActorStatus.STARTING)
            dropped = self.book.lost(one.index, started)
            try:
                self.supervisor.replace(one, dropped)
            except ActorError as e:
                # kept without this frame, whose locals view shared memory close() must free
                self.failure = e.with_traceback(None)
                return -1
            self.book.resume(one.index)
        return len(lost)

    def _respawn(self, actor: int) -> None:
        # a fresh pipe: the dead reader may have left half a message in the old one
        self.todo[actor].close()
        self.todo[actor] = IdChannel(self.ctx)
        self._spawn(actor, self.children.generation.get(actor, 0) + 1)
