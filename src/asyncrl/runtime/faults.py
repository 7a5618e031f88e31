"""What a fault in an actor (or a Hogwild! worker) costs: the error that ends a run, and the
restart budget with its one-line reports."""

from __future__ import annotations

import sys
from typing import Any


class ActorError(RuntimeError):
    """An actor or its env failed; the message names the actor and carries its traceback."""


class LearnerLost(RuntimeError):
    """A population's learner process failed or died; the message names it and carries its
    traceback. The other learners are consistent: their final checkpoints are written."""


class Restarts:
    """The run's budget of actor restarts (``--actor-restarts``) and their one-line reports.

    ``charge`` is called once per lost actor: it prints one line naming the actor, its envs, the
    cause and the last lines of its traceback, and counts it; past the budget it raises
    ActorError with the whole traceback instead.
    """

    def __init__(self, budget: int, role: str = "actor", stream: Any = None):
        self.budget, self.role = budget, role
        self.used = 0
        self.dropped = 0
        self.stream = stream

    def charge(self, label: str, cause: str, tb: str, dropped: int) -> None:
        self.dropped += dropped
        if self.used >= self.budget:
            raise ActorError(
                f"{label} {cause}; no restarts left (--actor-restarts {self.budget})"
                + (f":\n{tb}" if tb else "")
            )
        self.used += 1
        tail = " | ".join(line.strip() for line in tb.strip().splitlines()[-3:]) if tb else ""
        print(
            f"asyncrl: {label} {cause}; restarting it ({self.used} of {self.budget} restarts, "
            f"{dropped} rollout(s) dropped)" + (f": {tail}" if tail else ""),
            file=self.stream or sys.stderr,
            flush=True,
        )


def is_env_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was raised from, an env's error (see envs.GuardedEnv)."""
    from asyncrl.envs import EnvError

    while exc is not None:
        if isinstance(exc, EnvError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def actor_label(cfg: Any, actor: int, role: str = "actor") -> str:
    return f"{role} {actor} (env {cfg.env} x {cfg.envs_per_actor})"
