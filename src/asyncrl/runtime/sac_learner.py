"""The off-policy learner: actors' transitions into a replay buffer, SAC updates out of it.

Sampler and optimizer meet only at the replay buffer, and its rate limiter holds the replay
ratio (gradient steps per env step), whatever N and K are:

* sync mode: after every batched env step of N x K transitions (one slot per actor, rollout 1)
  the learner performs exactly the gradient steps now due (``RateLimiter.due_samples``), then
  publishes; actors wait meanwhile, as in sync PPO. The learner starts those gradient steps
  before the batch arrives (``work_ahead``): it draws each update's replay indices as they will
  be drawn once the step's transitions are in, and runs the update at once if none of them is
  among the slots that step writes -- the same update on the same data, bit for bit, as after
  the insert; the first that would read a new slot waits for it. Where actors run beside the
  learner (thread, process) their env stepping so overlaps its updates; inline only the order
  changes. Actors still act with the newest parameters (lag 0);
* async mode: an optimizer thread samples and updates continuously and publishes a version
  after every update; the training loop only inserts. The limiter blocks whichever side is
  ahead by more than ``ratio_tolerance`` gradient steps: a blocked insert holds the actor's slot,
  so the actor itself waits for a free slot (backpressure reaches the env loop).

The training loop's iteration is one inserted slot in both modes.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

import numpy as np
import torch

from asyncrl.algos.sac import SAC, SACConfig
from asyncrl.config import TrainConfig, learner_threads
from asyncrl.envs import EnvSpec
from asyncrl.metrics import EpisodeStats
from asyncrl.nets import FlatParams, choose_encoder, encoder_of, learner_device, make_encoder
from asyncrl.runtime.learner import EpisodeCounters
from asyncrl.runtime.rate_limiter import LimiterClosed, RateLimiter
from asyncrl.runtime.replay import ReplayBuffer
from asyncrl.runtime.transport import Slot


def as_update_batch(
    b: dict[str, np.ndarray], device: torch.device | None = None
) -> dict[str, torch.Tensor]:
    """A replay sample as the tensors ``SAC.update`` reads (no copies on the CPU; one copy
    each to another ``device``)."""
    return {
        "obs": torch.from_numpy(b["obs"]).to(device),
        "action": torch.from_numpy(b["action"]).to(device),
        "reward": torch.from_numpy(b["reward"]).to(device),
        "next_obs": torch.from_numpy(b["next_obs"]).to(device),
        "terminated": torch.from_numpy(b["terminated"]).to(device).float(),
    }


def _nothing() -> None:
    pass


class OptimizerFailed(RuntimeError):
    """The async optimizer thread raised; the message carries its error."""


class SACLearner(EpisodeCounters):
    def __init__(self, cfg: TrainConfig, spec: EnvSpec):
        self.cfg, self.spec = cfg, spec
        self.device = learner_device(cfg.device)
        # The networks start from cfg.seed as torch's global generator draws them; the global
        # state is put back at once, and the updates draw from the learner's own generator:
        # training never changes the caller's random state.
        kind = choose_encoder(encoder_of(cfg), spec)
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(cfg.seed)  # the CPU one: CUDA's untouched
            self.sac = SAC(
                spec.obs_dim,
                spec.n_actions,
                spec.action_low,
                spec.action_high,
                SACConfig(cfg.gamma, cfg.tau, cfg.policy_lr, cfg.q_lr, tuple(cfg.hidden)),
                self.device,
                torch.Generator(self.device).manual_seed(cfg.seed + 7),
                encoder=lambda: make_encoder(kind, spec, ()),
            )
        self.policy = self.sac.actor  # what actors act with
        self.flat = FlatParams(self.sac.actor)
        self.flat.make_contiguous()  # publishing a version is then one copy (CPU only)
        self.replay = ReplayBuffer(
            cfg.buffer_size, spec.obs_shape, spec.obs_dtype, (spec.n_actions,), seed=cfg.seed
        )
        self.limiter = self._new_limiter()
        self.async_ = cfg.mode == "async" and cfg.backend != "inline"
        self._step_inserts = cfg.actors * cfg.envs_per_actor * cfg.rollout  # per sync batch
        self._ahead = 0  # updates done for the batch that has not arrived yet
        self._ahead_seconds = 0.0
        self._drawn: np.ndarray | None = None  # indices drawn for the next update, not yet run
        self.version = 0
        self.env_steps = 0
        self.iterations = 0
        self.updates = 0
        self.learn_seconds = 0.0
        self.episode_stats = EpisodeStats()
        self._replay_lock = threading.Lock()  # replay: inserts (loop) vs samples (optimizer)
        self._update_lock = threading.Lock()  # networks: updates vs checkpoints and publishing
        self._pending: list[torch.Tensor] = []  # stats of updates not yet reported
        self._store: Any = None  # where the optimizer thread publishes (a Backend)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        # when learning began (first gradient step), for rates that leave out the warm-up
        self.learning_began: tuple[float, int] | None = None
        self._before_step = self._after_step = _nothing  # Hogwild! workers sync here
        self._samples_at_load = self._updates_at_load = 0  # the limiter's and ours at start

    def _new_limiter(self) -> RateLimiter:
        cfg = self.cfg
        return RateLimiter(
            samples_per_insert=cfg.replay_ratio,
            min_size_to_sample=cfg.learning_starts,
            error_buffer=cfg.ratio_tolerance,
            max_insert_batch=cfg.insert_batch,  # async inserts one slot at a time
        )

    # ---------------------------------------------------------------- one gradient step
    def _update_once(self, idx: np.ndarray | None = None) -> None:
        """One gradient step on a fresh sample, or on the slots ``idx`` if given."""
        with self._replay_lock:
            if idx is None:
                idx = self.replay.draw_indices(self.cfg.batch_size)
            batch = as_update_batch(self.replay.take(idx), self.device)
        t0 = time.perf_counter()
        if self.learning_began is None:
            self.learning_began = (t0, self.env_steps)
        with self._update_lock:
            self._before_step()
            stats = self.sac.update(batch)
            self._after_step()
            self.version += 1
            self.updates += 1
            self._pending.append(stats)
            if self.async_ and self._store is not None:
                self._store.publish(self.version, self.flat.write_to)
        self.learn_seconds += time.perf_counter() - t0

    def policy_vector(self) -> np.ndarray:
        """A copy of the actor as a published version holds it (float32, CPU), taken between
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

    def shared_tensors(self) -> list[torch.Tensor]:
        """Everything an update changes (actor, critics, target critics, temperature): what
        Hogwild! workers share."""
        return self.sac.state_tensors()

    def set_step_hooks(self, before, after) -> None:
        """Call ``before()`` and ``after()`` around every gradient step."""
        self._before_step, self._after_step = before, after

    # ---------------------------------------------------------------- the loop's calls
    def work_ahead(self) -> None:
        """Sync mode, actors stepping: do the updates the coming batch will make due, as far
        as they read none of its slots (see the module doc). Called by the loop while it would
        otherwise wait for the batch; ``train`` does the rest."""
        if self.cfg.mode != "sync" or self._drawn is not None:
            return
        n = self._step_inserts
        t0 = time.perf_counter()
        while self.limiter.due_samples(after_inserts=n) > self._ahead:
            idx = self.replay.draw_indices(self.cfg.batch_size, upcoming=n)
            if self.replay.hits_upcoming(idx, n):
                self._drawn = idx  # the first update after the insert reads these
                break
            self._update_once(idx)
            self._ahead += 1
        self._ahead_seconds += time.perf_counter() - t0

    def publish(self, store: Any) -> None:
        """Sync: publish now. Async: the optimizer thread publishes after every update; the
        first call hands it the store and starts it."""
        if not self.async_:
            if store.version != self.version:  # no update since (warm-up, ratio < 1): no copy
                store.publish(self.version, self.flat.write_to)
            return
        if self._thread is None:
            self._store = store
            with self._update_lock:
                store.publish(self.version, self.flat.write_to)
            self._thread = threading.Thread(
                target=self._optimizer_loop, name="asyncrl-sac-optimizer", daemon=True
            )
            self._thread.start()

    def _transitions(self, slots: list[Slot]) -> dict[str, np.ndarray]:
        """Flat transitions; next_obs is the following row, or the final obs at an episode end."""
        parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")
        }
        for s in slots:
            done = (s.terminated | s.truncated)[..., None]
            nxt = np.where(
                done,
                s.final_obs.reshape(*done.shape[:2], -1),
                s.obs[1:].reshape(*done.shape[:2], -1),
            )
            parts["obs"].append(s.obs[:-1].reshape(-1, *self.spec.obs_shape))
            parts["next_obs"].append(nxt.reshape(-1, *self.spec.obs_shape))
            parts["action"].append(s.actions.reshape(-1, self.spec.n_actions))
            parts["reward"].append(s.rewards.reshape(-1))
            parts["terminated"].append(s.terminated.reshape(-1))
            parts["truncated"].append(s.truncated.reshape(-1))
        return {k: np.concatenate(v) for k, v in parts.items()}

    def train(self, slots: list[Slot]) -> dict[str, float]:
        t0 = time.perf_counter()
        ahead, self._ahead = self._ahead, 0
        # updates done ahead did not see this batch: its lag counts from before them
        lag = self.version - ahead - np.concatenate([s.versions.reshape(-1) for s in slots])
        tr = self._transitions(slots)
        n = len(tr["reward"])
        if (ahead or self._drawn is not None) and n != self._step_inserts:
            raise RuntimeError(f"sync batch of {n} transitions, expected {self._step_inserts}")
        if self.async_:
            try:
                while not self.limiter.await_can_insert(n, timeout=0.5):
                    self._raise_if_failed()
            except LimiterClosed:
                self._raise_if_failed()  # the optimizer's own error, not the closed limiter
                raise
            with self._replay_lock:
                self.replay.add_batch(**tr)
            self._raise_if_failed()
        else:
            self.replay.add_batch(**tr)
            self.limiter.record_inserts(n)
            if ahead:
                self.limiter.record_samples(ahead)
            due = self.limiter.due_samples()
            for _ in range(due):
                idx, self._drawn = self._drawn, None
                self._update_once(idx)
            if due:
                self.limiter.record_samples(due)
            if self._drawn is not None:
                raise RuntimeError("indices drawn for an update that is not due")
        self.env_steps += n
        self.iterations += 1
        self.episode_stats.record(slots)
        stats = self._drain_stats()
        stats.update(
            {
                "learn_seconds": self._learn_seconds_of_step(t0),
                "samples": float(n),
                "policy_lag_mean": float(lag.mean()),
                "policy_lag_max": float(lag.max()),
                "rollout_seconds": float(sum(s.rollout_seconds[0] for s in slots)),
                "actor_wait_seconds": float(sum(s.wait_seconds[0] for s in slots)),
                "gradient_steps": float(self.updates),
                "replay_ratio_achieved": self.limiter.achieved_ratio,
                "insert_blocked_seconds": self.limiter.insert_blocked_seconds,
                "sample_blocked_seconds": self.limiter.sample_blocked_seconds,
                "replay_size": float(len(self.replay)),
            }
        )
        return stats

    def _learn_seconds_of_step(self, t0: float) -> float:
        """The loop's time in this step's learning, updates done ahead included (async: 0, the
        optimizer thread learns)."""
        if self.async_:
            return 0.0
        ahead, self._ahead_seconds = self._ahead_seconds, 0.0
        return time.perf_counter() - t0 + ahead

    def _drain_stats(self) -> dict[str, float]:
        with self._update_lock:
            pending, self._pending = self._pending, []
        if not pending:
            return {}
        mean = (pending[0] if len(pending) == 1 else torch.stack(pending).mean(0)).tolist()
        return dict(zip(SAC.STATS, mean, strict=True))

    def _raise_if_failed(self) -> None:
        """Raise the optimizer thread's error, with its own traceback in the message (the
        loop's traceback is of no use: the error happened in the other thread)."""
        if self._error is not None:
            e = self._error
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip()
            raise OptimizerFailed(f"SAC optimizer thread failed: {e!r}\n{tb}") from e

    def learning_rate_of_env_steps(self) -> float:
        """Env steps per second since the first gradient step (warm-up left out)."""
        if self.learning_began is None:
            return float("nan")
        t0, steps0 = self.learning_began
        return (self.env_steps - steps0) / max(time.perf_counter() - t0, 1e-9)

    def summary_fields(self, wall: float) -> dict:
        lim = self.limiter
        return {
            "gradient_steps": self.updates,
            "gradient_steps_per_second": self.updates / wall,
            "env_steps_per_second_learning": self.learning_rate_of_env_steps(),
            "update_seconds_mean": self.learn_seconds / max(self.updates, 1),
            "replay_ratio": self.cfg.replay_ratio,
            "replay_ratio_achieved": lim.achieved_ratio,
            "insert_blocked_seconds": lim.insert_blocked_seconds,
            "sample_blocked_seconds": lim.sample_blocked_seconds,
        }

    def close(self) -> None:
        self.limiter.close()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    # ---------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict:
        with self._update_lock:
            limiter = self.limiter.state_dict()
            # updates done ahead are in the networks already: count them, or a resumed run
            # would do them again
            limiter["samples"] += self._ahead
            if self.async_:
                # the optimizer thread counts a sample before its update: one may be in flight
                # now, not in the networks saved. Count the updates that are.
                limiter["samples"] = self._samples_at_load + self.updates - self._updates_at_load
            state = {
                "sac": self.sac.state_dict(),
                "limiter": limiter,
                "counters": {
                    "version": self.version,
                    "env_steps": self.env_steps,
                    "iterations": self.iterations,
                    "updates": self.updates,
                    "learn_seconds": self.learn_seconds,
                },
                "episodes": self.episode_stats.state_dict(),
            }
        if self.cfg.save_replay:
            with self._replay_lock:
                state["replay"] = self.replay.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.sac.load_state_dict(state["sac"])
        # the optimizers' saved state holds the rates of the run before: the rates given now
        # (--q-lr, --policy-lr, which may change on resume) take effect
        for opt, lr in (
            (self.sac.q_opt, self.cfg.q_lr),
            (self.sac.actor_opt, self.cfg.policy_lr),
            (self.sac.alpha_opt, self.cfg.policy_lr),
        ):
            for group in opt.param_groups:
                group["lr"] = lr
        c = state["counters"]
        self.version, self.env_steps, self.iterations = (
            c["version"],
            c["env_steps"],
            c["iterations"],
        )
        self.updates, self.learn_seconds = c["updates"], c["learn_seconds"]
        self.episode_stats.load_state_dict(state["episodes"])
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
            self.limiter.load_state_dict(state["limiter"])
            self._samples_at_load = int(state["limiter"]["samples"])
        self._updates_at_load = self.updates
        # Without the saved data the replay starts empty: warm up again before sampling.
