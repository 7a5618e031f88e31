"""SAC's hyperparameters (each field a flag of ``asyncrl train``; the replay's are shared with
the other off-policy algorithms), its presets per env family, and what it refuses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asyncrl.config import Warmup, need, preset_setting, setting
from asyncrl.learning.offpolicy import ReplaySettings, validate_replay

if TYPE_CHECKING:
    from asyncrl.config import Settings


@dataclass
class SACConfig(ReplaySettings):
    gamma: float = preset_setting(0.99, "discount")
    tau: float = setting(0.005, "Polyak factor of the target networks")
    policy_lr: float = setting(3e-4, "actor and temperature learning rate")
    q_lr: float = setting(3e-4, "critic learning rate")
    target_entropy: float = setting(
        0.0, "the temperature's target entropy (0: minus the action dimensions, saved resolved)"
    )
    # declared so that a run asking for them is told why SAC has none
    norm_obs: bool = preset_setting(False, "running normalisation of observations")
    norm_reward: bool = preset_setting(
        False, "divide rewards by the running std of the discounted return"
    )


# SAC as SB3 and CleanRL run it (gamma 0.99, 256x256, one update per env step) in every family,
# with one actor of one env: the learner's update bounds SAC's speed at replay ratio 1, so more
# envs only make the acting policy older (with 8, each actor's 8 transitions wait for 8 updates)
# and leave more episodes unfinished; CleanRL's 5,000 random warm-up steps, cut to 1% of a
# shorter run's budget, and on classic control SB3's 100 (RL Zoo's tuned Pendulum keeps it, its
# MountainCarContinuous has 0; CleanRL's 5,000 would be a tenth or more of those runs). SAC's
# observations and rewards are not normalised in any family (its replay keeps raw ones; CleanRL
# and SB3 do not normalise for SAC either).
GENERIC: dict[str, Any] = {
    "gamma": 0.99,
    "actors": 1,
    "rollout": 1,
    "envs_per_actor": 1,
    "hidden": [256, 256],
    "learning_starts": Warmup(5000),
    "norm_obs": False,
    "norm_reward": False,
    "total_steps": 1_000_000,
}
PRESETS: dict[str, dict[str, Any]] = {
    "generic": dict(GENERIC),
    "classic": {**GENERIC, "learning_starts": Warmup(100), "total_steps": 150_000},
    "box2d": dict(GENERIC),
    "mujoco": dict(GENERIC),
    # ALE actions are discrete, which SAC refuses: the table only completes the presets
    "atari": dict(GENERIC),
    "pixels": dict(GENERIC),
    "game": dict(GENERIC),  # masked discrete actions, which SAC refuses: completes the presets
}
TUNED: dict[str, tuple[str, dict[str, Any]]] = {}


def target_entropy(value: float, n_actions: int) -> float:
    """The temperature's target entropy a ``target_entropy`` setting means: 0 is minus the
    action dimensions (wherever the value comes from: the config, a policy's own, PBT's)."""
    return float(value) if value else -float(n_actions)


def validate(cfg: Settings) -> None:
    need(
        not cfg.norm_obs,
        "norm_obs: SAC here has no observation normaliser (its replay buffer keeps raw "
        "observations, and CleanRL's and SB3's SAC defaults learn MuJoCo without one); leave "
        "--norm-obs off",
    )
    need(
        not cfg.norm_reward,
        "norm_reward: SAC replays rewards collected under many policy versions, so a scale "
        "that moves would have to be applied when they are sampled, which this SAC does not "
        "do (CleanRL and SB3 SAC do not scale rewards); leave --norm-reward off",
    )
    validate_replay(cfg, "sac")
    need(0 <= cfg.gamma <= 1, f"gamma: must be in [0, 1], got {cfg.gamma}")
    need(0 < cfg.tau <= 1, f"tau: must be in (0, 1], got {cfg.tau}")
    need(cfg.policy_lr > 0, f"policy_lr: must be > 0, got {cfg.policy_lr}")
    need(cfg.q_lr > 0, f"q_lr: must be > 0, got {cfg.q_lr}")
