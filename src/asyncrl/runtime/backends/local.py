"""Actors in the learner's own process (inline, thread backends): made, replaced and charged
against the restart budget the way the process backend treats its processes.

An actor whose rollout raises is closed and replaced by a fresh one of the next generation (new
env seeds), its partial rollout dropped; an env error under ``--on-env-error raise`` ends the
run instead. A thread cannot be killed, so a hung env step is reported, not replaced: use the
process backend for envs that may hang.
"""

from __future__ import annotations

import traceback

import numpy as np

from asyncrl.config import TrainConfig
from asyncrl.envs import EnvSpec
from asyncrl.runtime.actor import Actor, ActorStatus
from asyncrl.runtime.backends.base import ActorError, Restarts, actor_label, is_env_error
from asyncrl.runtime.transport import PolicyStore, Slot


class LocalFleet:
    def __init__(self, cfg: TrainConfig, spec: EnvSpec, store: PolicyStore):
        self.cfg, self.spec, self.store = cfg, spec, store
        self.restarts = Restarts(cfg.actor_restarts)
        self.status = ActorStatus(np.zeros((cfg.actors, 2)))
        self.generation = [0] * cfg.actors
        self.actors: list[Actor | None] = [None] * cfg.actors

    def collect(self, i: int, slot: Slot, waited: float = 0.0) -> bool:
        """Fill ``slot`` with actor ``i``'s rollout (making the actor first if needed). False if
        the actor failed and was replaced: the slot holds no rollout. Raises ActorError if it
        may not be replaced."""
        try:
            if self.actors[i] is None:
                self.actors[i] = Actor(
                    i,
                    self.cfg,
                    self.spec,
                    self.store,
                    generation=self.generation[i],
                    status=self.status.rows[i],
                )
            self.actors[i].collect(slot, waited)
            return True
        except Exception as e:
            tb = traceback.format_exc()
            label = actor_label(self.cfg, i)
            self._drop(i)
            if is_env_error(e):
                raise ActorError(f"{label} failed:\n{tb}") from None
            self.restarts.charge(label, "raised", tb, dropped=1)
            return False

    def hung(self) -> None:
        """Raise ActorError if an actor has been in one env step past ``--env-step-timeout``."""
        for i in range(self.cfg.actors):
            busy = self.status.hung(i, self.cfg.env_step_timeout)
            if busy is not None:
                raise ActorError(
                    f"{actor_label(self.cfg, i)} hung: one env step has taken {busy:.1f} s "
                    f"(--env-step-timeout {self.cfg.env_step_timeout:g}); an actor thread "
                    "cannot be stopped, use --backend process to have hung actors replaced"
                )

    def _drop(self, i: int) -> None:
        actor, self.actors[i] = self.actors[i], None
        self.generation[i] += 1
        self.status.rows[i] = (ActorStatus.WAITING, 0.0)
        if actor is not None:
            try:
                actor.close()
            except Exception:  # a broken actor's envs may not close; it is dropped either way
                pass

    def close(self) -> None:
        for i in range(len(self.actors)):
            if self.actors[i] is not None:
                self.actors[i].close()
                self.actors[i] = None
