"""Reading finished runs back: the summary and the learning curve a study tabulates and plots.

A run directory written by ``asyncrl train`` holds ``summary.json`` and ``metrics.jsonl`` (one
line per ``log_every`` training iterations); a study needs nothing else, so any run can be
studied, also one made by hand with ``asyncrl train``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncrl.rundir import SUMMARY

METRICS = "metrics.jsonl"


@dataclass
class Curve:
    """Mean return of the last 20 episodes at each metrics row."""

    env_steps: list[int]
    wall_seconds: list[float]
    returns: list[float]

    def first_reaching(self, target: float) -> tuple[int, float] | None:
        """Env steps and seconds at the first row whose mean return is >= target."""
        for steps, wall, ret in zip(self.env_steps, self.wall_seconds, self.returns, strict=True):
            if ret >= target:  # NaN (no finished episode yet) compares False
                return steps, wall
        return None


def read_curve(run_dir: Path, policy: int | None = None) -> Curve:
    """The run's curve; of a population, one policy's (its rows, at its own env steps)."""
    steps: list[int] = []
    walls: list[float] = []
    returns: list[float] = []
    elapsed = 0.0
    with (Path(run_dir) / METRICS).open() as f:
        for line in f:
            row = json.loads(line)
            if "eval/mean_return" in row:  # an evaluation during training, not a training row
                continue
            if policy is not None and row.get("policy") != policy:
                continue
            elapsed += row.get("T", 0.0)
            steps.append(int(row["env_steps" if policy is None else "policy_env_steps"]))
            walls.append(float(row.get("wall_seconds", elapsed)))
            ret = row.get("episodic_return")
            returns.append(math.nan if ret is None else float(ret))
    return Curve(steps, walls, returns)


def study_curve(run_dir: Path, summary: dict[str, Any]) -> Curve:
    """The curve a study reads of a finished run: of a population, its best policy's (the one
    whose final return the summary gives), at that policy's own env steps; only a
    population's summary names a best policy."""
    return read_curve(run_dir, summary.get("best_policy"))


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """The summary of a run that ended normally (not interrupted), else None."""
    path = Path(run_dir) / SUMMARY
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    return None if summary.get("interrupted") else summary


@dataclass
class StudyRun:
    k: int
    mode: str
    run_dir: Path
    summary: dict[str, Any]
    curve: Curve
    reused: bool = False

    def row(self, target: float | None) -> dict[str, Any]:
        reached = self.curve.first_reaching(target) if target is not None else None
        s = self.summary
        return {
            "k": self.k,
            "mode": self.mode,
            "actors": s["actors"],
            "T": s["T"],
            "eps": s["eps"],
            "env_steps_per_second": s["env_steps_per_second"],
            "policy_lag_mean": s["policy_lag_mean"],
            "env_steps": s["env_steps"],
            "wall_seconds": s["wall_seconds"],
            "final_return": s["final_return"],
            "steps_to_target": reached[0] if reached else None,
            "seconds_to_target": reached[1] if reached else None,
            "run_dir": str(self.run_dir),
        }
