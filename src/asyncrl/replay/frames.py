"""Replay of image observations with every frame stored once.

Each actor env is a *stream* with a ring of rows of its own; a row holds the newest frame of
one observation and that step's action, reward and ends. A sampled transition rebuilds its
stacked observation from the rows before it in the stream, and its next observation is a later
row of the same stream -- so neither the frame stack nor the next observation is a second copy
(SB3's ``optimize_memory_usage``, kept per stream so that vector envs and episode ends stay
exact). Where an episode ends and the env resets, one more row holds the final observation. A
rollout's last observation is written with it, as the stream's *open* row: the next rollout's
first step fills in its action (or, where the stream broke, it stays the previous transition's
next observation), so every transition inserted can be drawn at once, as in ``ReplayBuffer``.

Frame stacks are read, not assumed: a row whose older frames are not the previous row's starts
a new chain, whose missing older frames must be the stack's padding (its first frame repeated,
or zeros, as Gymnasium's ``FrameStackObservation`` and EnvPool pad).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from asyncrl.replay.buffer import nstep_window

META = ("action", "reward", "terminated", "truncated", "valid", "depth", "pad_zero", "ahead")


def frame_row_bytes(
    obs_shape: tuple[int, ...], obs_dtype: Any, action_shape: tuple[int, ...], action_dtype: Any,
    stack: int,
) -> int:  # fmt: skip
    """Bytes of one row: the newest frame, the action, the reward and five small fields."""
    frame = obs_shape[1:] if stack > 1 else obs_shape
    frame_bytes = int(np.prod(frame, dtype=np.int64)) * np.dtype(obs_dtype).itemsize
    act = int(np.prod(action_shape, dtype=np.int64)) * np.dtype(action_dtype).itemsize
    return frame_bytes + act + 4 + 5  # reward float32; terminated, truncated, valid, depth, ...


class FrameReplay:
    """Up to ``capacity`` rows of image observations from up to ``streams`` actor envs, with
    frame stacks of ``stack`` frames (1: the whole observation is the frame). ``n_step``:
    transitions span up to that many steps within a rollout (see ``buffer.nstep_window``)."""

    looks_ahead = False  # draws are made after the insert they may read

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: Any,
        action_shape: tuple[int, ...],
        action_dtype: Any,
        streams: int,
        stack: int = 1,
        seed: int | None = None,
        n_step: int = 1,
        gamma: float = 0.99,
    ):
        self.obs_shape, self.obs_dtype = tuple(obs_shape), np.dtype(obs_dtype)
        self.action_shape = tuple(action_shape)
        self.action_dtype = np.dtype(action_dtype)
        self.stack, self.n_step, self.gamma = int(stack), int(n_step), float(gamma)
        self.streams = int(streams)
        self.rows = max(2, math.ceil(capacity / self.streams))  # per stream
        self.capacity = self.rows * self.streams
        S, C = self.streams, self.rows
        frame = self.obs_shape[1:] if self.stack > 1 else self.obs_shape
        self.frames = np.zeros((S, C, *frame), self.obs_dtype)
        self.action = np.zeros((S, C, *self.action_shape), self.action_dtype)
        self.reward = np.zeros((S, C), np.float32)
        self.terminated = np.zeros((S, C), bool)
        self.truncated = np.zeros((S, C), bool)
        self.valid = np.zeros((S, C), bool)  # a transition starts here (not a final-obs row)
        self.depth = np.zeros((S, C), np.uint8)  # older frames of its stack in this stream
        self.pad_zero = np.zeros((S, C), bool)  # its chain was padded with zeros (else repeats)
        self.ahead = np.zeros((S, C), np.uint8)  # rows to its next observation
        self.written = np.zeros(S, np.int64)  # rows ever written to each stream
        self.last: list[np.ndarray | None] = [None] * S  # each stream's newest row, whole
        self.open = np.zeros(S, bool)  # its newest row is a rollout's last obs, awaiting its step
        self.keys: dict[tuple[int, int], int] = {}  # (actor, env) -> stream
        self.stored = 0  # transitions in the rings now
        self.total = 0  # transitions ever inserted
        self._rng = np.random.default_rng(seed)

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        return self.stored

    @property
    def total_inserted(self) -> int:
        return self.total

    @property
    def bytes_per_transition(self) -> int:
        return frame_row_bytes(
            self.obs_shape, self.obs_dtype, self.action_shape, self.action_dtype, self.stack
        )

    @property
    def nbytes(self) -> int:
        return self.frames.nbytes + sum(getattr(self, f).nbytes for f in META)

    # ------------------------------------------------------------------ writing
    def _stream(self, actor: int, env: int) -> int:
        key = (actor, env)
        if key not in self.keys:
            if len(self.keys) == self.streams:
                raise ValueError(f"replay: more than {self.streams} actor envs")
            self.keys[key] = len(self.keys)
        return self.keys[key]

    def _continues(self, s: int, obs: np.ndarray) -> bool:
        """Whether ``obs`` is the frame stack after stream ``s``'s newest row."""
        last = self.last[s]
        if last is None:
            return False
        if self.stack == 1:
            return True
        return bool(np.array_equal(obs[:-1], last[1:]))

    def _write(self, s: int, obs: np.ndarray) -> int:
        """Write ``obs`` as stream ``s``'s next row, no transition's start yet; returns its
        absolute row number."""
        r = int(self.written[s])
        p = r % self.rows
        if r >= self.rows and self.valid[s, p]:
            self.stored -= 1  # the transition overwritten
        if self._continues(s, obs):
            prev = (r - 1) % self.rows
            depth = min(int(self.depth[s, prev]) + 1, self.stack - 1)
            pad_zero = bool(self.pad_zero[s, prev])
        else:
            depth, pad_zero = 0, self._padding(obs)
        self.frames[s, p] = obs[-1] if self.stack > 1 else obs
        self.depth[s, p], self.pad_zero[s, p], self.valid[s, p] = depth, pad_zero, False
        self.last[s] = np.array(obs)
        self.written[s] = r + 1
        return r

    def _padding(self, obs: np.ndarray) -> bool:
        """A chain's first stack: True if padded with zeros, False if its first frame repeats."""
        if self.stack == 1:
            return False
        older = obs[:-1]
        if np.all(older == obs[-1]):
            return False
        if not older.any():
            return True
        raise ValueError(
            "replay: a frame stack that neither continues the previous one nor starts with "
            "padding; these observations are not stacked frames (use the transitions layout)"
        )

    def add_slots(self, slots: list[Any]) -> None:
        """Insert the transitions of filled rollout slots, stream by stream."""
        for slot in slots:
            T, K = slot.rewards.shape
            if self.n_step == 1:
                reward = slot.rewards
                last = np.repeat(np.arange(T)[:, None], K, 1)
            else:
                reward, _, last = nstep_window(
                    slot.rewards, slot.terminated, slot.truncated, self.n_step, self.gamma
                )
            done = slot.terminated | slot.truncated
            for k in range(K):
                self._add_stream(slot, k, int(slot.actor[0]), reward[:, k], last[:, k], done[:, k])

    def _add_stream(self, slot, k, actor, reward, last, done) -> None:
        s = self._stream(actor, k)
        obs = slot.obs[:, k]
        T = len(reward)
        rows = np.empty(T + 1, np.int64)
        if self.open[s] and np.array_equal(obs[0], self.last[s]):
            rows[0] = self.written[s] - 1  # the stream goes on from its open row
        else:  # a new stream, or a broken one (the open row ends its last transition)
            rows[0] = self._write(s, obs[0])
        for t in range(T):
            p = rows[t] % self.rows
            self.action[s, p] = slot.actions[t, k]
            self.reward[s, p] = reward[t]
            self.valid[s, p] = True
            self.stored += 1
            if done[t]:
                final = slot.final_obs[t, k]
                if not np.array_equal(final, obs[t + 1]):  # a reset followed: keep the last
                    self._write(s, final)
            rows[t + 1] = self._write(s, obs[t + 1])
        self.open[s] = True
        for t in range(T):
            p = rows[t] % self.rows
            e = last[t]
            self.terminated[s, p] = slot.terminated[e, k]
            self.truncated[s, p] = slot.truncated[e, k] and done[e]
            self.ahead[s, p] = rows[e] + 1 - rows[t]
        self.total += T

    # ------------------------------------------------------------------ reading
    def draw_indices(self, batch_size: int) -> np.ndarray:
        """``(stream, row)`` of ``batch_size`` transitions drawn uniformly (with replacement)
        from those whose rows are all still in the rings."""
        if self.stored == 0:
            raise ValueError("cannot sample from an empty FrameReplay: add_slots first")
        lo = np.maximum(self.written - self.rows, 0)
        span = (self.written - lo).astype(np.float64)
        out = np.empty((0, 2), np.int64)
        while len(out) < batch_size:
            n = 2 * (batch_size - len(out))
            s = self._rng.choice(self.streams, size=n, p=span / span.sum())
            r = lo[s] + (self._rng.random(n) * span[s]).astype(np.int64)
            p = r % self.rows
            ok = (
                self.valid[s, p]
                & (r + self.ahead[s, p] < self.written[s])
                & (r - self.depth[s, p] >= lo[s])
            )
            out = np.concatenate([out, np.stack([s[ok], r[ok]], 1)])
        return out[:batch_size]

    def _stacks(self, s: np.ndarray, r: np.ndarray) -> np.ndarray:
        """The observations of rows ``r`` of streams ``s``, rebuilt."""
        if self.stack == 1:
            return self.frames[s, r % self.rows]
        back = np.arange(self.stack - 1, -1, -1)  # oldest frame first
        depth = self.depth[s, r % self.rows].astype(np.int64)
        rows = r[:, None] - np.minimum(back[None, :], depth[:, None])
        out = self.frames[s[:, None], rows % self.rows]
        zero = self.pad_zero[s, r % self.rows][:, None] & (back[None, :] > depth[:, None])
        out[zero] = 0
        return out

    def take(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        s, r = idx[:, 0], idx[:, 1]
        p = r % self.rows
        out = {
            "obs": self._stacks(s, r),
            "action": self.action[s, p],
            "reward": self.reward[s, p],
            "next_obs": self._stacks(s, r + self.ahead[s, p]),
            "terminated": self.terminated[s, p],
            "truncated": self.truncated[s, p],
        }
        if self.n_step > 1:
            out["steps"] = self.ahead[s, p]  # without resets inside, rows ahead = steps
        return out

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        """The rings as they are (views: serialise before the next insert)."""
        return {
            "layout": [*self.obs_shape, self.stack, self.streams, self.rows],
            "frames": self.frames,
            **{f: getattr(self, f) for f in META},
            "written": self.written,
            "last": [np.zeros(0) if x is None else x for x in self.last],
            "open": self.open,
            "keys": [[a, e, s] for (a, e), s in self.keys.items()],
            "counts": [self.stored, self.total],
            "rng_state": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        layout = [*self.obs_shape, self.stack, self.streams, self.rows]
        if list(_numpy(state["layout"]).tolist()) != layout:
            raise ValueError(f"load_state_dict: layout {state['layout']} here is {layout}")
        self.frames[...] = _numpy(state["frames"])
        for f in META:
            getattr(self, f)[...] = _numpy(state[f])
        self.written[...] = _numpy(state["written"])
        self.last = [None if len(x) == 0 else _numpy(x).copy() for x in state["last"]]
        self.keys = {(int(a), int(e)): int(s) for a, e, s in state["keys"]}
        self.stored, self.total = (int(x) for x in state["counts"])
        if "open" in state:
            self.open[...] = _numpy(state["open"])
        else:  # saved before open rows: a stream's observation after its rollout becomes one
            self.open[...] = False
            for s, pending in enumerate(state["pending"]):
                if len(pending):
                    self._write(s, _numpy(pending))
                    self.open[s] = True
        self._rng.bit_generator.state = state["rng_state"]


def _numpy(value: Any) -> np.ndarray:
    """An array as saved: a checkpoint gives numpy arrays back as tensors."""
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)
