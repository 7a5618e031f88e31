"""Actors as processes on one machine; trajectories and policies in shared memory.

Messages carry slot indices only. Each actor owns its slots and gets them back through its own
free queue, so in sync mode (one slot each) an actor cannot start a rollout before the learner
has trained on its last one and published, and every batch holds one rollout of every actor. In
async mode a semaphore counts filled batches waiting for the learner: an actor with a finished
rollout blocks only when ``max_batches_waiting`` are already queued (backpressure).

Every wait has a timeout so that a stop request, a dead parent or a dead actor is noticed within
a fraction of a second; nothing waits forever.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from typing import Any

import torch

from asyncrl.config import TrainConfig
from asyncrl.envs import EnvSpec
from asyncrl.runtime.backends.base import ActorError, SlotQueues
from asyncrl.runtime.transport import IdChannel, PolicyStore, SlotStore

POLL = 0.2  # seconds between liveness checks while blocked


class _Stopped(Exception):
    pass


def _wait(get: Any, stop: Any, parent: int) -> Any:
    """Block on ``get(timeout)`` until it succeeds, the run stops or the parent dies."""
    while True:
        if stop.is_set() or os.getppid() != parent:
            raise _Stopped
        try:
            return get(POLL)
        except queue.Empty:
            continue


def actor_main(
    actor_id: int,
    cfg: TrainConfig,
    spec: EnvSpec,
    slots: SlotStore,
    store: PolicyStore,
    free: Any,
    full: Any,
    errors: Any,
    stop: Any,
    waiting: Any,
    parent: int,
) -> None:
    """Entry point of an actor process: collect into free slots until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how the run ends
    torch.set_num_threads(cfg.threads_actor)
    from asyncrl.runtime.actor import Actor

    actor = None
    try:
        actor = Actor(actor_id, cfg, spec, store, in_place=cfg.mode == "sync")
        while True:
            t0 = time.perf_counter()
            slot_id = _wait(free.get, stop, parent)
            slot = slots.slots[slot_id]
            actor.collect(slot, waited=time.perf_counter() - t0)
            if waiting is not None:
                t1 = time.perf_counter()
                _wait(lambda t: waiting.acquire(timeout=t) or _empty(), stop, parent)
                slot.meta[2] += time.perf_counter() - t1
            full.put(slot_id)
    except _Stopped:
        pass
    except BaseException:
        errors.put((actor_id, traceback.format_exc()))
    finally:
        if actor is not None:
            actor.close()
        slots.close()
        store.close()


def _empty() -> Any:
    raise queue.Empty


class ChildProcesses:
    """Processes this one owns: spawned, watched, and always joined.

    Each child reports a failure as ``(index, traceback)`` on :attr:`errors`; :meth:`check`
    turns that, or a child that died without a word, into an ActorError naming the child and
    its envs. :meth:`close` joins, then terminates, then kills: nothing is left running.
    """

    def __init__(self, ctx: Any, role: str, cfg: TrainConfig):
        self.ctx, self.role, self.cfg = ctx, role, cfg
        self.errors = ctx.Queue()
        self.procs: list[Any] = []

    def start(self, target: Any, args: tuple, index: int) -> None:
        p = self.ctx.Process(
            target=target, name=f"asyncrl-{self.role}-{index}", args=args, daemon=True
        )
        p.start()
        self.procs.append(p)

    def _label(self, index: int) -> str:
        return f"{self.role} {index} (env {self.cfg.env} x {self.cfg.envs_per_actor})"

    def check(self) -> None:
        """Raise ActorError if a child failed or died."""
        try:
            index, tb = self.errors.get_nowait()
        except queue.Empty:
            pass
        else:
            raise ActorError(f"{self._label(index)} failed:\n{tb}")
        for i, p in enumerate(self.procs):
            if not p.is_alive() and p.exitcode != 0:
                time.sleep(POLL)  # its traceback may still be in flight
                try:
                    index, tb = self.errors.get_nowait()
                except queue.Empty:
                    raise ActorError(
                        f"{self._label(i)} exited with code {p.exitcode} and no traceback"
                    ) from None
                raise ActorError(f"{self._label(index)} failed:\n{tb}")

    def close(self, queues: tuple = ()) -> None:
        for p in self.procs:
            p.join(timeout=5)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
        self.procs = []
        for q in (*queues, self.errors):
            q.cancel_join_thread()
            q.close()


class ProcessBackend(SlotQueues):
    def __init__(self, cfg: TrainConfig, spec: EnvSpec, slots: SlotStore, store: PolicyStore):
        self.cfg, self.spec, self.slots, self.store = cfg, spec, slots, store
        self.ctx = mp.get_context("spawn")
        self.per_actor = cfg.slots_per_actor
        self.children = ChildProcesses(self.ctx, "actor", cfg)
        self.free = [IdChannel(self.ctx) for _ in range(cfg.actors)]
        self.full = IdChannel(self.ctx)
        self.stop = self.ctx.Event()
        self.waiting = self.ctx.Semaphore(cfg.max_batches_waiting) if cfg.mode == "async" else None

    def start(self) -> None:
        for i in range(self.cfg.actors):
            for j in range(self.per_actor):
                self.free[i].put(i * self.per_actor + j)
        for i in range(self.cfg.actors):
            args = (
                i,
                self.cfg,
                self.spec,
                self.slots,
                self.store,
                self.free[i],
                self.full,
                self.children.errors,
                self.stop,
                self.waiting,
                os.getpid(),
            )
            self.children.start(actor_main, args, i)

    def _get_full(self) -> int:
        while True:
            try:
                return self.full.get(POLL)
            except queue.Empty:
                self.children.check()

    def close(self) -> None:
        self.stop.set()
        self.children.close()
        for channel in (*self.free, self.full):
            channel.close()
