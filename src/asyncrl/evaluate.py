"""Evaluate a saved policy: mean and standard deviation of episode returns (``asyncrl eval``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asyncrl.config import ConfigError, need_wandb
from asyncrl.envs.pettingzoo import check_opponent, is_pettingzoo
from asyncrl.policy import load, probe_rendering
from asyncrl.settings import load_run_config

# what a result logs to W&B (with --wandb), under evaluate/<name>: apart from the training's
# evaluations (eval/*), which run other seeds on the checkpoints of their time
LOGGED = ("mean_return", "std_return", "mean_length", "std_length", "episodes")


def evaluate(
    run_dir: str | Path,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int = 10_000,
    checkpoint: str = "latest",
    video: str | Path | None = None,
    policy: int | None = None,
    wandb: bool = False,
    opponent: str | None = None,
) -> dict[str, Any]:
    """Evaluate the policy saved in ``run_dir`` (its ``"latest"`` or ``"best"`` checkpoint) for
    ``episodes`` episodes seeded ``seed``, ``seed + 1``, ...; optionally record them as a GIF at
    ``video``. Returns ``EvalResult.to_dict()`` (episodes, mean and std of returns and lengths,
    and each episode's return and length) and the policy's training env steps. ``policy``: a
    population run's policy i (default: its best). ``wandb``: also log the result, and the
    video, to the run's W&B run (a new one if it has none) at the policy's env steps.
    ``opponent``: a game's (random, the default; lookahead: connect four only; pool: a
    ``--opponents pool`` run's snapshots at the checkpoint); the result then holds
    ``win/draw/loss_rate_vs_<opponent>`` over ``episodes`` games (and ``video`` records
    them, a frame after each game's start and each move)."""
    if wandb:  # before anything runs
        need_wandb()
    if video is not None:  # before this process loads the OpenGL library, which may hang
        cfg = load_run_config(run_dir)
        probe_rendering(cfg.env, cfg.atari_preprocessing)
    if opponent is not None:  # before anything loads
        cfg = load_run_config(run_dir)
        if not is_pettingzoo(cfg.env):
            raise ConfigError(f"opponent: {cfg.env} is a single-agent env, played without one")
        check_opponent(cfg.env, opponent, pool=cfg.opponents == "pool")
    loaded = load(run_dir, checkpoint, policy=policy)
    if loaded.spec.agents > 1:  # a game: ``episodes`` games against an opponent
        if wandb:
            raise ConfigError("wandb: a multi-agent run is evaluated without --wandb")
        opponent = opponent or "random"
        rates = loaded.play_vs(opponent, episodes, seed, deterministic, video)
        result: dict[str, Any] = {f"{k}_rate_vs_{opponent}": v for k, v in rates.items()}
        result.update(games=episodes, env_steps=loaded.env_steps)
        return result
    result = loaded.evaluate(episodes, seed, deterministic, video).to_dict()
    result["env_steps"] = loaded.env_steps
    if loaded.index is not None:
        result["policy"] = loaded.index
    if wandb:
        _log_to_wandb(Path(run_dir), result, video)
    return result


def _log_to_wandb(run_dir: Path, result: dict[str, Any], video: str | Path | None) -> None:
    from asyncrl.runtime.shell import open_tracker

    tracker = open_tracker(load_run_config(run_dir), run_dir, resume=True)
    try:
        row = {f"evaluate/{name}": result[name] for name in LOGGED}
        if video is not None:
            row["evaluate/video"] = tracker.video(video)
        tracker.log(result["env_steps"], row)
    except BaseException:
        tracker.finish(1)
        raise
    tracker.finish(0)
