"""Evaluate a saved policy: mean and standard deviation of episode returns (``asyncrl eval``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asyncrl.policy import load, probe_rendering
from asyncrl.settings import load_run_config


def evaluate(
    run_dir: str | Path,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int = 10_000,
    checkpoint: str = "latest",
    video: str | Path | None = None,
    policy: int | None = None,
) -> dict[str, Any]:
    """Evaluate the policy saved in ``run_dir`` (its ``"latest"`` or ``"best"`` checkpoint) for
    ``episodes`` episodes seeded ``seed``, ``seed + 1``, ...; optionally record them as a GIF at
    ``video``. Returns ``EvalResult.to_dict()`` (episodes, mean and std of returns and lengths,
    and each episode's return and length) and the policy's training env steps. ``policy``: a
    population run's policy i (default: its best)."""
    if video is not None:  # before this process loads the OpenGL library, which may hang
        cfg = load_run_config(run_dir)
        probe_rendering(cfg.env, cfg.atari_preprocessing)
    loaded = load(run_dir, checkpoint, policy=policy)
    result = loaded.evaluate(episodes, seed, deterministic, video).to_dict()
    result["env_steps"] = loaded.env_steps
    if loaded.index is not None:
        result["policy"] = loaded.index
    return result
