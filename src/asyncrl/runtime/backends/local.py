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

from asyncrl.core import Algorithm
from asyncrl.envs import EnvSpec
from asyncrl.runtime.actor import Actor
from asyncrl.runtime.faults import ActorError, actor_label, is_env_error
from asyncrl.runtime.supervisor import ActorStatus, Lost, Supervisor
from asyncrl.runtime.transport import PolicyStore, PoolStore, Slot
from asyncrl.settings import TrainConfig


class LocalFleet:
    def __init__(
        self,
        cfg: TrainConfig,
        spec: EnvSpec,
        algo: Algorithm,
        store: PolicyStore | list[PolicyStore],
        pool: PoolStore | None = None,
    ):
        self.cfg, self.spec, self.algo, self.store, self.pool = cfg, spec, algo, store, pool
        self.status = ActorStatus(np.zeros((cfg.actors, 2)))
        # its hang checks run in the learner's waits: a stopped process, or a learner busy
        # training, is not time an actor is charged for (the supervisor's pauses)
        self.supervisor = Supervisor(self, cfg.env_step_timeout, self.status, cfg.actor_restarts)
        self.restarts = self.supervisor.restarts
        self.generation = [0] * cfg.actors
        self.actors: list[Actor | None] = [None] * cfg.actors
        self.restored: list[dict | None] = [None] * cfg.actors  # applied as actors are made

    def collect(self, i: int, slot: Slot | list[Slot], waited: float = 0.0) -> bool:
        """Fill ``slot`` (a population: one per policy) with actor ``i``'s rollout (making the
        actor first if needed). False if the actor failed and was replaced: the slot holds no
        rollout. Raises ActorError if it may not be replaced."""
        try:
            if self.actors[i] is None:
                ActorStatus.set(self.status.rows[i], ActorStatus.STARTING)  # timed: may hang
                self.actors[i] = Actor(
                    i,
                    self.cfg,
                    self.spec,
                    self.algo,
                    self.store,
                    generation=self.generation[i],
                    status=self.status.rows[i],
                    pool=self.pool,
                )
                if self.restored[i] is not None:
                    self.actors[i].load_state_dict(self.restored[i])
                    self.restored[i] = None
            self.actors[i].collect(slot, waited)
            return True
        except Exception as e:
            lost = Lost(i, "raised", traceback.format_exc(), is_env_error(e))
        self._drop(i)
        self.supervisor.replace(lost, dropped=1)  # made anew at its next rollout
        return False

    def state_dict(self, actors: bool) -> dict:
        """The generations, and with ``actors`` each actor's state (only consistent while no
        actor is in a rollout: the inline backend between iterations)."""
        state: dict = {"generations": list(self.generation)}
        if actors:
            state["actors"] = [a.state_dict() if a is not None else None for a in self.actors]
        return state

    def load_state_dict(self, state: dict) -> None:
        """Actors' states saved with :meth:`state_dict` continue exactly; without them, every
        actor starts as the generation after all the saved ones, with env seeds no earlier
        actor had (a resumed run's envs continue to new episodes, not the first ones again)."""
        saved = state.get("actors")
        K = self.cfg.envs_per_actor // self.spec.agents  # a multi-agent env's: its games
        if (
            saved is not None
            and len(saved) == len(self.actors)
            and all(a is None or len(a["envs"]) == K for a in saved)
        ):  # the same layout of actors and envs (else they start anew, below)
            self.generation = list(state["generations"])
            self.restored = list(saved)
        else:
            self.generation = [max(state["generations"], default=-1) + 1] * len(self.actors)

    def hung(self) -> None:
        """Raise ActorError if an actor has been in one env step past ``--env-step-timeout``."""
        for i, doing, busy in self.supervisor.find_hung():
            raise ActorError(
                f"{self.label(i)} hung: {doing} has taken {busy:.1f} s "
                f"(--env-step-timeout {self.cfg.env_step_timeout:g}); an actor thread "
                "cannot be stopped, use --backend process to have hung actors replaced"
            )

    # ------------------------------------------------------------ as the supervisor sees them
    def indices(self) -> range:
        return range(self.cfg.actors)

    def label(self, index: int) -> str:
        return actor_label(self.cfg, index)

    def dead(self) -> list:
        return []  # a failed rollout is reported where it raises (collect)

    def kill(self, index: int) -> None:
        raise NotImplementedError("a thread cannot be killed")  # hence hung() raises

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
