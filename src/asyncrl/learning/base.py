"""The runtime's host of an algorithm's update: what every learner does whatever its algorithm
-- the iteration's bookkeeping (version, env steps, lag, timings, the row's figures), the
non-finite guard and its counters, the schedules' leg, publishing the acting module's
parameters as a policy version -- around what the algorithm implements (:meth:`LearnerBase.update`
on a batch, its state). Hogwild! sharing and PBT's adoption are capabilities an algorithm adds
(:mod:`asyncrl.learning.capabilities`)."""

from __future__ import annotations

import functools
import math
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.core import NonFiniteError, PolicySink
from asyncrl.learning.guard import nonfinite_in_rollout
from asyncrl.learning.schedule import continue_schedule, linear, schedule_state
from asyncrl.metrics import EpisodeStats
from asyncrl.nets import FlatParams

if TYPE_CHECKING:
    from asyncrl.config import Settings


def _finite(grads: list[torch.Tensor]) -> bool:
    """Whether every element of ``grads`` is finite: one fused pass (the check AMP's GradScaler
    makes, its scale 1 here), a quarter of the time of per-tensor norms; a host sync on a GPU."""
    found = torch.zeros((), device=grads[0].device)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.ones_like(found))
    return not bool(found)


class LearnerBase:
    """The host (see the module doc): counters a checkpoint keeps (``version``, ``env_steps``,
    ``iterations``, ``learn_seconds``, the finished episodes' returns in ``episode_stats``),
    the linear schedules' current leg, the published vector of ``self.policy``
    (``self.flat``), and :meth:`train`, one iteration written once for every algorithm.

    An algorithm's learner subclasses it: it sets ``cfg``, ``policy`` and ``flat``, names the
    slot fields checked for NaN and inf (``CHECKED``, ``CHECKED_AT_ENDS``), and implements
    :meth:`update` (and :meth:`iteration_fields`, :meth:`own_summary` where it has figures of
    its own), ``state_dict`` and ``load_state_dict``."""

    cfg: Settings
    policy: torch.nn.Module
    flat: FlatParams
    CHECKED: tuple[str, ...] = ()  # slot fields that must be finite
    CHECKED_AT_ENDS: tuple[str, ...] = ()  # ... and those written only where episodes ended
    # a multi-agent env's seats: the fields the update reads at every step, waiting ones too
    # (None: the rows are not seats)
    seats_whole: tuple[str, ...] | None = None
    # whether its slots hold other policies' steps too, its own marked ``own``: the population
    # tells it (--policy-mapping random)
    marks_own = False
    # a policy not in --policies-to-train: it receives its batches (steps, episodes) but never
    # updates, so its parameters stay as they were loaded; the population tells it
    frozen = False

    def __init__(self) -> None:
        self.version = 0
        self.env_steps = 0
        self.iterations = 0
        self.learn_seconds = 0.0
        self.episode_stats = EpisodeStats()
        # the linear schedules' leg: from (env steps, fraction remaining) down to 0 at
        # cfg.total_steps; a fresh run's is (0, 1)
        self.schedule_from: tuple[int, float] = (0, 1.0)
        # --on-nonfinite skip: rollouts dropped and gradient steps not applied, for NaN or inf
        self.skipped_rollouts = 0
        self.skipped_steps = 0
        self._warned: set[str] = set()

    @property
    def numel(self) -> int:
        return self.flat.numel

    # ---------------------------------------------------------------- one iteration
    def train(self, slots: list[Any]) -> dict[str, float]:
        """One training iteration on ``slots`` (joined along the env axis): the algorithm's
        :meth:`update` on the finite ones, then the counters, the batch's episodes and the
        row's figures. The caller publishes the new version before the slots are refilled."""
        t0 = time.perf_counter()
        lag = self.policy_lag(slots)
        steps = int(sum(s.env_steps[0] for s in slots))
        good = self.finite_rollouts(slots, self.CHECKED, self.CHECKED_AT_ENDS)
        stats = self.update(good, steps) if not self.frozen else {}
        self.env_steps += steps
        self.iterations += 1
        self.episode_stats.record(good)
        seconds = self.iteration_seconds(t0)
        stats.update(
            {
                "learn_seconds": seconds,
                "samples": float(steps),
                "policy_lag_mean": float(lag.mean()),
                "policy_lag_max": float(lag.max()),
                "rollout_seconds": float(sum(s.rollout_seconds[0] for s in slots)),
                "actor_wait_seconds": float(sum(s.wait_seconds[0] for s in slots)),
                **self.iteration_fields(steps, seconds),
                **self.nonfinite_counts(),
            }
        )
        return stats

    def update(self, slots: list[Any], steps: int) -> dict[str, float]:
        """The algorithm's update on ``slots`` (their fields finite; ``steps`` env steps in
        the batch as it came, dropped rollouts among them); its figures. It moves ``version``
        on for each new set of parameters it makes."""
        raise NotImplementedError

    def policy_lag(self, slots: list[Any]) -> np.ndarray:
        """Versions between the one each sample was acted with and the one the update starts
        from; under a mapping that marks own steps, of this policy's own steps only."""
        versions = np.concatenate([s.versions.reshape(-1) for s in slots])
        lag = self.version - versions
        if self.marks_own:
            acted = np.concatenate([s.own.reshape(-1) for s in slots])
            lag = lag[acted] if acted.any() else np.zeros(1, dtype=lag.dtype)
        return lag

    def iteration_seconds(self, t0: float) -> float:
        """This iteration's learning time (since ``t0``), added to ``learn_seconds``."""
        seconds = time.perf_counter() - t0
        self.learn_seconds += seconds
        return seconds

    def iteration_fields(self, steps: int, seconds: float) -> dict[str, float]:
        """The algorithm's own figures in each iteration's row (after the counters moved)."""
        return {}

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
            where = nonfinite_in_rollout(slot, fields, at_ends, self.seats_whole)
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

    def work_ahead(self) -> None:
        """Nothing by default: an update needs the batch it waits for."""

    def summary_fields(self, wall: float) -> dict[str, Any]:
        return {**self.own_summary(wall), **self.nonfinite_counts()}

    def own_summary(self, wall: float) -> dict[str, Any]:
        """The algorithm's own figures for summary.json."""
        return {}

    def close(self) -> None:
        """Stop what the learner runs beside the loop (an optimizer thread); else nothing."""

    # ---------------------------------------------------------------- checkpoint state
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
