"""DQN's hyperparameters (each field a flag of ``asyncrl train``; the replay's are shared with
the other off-policy algorithms), its presets per env family, and what it refuses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asyncrl.config import need, preset_setting, setting
from asyncrl.learning.offpolicy import ReplaySettings, validate_replay

if TYPE_CHECKING:
    from asyncrl.config import Settings


@dataclass
class DQNConfig(ReplaySettings):
    lr: float = preset_setting(2.5e-4, "Adam learning rate")
    lr_schedule: str = setting(
        "constant", "learning-rate schedule over total_steps", choices=("constant", "linear")
    )
    gamma: float = preset_setting(0.99, "discount")
    batch_size: int = preset_setting(128, "transitions per gradient step")
    target_every: int = preset_setting(
        500, "env steps between copies of the online network into the target network"
    )
    tau: float = setting(1.0, "fraction of the online network each target update takes (1: copy)")
    epsilon_start: float = setting(1.0, "exploration: probability of a random action at first")
    epsilon_end: float = preset_setting(0.05, "exploration: the probability it ends at")
    exploration_fraction: float = preset_setting(
        0.5, "fraction of total_steps over which exploration falls linearly to epsilon_end"
    )
    n_step: int = preset_setting(1, "env steps each transition's return sums (within one rollout)")
    double: bool = setting(True, "double DQN: the online network picks the next action")
    td_loss: str = preset_setting(
        "huber",
        "loss on the TD error: huber (Nature DQN's, SB3's) or mse (CleanRL's)",
        choices=("huber", "mse"),
    )
    max_grad_norm: float = setting(10.0, "clip the global gradient norm to this (0: off)")


# classic (and generic, box2d): CleanRL's dqn.py (120-84 network, 10k buffer, learning from 10k
# steps, a gradient step per 10 env steps, target copy every 500); atari: CleanRL's dqn_atari.py
# (Nature CNN,
# 1M buffer, lr 1e-4, a gradient step per 4 env steps, target copy every 1,000, exploration to
# 0.01 over the first 10% of 10M steps, learning from 80k), as pixels. mujoco's only completes
# the table: MuJoCo actions are continuous, which DQN refuses.
_CLEANRL_CLASSIC: dict[str, Any] = {
    "lr": 2.5e-4,
    "gamma": 0.99,
    "batch_size": 128,
    "buffer_size": 10_000,
    "learning_starts": 10_000,
    "replay_ratio": 0.1,
    "target_every": 500,
    "td_loss": "mse",
    "epsilon_end": 0.05,
    "exploration_fraction": 0.5,
    "rollout": 1,
    "hidden": [120, 84],
    "total_steps": 500_000,
}
_CLEANRL_ATARI: dict[str, Any] = {
    "lr": 1e-4,
    "gamma": 0.99,
    "batch_size": 32,
    "buffer_size": 1_000_000,
    "learning_starts": 80_000,
    "replay_ratio": 0.25,
    "target_every": 1000,
    "td_loss": "mse",
    "epsilon_end": 0.01,
    "exploration_fraction": 0.1,
    "rollout": 1,
    "hidden": [512],
    "threads_learner": 0,
    "total_steps": 10_000_000,
}
PRESETS: dict[str, dict[str, Any]] = {
    "generic": dict(_CLEANRL_CLASSIC),
    "classic": dict(_CLEANRL_CLASSIC),
    "box2d": dict(_CLEANRL_CLASSIC),
    "mujoco": dict(_CLEANRL_CLASSIC),
    "atari": dict(_CLEANRL_ATARI),
    "pixels": dict(_CLEANRL_ATARI),
    "game": dict(_CLEANRL_CLASSIC),  # its generic values (no game screened for DQN)
}
# Values tuned on one env, per family: auto gives them to that env alone (docs, Guides:
# presets). CartPole's: RL Zoo's tuned DQN for CartPole-v1 with CleanRL's squared error, a rate
# falling to 0 and 3-step returns on rollouts of 4, at the 100k steps where they solve it in
# both modes (docs, benchmarks/dqn and defaults-generality); 2 actors x 4 envs as measured.
TUNED: dict[str, tuple[str, dict[str, Any]]] = {
    "classic": (
        "CartPole-v1",
        {
            "lr": 2.3e-3,
            "lr_schedule": "linear",
            "batch_size": 64,
            "buffer_size": 100_000,
            "learning_starts": 1_000,
            "replay_ratio": 0.5,
            "target_every": 256,
            "epsilon_end": 0.01,
            "exploration_fraction": 0.16,
            "envs_per_actor": 4,
            "rollout": 4,
            "n_step": 3,
            "hidden": [256, 256],
            "total_steps": 100_000,
        },
    ),
    # RL Zoo's tuned DQN for LunarLander (its v2 entry: 4 gradient steps of 128 per 4 env steps,
    # 50k buffer, target copy every 250, epsilon to 0.1 over 12%, 256-256, Huber), learning
    # from one batch where RL Zoo starts at 0 (docs, benchmarks: defaults-generality, DQN rows)
    "box2d": (
        "LunarLander-v3",
        {
            "lr": 6.3e-4,
            "batch_size": 128,
            "buffer_size": 50_000,
            "learning_starts": 128,
            "replay_ratio": 1.0,
            "target_every": 250,
            "epsilon_end": 0.1,
            "exploration_fraction": 0.12,
            "hidden": [256, 256],
            "td_loss": "huber",
            "total_steps": 100_000,
        },
    ),
}


def agree(cfg: Settings, filled: frozenset[str]) -> dict[str, Any]:
    """Values in ``filled`` (a preset's, not the user's) that would contradict a setting given:
    a Hogwild! worker (whose loop is sync) steps with rollouts of 1; sync DQN with 1-step
    returns and rollouts as long as computes what rollouts of 1 do (:func:`update_rollout`);
    async DQN with 1-step returns at least that long (one hand-over per gradient step, not one
    per env step); a transition's return sums steps of one rollout."""
    out: dict[str, Any] = {}
    rollout, sync = cfg.rollout, cfg.mode == "sync" and not cfg.hogwild
    # sync: n-step returns filled would change with the rollout derived (n_step 1 below)
    n_step = 1 if sync and "n_step" in filled else cfg.n_step
    if "rollout" in filled and cfg.hogwild and rollout != 1:
        out["rollout"] = rollout = 1
    elif "rollout" in filled and not cfg.hogwild and (sync or n_step == 1):
        # sync: exactly that rollout; async: at least it (a hand-over per gradient step)
        steps = update_rollout(cfg) if n_step == 1 else 1
        if steps > rollout or (sync and steps != rollout):
            out["rollout"] = rollout = steps
    if "n_step" in filled and min(n_step, rollout) != cfg.n_step:
        out["n_step"] = min(n_step, rollout)
    return out


