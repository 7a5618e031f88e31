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

from asyncrl.envs import EnvSpec
from asyncrl.runtime.backends.base import OwnedTransport
from asyncrl.runtime.backends.local import LocalFleet
from asyncrl.runtime.transport import Slot
from asyncrl.settings import TrainConfig


class InlineBackend(OwnedTransport):
    def __init__(self, cfg: TrainConfig, spec: EnvSpec, numel: int):
        self.cfg, self.spec = cfg, spec
        # one slot per actor and policy; actors act with the published vectors in place
        self._own_transport(cfg, spec, numel, cfg.actors, shared=False, buffers=1)
        self.fleet = LocalFleet(cfg, spec, self.stores)
        self.restarts = self.fleet.restarts
        P = cfg.policies
        self.waiting: list[deque[int]] = [deque() for _ in range(P)]  # per policy
        self.released: list[set[int]] = [set() for _ in range(P)]  # async: per actor

    def start(self) -> None:
        pass  # actors are made at their first rollout

    def _collect(self, i: int) -> None:
        rollout = [store.slots[i] for store in self.slot_stores]
        while not self.fleet.collect(i, rollout):
            pass  # replaced: the new actor collects the rollout again
        for waiting in self.waiting:
            waiting.append(i)

    def next_batch(self, stop: Any = None, policy: int = 0) -> list[Slot]:
        # collects in this thread: no wait
        waiting = self.waiting[policy]
        if not waiting:
            for i in range(self.cfg.actors):
                self._collect(i)
        if self.cfg.mode == "sync":
            ids = list(waiting)
            waiting.clear()
        else:
            ids = [waiting.popleft()]
        return self._batch(ids, policy)

    def release(self, slots: list[Slot], policy: int = 0) -> None:
        if self.cfg.mode == "async":  # an actor collects again once every policy is done
            for slot in slots:
                self.released[policy].add(slot.index)
                if all(slot.index in done for done in self.released):
                    for done in self.released:
                        done.discard(slot.index)
                    self._collect(slot.index)

    def actor_state(self) -> dict:
        # sync: between iterations every actor is idle, its rollout trained on -- its state is
        # exactly where a resumed run goes on. Async keeps rollouts waiting: generations only.
        return self.fleet.state_dict(actors=self.cfg.mode == "sync")

    def load_actor_state(self, state: dict) -> None:
        self.fleet.load_state_dict(state)

    def close(self) -> None:
        self.fleet.close()
        self._close_transport()
