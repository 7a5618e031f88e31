"""The errors a fault in a child ends a run with, and how a child is named in them (the restart
budget and its reports are the supervisor's: runtime/supervisor.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asyncrl.settings import TrainConfig


class ActorError(RuntimeError):
    """An actor or its env failed; the message names the actor and carries its traceback."""


class LearnerLost(RuntimeError):
    """A population's learner process failed or died; the message names it and carries its
    traceback. The other learners are consistent: their final checkpoints are written."""


def is_env_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was raised from, an env's error (see envs.GuardedEnv)."""
    from asyncrl.envs import EnvError

    while exc is not None:
        if isinstance(exc, EnvError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def actor_label(cfg: TrainConfig, actor: int, role: str = "actor") -> str:
    return f"{role} {actor} (env {cfg.env} x {cfg.envs_per_actor})"
