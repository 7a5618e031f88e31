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
