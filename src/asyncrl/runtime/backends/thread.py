"""Actors in a thread of the learner's own process: the ML-Agents arrangement, one process.

One thread steps all N actors in turn while the training loop (the learner) runs in the main
thread; they meet at thread-safe bounded queues of slot indices, exactly as processes do in
the process backend (one free queue per actor, one queue of filled slots, a semaphore for
``max_batches_waiting``), so sync and async mean the same here. Every blocking get has a timeout
so a stop request is noticed.

What it costs: both threads share one interpreter lock, so env stepping and the learner's
Python-level work do not run in parallel; only the parts that release the lock (PyTorch
kernels, MuJoCo's C step, numpy copies) overlap. What it saves: no process start-up, no
shared-memory segments, no pickling of configs. Actors copy published policy versions under the
store's lock, so unlike designs that share the module, no sample is ever taken with parameters
half-way through an update.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback

from asyncrl.config import TrainConfig
from asyncrl.envs import EnvSpec
from asyncrl.runtime.actor import Actor
from asyncrl.runtime.backends.base import ActorError, SlotQueues
from asyncrl.runtime.transport import PolicyStore, SlotStore

POLL = 0.2


class _Stopped(Exception):
    pass


class ThreadBackend(SlotQueues):
    def __init__(self, cfg: TrainConfig, spec: EnvSpec, slots: SlotStore, store: PolicyStore):
        self.cfg, self.spec, self.slots, self.store = cfg, spec, slots, store
        self.per_actor = cfg.slots_per_actor
        self.free = [queue.Queue(maxsize=self.per_actor) for _ in range(cfg.actors)]
        self.full: queue.Queue[int] = queue.Queue(maxsize=len(slots.slots))
        self.waiting = threading.Semaphore(cfg.max_batches_waiting) if cfg.mode == "async" else None
        self.stop = threading.Event()
        self.error: tuple[int, str] | None = None
        self.thread: threading.Thread | None = None

    def _wait(self, get) -> object:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                return get(POLL)
            except queue.Empty:
                continue

    def _acquire_waiting(self, timeout: float) -> bool:
        if not self.waiting.acquire(timeout=timeout):
            raise queue.Empty
        return True

    def _run(self) -> None:
        actor_id = 0
        actors: list[Actor] = []
        try:
            for actor_id in range(self.cfg.actors):
                actors.append(
                    Actor(
                        actor_id, self.cfg, self.spec, self.store, in_place=self.cfg.mode == "sync"
                    )
                )
            while True:
                for actor_id, actor in enumerate(actors):
                    t0 = time.perf_counter()
                    slot_id = self._wait(lambda t, q=self.free[actor_id]: q.get(timeout=t))
                    slot = self.slots.slots[slot_id]
                    actor.collect(slot, waited=time.perf_counter() - t0)
                    if self.waiting is not None:
                        t1 = time.perf_counter()
                        self._wait(self._acquire_waiting)
                        slot.meta[2] += time.perf_counter() - t1
                    self.full.put(slot_id)
        except _Stopped:
            pass
        except BaseException:
            self.error = (actor_id, traceback.format_exc())
        finally:
            for actor in actors:
                actor.close()

    def start(self) -> None:
        for i in range(self.cfg.actors):
            for j in range(self.per_actor):
                self.free[i].put(i * self.per_actor + j)
        self.thread = threading.Thread(target=self._run, name="asyncrl-actors", daemon=True)
        self.thread.start()

    def _get_full(self) -> int:
        while True:
            try:
                return self.full.get(timeout=POLL)
            except queue.Empty:
                if self.error is not None:
                    actor_id, tb = self.error
                    raise ActorError(
                        f"actor {actor_id} (env {self.cfg.env} x {self.cfg.envs_per_actor}) "
                        f"failed:\n{tb}"
                    ) from None

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
            self.thread = None
