"""Capabilities an algorithm's learner may add to the host (:class:`~asyncrl.learning.base.
LearnerBase`): Hogwild! sharing (:class:`HogwildSharing`, the protocol
:class:`asyncrl.core.SharesParameters`) and PBT's adoption (:class:`PBTAdoption`,
:class:`asyncrl.core.Adoptable`). The runtime asks for them with ``isinstance``."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from asyncrl.nets import RunningNorm

if TYPE_CHECKING:
    from asyncrl.config import Settings


def _nothing() -> None:
    pass


class HogwildSharing:
    """What Hogwild! workers share of a learner, and the hooks around its gradient steps. A
    learner names its tensors in ``shared_tensors`` and calls ``before_step()`` and
    ``after_step()`` around each step."""

    policy: Any
    before_step: Callable[[], None] = staticmethod(_nothing)
    after_step: Callable[[], None] = staticmethod(_nothing)

    def shared_tensors(self) -> list[Any]:
        raise NotImplementedError

    def running_norms(self) -> list[RunningNorm]:
        """The running statistics among the shared tensors (Hogwild! merges them, not adds)."""
        return [m for m in self.policy.modules() if isinstance(m, RunningNorm)]

    def set_step_hooks(self, before: Callable[[], None], after: Callable[[], None]) -> None:
        self.before_step, self.after_step = before, after

    @property
    def changes_outside_steps(self) -> bool:
        return False


class PBTAdoption:
    """PBT's perturbation (new values of the algorithm's mutable settings) and exploit (a copy
    of another learner's state, see :class:`asyncrl.core.Adoptable`)."""

    cfg: Settings
    version: int
    episode_stats: Any
    state_dict: Callable[[], dict[str, Any]]
    load_state_dict: Callable[[dict[str, Any]], None]

    # what a learner keeps of its own when it adopts another's state: its counters (the
    # episodes its own batches finished among them) and the random streams its updates draw
    OWN_COUNTERS = (
        "version", "env_steps", "iterations", "learn_seconds", "schedule_from",
        "updates", "_updates_at_load", "_samples_at_load", "skipped_rollouts", "skipped_steps",
    )  # fmt: skip

    def random_streams(self) -> list[torch.Generator]:
        """The generators its updates draw from (minibatch order, SAC's noise): a policy that
        copies another keeps drawing its own, or the pair would draw alike from then on."""
        return []

    def set_hyperparameters(self, values: dict[str, Any]) -> None:
        """Train on with ``values`` of its settings (PBT's mutable ones)."""
        self.cfg = dataclasses.replace(self.cfg, **values)
        self.hyperparameters_changed()

    def hyperparameters_changed(self) -> None:
        """Where a subclass hands changed settings to what read them at construction."""

    def adoptable_state(self) -> dict[str, Any]:
        """What another learner adopts of this one: all of its state."""
        return self.state_dict()

    def adopt(self, state: dict[str, Any], values: dict[str, Any]) -> None:
        """PBT's exploit (see asyncrl.core.Adoptable.adopt); ``state`` without a replay buffer
        keeps this learner's own replay."""
        # The one copy as a state passes from one learner to another: an inline population's
        # source hands over live tensors, and torch's load_state_dict keeps tensors that
        # already match (the two would share Adam's moments and step).
        state = copy.deepcopy(state)
        lock = getattr(self, "_update_lock", None)  # an async optimizer thread updates meanwhile
        with lock if lock is not None else contextlib.nullcontext():
            own = {k: getattr(self, k) for k in self.OWN_COUNTERS if hasattr(self, k)}
            episodes = self.episode_stats.state_dict()
            streams = [(g, g.get_state()) for g in self.random_streams()]
            self.load_state_dict(state)
            for k, v in own.items():
                setattr(self, k, v)
            self.episode_stats.load_state_dict(episodes)  # in place: handles hold this object
            for generator, stream in streams:
                generator.set_state(stream)
            self.version += 1  # a new version: actors read it although the step count stays
            self.set_hyperparameters(values)
