"""What every backend does for the training loop, whatever it runs actors on.

The loop (runtime/trainer.py) only ever asks a backend for the next batch of filled slots and
hands them back once trained on. Sync and async differ in *how many* slots one batch holds and in
when an actor may start its next rollout; the loop is the same.
"""

from __future__ import annotations

from typing import Protocol

from asyncrl.runtime.transport import Slot


class ActorError(RuntimeError):
    """An actor or its env failed; the message names the actor and carries its traceback."""


class Backend(Protocol):
    def start(self) -> None:
        """Start the actors (the learner has published version 0 already)."""

    def next_batch(self) -> list[Slot]:
        """Block until the learner's next batch is filled: all actors' slots in sync mode, one
        actor's in async mode. Raises ActorError if an actor failed."""

    def release(self, slots: list[Slot]) -> None:
        """The learner is done with these slots (and has published): actors may refill them."""

    def close(self) -> None:
        """Stop the actors and free every resource; safe to call twice and on error paths."""


class SlotQueues:
    """The slot protocol of backends whose actors run beside the learner (threads, processes).

    Subclasses provide ``free`` (one queue of slot ids per actor), ``waiting`` (a semaphore of
    ``max_batches_waiting`` in async mode, else None), ``per_actor``, ``slots``, ``cfg`` and
    ``_get_full()``, a blocking get of the next filled slot id that raises ActorError when an
    actor failed. Actor i owns slots ``i * per_actor ... (i + 1) * per_actor - 1``.
    """

    def next_batch(self) -> list[Slot]:
        count = self.cfg.actors if self.cfg.mode == "sync" else 1
        # in actor order, not arrival order: a sync run then trains the same on every backend
        ids = sorted(self._get_full() for _ in range(count))
        if self.waiting is not None:
            self.waiting.release()  # the batch left the queue: one more may wait
        return [self.slots.slots[i] for i in ids]

    def release(self, slots: list[Slot]) -> None:
        for slot in slots:
            i = self.slots.slots.index(slot)
            self.free[i // self.per_actor].put(i)
