"""The run directory: resolved config, checkpoints, metric logs and the summary.

Every file a run leaves is written to a temporary name and renamed, so a run killed at any
moment leaves either the previous complete file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from asyncrl.config import ConfigError, TrainConfig, from_dict, load_yaml

CONFIG = "config.yaml"
CHECKPOINT = "checkpoint.pt"
SUMMARY = "summary.json"


def default_run_dir(cfg: TrainConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    mode = f"hogwild{cfg.hogwild}-{cfg.sync_mode}" if cfg.hogwild else cfg.mode
    return Path("runs") / f"{cfg.env}-{cfg.algo}-{mode}-{stamp}"


def default_study_dir(kind: str, cfg: TrainConfig) -> Path:
    """Where ``asyncrl compare`` / ``tune`` put their runs and tables unless told."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{kind}-{cfg.env.replace(':', '-')}-{cfg.algo}-{stamp}"


def _atomic_write(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


def save_checkpoint(run_dir: Path, state: dict[str, Any]) -> None:
    _atomic_write(run_dir / CHECKPOINT, lambda p: torch.save(state, p))


def load_checkpoint(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / CHECKPOINT
    if not path.exists():
        raise ConfigError(f"run_dir: {run_dir} holds no {CHECKPOINT} to resume or evaluate from")
    return torch.load(path, map_location="cpu", weights_only=False)


def restore_learner(run_dir: Path, learner: Any) -> float:
    """Load the checkpointed learner state into ``learner``; returns the wall-clock seconds the
    run had taken before, so a resumed run's clock continues."""
    state = load_checkpoint(run_dir)
    learner.load_state_dict(state["learner"])
    return state.get("wall_seconds", 0.0)


def save_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    _atomic_write(run_dir / SUMMARY, lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))


def save_config(run_dir: Path, cfg: TrainConfig) -> None:
    _atomic_write(run_dir / CONFIG, cfg.save)


def load_run_config(run_dir: str | Path) -> TrainConfig:
    path = Path(run_dir) / CONFIG
    if not path.exists():
        raise ConfigError(f"run_dir: {run_dir} is not a run directory (no {CONFIG})")
    return from_dict(load_yaml(path))
