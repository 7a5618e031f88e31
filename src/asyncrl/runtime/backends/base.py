"""What every backend offers the training loop, and the bookkeeping they share.

A backend is made from the prepared run (settings, env spec, algorithm, each policy's
settings) and the size of each policy's published parameter vector (``backends.make_backend``).
It owns how rollouts and policy versions travel between actors and the learner (shared memory
on one machine; something else across machines) and supervises its actors. The loop sees only
:class:`Backend`: start, next batch, release, publish, health, close.

The bookkeeping every backend with actors beside the learner needs is here, apart from how it
moves data: :class:`SlotBook` (every slot's state and the backpressure rule). Watching the
actors (liveness, hangs, kills, the restart budget) is the supervisor's
(``runtime/supervisor.py``).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from asyncrl.runtime.lifecycle import StopRequested
from asyncrl.runtime.supervisor import Restarts
from asyncrl.runtime.transport import (
    PolicyStore,
    PoolStore,
    Slot,
    SlotLayout,
    SlotStore,
    policy_layouts,
)

if TYPE_CHECKING:
    from asyncrl.settings import Prepared, TrainConfig


class Backend(Protocol):
    """The training loop's view of where actors run."""

    @property
    def version(self) -> int:
        """The newest published policy version."""

    def publish(self, version: int, write: Any) -> None:
        """Publish a policy version: ``write(array)`` fills the float32 parameter vector. The
        learner calls this (through ``learner.publish(backend)``) before ``start`` and after
        every update."""

    def start(self) -> None:
        """Start the actors (the learner has published version 0 already)."""

    def next_batch(self, stop: Any = None) -> list[Slot]:
        """Block until the learner's next batch is filled: all actors' slots in sync mode, one
        actor's in async mode. Dead or hung actors are replaced meanwhile; raises ActorError when
        one cannot be (restart budget spent, an env error under ``--on-env-error raise``), and
        StopRequested once ``stop`` (the run's StopSignals) is true and no batch is ready."""

    def release(self, slots: list[Slot]) -> None:
        """The learner is done with these slots (and has published): actors may refill them."""

    def health(self) -> dict[str, int]:
        """Counters of faults so far: ``actor_restarts``, ``dropped_rollouts``,
        ``env_restarts``."""

    def close(self) -> None:
        """Stop the actors and free every resource; safe to call twice and on error paths."""

    @classmethod
    def check_settings(cls, cfg: TrainConfig) -> None:
        """What only the backend can check (a Ray cluster's size), before anything starts."""

    def actor_state(self) -> dict:
        """What a checkpoint keeps of the actors, taken between iterations: their generations
        (so a resumed run's envs take seeds no earlier actor had), and where the actors are
        idle then (inline, sync) each actor's own state, so a resumed run continues exactly."""

    def load_actor_state(self, state: dict) -> None:
        """Before ``start``: continue from what :meth:`actor_state` returned."""

    def continuing_actors(self) -> list[int]:
        """After :meth:`load_actor_state`: the actors whose envs continue the episodes they were
        in (their states restored); the others' envs begin new ones."""


class OwnedTransport:
    """What the backends here share: they own their slots and policy store, publish through
    the store and count faults the same way. Subclasses call :meth:`_own_transport` and set
    ``restarts`` (a :class:`Restarts`)."""

    restarts: Restarts

    @classmethod
    def check_settings(cls, cfg: TrainConfig) -> None:
        """What only this backend can check before the run starts (ConfigError): nothing here."""

    def _own_transport(
        self, run: Prepared, numel: list[int], slot_count: int, shared: bool, buffers: int
    ) -> None:
        """A slot store and a policy store per policy (``slot_stores``, ``stores``); policy 0's
        are also ``slots`` and ``store``, a one-policy run's only ones. ``numel``: each
        policy's parameters. Keeps each policy's slot layout (the prepared run's) as
        ``layouts``, for actors that make their own slots (Ray's)."""
        self.slot_stores: list[SlotStore] = []
        self.stores: list[PolicyStore] = []
        self.pool: PoolStore | None = None  # --opponents pool: the snapshots
        self.layouts: list[SlotLayout] = policy_layouts(run)
        try:
            for layout, n in zip(self.layouts, numel, strict=True):
                self.slot_stores.append(SlotStore(layout, slot_count, shared=shared))
                self.stores.append(PolicyStore(n, shared=shared, buffers=buffers))
            if run.cfg.opponents == "pool":
                self.pool = PoolStore(numel[0], run.cfg.pool_size, shared=shared)
        except BaseException:
            self._close_transport()
            raise
        self.slots, self.store = self.slot_stores[0], self.stores[0]
        self.env_restarts = 0

    @property
    def version(self) -> int:
        return self.store.version

    def publish(self, version: int, write: Any) -> None:
        self.store.publish(version, write)

    def sink(self, policy: int) -> PolicyStore:
        """Where ``policy``'s learner publishes its versions."""
        return self.stores[policy]

    def _batch(self, ids: list[int], policy: int = 0) -> list[Slot]:
        """The slots of a batch, counting the env restarts their actors reported (in policy
        0's slots: every rollout fills one of each policy's)."""
        batch = [self.slot_stores[policy].slots[i] for i in ids]
        if policy == 0:
            self.env_restarts += sum(int(s.env_restarts[0]) for s in batch)
        return batch

    def health(self) -> dict[str, int]:
        return {
            "actor_restarts": self.restarts.used,
            "dropped_rollouts": self.restarts.dropped,
            "env_restarts": self.env_restarts,
        }

    first_generation = 0  # a resumed run's actors start after every earlier generation

    def _generations(self) -> list[int]:
        """Each actor's generation now (how many actors held its id before)."""
        return []

    def actor_state(self) -> dict:
        return {"generations": self._generations()}

    def load_actor_state(self, state: dict) -> None:
        self.first_generation = max(state.get("generations") or [-1]) + 1

    def continuing_actors(self) -> list[int]:
        return []  # actors' states are not saved: their envs begin new episodes

    def _close_transport(self) -> None:
        for store in (*getattr(self, "slot_stores", ()), *getattr(self, "stores", ())):
            store.close()
        if getattr(self, "pool", None) is not None:
            self.pool.close()


