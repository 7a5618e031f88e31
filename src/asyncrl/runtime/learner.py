"""The learner: turns filled slots into one PPO update and a new published policy version.

One call of :meth:`Learner.train` is one training iteration, whatever the backend: the slots of
all actors in sync mode, of one actor in async mode. Policy lag of each sample is measured here,
against the version the learner holds when it starts the update.
"""

from __future__ import annotations

import time
from dataclasses import fields
from typing import Any

import numpy as np
import torch

from asyncrl.algos.ppo import PPO, PPOConfig
from asyncrl.algos.reward_norm import RewardNormalizer
from asyncrl.config import TrainConfig
from asyncrl.envs import EnvSpec
from asyncrl.metrics import EpisodeStats
from asyncrl.nets import FlatParams, build_policy, encoder_of, learner_device
from asyncrl.runtime.transport import Slot

ROLLOUT_FIELDS = ("obs", "actions", "logp", "rewards", "terminated", "truncated", "trunc_values")


class EpisodeCounters:
    """What every learner offers the training loop beside its updates: counts of finished
    episodes (from the ``episode_stats`` it keeps), its own summary figures, and ``close``."""

    episode_stats: EpisodeStats

    def close(self) -> None:
        """Stop what the learner runs beside the loop (SAC's optimizer thread); PPO: nothing."""

    def summary_fields(self, wall: float) -> dict:
        """The learner's own figures for summary.json (``wall``: the run's seconds)."""
        return {}

    @property
    def final_return(self) -> float:
        return self.episode_stats.final_return

    @property
    def final_length(self) -> float:
        """Mean length of the last 20 finished episodes (those of ``final_return``)."""
        return self.episode_stats.final_length

    @property
    def episodes(self) -> int:
        return self.episode_stats.episodes


