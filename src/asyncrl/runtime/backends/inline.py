"""Everything in one process, in a fixed order: deterministic for a fixed seed, for debugging.

Sync mode runs the protocol as it is: every actor collects with the newest version, then the
learner trains on all of them. Async mode is *emulated* as N equally fast actors running beside
the learner, each keeping its R = ``--rollouts-per-batch`` slots full: all actors start by
filling them with version 0, in rounds of every actor; the learner trains on the R oldest
waiting rollouts, and once every policy is done with a slot, the actor it came from collects
its next rollout into it with the versions just published. N*R rollouts wait in a queue of
which a batch takes R, so in steady state every batch lags N - 1 versions, whatever R (a
population's batches of P rollouts too; real actors that outpace the learner: N + B, see
SlotBook).

An actor whose rollout raises is replaced at once (LocalFleet) and collects again into the same
slot, so a fault costs a dropped rollout, never a batch.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from asyncrl.runtime.backends.base import OwnedTransport
from asyncrl.runtime.backends.local import LocalFleet
from asyncrl.runtime.transport import Slot
from asyncrl.settings import Prepared


class InlineBackend(OwnedTransport):
    def __init__(self, run: Prepared, numel: list[int]):
        cfg, spec = run.cfg, run.spec
        self.cfg, self.spec = cfg, spec
        # per actor and policy one slot, or in async mode one per rollout of a batch; actors
        # act with the published vectors in place
        self.per_actor = cfg.rollouts_per_batch
        self._own_transport(run, numel, cfg.actors * self.per_actor, False, buffers=1)
        self.fleet = LocalFleet(cfg, spec, run.algo, self.stores, self.pool)
        self.restarts = self.fleet.restarts
        P = cfg.policies
        self.waiting: list[deque[int]] = [deque() for _ in range(P)]  # per policy
        self.released: list[set[int]] = [set() for _ in range(P)]  # async: per slot
        self.busy: set[int] = set()  # slots filled and not yet released by every policy

    def start(self) -> None:
        pass  # actors are made at their first rollout

    def _collect(self, slot: int) -> None:
        rollout = [store.slots[slot] for store in self.slot_stores]
        while not self.fleet.collect(slot // self.per_actor, rollout):
            pass  # replaced: the new actor collects the rollout again
        self.busy.add(slot)
        for waiting in self.waiting:
            waiting.append(slot)

    def _collect_round(self) -> None:
        """Every actor with a free slot collects one rollout into its first, in actor order."""
        m = self.per_actor
        free = [
            next((s for s in range(a * m, (a + 1) * m) if s not in self.busy), None)
            for a in range(self.cfg.actors)
        ]
        if all(s is None for s in free):
            raise RuntimeError("inline backend: every slot is in use, none for a batch")
        for s in free:
            if s is not None:
                self._collect(s)

    def next_batch(self, stop: Any = None, policy: int = 0) -> list[Slot]:
        # collects in this thread: no wait. Async starts with every slot full (a released slot
        # is collected again at once); sync collects a round when no rollout waits.
        waiting, per_batch = self.waiting[policy], self.cfg.rollouts_per_batch
        if self.cfg.mode == "async" and not self.busy:
            for _ in range(self.per_actor):
                self._collect_round()
        while len(waiting) < per_batch:
            self._collect_round()
        if self.cfg.mode == "sync":
            ids = list(waiting)
            waiting.clear()
        else:
            ids = [waiting.popleft() for _ in range(per_batch)]
        return self._batch(ids, policy)

    def release(self, slots: list[Slot], policy: int = 0) -> None:
        if self.cfg.mode == "async":  # an actor collects again once every policy is done
            for slot in slots:
                self.released[policy].add(slot.index)
                if all(slot.index in done for done in self.released):
                    for done in self.released:
                        done.discard(slot.index)
                    self.busy.discard(slot.index)
                    self._collect(slot.index)
        else:
            self.busy.difference_update(s.index for s in slots)

    def actor_state(self) -> dict:
        # sync: between iterations every actor is idle, its rollout trained on -- its state is
        # exactly where a resumed run goes on. Async keeps rollouts waiting: generations only.
        return self.fleet.state_dict(actors=self.cfg.mode == "sync")

    def load_actor_state(self, state: dict) -> None:
        self.fleet.load_state_dict(state)

    def continuing_actors(self) -> list[int]:
        return [i for i, saved in enumerate(self.fleet.restored) if saved is not None]

    def close(self) -> None:
        self.fleet.close()
        self._close_transport()