# ------------------------------------------------------------------------------ slot ledger
FREE, FILLING, FULL, TRAINING = range(4)


class SlotBook:
    """The learner side's ledger of every rollout slot, and the one place backpressure lives.

    Actor ``a`` owns slots ``a * per_actor ... (a + 1) * per_actor - 1``; each is FREE (the
    learner's to hand out), FILLING (granted to its actor), FULL (filled, waiting for the learner,
    in delivery order) or TRAINING (in a batch). An actor holds at most one grant and starts a
    rollout only with one. Sync (one slot each): an actor's slot is granted again when the
    learner releases it. Async: a batch is the ``per_batch`` oldest filled slots; an actor that
    delivers a slot is granted its next one at once if fewer than ``max_waiting`` complete
    batches are ahead of the batch it delivered into, or if exactly ``max_waiting`` are and that
    batch is not complete yet, else as soon as enough batches left the queue -- the semaphore
    rule of ``--max-batches-waiting``, decided here, so no permit can die with an actor. A lost
    actor's FILLING slot is dropped (its partial rollout discarded, the slot FREE again); its
    FULL slots are complete and stay queued.

    Not thread-safe by itself: callers hold :attr:`cond`.
    """

    def __init__(
        self, actors: int, per_actor: int, sync: bool, max_waiting: int, per_batch: int = 1
    ):
        self.actors, self.per_actor, self.sync, self.max_waiting = (
            actors,
            per_actor,
            sync,
            max_waiting,
        )
        self.per_batch = per_batch  # async: slots a batch takes
        self.state = [FREE] * (actors * per_actor)
        self.pending: deque[int] = deque()
        self.filling: list[int | None] = [None] * actors
        self.last_delivered: list[int | None] = [None] * actors
        self.paused: set[int] = set()
        self.cond = threading.Condition()

    def owner(self, slot: int) -> int:
        return slot // self.per_actor

    def grants(self) -> list[tuple[int, int]]:
        """Grant every actor that may start a rollout now a FREE slot of its own: ``[(actor,
        slot)]``, to be sent to them."""
        out = []
        for a in range(self.actors):
            if not self.may_grant(a):
                continue
            first = a * self.per_actor
            for s in range(first, first + self.per_actor):
                if self.state[s] == FREE:
                    self.grant(a, s)
                    out.append((a, s))
                    break
        return out

    def may_grant(self, a: int) -> bool:
        """Whether actor ``a`` may start a rollout now (if it has a FREE slot)."""
        if a in self.paused or self.filling[a] is not None:
            return False
        if not self.sync:
            last = self.last_delivered[a]
            if last is not None and self.state[last] == FULL:
                batch = self.pending.index(last) // self.per_batch  # complete ones ahead
                complete = len(self.pending) >= (batch + 1) * self.per_batch
                # backpressure: too many batches ahead of its last one; the one batch past the
                # B waiting may still be completed (by the actors delivering into it), no more
                if batch > self.max_waiting or (batch == self.max_waiting and complete):
                    return False
        return True

    def grant(self, a: int, s: int) -> None:
        self.state[s] = FILLING
        self.filling[a] = s

    def delivered(self, slot: int) -> None:
        a = self.owner(slot)
        if self.state[slot] != FILLING or self.filling[a] != slot:
            raise RuntimeError(f"slot {slot} delivered by actor {a} but not granted to it")
        self.state[slot] = FULL
        self.filling[a] = None
        self.last_delivered[a] = slot
        self.pending.append(slot)

    def take(self) -> list[int] | None:
        """The next batch, if it is complete: every actor's slot (sync, in actor order), or the
        ``per_batch`` oldest filled slots (async). Those slots are TRAINING until released."""
        if self.sync:
            if len(self.pending) < self.actors:
                return None
            ids = sorted(self.pending)
            self.pending.clear()
        elif len(self.pending) >= self.per_batch:
            ids = [self.pending.popleft() for _ in range(self.per_batch)]
        else:
            return None
        for s in ids:
            self.state[s] = TRAINING
        return ids

    def wait_take(self, failure: Any, idle: Any, poll: float, stop: Any = None) -> list[int]:
        """Block (holding :attr:`cond`) until :meth:`take` gives a batch; every ``poll`` seconds
        raise ``failure()`` if it is not None, raise StopRequested if ``stop`` is true (a signal
        came: a hung actor must not hold the run), and call ``idle()`` (a backend's checks)."""
        while True:
            error = failure()
            if error is not None:
                raise error
            ids = self.take()
            if ids is not None:
                return ids
            if stop:
                raise StopRequested("stopped while waiting for the actors")
            idle()
            self.cond.wait(poll)

    def release(self, ids: list[int]) -> None:
        for s in ids:
            if self.state[s] != TRAINING:
                raise RuntimeError(f"slot {s} released but not being trained on")
            self.state[s] = FREE

    def lost(self, actor: int, started: bool = True) -> int:
        """``actor`` is gone: reclaim the slot it was granted and grant it nothing until
        :meth:`resume`. Returns the number of rollouts dropped: 1 if it had begun filling that
        slot (``started``), 0 if it died before (the grant may still have been in flight)."""
        self.paused.add(actor)
        s = self.filling[actor]
        if s is None:
            return 0
        self.state[s] = FREE
        self.filling[actor] = None
        return int(started)

    def blocked(self, actor: int) -> bool:
        """``actor`` has no slot granted: it waits for the learner (sync: to train on its last
        rollout; async: for batches ahead of its last to leave the queue)."""
        return self.filling[actor] is None and actor not in self.paused

    def resume(self, actor: int) -> None:
        """``actor``'s replacement is ready for grants. It inherits its predecessor's place in
        the backpressure order, so a restart never lets more batches wait."""
        self.paused.discard(actor)


