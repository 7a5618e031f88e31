"""Replay for off-policy learners: rings of transitions (whole observations, or image frames
stored once) and the rate limiter that holds the replay ratio (gradient steps per env step)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asyncrl.envs.spec import is_image
from asyncrl.replay.buffer import ReplayBuffer, transition_bytes
from asyncrl.replay.frames import FrameReplay, frame_row_bytes

if TYPE_CHECKING:
    from asyncrl.config import Settings


def action_dtype(spec: Any) -> str:
    return "int64" if spec.discrete else "float32"


def layout(cfg: Settings, spec: Any) -> str:
    """``transitions`` or ``frames`` (see ``--replay-layout``; auto: frames for image
    observations, stacked or not, so that each is stored once)."""
    if cfg.replay_layout == "auto":
        return "frames" if is_image(spec) else "transitions"
    return cfg.replay_layout


def bytes_per_transition(cfg: Settings, spec: Any) -> int:
    """Bytes one transition takes in the replay :func:`make_replay` gives the run."""
    if layout(cfg, spec) == "frames":
        return frame_row_bytes(
            spec.obs_shape, spec.obs_dtype, spec.action_shape, action_dtype(spec),
            spec.frame_stack,
        )  # fmt: skip
    return transition_bytes(spec.obs_shape, spec.obs_dtype, spec.action_shape, action_dtype(spec))


def make_replay(
    cfg: Settings, spec: Any, seed: int | None = None, n_step: int = 1, gamma: float = 0.99
) -> Any:
    """The replay buffer of ``cfg.buffer_size`` transitions for the run's envs."""
    if layout(cfg, spec) == "frames":
        return FrameReplay(
            cfg.buffer_size,
            spec.obs_shape,
            spec.obs_dtype,
            spec.action_shape,
            action_dtype(spec),
            streams=cfg.actors * cfg.envs_per_actor,
            stack=spec.frame_stack,
            seed=seed,
            n_step=n_step,
            gamma=gamma,
        )
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
