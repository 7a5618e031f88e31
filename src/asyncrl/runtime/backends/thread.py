"""Actors in a thread of the learner's own process: one thread steps all N actors in turn,
sharing the process backend's slot ledger, so sync and async mean the same here. They share the
interpreter lock with the learner (docs: Internals has what that costs and saves)."""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from typing import Any

from asyncrl.runtime.backends.base import OwnedTransport, SlotBooks
from asyncrl.runtime.backends.local import LocalFleet
from asyncrl.runtime.faults import ActorError
from asyncrl.runtime.transport import Slot
from asyncrl.settings import Prepared

POLL = 0.2


class ThreadBackend(OwnedTransport):
    def __init__(self, run: Prepared, numel: list[int]):
        cfg, spec = run.cfg, run.spec
        self.cfg, self.spec = cfg, spec
        sync = cfg.mode == "sync"
        per_actor = cfg.slots_per_actor
        self._own_transport(run, numel, cfg.actors * per_actor, False, 1 if sync else 2)
        self.fleet = LocalFleet(cfg, spec, run.algo, self.stores, self.pool)
        self.restarts = self.fleet.restarts
        self.book = SlotBooks.of_run(cfg)
        self.granted: deque[tuple[int, int, float]] = deque()  # (actor, slot, granted at)
        self.stop = False
        self.failure: BaseException | None = None
        self.thread: threading.Thread | None = None

    def _grant(self) -> None:
        now = time.perf_counter()
        self.granted.extend((a, s, now) for a, s in self.book.grants())
        self.book.cond.notify_all()

    def _run(self) -> None:
        cond = self.book.cond
        try:
            while True:
                with cond:
                    while not self.granted and not self.stop:
                        cond.wait(POLL)
                    if self.stop:
                        return
                    actor, slot_id, granted_at = self.granted.popleft()
                rollout = [store.slots[slot_id] for store in self.slot_stores]
                ok = self.fleet.collect(actor, rollout, waited=time.perf_counter() - granted_at)
                with cond:
                    if ok:
                        self.book.delivered(slot_id)
                    else:  # replaced: its slot is free again, and granted to the new actor
                        self.book.lost(actor)
                        self.book.resume(actor)
                    self._grant()
        except ActorError as e:
            failure: BaseException = e
        except BaseException:
            failure = ActorError(f"actor thread failed:\n{traceback.format_exc()}")
        with cond:
            self.failure = failure
            cond.notify_all()

    def start(self) -> None:
        with self.book.cond:
            self._grant()
        self.thread = threading.Thread(target=self._run, name="asyncrl-actors", daemon=True)
        self.thread.start()

    def next_batch(self, stop: Any = None, policy: int = 0) -> list[Slot]:
        with self.book.cond:  # no thread watches a hung actor thread: look while waiting
            ids = self.book.wait_take(lambda: self.failure, self.fleet.hung, POLL, stop, policy)
            self._grant()
        return self._batch(ids, policy)

    def release(self, slots: list[Slot], policy: int = 0) -> None:
        with self.book.cond:
            self.book.release([s.index for s in slots], policy)
            self._grant()

    def actor_state(self) -> dict:
        return self.fleet.state_dict(actors=False)  # actors may be mid-rollout meanwhile

    def load_actor_state(self, state: dict) -> None:
        self.fleet.load_state_dict(state)

    def actor_phase(self, actor: int) -> int:
        return self.fleet.status.phase(actor)

    def close(self) -> None:
        with self.book.cond:
            self.stop = True
            self.book.cond.notify_all()
        if self.thread is not None:
            self.thread.join(timeout=30)
            self.thread = None
        self.fleet.close()
        self._close_transport()