class Learner(EpisodeCounters):
    def __init__(self, cfg: TrainConfig, spec: EnvSpec):
        self.cfg, self.spec = cfg, spec
        self.device = learner_device(cfg.device)
        # The network starts from cfg.seed as torch's global generator draws it; the global
        # state is put back at once (updates draw from self.generator): training never changes
        # the caller's random state. Initialised on the CPU: the same on any device.
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(cfg.seed)  # the CPU one: CUDA's untouched
            policy = build_policy(spec, cfg.hidden, cfg.activation, cfg.norm_obs, encoder_of(cfg))
        self.generator = torch.Generator().manual_seed(cfg.seed + 7)
        self.policy = policy.to(self.device)
        ppo_cfg = PPOConfig(**{f.name: getattr(cfg, f.name) for f in fields(PPOConfig)})
        self.algo = PPO(self.policy, ppo_cfg, cfg.lr, compile=cfg.compile)
        self.flat = FlatParams(self.policy)
        # One statistic for the run, whatever N and K: the learner sees every env's rewards.
        self.reward_norm = RewardNormalizer(cfg.gamma, cfg.reward_clip) if cfg.norm_reward else None
        self.version = 0
        self.env_steps = 0
        self.iterations = 0
        self.learn_seconds = 0.0
        self.episode_stats = EpisodeStats()
        # The linear schedules' current leg: from (env steps, fraction remaining) down to 0 at
        # cfg.total_steps. A fresh run: (0, 1). See load_state_dict for a resumed one.
        self.schedule_from = (0, 1.0)

    def publish(self, store: Any) -> None:
        """Publish the current parameters as version ``self.version`` to ``store`` (a Backend,
        or a PolicyStore: anything with ``publish(version, write)``)."""
        store.publish(self.version, self.flat.write_to)

    def policy_vector(self) -> np.ndarray:
        """A copy of the policy as a published version holds it (float32, CPU): what an
        evaluation during training acts with."""
        out = np.empty(self.flat.numel, np.float32)
        self.flat.write_to(out)
        return out

    def work_ahead(self) -> None:
        """Nothing: an on-policy update needs the batch it waits for."""

    def shared_tensors(self) -> list[torch.Tensor]:
        """Everything an update changes (weights and observation statistics): what Hogwild!
        workers share."""
        return self.flat.tensors

    def set_step_hooks(self, before, after) -> None:
        """Call ``before()`` and ``after()`` around every gradient step."""
        self.algo.before_step, self.algo.after_step = before, after

    def _remaining(self, schedule: str, env_steps: int | None = None) -> float:
        """The fraction of the learning rate (or clip range) a linear schedule leaves at
        ``env_steps`` (default: now): 1 - env_steps / total_steps in a run that was never
        resumed with another total_steps (see :meth:`load_state_dict`)."""
        if schedule == "constant":
            return 1.0
        steps = self.env_steps if env_steps is None else env_steps
        return _linear(self.schedule_from, self.cfg.total_steps, steps)

    def lr_now(self) -> float:
        return self.cfg.lr * self._remaining(self.cfg.lr_schedule)

    def train(self, slots: list[Slot]) -> dict[str, float]:
        """One training iteration on ``slots`` (joined along the env axis). The caller publishes
        the new version before the slots are refilled."""
        t0 = time.perf_counter()
        rollout = {  # on the CPU, no copy; else one copy to the learner's device
            k: torch.from_numpy(_join([getattr(s, k) for s in slots])).to(self.device)
            for k in ROLLOUT_FIELDS
        }
        if self.reward_norm is not None:  # before GAE / V-trace; the slots stay as written
            rollout["rewards"] = torch.from_numpy(
                self.reward_norm(
                    rollout["rewards"].numpy(),
                    (rollout["terminated"] | rollout["truncated"]).numpy(),
                    _streams(slots),
                )
            )
        versions = _join([s.versions for s in slots])
        lag = self.version - versions
        batch = self.algo.targets(rollout)
        stats = self.algo.update(
            batch, self.lr_now(), self.generator, self._remaining(self.cfg.clip_schedule)
        )
        if self.cfg.norm_obs:  # after the update: the batch was acted on with the old statistics
            self.policy.obs_norm.update(rollout["obs"][:-1])
        self.version += 1
        steps = int(sum(s.env_steps[0] for s in slots))
        self.env_steps += steps
        self.iterations += 1
        self.episode_stats.record(slots)
        seconds = time.perf_counter() - t0
        self.learn_seconds += seconds
        stats.update(
            {
                "learn_seconds": seconds,
                "samples": float(steps),
                "learner_samples_per_second": steps / seconds,
                "policy_lag_mean": float(lag.mean()),
                "policy_lag_max": float(lag.max()),
                "rollout_seconds": float(sum(s.rollout_seconds[0] for s in slots)),
                "actor_wait_seconds": float(sum(s.wait_seconds[0] for s in slots)),
                "lr": self.lr_now(),
            }
        )
        if self.reward_norm is not None:
            stats["reward_norm/return_std"] = self.reward_norm.return_std
        return stats

    # ---------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(),
            "optimizer": self.algo.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "counters": {
                "version": self.version,
                "env_steps": self.env_steps,
                "iterations": self.iterations,
                "learn_seconds": self.learn_seconds,
            },
            "episodes": self.episode_stats.state_dict(),
            "schedule": {
                "from_steps": self.schedule_from[0],
                "from_remaining": self.schedule_from[1],
                "total_steps": self.cfg.total_steps,
            },
        }
        if self.reward_norm is not None:
            state["reward_norm"] = self.reward_norm.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.algo.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        c = state["counters"]
        self.version, self.env_steps, self.iterations = (
            c["version"],
            c["env_steps"],
            c["iterations"],
        )
        self.learn_seconds = c["learn_seconds"]
        self.episode_stats.load_state_dict(state["episodes"])
        # Schedules go on without a jump. With the same total_steps the saved leg continues
        # as it was (a resumed run is the run that did not stop). With another one, a new leg
        # starts here at the fraction the run had reached and ends at 0 at the new total --
        # never back up, as a rate of 1 - env_steps / total_steps would with a larger total.
        sched = state.get("schedule")
        if sched is not None:
            self.schedule_from = continue_schedule(sched, self.cfg.total_steps, self.env_steps)
        if self.reward_norm is not None and "reward_norm" in state:
            self.reward_norm.load_state_dict(state["reward_norm"])


def continue_schedule(saved: dict, total_steps: int, env_steps: int) -> tuple[int, float]:
    """The linear schedules' leg (start env steps, fraction there) of a run resumed at
    ``env_steps`` with ``total_steps``, from the leg ``saved`` in its checkpoint: that leg if
    the total is the same, else a new one from the fraction reached (see load_state_dict)."""
    leg = (int(saved["from_steps"]), float(saved["from_remaining"]))
    if int(saved["total_steps"]) == total_steps:
        return leg
    return env_steps, _linear(leg, int(saved["total_steps"]), env_steps)


def _linear(start: tuple[int, float], total_steps: int, env_steps: int) -> float:
    steps0, frac0 = start
    span = total_steps - steps0
    return 0.0 if span <= 0 else max(frac0 * (1.0 - (env_steps - steps0) / span), 0.0)


def _streams(slots: list[Slot]) -> np.ndarray:
    """Which env each column of the joined slots comes from: actor id x K + env index, so that
    every env keeps its own discounted return whatever batch it arrives in."""
    return np.concatenate(
        [int(s.actor[0]) * s.rewards.shape[1] + np.arange(s.rewards.shape[1]) for s in slots]
    )


def _join(arrays: list[np.ndarray]) -> np.ndarray:
    """Slots side by side along the env axis; one slot is used where it lies, without a copy."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=1)