def update_rollout(cfg: Settings) -> int:
    """The longest rollout that in sync mode computes exactly what rollouts of one step do
    (async takes it as its least: a hand-over per gradient step, not per env step): with one
    actor and one policy, each gradient step falls due every P batched env steps (P = 1 /
    (replay_ratio x envs_per_actor), a whole number), the first one P steps after the warm-up;
    a rollout of T steps, T dividing P, the warm-up's steps and the budget's, ends exactly
    where each update falls due, and acts T steps with one version as the single steps did
    (CleanRL's dqn.py: a gradient step per 10 env steps, rollouts of 10). Else 1."""
    from fractions import Fraction
    from math import gcd

    if cfg.actors != 1 or cfg.policies != 1 or cfg.envs_per_actor < 1:
        return 1  # several actors' rollouts would enter the replay in another order
    from asyncrl.envs.registry import is_pettingzoo

    if is_pettingzoo(cfg.env):
        return 1  # a game's seat transitions span rollouts
    K = cfg.envs_per_actor
    period = 1 / (Fraction(repr(float(cfg.replay_ratio))) * K)
    if period.denominator != 1 or period <= 1:
        return 1
    return gcd(int(period), -(-cfg.learning_starts // K), -(-cfg.total_steps // K))


def validate(cfg: Settings) -> None:
    validate_replay(cfg, "dqn")
    need(cfg.lr > 0, f"lr: must be > 0, got {cfg.lr}")
    need(0 <= cfg.gamma <= 1, f"gamma: must be in [0, 1], got {cfg.gamma}")
    need(cfg.target_every >= 1, f"target_every: must be >= 1, got {cfg.target_every}")
    need(0 < cfg.tau <= 1, f"tau: must be in (0, 1], got {cfg.tau}")
    for name in ("epsilon_start", "epsilon_end", "exploration_fraction"):
        value = getattr(cfg, name)
        need(0 <= value <= 1, f"{name}: must be in [0, 1], got {value}")
    need(1 <= cfg.n_step <= 255, f"n_step: must be in 1..255, got {cfg.n_step}")
    # a transition's return sums steps of one rollout: past its end n_step would do nothing
    need(
        cfg.n_step <= cfg.rollout,
        f"n_step: {cfg.n_step}-step returns sum steps within one rollout of {cfg.rollout}; "
        "set rollout >= n_step or n_step 1",
    )
    need(cfg.max_grad_norm >= 0, f"max_grad_norm: must be >= 0, got {cfg.max_grad_norm}")


def epsilon(cfg: Settings, env_steps: int) -> float:
    """The exploration probability at ``env_steps``: linear from epsilon_start to epsilon_end
    over exploration_fraction x total_steps, then epsilon_end."""
    span = cfg.exploration_fraction * cfg.total_steps
    if span <= 0:
        return cfg.epsilon_end
    frac = min(env_steps / span, 1.0)
    return cfg.epsilon_start + frac * (cfg.epsilon_end - cfg.epsilon_start)
