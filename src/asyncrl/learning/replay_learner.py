"""The learner off-policy algorithms share: actors' slots into a replay buffer, updates out of
samples of it, with a rate limiter holding the replay ratio (gradient steps per env step)
whatever N and K are.

Sync mode: after each batch the learner performs exactly the gradient steps due, and starts
them before the batch arrives where none reads its slots (``work_ahead``: the same updates on
the same data, bit for bit). Async mode: an optimizer thread samples and updates continuously,
publishing after every update; the loop only inserts, and the limiter blocks whichever side is
ahead by more than ``ratio_tolerance``. The loop's iteration is one inserted batch in both.
"""

from __future__ import annotations

import copy
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.config import learner_threads
from asyncrl.core import NonFiniteError
from asyncrl.learning.base import LearnerBase
from asyncrl.learning.capabilities import HogwildSharing, PBTAdoption
from asyncrl.learning.offpolicy import insert_batch
from asyncrl.replay.rate_limiter import LimiterClosed, RateLimiter
from asyncrl.replay.seats import SeatTransitions

if TYPE_CHECKING:
    from asyncrl.config import Settings

CHECKED = ("obs", "actions", "rewards")  # for NaN and inf; final_obs where episodes ended


class OptimizerFailed(RuntimeError):
    """The async optimizer thread raised; the message carries its error."""


