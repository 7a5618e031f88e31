"""Everything in one process, in a fixed order: deterministic for a fixed seed, for debugging.

Sync mode runs the protocol as it is: every actor collects with the newest version, then the
learner trains on all of them. Async mode is *emulated* as N equally fast actors running beside
the learner: all actors start with version 0; the learner trains on the oldest waiting batch, and
the actor it came from immediately collects its next batch with the version just published. In
steady state every batch therefore lags N - 1 versions, as it would with real parallel actors.

An actor whose rollout raises is replaced at once (LocalFleet) and collects again into the same
slot, so a fault costs a dropped rollout, never a batch.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from asyncrl.config import TrainConfig
from asyncrl.envs import EnvSpec
from asyncrl.runtime.backends.local import LocalFleet
from asyncrl.runtime.transport import PolicyStore, Slot, SlotLayout, SlotStore


class InlineBackend:
    def __init__(self, cfg: TrainConfig, spec: EnvSpec, numel: int):
        self.cfg, self.spec = cfg, spec
        layout = SlotLayout.for_rollout(spec, cfg.rollout, cfg.envs_per_actor, cfg.algo == "sac")
        self.slots = SlotStore(layout, cfg.actors, shared=False)  # one per actor
        self.store = PolicyStore(numel, shared=False, buffers=1)  # actors act in place
        self.fleet = LocalFleet(cfg, spec, self.store, in_place=True)
        self.waiting: deque[int] = deque()
        self.env_restarts = 0

    @property
    def version(self) -> int:
        return self.store.version

    def publish(self, version: int, write: Any) -> None:
        self.store.publish(version, write)

    def start(self) -> None:
        pass  # actors are made at their first rollout

    def _collect(self, i: int) -> None:
        slot = self.slots.slots[i]
        while not self.fleet.collect(i, slot):
            pass  # replaced: the new actor collects the rollout again
        self.env_restarts += int(slot.env_restarts[0])
        self.waiting.append(i)

    def next_batch(self) -> list[Slot]:
        if not self.waiting:
            for i in range(self.cfg.actors):
                self._collect(i)
        if self.cfg.mode == "sync":
            ids = list(self.waiting)
            self.waiting.clear()
        else:
            ids = [self.waiting.popleft()]
        return [self.slots.slots[i] for i in ids]

    def release(self, slots: list[Slot]) -> None:
        if self.cfg.mode == "async":
            for slot in slots:
                self._collect(slot.index)

    def health(self) -> dict[str, int]:
        return {
            "actor_restarts": self.fleet.restarts.used,
            "dropped_rollouts": self.fleet.restarts.dropped,
            "env_restarts": self.env_restarts,
        }

    def close(self) -> None:
        self.fleet.close()
        self.slots.close()
        self.store.close()
