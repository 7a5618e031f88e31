"""What every learner shares: its counters and the episodes its batches finished, the
schedules' leg, and publishing its acting module's parameters as a policy version."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from asyncrl.core import NonFiniteError, PolicySink
from asyncrl.learning.guard import nonfinite_in_rollout
from asyncrl.learning.schedule import continue_schedule, linear, schedule_state
from asyncrl.metrics import EpisodeStats
from asyncrl.nets import FlatParams, RunningNorm


def _nothing() -> None:
    pass


def _finite(grads: list[torch.Tensor]) -> bool:
    """Whether every element of ``grads`` is finite: one fused pass (the check AMP's GradScaler
    makes, its scale 1 here), a quarter of the time of per-tensor norms; a host sync on a GPU."""
    found = torch.zeros((), device=grads[0].device)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.ones_like(found))
    return not bool(found)


class LearnerBase:
    """Counters a checkpoint keeps (``version``, ``env_steps``, ``iterations``,
    ``learn_seconds``, the finished episodes' returns in ``episode_stats``), the linear
    schedules' current leg, and the published vector of ``self.policy`` (``self.flat``).
    Subclasses set ``cfg``, ``policy`` and ``flat``, and record each batch's episodes."""

    cfg: Any
    policy: torch.nn.Module
    flat: FlatParams

    def __init__(self) -> None:
        self.version = 0
        self.env_steps = 0
        self.iterations = 0
        self.learn_seconds = 0.0
        self.episode_stats = EpisodeStats()
        # the linear schedules' leg: from (env steps, fraction remaining) down to 0 at
        # cfg.total_steps; a fresh run's is (0, 1)
        self.schedule_from: tuple[int, float] = (0, 1.0)
        self.before_step: Callable[[], None] = _nothing
        self.after_step: Callable[[], None] = _nothing
        # --on-nonfinite skip: rollouts dropped and gradient steps not applied, for NaN or inf
        self.skipped_rollouts = 0
        self.skipped_steps = 0
        self._warned: set[str] = set()

    @property
    def numel(self) -> int:
        return self.flat.numel

    def remaining(self, schedule: str = "linear", env_steps: int | None = None) -> float:
        """The fraction a schedule leaves at ``env_steps`` (default: now): 1 for ``constant``;
        for ``linear`` 1 - env_steps / total_steps in a run never resumed with another total."""
        if schedule == "constant":
            return 1.0
        steps = self.env_steps if env_steps is None else env_steps
        return linear(self.schedule_from, self.cfg.total_steps, steps)

    def episodes_continue(self, actors: list[int]) -> None:
        """After loading a checkpoint: the envs of ``actors`` continue the episodes they were in
        when it was written (their states were restored); the others begin new ones. A learner
        keeping per-env state across an episode's steps keeps that of the continuing envs."""

    def publish(self, store: PolicySink) -> None:
        """Publish the current parameters as version ``self.version``."""
        store.publish(self.version, self.flat.write_to)

    def policy_vector(self) -> np.ndarray:
        out = np.empty(self.flat.numel, np.float32)
        self.flat.write_to(out)
        return out

    # ---------------------------------------------------------------- NaN and inf
    @property
    def skipping(self) -> bool:
        return self.cfg.on_nonfinite == "skip"

    def finite_rollouts(
        self, slots: list[Any], fields: tuple[str, ...], at_ends: tuple[str, ...] = ()
    ) -> list[Any]:
        """``slots`` whose ``fields`` are finite. A NaN or inf raises NonFiniteError naming
        the actor, env and step, or with --on-nonfinite skip drops that rollout (counted)."""
        good = []
        for slot in slots:
            where = nonfinite_in_rollout(slot, fields, at_ends)
            if where is None:
                good.append(slot)
            elif self.skipping:
                self.skipped_rollouts += 1
                self._warn_once("rollout", where)
            else:
                raise NonFiniteError(f"{where} (the run at {self.env_steps:,} env steps)")
        return good

    def guard_steps(self, optimizers: dict[str, torch.optim.Optimizer]) -> None:
        """Check every step of ``optimizers`` (named) before it is applied: a NaN or inf
        gradient raises NonFiniteError, or with --on-nonfinite skip the step does nothing."""
        for name, optimizer in optimizers.items():
            params = [p for g in optimizer.param_groups for p in g["params"]]
            optimizer.register_step_pre_hook(functools.partial(self._check_step, name, params))

    def _check_step(self, name: str, params: list[torch.Tensor], *_: Any) -> None:
        params = [p for p in params if p.grad is not None]
        if not params or _finite([p.grad for p in params]):
            return
        norm = float(torch.stack(torch._foreach_norm([p.grad for p in params])).norm())
        if self.skipping:
            for p in params:  # an optimizer steps only parameters that have a gradient
                p.grad = None
        self.nonfinite_steps(name, 1, norm)

    def nonfinite_steps(self, name: str, count: int, norm: float) -> None:
        """``count`` steps of ``name`` had a NaN or inf gradient (of norm ``norm``) and were
        not applied: counted with --on-nonfinite skip, else NonFiniteError. For an update that
        skips such steps itself (PPO's fused step), without a host sync per step."""
        if self.skipping:
            self.skipped_steps += count
            self._warn_once("step", f"the {name} gradient norm is {norm}")
            return
        raise NonFiniteError(
            f"the {name} gradient norm is {norm} in update {self.version + 1} (the run "
            f"at {self.env_steps:,} env steps); the step was not applied"
        )

    def _warn_once(self, kind: str, where: str) -> None:
        """One line the first time a rollout (or a step) is skipped; the rest are counted."""
        if kind not in self._warned:
            self._warned.add(kind)
            print(
                f"asyncrl: warning: {where} (the run at {self.env_steps:,} env steps); "
                f"--on-nonfinite skip: that {kind} and any later such are skipped, counted in "
                f"nonfinite_skipped_{kind}s",
                file=sys.stderr,
                flush=True,
            )

    def check_losses(self, stats: dict[str, float], losses: tuple[str, ...]) -> None:
        """Raise NonFiniteError if one of the ``losses`` in ``stats`` is not finite (with
        skip, not: a skipped step's own loss is expected to be)."""
        if self.skipping:
            return
        for key in losses:
            value = stats.get(key, 0.0)
            if not math.isfinite(value):
                raise NonFiniteError(
                    f"{key} is {value} in the updates up to {self.version} (the run at "
                    f"{self.env_steps:,} env steps)"
                )

    def nonfinite_counts(self) -> dict[str, int]:
        return {
            "nonfinite_skipped_rollouts": self.skipped_rollouts,
            "nonfinite_skipped_steps": self.skipped_steps,
        }

    def running_norms(self) -> list[RunningNorm]:
        """The running statistics among the shared tensors (Hogwild! merges them, not adds)."""
        return [m for m in self.policy.modules() if isinstance(m, RunningNorm)]

    def work_ahead(self) -> None:
        """Nothing by default: an update needs the batch it waits for."""

    def set_step_hooks(self, before: Callable[[], None], after: Callable[[], None]) -> None:
        self.before_step, self.after_step = before, after

    @property
    def changes_outside_steps(self) -> bool:
        return False

    def summary_fields(self, wall: float) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        """Stop what the learner runs beside the loop (an optimizer thread); else nothing."""

    # ---------------------------------------------------------------- populations (PBT)
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

    def adopt(self, state: dict[str, Any], values: dict[str, Any]) -> None:
        """PBT's exploit (see asyncrl.core.Learner.adopt); ``state`` without a replay buffer
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

    # ---------------------------------------------------------------- checkpoint state
    def adoptable_state(self) -> dict[str, Any]:
        """What another learner adopts of this one (see asyncrl.core.Learner): all of it."""
        return self.state_dict()

    def counters_state(self) -> dict[str, Any]:
        return {
            "counters": {
                "version": self.version,
                "env_steps": self.env_steps,
                "iterations": self.iterations,
                "learn_seconds": self.learn_seconds,
            },
            "episodes": self.episode_stats.state_dict(),
            "schedule": schedule_state(self.schedule_from, self.cfg.total_steps),
        }

    def load_counters(self, state: dict[str, Any]) -> None:
        c = state["counters"]
        self.version, self.env_steps = c["version"], c["env_steps"]
        self.iterations, self.learn_seconds = c["iterations"], c["learn_seconds"]
        self.episode_stats.load_state_dict(state["episodes"])
        if state.get("schedule") is not None:
            self.schedule_from = continue_schedule(
                state["schedule"], self.cfg.total_steps, self.env_steps
            )