class ReplayLearner(LearnerBase, HogwildSharing, PBTAdoption):
    """A learner that inserts what actors collected into a replay buffer and trains on samples
    of it. A subclass sets ``rule`` (``update(batch) -> stats tensor``, ``STATS``, ``LOSSES``,
    ``optimizers()``, ``state_dict``, ``load_state_dict``, ``state_tensors``), ``policy`` (the
    acting module), ``flat`` and ``replay``, and converts samples in :meth:`update_batch`; it
    calls :meth:`_start` at the end of its ``__init__``."""

    cfg: Settings
    rule: Any
    policy: Any
    flat: Any
    replay: Any
    name = "off-policy"
    CHECKED = CHECKED
    CHECKED_AT_ENDS = ("final_obs",)

    def _start(self) -> None:
        LearnerBase.__init__(self)
        cfg = self.cfg
        self.guard_steps(self.rule.optimizers())
        self.limiter = RateLimiter(
            samples_per_insert=cfg.replay_ratio,
            min_size_to_sample=cfg.learning_starts,
            error_buffer=cfg.ratio_tolerance,
            max_insert_batch=insert_batch(cfg),  # async inserts one batch at a time
        )
        self.async_ = cfg.mode == "async" and cfg.backend != "inline"
        self._step_inserts = cfg.actors * cfg.envs_per_actor * cfg.rollout  # per sync batch
        self._ahead = 0  # updates done for the batch that has not arrived yet
        self._ahead_seconds = 0.0
        self._drawn: np.ndarray | None = None  # indices drawn for the next update, not yet run
        # the env steps the update being made reads its schedules at (see _schedule_steps)
        self.schedule_steps = self.env_steps
        self.updates = 0
        self._replay_lock = threading.Lock()  # replay: inserts (loop) vs samples (optimizer)
        self._update_lock = threading.Lock()  # networks: updates vs checkpoints and publishing
        self._pending: list[Any] = []  # stats of updates not yet reported
        self._store: Any = None  # where the optimizer thread publishes (a Backend)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        # when learning began (first gradient step), for rates that leave out the warm-up
        self.learning_began: tuple[float, int] | None = None
        self._samples_at_load = self._updates_at_load = 0  # the limiter's and ours at start
        # a multi-agent env's seats: a transition spans a seat's move to its next, which may
        # come in a later slot (replay/seats.py); the limiter counts those transitions
        spec = getattr(self, "spec", None)
        self.seats = SeatTransitions() if spec is not None and spec.agents > 1 else None
        if self.seats is not None:
            self.seats_whole = ("rewards", "final_obs")  # read where the seat waited too

    # ---------------------------------------------------------------- what subclasses give
    def update_batch(self, sample: dict[str, np.ndarray]) -> dict[str, Any]:
        """A replay sample as the tensors ``rule.update`` reads."""
        raise NotImplementedError

    def before_update(self) -> None:
        """Just before each gradient step, under the update lock (schedules move here, read at
        ``schedule_steps``)."""

    # ---------------------------------------------------------------- one gradient step
    def _update_once(self, idx: np.ndarray | None = None, at: int | None = None) -> None:
        """One gradient step on a fresh sample, or on the slots ``idx`` if given; its schedules
        read at ``at`` env steps (default: the learner's count)."""
        with self._replay_lock:
            if idx is None:
                idx = self.replay.draw_indices(self.cfg.batch_size)
            batch = self.update_batch(self.replay.take(idx))
        t0 = time.perf_counter()
        if self.learning_began is None:
            self.learning_began = (t0, self.env_steps)
        with self._update_lock:
            self.schedule_steps = self.env_steps if at is None else at
            self.before_step()
            self.before_update()
            stats = self.rule.update(batch)
            self.after_step()
            self.version += 1
            self.updates += 1
            self._pending.append(stats)
            if self.async_ and self._store is not None:
                self._store.publish(self.version, self.flat.write_to)
        self.learn_seconds += time.perf_counter() - t0

    def policy_vector(self) -> np.ndarray:
        """A copy of the acting module as a published version holds it, taken between
        updates: what an evaluation during training acts with."""
        out = np.empty(self.flat.numel, np.float32)
        with self._update_lock:
            self.flat.write_to(out)
        return out

    def _optimizer_loop(self) -> None:
        torch.set_num_threads(learner_threads(self.cfg))
        try:
            while True:
                if self.limiter.await_can_sample(1, timeout=0.5):
                    self._update_once()
        except LimiterClosed:
            pass
        except BaseException as e:  # surfaced by the training loop
            self._error = e
            self.limiter.close()

    def shared_tensors(self) -> list[Any]:
        """Everything an update changes: what Hogwild! workers share."""
        return self.rule.state_tensors()

    def _schedule_steps(self, update: int, inserts_before: int) -> int:
        """The env steps the run's ``update``-th gradient step reads its schedules at (epsilon,
        a linear rate), its batch's first insert being insert ``inserts_before`` + 1: those
        before the rollout step whose transitions made it due. With rollouts of one step that is
        the batch's start; a sync rollout of T steps places each update at the step it fell
        due in, so that where every update falls due at a rollout's last step, rollouts of T
        steps compute what rollouts of one do (docs: benchmarks, DQN)."""
        T = self.cfg.rollout
        if T == 1 or self.cfg.mode != "sync" or self.seats is not None:
            return self.env_steps
        per_step = self._step_inserts // T
        t = (self.limiter.inserts_due(update) - inserts_before - 1) // per_step
        return self.env_steps + min(max(t, 0), T - 1) * per_step

    # ---------------------------------------------------------------- the loop's calls
    def work_ahead(self) -> None:
        """Sync mode, actors stepping: do the updates the coming batch will make due, as far
        as they read none of its slots. Called by the loop while it would otherwise wait for
        the batch; ``train`` does the rest."""
        if self.cfg.mode != "sync" or self._drawn is not None or not self.replay.looks_ahead:
            return
        if self.frozen:  # it never updates
            return
        if self.seats is not None:  # how many transitions the batch completes is not known
            return
        n = self._step_inserts
        t0 = time.perf_counter()
        while self.limiter.due_samples(after_inserts=n) > self._ahead:
            idx = self.replay.draw_indices(self.cfg.batch_size, upcoming=n)
            if self.replay.hits_upcoming(idx, n):
                self._drawn = idx  # the first update after the insert reads these
                break
            at = self._schedule_steps(self.limiter.samples + self._ahead + 1, self.limiter.inserts)
            self._update_once(idx, at)
            self._ahead += 1
        self._ahead_seconds += time.perf_counter() - t0

    def publish(self, store: Any) -> None:
        """Sync: publish now. Async: the optimizer thread publishes after every update; the
        first call hands it the store and starts it."""
        if not self.async_ or self.frozen:  # a frozen policy has no optimizer thread
            if store.version != self.version:  # no update since (warm-up, ratio < 1): no copy
                store.publish(self.version, self.flat.write_to)
            return
        if self._thread is None:
            self._store = store
            with self._update_lock:
                store.publish(self.version, self.flat.write_to)
            self._thread = threading.Thread(
                target=self._optimizer_loop, name=f"asyncrl-{self.name}-optimizer", daemon=True
            )
            self._thread.start()

    def policy_lag(self, slots: list[Any]) -> np.ndarray:
        # updates done ahead did not see this batch: its lag counts from before them
        return super().policy_lag(slots) - self._ahead

    def update(self, slots: list[Any], steps: int) -> dict[str, float]:
        """The batch into the replay; sync: the gradient steps now due, async: the optimizer
        thread's since the last batch. The mean of their figures."""
        ahead, self._ahead = self._ahead, 0
        if (ahead or self._drawn is not None) and steps != self._step_inserts:
            raise RuntimeError(f"sync batch of {steps} transitions, expected {self._step_inserts}")
        if self.seats is None:
            n = int(sum(s.rewards.size for s in slots))
            parts = [(n, lambda: self.replay.add_slots(slots))]
        else:
            parts = self._seat_parts(slots)
            n = sum(m for m, _ in parts)
        if n < steps:  # skipped: indices drawn for the next update may name rows left unwritten
            self._drawn = None
        if self.async_:
            for m, add in parts:
                try:
                    while m and not self.limiter.await_can_insert(m, timeout=0.5):
                        self._raise_if_failed()
                except LimiterClosed:
                    self._raise_if_failed()  # the optimizer's own error, not the closed limiter
                    raise
                if m:
                    with self._replay_lock:
                        add()
            self._raise_if_failed()
        else:
            for m, add in parts:
                if m:
                    add()
                    self.limiter.record_inserts(m)
            if ahead:
                self.limiter.record_samples(ahead)
            due, done = self.limiter.due_samples(), self.limiter.samples
            for k in range(due):
                idx, self._drawn = self._drawn, None
                self._update_once(idx, self._schedule_steps(done + k + 1, self.limiter.inserts - n))
            if due:
                self.limiter.record_samples(due)
            if self._drawn is not None:
                raise RuntimeError("indices drawn for an update that is not due")
        stats = self._drain_stats()
        self.check_losses(stats, self.rule.LOSSES)
        return stats

    def finite_rollouts(
        self, slots: list[Any], fields: tuple[str, ...], at_ends: tuple[str, ...] = ()
    ) -> list[Any]:
        good = super().finite_rollouts(slots, fields, at_ends)
        if self.seats is not None and len(good) < len(slots):  # --on-nonfinite skip
            kept = {id(s) for s in good}
            for slot in slots:
                if id(slot) not in kept:  # its seats' open transitions miss this rollout
                    self.seats.forget(int(slot.actor[0]))
        return good

    def _seat_parts(self, slots: list[Any]) -> list[tuple[int, Any]]:
        """The transitions the seats' slots complete, as inserts of at most the limiter's
        largest batch each (a game's end may complete more transitions than seats moved)."""
        done = [self.seats.add(s) for s in slots]
        rows = {k: np.concatenate([d[k] for d in done]) for k in done[0]} if done else {}
        n, most = (len(rows["reward"]) if rows else 0), self.limiter.max_insert_batch
        parts = []
        for i in range(0, n, most):
            part = {k: v[i : i + most] for k, v in rows.items()}
            parts.append((len(part["reward"]), lambda part=part: self.replay.add_batch(**part)))
        return parts

    def iteration_seconds(self, t0: float) -> float:
        return self._learn_seconds_of_step(t0)  # its updates count their own learn_seconds

    def iteration_fields(self, steps: int, seconds: float) -> dict[str, float]:
        return {
            "gradient_steps": float(self.updates),
            "replay_ratio_achieved": self.limiter.achieved_ratio,
            "insert_blocked_seconds": self.limiter.insert_blocked_seconds,
            "sample_blocked_seconds": self.limiter.sample_blocked_seconds,
            "replay_size": float(len(self.replay)),
            # what its filled part holds: the process's memory grows with it, legitimately
            "memory/replay_mb": self.replay.nbytes
            * len(self.replay)
            / self.replay.capacity
            / 2**20,
        }

    def _learn_seconds_of_step(self, t0: float) -> float:
        """The loop's time in this step's learning, updates done ahead included (async: 0, the
        optimizer thread learns)."""
        if self.async_:
            return 0.0
        ahead, self._ahead_seconds = self._ahead_seconds, 0.0
        return time.perf_counter() - t0 + ahead

    def _drain_stats(self) -> dict[str, float]:
        """The updates' statistics since the last call, and with them (one host sync) the fused
        step's steps not applied for a NaN or inf gradient (counted with --on-nonfinite skip,
        else NonFiniteError)."""
        with self._update_lock:
            pending, self._pending = self._pending, []
            skipped = self.fused_nonfinite() if pending else {}
        if not pending:
            return {}
        for name, (bad, norm) in skipped.items():
            if bad:
                self.nonfinite_steps(name, bad, norm)
        mean = (pending[0] if len(pending) == 1 else torch.stack(pending).mean(0)).tolist()
        return dict(zip(self.rule.STATS, mean, strict=True))

    def fused_nonfinite(self) -> dict[str, tuple[int, float]]:
        """Per optimizer, the fused step's steps not applied since the last call and their mean
        gradient norm; {} where the update is autograd's (its optimizers' hooks guard it)."""
        return {}

    def _raise_if_failed(self) -> None:
        """Raise the optimizer thread's error, with its own traceback in the message (the
        loop's traceback is of no use: the error happened in the other thread)."""
        if self._error is not None:
            e = self._error
            if isinstance(e, NonFiniteError):  # its message says where; the run ends nonfinite
                raise e
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip()
            raise OptimizerFailed(
                f"{self.name.upper()} optimizer thread failed: {e!r}\n{tb}"
            ) from e

    def learning_rate_of_env_steps(self) -> float:
        """Env steps per second since the first gradient step (warm-up left out)."""
        if self.learning_began is None:
            return float("nan")
        t0, steps0 = self.learning_began
        return (self.env_steps - steps0) / max(time.perf_counter() - t0, 1e-9)

    def own_summary(self, wall: float) -> dict:
        lim = self.limiter
        seats = {} if self.seats is None else {"seat_transitions_broken": self.seats.broken}
        return {
            "gradient_steps": self.updates,
            "gradient_steps_per_second": self.updates / wall,
            "env_steps_per_second_learning": self.learning_rate_of_env_steps(),
            "update_seconds_mean": self.learn_seconds / max(self.updates, 1),
            "replay_ratio": self.cfg.replay_ratio,
            "replay_ratio_achieved": lim.achieved_ratio,
            "insert_blocked_seconds": lim.insert_blocked_seconds,
            "sample_blocked_seconds": lim.sample_blocked_seconds,
            **seats,
        }

    def close(self) -> None:
        self.limiter.close()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    # ---------------------------------------------------------------- checkpoint state
    def state_dict(self, replay: bool = True) -> dict:
        """``replay=False``: without the replay and its limiter (another learner adopting
        this state keeps its own: nothing replay-sized is copied)."""
        with self._update_lock:
            # updates done ahead are in the networks already: count them, or a resumed run
            # would do them again
            samples = self.limiter.samples + self._ahead
            if self.async_:
                # the optimizer thread counts a sample before its update: one may be in flight
                # now, not in the networks saved. Count the updates that are.
                samples = self._samples_at_load + self.updates - self._updates_at_load
            limiter = self.limiter.state_dict(samples)
            rule = self.rule.state_dict()
            if self.async_:  # the optimizer thread updates these tensors while they are saved
                rule = copy.deepcopy(rule)
            state = {self.name: rule, "limiter": limiter}
            state.update(self.counters_state())
            state["counters"]["updates"] = self.updates
        if not replay:
            del state["limiter"]
        elif self.cfg.save_replay:
            with self._replay_lock:
                state["replay"] = self.replay.state_dict()
                if self.seats is not None:  # transitions the next slots complete
                    state["seats"] = self.seats.state_dict()
        return state

    def adoptable_state(self) -> dict:
        return self.state_dict(replay=False)

    def load_state_dict(self, state: dict) -> None:
        self.rule.load_state_dict(state[self.name])
        self.load_counters(state)
        self.updates = state["counters"]["updates"]
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
            if self.seats is not None and "seats" in state:
                self.seats.load_state_dict(state["seats"])
            self.limiter.load_state_dict(state["limiter"])
            self._samples_at_load = int(state["limiter"]["samples"])
        self._updates_at_load = self.updates
        # Without the saved data the replay starts empty: warm up again before sampling.
