"""Return normalisation: rewards divided by the running std of the discounted return.

What Gymnasium's ``NormalizeReward`` and SB3's ``VecNormalize(norm_reward=True)`` do, and what
CleanRL, SB3 and Sample Factory train PPO on MuJoCo with. Per env, a discounted return is
accumulated from the start of its episode, ``G_t = gamma * G_(t-1) + r_t``, and one running
mean and variance is kept over every ``G_t`` seen; a reward is scaled as
``r_t / sqrt(var + eps)``, then clipped to ``+/- clip`` (0: no clip). No mean is subtracted:
shifting rewards would change what an episode's length is worth (openai/baselines#538).

Episode ends, as SB3's ``VecNormalize`` has them: ``G`` is reset to 0 after the step that ends
an episode, whether it terminated or was truncated (SB3's ``done`` includes time limits), so the
next episode accumulates from 0. Gymnasium 1.x's vector wrapper in same-step autoreset (the mode
asyncrl's actors use) resets after both as well, but also drops the accumulated return *at* a
terminating step, keeping only that step's reward -- a quirk its own source keeps "for
backward compatibility"; this follows SB3.

One difference of granularity: SB3 updates the statistic every env step and scales that step's
rewards with it. Here the statistic is updated with a whole batch of returns (one rollout of one
actor, or of all of them in sync mode), and then that batch's rewards are scaled: every reward of
one PPO update shares one scale. The statistic merges batches exactly (Chan et al.'s parallel
formula in :class:`~asyncrl.nets.RunningNorm`), so how the envs are split among actors and in
which order the batches arrive do not change it, only the streams of rewards seen.

The math only: numpy in, numpy out, no processes. The learner owns one instance and says which
env each column of a batch comes from (``streams``, an id per env: actor x K + env index).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from asyncrl.nets import RunningNorm


class RewardNormalizer:
    def __init__(self, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.stat = RunningNorm(())  # mean and variance of the discounted returns
        self.returns = np.zeros(0)  # G of each env stream, by stream id

    def __call__(self, rewards: np.ndarray, ends: np.ndarray, streams: np.ndarray) -> np.ndarray:
        """Scale a batch of time-major rewards [T, B] of the envs ``streams`` [B] (ids, distinct
        within a batch), whose episodes end where ``ends`` [T, B] is true; updates the
        statistic with the batch first. Returns float32 [T, B]."""
        self.update(rewards, ends, streams)
        return self.scale(rewards)

    def update(self, rewards: np.ndarray, ends: np.ndarray, streams: np.ndarray) -> None:
        self.stat.update(torch.from_numpy(self.discounted_returns(rewards, ends, streams)))

    def discounted_returns(
        self, rewards: np.ndarray, ends: np.ndarray, streams: np.ndarray
    ) -> np.ndarray:
        """``G_t`` of every step [T, B] (float64), carrying each stream's accumulator on."""
        streams = np.asarray(streams, dtype=np.int64)
        if streams.size and streams.max() >= self.returns.size:
            grown = np.zeros(int(streams.max()) + 1)
            grown[: self.returns.size] = self.returns
            self.returns = grown
        g = self.returns[streams]
        out = np.empty(rewards.shape, dtype=np.float64)
        for t in range(rewards.shape[0]):
            g = g * self.gamma + rewards[t]
            out[t] = g
            g = np.where(ends[t], 0.0, g)
        self.returns[streams] = g
        return out

    @property
    def return_std(self) -> float:
        """The divisor: sqrt(var + eps) of the discounted returns seen so far."""
        return math.sqrt(float(self.stat.var) + self.eps)

    def scale(self, rewards: np.ndarray) -> np.ndarray:
        out = np.asarray(rewards, dtype=np.float64) / self.return_std
        if self.clip > 0:
            out = np.clip(out, -self.clip, self.clip)
        return out.astype(np.float32)

    # -------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The statistic only. The per-env accumulators are not saved: a resumed run starts
        new actors, whose envs begin new episodes, so their returns start from 0 again."""
        return {k: v.clone() for k, v in self.stat.state_dict().items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.stat.load_state_dict(state)
        self.returns = np.zeros(0)