class SlotBooks:
    """The ledgers of a population: one :class:`SlotBook` per policy over that policy's slots,
    under one lock. An actor's rollout fills one slot of every policy at once (each its envs'
    steps), so it is granted slot ``s`` only when every policy's ledger may grant it and has
    ``s`` FREE -- every learner has released it -- and delivers it to all; each policy's
    learner takes and releases its own. One policy: one SlotBook, the same grants."""

    def __init__(
        self,
        policies: int,
        actors: int,
        per_actor: int,
        sync: bool,
        max_waiting: int,
        per_batch: int = 1,
    ):
        self.actors, self.per_actor = actors, per_actor
        self.books = [
            SlotBook(actors, per_actor, sync, max_waiting, per_batch) for _ in range(policies)
        ]
        self.cond = threading.Condition()
        for book in self.books:
            book.cond = self.cond

    @classmethod
    def of_run(cls, cfg: TrainConfig) -> SlotBooks:
        """The ledgers a run's settings call for (slots per actor: ``cfg.slots_per_actor``)."""
        return cls(
            cfg.policies,
            cfg.actors,
            cfg.slots_per_actor,
            cfg.mode == "sync",
            cfg.max_batches_waiting,
            cfg.rollouts_per_batch,
        )

    def grants(self) -> list[tuple[int, int]]:
        books = self.books
        if len(books) == 1:
            return books[0].grants()
        out = []
        for a in range(self.actors):
            if not all(b.may_grant(a) for b in books):
                continue
            first = a * self.per_actor
            for s in range(first, first + self.per_actor):
                if all(b.state[s] == FREE for b in books):
                    for b in books:
                        b.grant(a, s)
                    out.append((a, s))
                    break
        return out

    def delivered(self, slot: int) -> None:
        for book in self.books:
            book.delivered(slot)

    def take(self, policy: int = 0) -> list[int] | None:
        return self.books[policy].take()

    def wait_take(
        self, failure: Any, idle: Any, poll: float, stop: Any = None, policy: int = 0
    ) -> list[int]:
        return self.books[policy].wait_take(failure, idle, poll, stop)

    def release(self, ids: list[int], policy: int = 0) -> None:
        self.books[policy].release(ids)

    def lost(self, actor: int, started: bool = True) -> int:
        """One rollout dropped, whatever the number of policies it was for."""
        return max(book.lost(actor, started) for book in self.books)

    def blocked(self, actor: int) -> bool:
        return all(book.blocked(actor) for book in self.books)

    def resume(self, actor: int) -> None:
        for book in self.books:
            book.resume(actor)

    @property
    def pending(self) -> deque[int]:
        """Policy 0's filled slots waiting for its learner (tools and tests)."""
        return self.books[0].pending

    @property
    def state(self) -> list[int]:
        return self.books[0].state
