"""A fixed-capacity ring of transitions for off-policy learners.

Storage is preallocated once, so memory use is known up front (``nbytes``) and never grows during a
run; observations keep the env's own dtype (uint8 pixels stay uint8: four times smaller than
float32), unless the caller explicitly asks for another one by passing it as ``obs_dtype``.
``next_obs`` is stored separately rather than derived from the following slot because vector envs
autoreset: the observation after a final step is ``info["final_obs"]``, not the next row's ``obs``.

The buffer is not thread-safe: whoever shares it between threads or processes serialises access.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
# what one transition holds besides its observations and action
REWARD_DTYPE = np.dtype(np.float32)
FLAG_DTYPE = np.dtype(np.bool_)


def transition_bytes(
    obs_shape: tuple[int, ...],
    obs_dtype: np.dtype | type | str,
    action_shape: tuple[int, ...],
    action_dtype: np.dtype | type | str = np.float32,
) -> int:
    """Bytes one transition takes (obs and next_obs, action, reward, two flags), known before
    any buffer is made."""
    obs = int(np.prod(obs_shape, dtype=np.int64)) * np.dtype(obs_dtype).itemsize
    act = int(np.prod(action_shape, dtype=np.int64)) * np.dtype(action_dtype).itemsize
    return 2 * obs + act + REWARD_DTYPE.itemsize + 2 * FLAG_DTYPE.itemsize


class ReplayBuffer:
    """Uniform replay over the newest ``capacity`` transitions, oldest overwritten first.

    Slot ``i`` of every array belongs to the same transition. Writes go to consecutive slots
    starting at ``position`` and wrap around, so the stored items in ring order (oldest first) are
    slots ``position, position + 1, ...`` (mod capacity) once full, and ``0 .. len - 1`` before.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: np.dtype | type,
        action_shape: tuple[int, ...],
        action_dtype: np.dtype | type = np.float32,
        seed: int | None = None,
        n_step: int = 1,
        gamma: float = 0.99,
    ) -> None:
        if int(capacity) != capacity or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.action_shape = tuple(int(d) for d in action_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.action_dtype = np.dtype(action_dtype)
        n = self.capacity
        self.obs = np.zeros((n, *self.obs_shape), self.obs_dtype)
        self.action = np.zeros((n, *self.action_shape), self.action_dtype)
        self.reward = np.zeros(n, REWARD_DTYPE)
        self.next_obs = np.zeros((n, *self.obs_shape), self.obs_dtype)
        self.terminated = np.zeros(n, FLAG_DTYPE)
        self.truncated = np.zeros(n, FLAG_DTYPE)
        # n-step transitions: the env steps each spans (its reward sums them, discounted)
        self.n_step, self.gamma = int(n_step), float(gamma)
        self.fields = FIELDS + (("steps",) if self.n_step > 1 else ())
        if self.n_step > 1:
            self.steps = np.zeros(n, np.uint8)
        self._pos = 0  # next slot to write
        self._total = 0  # transitions ever inserted (also counts overwritten ones)
        self._rng = np.random.default_rng(seed)

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        return min(self._total, self.capacity)

    @property
    def total_inserted(self) -> int:
        """Transitions inserted since construction, overwritten ones included."""
        return self._total

    @property
    def position(self) -> int:
        """The slot the next transition goes to (the oldest stored one, once full)."""
        return self._pos

    @property
    def bytes_per_transition(self) -> int:
        """Exact storage cost of one slot, to size ``capacity`` against available memory."""
        return self.transition_bytes(
            self.obs_shape, self.obs_dtype, self.action_shape, self.action_dtype
        )

    # bytes of one transition, before any buffer is made (config checks the total against memory)
    transition_bytes = staticmethod(transition_bytes)

    @property
    def nbytes(self) -> int:
        """Bytes held by the preallocated storage (all ``capacity`` slots, used or not)."""
        return sum(getattr(self, f).nbytes for f in self.fields)

    # ------------------------------------------------------------------ writing
    def add_batch(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        steps: np.ndarray | None = None,
    ) -> None:
        """Insert B transitions (leading axis B), as if one by one in order.

        The batch may wrap around the end of the ring; if B exceeds ``capacity`` only its last
        ``capacity`` transitions survive, exactly as sequential insertion would leave them.
        Values are cast to the storage dtypes only within a kind (float64 -> float32 is allowed,
        float -> uint8 raises), so a wrongly typed observation fails loudly instead of wrapping.
        """
        batch = dict(
            obs=np.asarray(obs),
            action=np.asarray(action),
            reward=np.asarray(reward),
            next_obs=np.asarray(next_obs),
            terminated=np.asarray(terminated),
            truncated=np.asarray(truncated),
        )
        if self.n_step > 1:
            batch["steps"] = np.asarray(steps)
        b = batch["reward"].shape[0] if batch["reward"].ndim else -1
        for name, arr in batch.items():  # validate everything before writing anything
            dst = getattr(self, name)
            want = (b, *dst.shape[1:])
            if arr.shape != want:
                raise ValueError(
                    f"add_batch: {name} has shape {arr.shape}, expected {want} "
                    f"(batch of {b} transitions)"
                )
            if not np.can_cast(arr.dtype, dst.dtype, casting="same_kind"):
                raise TypeError(
                    f"add_batch: {name} of dtype {arr.dtype} cannot be stored as {dst.dtype}"
                )
        if b == 0:
            return
        cap = self.capacity
        start, skip = self._pos, 0
        if b > cap:  # only the last `cap` transitions would survive sequential insertion
            skip = b - cap
            start = (self._pos + skip) % cap
        n = b - skip
        first = min(n, cap - start)  # slots before the wrap
        for name, arr in batch.items():
            dst, src = getattr(self, name), arr[skip:]
            np.copyto(dst[start : start + first], src[:first], casting="same_kind")
            if first < n:
                np.copyto(dst[: n - first], src[first:], casting="same_kind")
        self._pos = (self._pos + b) % cap
        self._total += b

    def add_slots(self, slots: list[Any]) -> None:
        """Insert the transitions of filled rollout slots, each in env order within a step."""
        for slot in slots:
            self.add_batch(**rollout_transitions(slot, self.n_step, self.gamma))

    # ------------------------------------------------------------------ reading
    looks_ahead = True  # draw_indices(upcoming=...) and hits_upcoming are exact

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly with replacement from the stored ones.

        With replacement because that is what the SAC analysis assumes, and it keeps sampling
        O(batch_size) regardless of how full the buffer is. Returns fresh arrays (copies).
        """
        return self.take(self.draw_indices(batch_size))

    def draw_indices(self, batch_size: int, upcoming: int = 0) -> np.ndarray:
        """The slots ``sample`` would read, drawn as if ``upcoming`` more transitions had been
        inserted already: ``sample(b)`` after ``add_batch`` of n equals ``take`` of
        ``draw_indices(b, upcoming=n)`` drawn before it, once the batch is in (same draws of the
        same generator). A learner can so start on a batch before the newest transitions arrive,
        if none of them was drawn (``hits_upcoming``)."""
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        size = min(self._total + int(upcoming), self.capacity)
        if size == 0:
            raise ValueError("cannot sample from an empty ReplayBuffer: add_batch first")
        return self._rng.integers(0, size, size=int(batch_size))

    def hits_upcoming(self, idx: np.ndarray, upcoming: int) -> bool:
        """Whether any of ``idx`` is among the next ``upcoming`` slots written (new data there,
        or, once full, the oldest transitions about to be overwritten)."""
        return bool((((idx - self._pos) % self.capacity) < upcoming).any())

    def take(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions in slots ``idx`` (fresh arrays)."""
        return {f: getattr(self, f).take(idx, axis=0) for f in self.fields}

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to continue with this buffer's data and sampling.

        Array entries are *views* of the live storage, trimmed to the used slots (no copy, which
        matters for buffers of many GB): serialise them before the next ``add_batch``.
        """
        size = len(self)
        return {
            "capacity": self.capacity,
            "obs_shape": self.obs_shape,
            "obs_dtype": self.obs_dtype.str,
            "action_shape": self.action_shape,
            "action_dtype": self.action_dtype.str,
            "position": self._pos,
            "total_inserted": self._total,
            "rng_state": self._rng.bit_generator.state,
            **{f: getattr(self, f)[:size] for f in self.fields},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from ``state_dict()``; the layout (capacity, shapes, dtypes) must match."""
        layout = {
            "capacity": self.capacity,
            "obs_shape": self.obs_shape,
            "obs_dtype": self.obs_dtype.str,
            "action_shape": self.action_shape,
            "action_dtype": self.action_dtype.str,
        }
        for key, mine in layout.items():
            theirs = state[key]
            if isinstance(mine, tuple):
                theirs = tuple(theirs)
            if theirs != mine:
                raise ValueError(
                    f"load_state_dict: {key} is {theirs!r} in the saved state but {mine!r} here"
                )
        total, pos = int(state["total_inserted"]), int(state["position"])
        size = min(total, self.capacity)
        if pos != total % self.capacity:
            raise ValueError(
                f"load_state_dict: position {pos} inconsistent with total_inserted {total}"
            )
        for f in self.fields:
            src = np.asarray(state[f])
            dst = getattr(self, f)
            if src.shape != (size, *dst.shape[1:]):
                raise ValueError(
                    f"load_state_dict: {f} has shape {src.shape}, expected {(size, *dst.shape[1:])}"
                )
            dst[:size] = src
            dst[size:] = 0
        self._pos, self._total = pos, total
        self._rng.bit_generator.state = state["rng_state"]


def nstep_window(
    rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, n: int, gamma: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each step t of a [T, K] rollout, the n-step window that starts there and stays
    inside the rollout and the episode: its discounted reward sum, the steps it spans (<= n;
    fewer where the rollout or the episode ends first) and the row of its last step."""
    T, K = rewards.shape
    total = np.zeros((T, K), np.float64)
    steps = np.zeros((T, K), np.int64)
    alive = np.ones((T, K), bool)
    done = terminated | truncated
    for j in range(min(n, T)):
        open_ = alive[: T - j]
        total[: T - j] += np.where(open_, gamma**j * rewards[j:], 0.0)
        steps[: T - j] += open_
        alive[: T - j] &= ~done[j:]
        alive[T - j - 1 :] = False  # windows that reached the rollout's end stop there
    last = np.arange(T)[:, None] + steps - 1
    return total.astype(np.float32), steps, last


def rollout_transitions(slot: Any, n_step: int = 1, gamma: float = 0.99) -> dict[str, np.ndarray]:
    """A slot's transitions, flat in (step, env) order; ``next_obs`` is the following row, or the
    final observation where the episode ended. With ``n_step`` > 1 each transition spans up to
    n steps within the rollout (``steps``), its reward their discounted sum."""
    T, K = slot.rewards.shape
    cols = np.arange(K)[None, :]
    if n_step == 1:
        reward, steps, last = slot.rewards, None, np.arange(T)[:, None].repeat(K, 1)
    else:
        reward, steps, last = nstep_window(
            slot.rewards, slot.terminated, slot.truncated, n_step, gamma
        )
    done = (slot.terminated | slot.truncated)[last, cols]
    obs_shape = slot.obs.shape[2:]
    where = done.reshape(T, K, *([1] * len(obs_shape)))
    next_obs = np.where(where, slot.final_obs[last, cols], slot.obs[last + 1, cols])
    out = {
        "obs": slot.obs[:-1].reshape(-1, *obs_shape),
        "action": slot.actions.reshape(T * K, *slot.actions.shape[2:]),
        "reward": np.ascontiguousarray(reward).reshape(-1),
        "next_obs": next_obs.reshape(-1, *obs_shape),
        "terminated": slot.terminated[last, cols].reshape(-1),
        "truncated": (slot.truncated[last, cols] & done).reshape(-1),
    }
    if steps is not None:
        out["steps"] = steps.reshape(-1).astype(np.uint8)
    return out
