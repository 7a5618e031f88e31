"""Replay for off-policy learners: rings of transitions and the rate limiter that holds the
replay ratio (gradient steps per env step)."""

from __future__ import annotations

from typing import Any

from asyncrl.replay.buffer import ReplayBuffer, transition_bytes


def action_dtype(spec: Any) -> str:
    return "int64" if spec.discrete else "float32"


def bytes_per_transition(spec: Any) -> int:
    """Bytes one transition takes in the replay :func:`make_replay` gives an env of ``spec``."""
    return transition_bytes(spec.obs_shape, spec.obs_dtype, spec.action_shape, action_dtype(spec))


def make_replay(
    cfg: Any, spec: Any, seed: int | None = None, n_step: int = 1, gamma: float = 0.99
) -> Any:
    """The replay buffer of ``cfg.buffer_size`` transitions for an env of ``spec``."""
    return ReplayBuffer(
        cfg.buffer_size,
        spec.obs_shape,
        spec.obs_dtype,
        spec.action_shape,
        action_dtype(spec),
        seed=seed,
        n_step=n_step,
        gamma=gamma,
    )
