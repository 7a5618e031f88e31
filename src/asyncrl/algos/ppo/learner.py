"""PPO's learner: filled slots in, one PPO update and a new policy version out.

One call of ``train`` (the host's, :class:`~asyncrl.learning.base.LearnerBase`) is one training
iteration, whatever the backend: the slots of all actors in sync mode, of one actor in async
mode; :meth:`PPOLearner.update` is PPO's part of it. Policy lag of each sample is measured
against the version the learner holds when it starts the update.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.algos.ppo.config import PPOConfig, recurrence
from asyncrl.algos.ppo.networks import build_policy
from asyncrl.algos.ppo.reward_norm import RewardNormalizer
from asyncrl.algos.ppo.update import PPO, STATS
from asyncrl.envs import EnvSpec
from asyncrl.learning.base import LearnerBase
from asyncrl.learning.capabilities import HogwildSharing, PBTAdoption
from asyncrl.learning.guard import zero_unowned
from asyncrl.nets import FlatParams, encoder_of, learner_device

if TYPE_CHECKING:
    from asyncrl.config import Settings

ROLLOUT_FIELDS = ("obs", "actions", "logp", "rewards", "terminated", "truncated", "trunc_values")
CHECKED = ("obs", "actions", "rewards", "logp", "trunc_values")  # for NaN and inf
LOSSES = ("loss/policy", "loss/value", "loss/entropy")
# a seat's own at every step: what it received while waiting, and its value at a cut
SEATS_KEEP = ("rewards", "trunc_values")


class PPOLearner(LearnerBase, HogwildSharing, PBTAdoption):
    CHECKED = CHECKED

    def __init__(self, cfg: Settings, spec: EnvSpec):
        super().__init__()
        self.cfg, self.spec = cfg, spec
        self.hp = PPOConfig.of(cfg)
        self.device = learner_device(cfg.device)
        # The network starts from cfg.seed as torch's global generator draws it; the global
        # state is put back at once (updates draw from self.generator): training never changes
        # the caller's random state. Initialised on the CPU: the same on any device.
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(cfg.seed)  # the CPU one: CUDA's untouched
            policy = build_policy(
                spec,
                cfg.hidden,
                cfg.activation,
                cfg.norm_obs,
                encoder_of(cfg),
                cfg.recurrent,
                cfg.rnn_size,
                cfg.norm_obs_min_std,
                cfg.norm_obs_keep_sparse,
            )
        self.generator = torch.Generator().manual_seed(cfg.seed + 7)
        self.policy = policy.to(self.device)
        self.fields = ROLLOUT_FIELDS
        if cfg.recurrent != "none":
            from asyncrl.algos.ppo.recurrent import RecurrentPPO

            self.algo: Any = RecurrentPPO(
                self.policy, self.hp, cfg.lr, recurrence(cfg), compile=bool(cfg.compile)
            )
            self.fields += ("rnn_states",)
        else:
            self.algo = PPO(
                self.policy, self.hp, cfg.lr, bool(cfg.compile), precision=cfg.precision
            )
        self.flat = FlatParams(self.policy)
        # One statistic for the run, whatever N and K: the learner sees every env's rewards.
        self.reward_norm = RewardNormalizer(cfg.gamma, cfg.reward_clip) if cfg.norm_reward else None
        if spec.agents > 1:  # the guard checks a waiting seat's rewards: its update reads them
            self.seats_whole = SEATS_KEEP
        self.guard_steps({"policy": self.algo.optimizer})  # the autograd step's
        self.algo.on_nonfinite = functools.partial(self.nonfinite_steps, "policy")  # the fused

    def shared_tensors(self) -> list[torch.Tensor]:
        """Weights and observation statistics: what Hogwild! workers share."""
        return self.flat.tensors

    def set_step_hooks(self, before, after) -> None:
        self.algo.before_step, self.algo.after_step = before, after

    @property
    def changes_outside_steps(self) -> bool:
        return bool(self.cfg.norm_obs)  # the observation statistics move after the update

    def hyperparameters_changed(self) -> None:
        self.hp = self.algo.cfg = PPOConfig.of(self.cfg)
        if self.algo.fused is not None:  # the fused step reads its own reference
            self.algo.fused.cfg = self.hp
        if self.reward_norm is not None:
            self.reward_norm.gamma = self.cfg.gamma

    def random_streams(self) -> list[torch.Generator]:
        return [self.generator]

    def lr_now(self) -> float:
        return self.cfg.lr * self.remaining(self.cfg.lr_schedule)

    def update(self, good: list[Any], steps: int) -> dict[str, float]:
        """One PPO update on the finite slots ``good`` (none: no update), a new version."""
        stats: dict[str, float] = {}
        if good:
            rollout = self.rollout(good)
            batch = self.algo.targets(rollout)
            # --policy-mapping random: a slot holds every env's steps, this policy's marked
            # "own"; the others' never reach its returns (they end before, or begin after, an
            # episode end)
            own = _join([s.own for s in good]) if self.marks_own else None
            if own is not None:
                keep = torch.from_numpy(own.reshape(-1)).to(self.device)
                batch = {k: v[keep] for k, v in batch.items()}
            # samples, whatever the layout (a recurrent batch is [sequences, steps])
            if batch["adv"].numel() >= self.hp.minibatch_size:
                stats = self.algo.update(
                    batch, self.lr_now(), self.generator, self.remaining(self.cfg.clip_schedule)
                )
                self.check_losses(stats, LOSSES)
            else:  # the random mapping gave this policy fewer steps than a minibatch: no step
                stats = dict.fromkeys((*STATS, "loss/explained_variance"), math.nan)
            if self.cfg.norm_obs:  # after the update: the batch was acted on with the old ones
                seen = rollout["obs"][:-1]
                self.policy.obs_norm.update(seen if own is None else seen[keep.view(own.shape)])
        self.version += 1
        return stats

    def iteration_fields(self, steps: int, seconds: float) -> dict[str, float]:
        fields = {"learner_samples_per_second": steps / seconds, "lr": self.lr_now()}
        if self.reward_norm is not None:
            fields["reward_norm/return_std"] = self.reward_norm.return_std
        return fields

    def rollout(self, slots: list[Any]) -> dict[str, torch.Tensor]:
        """The slots as the update's tensors on the learner's device. What is computed on the
        host (return normalisation) reads the slots' arrays, never a device tensor."""
        host = {k: _join([getattr(s, k) for s in slots]) for k in self.fields}
        if self.marks_own:  # the random mapping: other cells hold what was left there
            own, ended = _join([s.own for s in slots]), host["terminated"] | host["truncated"]
            seats = self.spec.agents > 1
            for k in CHECKED:  # 0 in a copy: a NaN there would reach owned returns via the scan
                if not (seats and k in SEATS_KEEP):
                    host[k] = zero_unowned(host[k], own, ended, seats)
            if seats:
                host["seats"] = own
        if self.reward_norm is not None:  # before GAE / V-trace; the slots stay as written
            ends = host["terminated"] | host["truncated"]
            host["rewards"] = self.reward_norm(host["rewards"], ends, _streams(slots))
        # on the CPU, no copy; else one copy to the learner's device
        return {k: torch.from_numpy(v).to(self.device) for k, v in host.items()}

    # ---------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict:
        state = {
            "policy": self.policy.state_dict(),
            "optimizer": self.algo.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            **self.counters_state(),
        }
        if self.reward_norm is not None:
            state["reward_norm"] = self.reward_norm.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.algo.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.load_counters(state)
        if self.reward_norm is not None and "reward_norm" in state:
            self.reward_norm.load_state_dict(state["reward_norm"])

    def adopt(self, state: dict, values: dict[str, Any]) -> None:
        """PBT's exploit; its envs go on with their episodes, so with their discounted returns."""
        returns = None if self.reward_norm is None else self.reward_norm.returns.copy()
        super().adopt(state, values)
        if returns is not None:
            self.reward_norm.returns = returns

    def episodes_continue(self, actors: list[int]) -> None:
        if self.reward_norm is not None:  # their streams, as _streams numbers them
            K = self.cfg.envs_per_actor
            self.reward_norm.continue_episodes(
                np.concatenate([a * K + np.arange(K) for a in actors] or [np.zeros(0, int)])
            )


def _streams(slots: list[Any]) -> np.ndarray:
    """Which env each column of the joined slots comes from: actor id x K + env index, so that
    every env keeps its own discounted return whatever batch it arrives in."""
    return np.concatenate(
        [int(s.actor[0]) * s.rewards.shape[1] + np.arange(s.rewards.shape[1]) for s in slots]
    )


def _join(arrays: list[np.ndarray]) -> np.ndarray:
    """Slots side by side along the env axis; one slot is used where it lies, without a copy."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=1)
