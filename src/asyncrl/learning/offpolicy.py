"""What off-policy algorithms (SAC, DQN) share before any learning: their replay settings and
the checks on them, the replay buffer's memory, and the final observation an actor records at
every episode end (the learner they share is :mod:`asyncrl.learning.replay_learner`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from asyncrl import system
from asyncrl.config import Hyperparameters, need, preset_setting, setting
from asyncrl.core import SlotField

if TYPE_CHECKING:
    from asyncrl.config import Settings


@dataclass
class ReplaySettings(Hyperparameters):
    replay_ratio: float = preset_setting(1.0, "gradient steps per env step, independent of N and K")
    ratio_tolerance: float = setting(
        0.0, "async: how far (in gradient steps) either side may run ahead (0: auto)"
    )
    learning_starts: int = preset_setting(
        1000, "transitions collected before updates start (SAC acts at random meanwhile)"
    )
    batch_size: int = setting(256, "transitions per gradient step")
    buffer_size: int = preset_setting(
        1_000_000,
        "replay capacity in transitions (a preset's is reduced to what fits in memory; a "
        "given one is refused if it does not fit)",
    )
    save_replay: bool = setting(
        False, "store the replay buffer in checkpoints (resume with its data)"
    )
    replay_layout: str = setting(
        "auto",
        "how transitions are stored: transitions (observation and next observation each), "
        "frames (each image frame once, stacks and next observations rebuilt from the stream), "
        "or auto (frames for image observations, stacked or not)",
        choices=("auto", "transitions", "frames"),
    )


REPLAY_DERIVED = {"ratio_tolerance": 0}
REPLAY_FIXED_ON_RESUME = ("buffer_size", "replay_layout")
# of the memory available, what a preset's replay buffer may take: half, so that the run's
# processes (each with torch), its slots, evaluation and the rest of the machine keep the other
MEMORY_SHARE = 0.5


def insert_batch(cfg: Settings) -> int:
    """Transitions an async learner inserts into the replay buffer at once: its batch of
    ``rollouts_per_batch`` rollouts (the rate limiter's largest insert; sync has 1)."""
    return cfg.envs_per_actor * cfg.rollout * cfg.rollouts_per_batch


def validate_replay(cfg: Settings, algo: str) -> None:
    need(cfg.replay_ratio > 0, f"replay_ratio: must be > 0, got {cfg.replay_ratio}")
    need(cfg.batch_size >= 1, f"batch_size: must be >= 1, got {cfg.batch_size}")
    need(cfg.buffer_size >= 1, f"buffer_size: must be >= 1, got {cfg.buffer_size}")
    need(
        cfg.batch_size <= cfg.buffer_size,
        f"batch_size: {cfg.batch_size} is larger than the replay capacity buffer_size "
        f"{cfg.buffer_size}",
    )
    need(cfg.learning_starts >= 1, f"learning_starts: must be >= 1, got {cfg.learning_starts}")
    need(
        cfg.learning_starts <= cfg.buffer_size,
        f"learning_starts: {cfg.learning_starts} transitions do not fit in buffer_size "
        f"{cfg.buffer_size}",
    )
    need(
        not cfg.hogwild or cfg.rollout == 1,
        f"rollout: a Hogwild! worker's {algo.upper()} loop updates after every batched env step, "
        f"so rollout must be 1, got {cfg.rollout}",
    )
    need(
        not (cfg.hogwild and cfg.save_replay),
        "save_replay: Hogwild! workers keep their own replay buffers, which checkpoints do not "
        "store; leave --save-replay off",
    )
    if cfg.hogwild:
        return  # a worker's own loop is sync, with its own rollout (checked on its config)
    need_window = max(1.0, cfg.replay_ratio * insert_batch(cfg))
    need(
        cfg.ratio_tolerance >= need_window,
        f"ratio_tolerance: {cfg.ratio_tolerance} gradient steps is too narrow for inserts of "
        f"{insert_batch(cfg)} transitions at replay_ratio {cfg.replay_ratio}: it must be >= "
        f"{need_window:g} or neither side can make progress",
    )


def derived_replay(cfg: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if cfg.log_every == 0:
        # an iteration is one batched env step: a row each would be a line per env step
        per_iteration = max(cfg.actors * cfg.envs_per_actor * cfg.rollout, 1)
        out["log_every"] = -(-1_000 // per_iteration)
    if cfg.ratio_tolerance == 0:
        # twice the narrowest window that can make progress (see RateLimiter)
        out["ratio_tolerance"] = 2.0 * max(1.0, cfg.replay_ratio * insert_batch(cfg))
    return out


def replay_bytes(cfg: Settings, spec: Any) -> int:
    """Bytes one stored transition takes, as the replay of this run lays it out."""
    from asyncrl.replay import bytes_per_transition

    return bytes_per_transition(cfg, spec)


def replay_buffers(cfg: Settings) -> int:
    """Replay buffers of ``buffer_size`` a run fills: one per learner, each keeping its own --
    a population's policies', or Hogwild! workers'."""
    return cfg.hogwild or cfg.policies


def _each(cfg: Settings) -> str:
    """What the buffers are, where there are several (for the memory lines)."""
    n = replay_buffers(cfg)
    if n == 1:
        return ""
    if cfg.hogwild:
        return f" in each of {n} Hogwild! workers' replay buffers (hogwild {n})"
    return f" in each of {n} policies' replay buffers (policies {n})"


def fit_replay(
    cfg: Settings, spec: Any, given: Settings | None
) -> tuple[dict[str, Any], list[str]]:
    """The replay buffers are allocated whole, up front, one per learner: a given
    ``buffer_size`` whose buffers do not fit in the memory available together is refused; a
    preset's is reduced to what fits, with a line."""
    per = replay_bytes(cfg, spec)
    n = replay_buffers(cfg)
    need_bytes = per * cfg.buffer_size * n
    avail, source = system.available_memory()
    if need_bytes <= avail:
        return {}, []
    what = (
        f"{cfg.buffer_size:,} transitions of {per:,} B{_each(cfg)} need {need_bytes:,} B "
        f"({need_bytes / 1e9:,.2f} GB) of memory; {avail:,} B ({avail / 1e9:,.2f} GB) is "
        f"available ({source})"
    )
    fewer = "" if n == 1 else f" or --{'hogwild' if cfg.hogwild else 'policies'}"
    need(
        given is not None and given.buffer_size is None,
        f"buffer_size: {what}: lower --buffer-size{fewer}",
    )
    fits = int(MEMORY_SHARE * avail) // (per * n)
    need(
        fits >= max(cfg.learning_starts, cfg.batch_size),
        f"buffer_size: {what}; the {fits:,} that fit are fewer than learning_starts "
        f"{cfg.learning_starts:,}: free memory or lower --learning-starts{fewer}",
    )
    line = (
        f"asyncrl: buffer_size {cfg.buffer_size:,} -> {fits:,}: {what}, so the preset's "
        f"{'buffers take' if n > 1 else 'buffer takes'} {MEMORY_SHARE:.0%} of it "
        "(--buffer-size sets it)"
    )
    return {"buffer_size": fits}, [line]


def replay_note(cfg: Settings, spec: Any) -> str:
    """The replay's part of the start-up memory line; for the frame layout, also what the
    whole-observation layout would take."""
    from asyncrl.replay import action_dtype, layout, transition_bytes

    per = replay_bytes(cfg, spec)
    note = (
        f"replay {per:,} B per transition, {per * cfg.buffer_size / 1e9:,.2f} GB for "
        f"buffer_size {cfg.buffer_size:,}"
    )
    n = replay_buffers(cfg)
    if n > 1:
        note += f"{_each(cfg)}, {n * per * cfg.buffer_size / 1e9:,.2f} GB in all"
    if layout(cfg, spec) == "frames":
        whole = transition_bytes(
            spec.obs_shape, spec.obs_dtype, spec.action_shape, action_dtype(spec)
        )
        note += f" (each frame stored once; {whole:,} B with whole observations)"
    return note


# ------------------------------------------------------------------------------ acting
def slot_fields(spec: Any, rollout: int, num_envs: int) -> tuple[SlotField, ...]:
    """The final observation of every episode that ended: the replay's ``next_obs`` there, since
    the next row already holds the reset observation."""
    return (("final_obs", (rollout, num_envs, *spec.obs_shape), spec.obs_dtype),)


class FinalObsActing:
    """Records the final observation of every episode that ends; subclasses act."""

    module: Any

    def start_rollout(self, slot: Any, version: int) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}  # nothing carries over between rollouts

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def episodes_ended(
        self, slot: Any, t: int, ended: np.ndarray, truncated: np.ndarray, final_obs: Any
    ) -> None:
        for i in ended:
            slot.final_obs[t, i] = final_obs[i]


class ReplayAlgorithm:
    """What off-policy algorithms answer alike (see ``core.Algorithm``): settings derived from
    the replay's, a buffer fitted to memory, the replay in the memory line, and a slot field
    for every episode's final observation. SAC and DQN subclass it."""

    def switch_values(self, cfg: Settings, filled: frozenset[str]) -> tuple[str, dict[str, Any]]:
        return "", {}  # no switch of theirs derives other settings

    fixed_on_resume = REPLAY_FIXED_ON_RESUME
    derive_markers = REPLAY_DERIVED
    masked_slots = False  # the replay takes whole slots

    def derived(self, cfg: Settings) -> dict[str, Any]:
        return derived_replay(cfg)

    def for_env(
        self, cfg: Settings, spec: Any, given: Settings | None
    ) -> tuple[dict[str, Any], list[str]]:
        return fit_replay(cfg, spec, given)

    def slot_fields(
        self, spec: Any, rollout: int, num_envs: int, cfg: Settings | None = None
    ) -> tuple[SlotField, ...]:
        return slot_fields(spec, rollout, num_envs)

    def memory_note(self, cfg: Settings, spec: Any) -> str | None:
        return replay_note(cfg, spec)
