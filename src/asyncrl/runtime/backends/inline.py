"""Everything in one process, in a fixed order: deterministic for a fixed seed, for debugging.

Sync mode runs the protocol as it is: every actor collects with the newest version, then the
learner trains on all of them. Async mode is *emulated* as N equally fast actors running beside
the learner: all actors start with version 0; the learner trains on the oldest waiting batch, and
the actor it came from immediately collects its next batch with the version just published. In
steady state every batch therefore lags N - 1 versions, as it would with real parallel actors.
"""

from __future__ import annotations

from collections import deque

from asyncrl.config import TrainConfig
from asyncrl.envs import EnvSpec
from asyncrl.runtime.actor import Actor
from asyncrl.runtime.transport import PolicyStore, Slot, SlotStore


class InlineBackend:
    def __init__(self, cfg: TrainConfig, spec: EnvSpec, slots: SlotStore, store: PolicyStore):
        self.cfg, self.spec, self.store = cfg, spec, store
        self.slots = slots.slots  # one per actor
        self.actors: list[Actor] = []
        self.waiting: deque[int] = deque()

    def start(self) -> None:
        self.actors = [
            Actor(i, self.cfg, self.spec, self.store, in_place=True) for i in range(self.cfg.actors)
        ]

    def _collect(self, i: int) -> None:
        self.actors[i].collect(self.slots[i])
        self.waiting.append(i)

    def next_batch(self) -> list[Slot]:
        if not self.waiting:
            for i in range(len(self.actors)):
                self._collect(i)
        if self.cfg.mode == "sync":
            ids = list(self.waiting)
            self.waiting.clear()
        else:
            ids = [self.waiting.popleft()]
        return [self.slots[i] for i in ids]

    def release(self, slots: list[Slot]) -> None:
        if self.cfg.mode == "async":
            for slot in slots:
                self._collect(int(slot.meta[0]))

    def close(self) -> None:
        for actor in self.actors:
            actor.close()
        self.actors = []
