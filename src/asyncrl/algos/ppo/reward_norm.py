"""Return normalisation: rewards divided by the running std of the discounted return, per
env, reset at every episode end (SB3's ``VecNormalize(norm_reward=True)``), updated a batch at
a time. Numpy in, numpy out; docs (Internals) has the details and the differences from
Gymnasium's wrapper."""

from __future__ import annotations

import math

import numpy as np
import torch

from asyncrl.algos.ppo.returns import linear_scan
from asyncrl.nets import RunningNorm


class RewardNormalizer:
    def __init__(self, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.stat = RunningNorm(())  # mean and variance of the discounted returns
        self.returns = np.zeros(0)  # G of each env stream, by stream id
        self.saved_returns: np.ndarray | None = None  # a checkpoint's, until envs continue

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
        # G_t = r_t + gamma G_{t-1}, G_{t-1} = 0 after an episode end, the streams' G before
        x = np.asarray(rewards, dtype=np.float64).copy()
        x[0] += self.gamma * self.returns[streams]
        carry = np.full(x.shape, self.gamma)
        carry[1:] *= ~np.asarray(ends[:-1], dtype=bool)
        out = linear_scan(x, carry)
        self.returns[streams] = np.where(ends[-1], 0.0, out[-1])
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
        """The statistic, and each env stream's discounted return so far (``returns``)."""
        state = {k: v.clone() for k, v in self.stat.state_dict().items()}
        state["returns"] = torch.from_numpy(self.returns.copy())
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """The statistic; the accumulators start from 0 -- a resumed run's envs begin new
        episodes -- unless :meth:`continue_episodes` says which envs go on with theirs."""
        state = dict(state)
        saved = state.pop("returns", None)  # absent in checkpoints written before it was kept
        self.stat.load_state_dict(state)
        self.saved_returns = None if saved is None else np.asarray(saved, dtype=np.float64)
        self.returns = np.zeros(0)

    def continue_episodes(self, streams: np.ndarray) -> None:
        """The env streams ``streams`` continue the episodes of the checkpoint loaded (their
        actors' states were restored): they carry on with the discounted returns saved."""
        saved = self.saved_returns
        if saved is None:
            return
        self.returns = np.zeros(saved.size)
        streams = np.asarray(streams, dtype=np.int64)
        streams = streams[streams < saved.size]
        self.returns[streams] = saved[streams]
