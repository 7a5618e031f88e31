"""Throughput as a product feature: per-iteration figures, their logs and the live display.

Definitions (ALF's async-training guide): T is the wall-clock interval between two training
iterations, EPS = K / T with K the envs of one actor. EPS does not depend on N by definition,
but T does when N actors compete for the same cores: measure it, don't assume it.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

_COMPENSATED_SUM = sys.version_info >= (3, 12)


class _Sum:
    """``sum()`` of a stream of floats, kept one value at a time, bit for bit: naive addition
    before Python 3.12, Neumaier's compensated addition from 3.12 on, as ``sum`` does.

    Throughput keeps sums, not lists, of its per-iteration figures (a list holds every
    iteration: a one-env SAC run of 10M steps has 10M), and its figures must not change by it.
    """

    __slots__ = ("hi", "c")

    def __init__(self) -> None:
        self.hi = 0.0
        self.c = 0.0

    def add(self, x: float) -> None:
        x = float(x)
        if not _COMPENSATED_SUM:
            self.hi += x
            return
        t = self.hi + x
        if abs(self.hi) >= abs(x):
            self.c += (self.hi - t) + x
        else:
            self.c += (x - t) + self.hi
        self.hi = t

    @property
    def value(self) -> float:
        # as CPython: the compensation is not added when it would turn an overflow into NaN
        if self.c and math.isfinite(self.c):
            return self.hi + self.c
        return self.hi


class Throughput:
    """Interval T between iterations, EPS, env steps/s; and the learner's wait for data.

    Memory does not grow with the iterations: intervals and lags are kept as running sums,
    counts and maxima, which give the same figures the lists of them gave.
    """

    def __init__(self, envs_per_actor: int):
        self.K = envs_per_actor
        self.start = time.perf_counter()
        self.last = self.start
        self.iterations = 0
        self.first_T = math.nan  # the first interval includes starting the actors
        self._T_after_first = _Sum()
        self.learner_wait = 0.0
        self.actor_wait = 0.0
        self.rollout_seconds = 0.0
        self._lag_samples = _Sum()
        self._lag_weighted = _Sum()  # sum of mean lag x samples
        self._lag_max: float | None = None
        self.steps = 0
        self.first_end: float | None = None  # end of the first iteration
        self.steps_after_first = 0

    def iteration(self, learner_wait: float, stats: dict[str, float]) -> dict[str, float]:
        now = time.perf_counter()
        T = now - self.last
        self.last = now
        self.iterations += 1
        if self.first_end is None:
            self.first_end = now
            self.first_T = T
        else:
            self._T_after_first.add(T)
            self.steps_after_first += int(stats["samples"])
        self.learner_wait += learner_wait
        self.actor_wait += stats["actor_wait_seconds"]
        self.rollout_seconds += stats["rollout_seconds"]
        lag_mean, lag_max, samples = (
            stats["policy_lag_mean"],
            stats["policy_lag_max"],
            stats["samples"],
        )
        self._lag_samples.add(samples)
        self._lag_weighted.add(lag_mean * samples)
        if self._lag_max is None or lag_max > self._lag_max:  # as max(): the first of equals
            self._lag_max = lag_max
        return {
            "T": T,
            "eps": self.K / T,
            "env_steps_per_second": stats["samples"] / T,
            "learner_wait_seconds": learner_wait,
        }

    @property
    def mean_T(self) -> float:
        # The first interval includes starting the actors; leave it out when there are others.
        if self.iterations <= 1:
            return self.first_T
        return self._T_after_first.value / (self.iterations - 1)

    @property
    def steady_rate(self) -> float:
        """Env steps/s from the end of the first iteration on: leaves out process start-up and
        one-off costs (torch.compile) that a long run amortises."""
        if self.first_end is None or self.steps_after_first == 0:
            return math.nan
        return self.steps_after_first / (self.last - self.first_end)

    @property
    def wall(self) -> float:
        return time.perf_counter() - self.start

    def summary(self, new_steps: int, actors: int) -> dict[str, float]:
        """The run's throughput figures for summary.json (``new_steps``: env steps this run)."""
        wall = self.wall
        lag_mean, lag_max = self.lag_summary()
        steady = self.steady_rate
        return {
            "wall_seconds": wall,
            "T": self.mean_T,
            "eps": self.K / self.mean_T,
            "env_steps_per_second": steady if math.isfinite(steady) else new_steps / wall,
            "env_steps_per_second_overall": new_steps / wall,  # start-up included
            "policy_lag_mean": lag_mean,
            "policy_lag_max": lag_max,
            # per actor, averaged: seconds spent stepping envs and choosing actions
            "rollout_seconds": self.rollout_seconds / actors,
            "learner_wait_seconds": self.learner_wait,
            "actor_wait_seconds": self.actor_wait / actors,
        }

    def lag_summary(self) -> tuple[float, float]:
        """Policy lag over the run: the mean weighted by samples, and the maximum."""
        total = self._lag_samples.value
        if not total:
            return math.nan, math.nan
        return self._lag_weighted.value / total, self._lag_max


class RowWindow:
    """The iterations since the last metrics row, folded into one row.

    Figures of an iteration (losses, waits, lags) are averaged over the iterations that report
    them; running totals and states (counters, the achieved replay ratio, the return of the last
    20 episodes) are taken from the newest; rates are recomputed over the whole window.
    """

    LATEST = frozenset(
        {
            "iteration",
            "wall_seconds",
            "episodic_return",
            "episodic_length",
            "gradient_steps",
            "replay_ratio_achieved",
            "insert_blocked_seconds",
            "sample_blocked_seconds",
            "replay_size",
            "memory/replay_mb",
            "lr",
            "nonfinite_skipped_rollouts",
            "nonfinite_skipped_steps",
        }
    )

    def __init__(self, envs_per_actor: int):
        self.K = envs_per_actor
        self.rows: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def fold(self) -> dict[str, Any]:
        rows, self.rows = self.rows, []
        out: dict[str, Any] = {}
        for key in dict.fromkeys(k for r in rows for k in r):
            values = [r[key] for r in rows if key in r]
            if key in self.LATEST:
                out[key] = values[-1]
            elif key == "policy_lag_max":
                out[key] = max(values)
            else:
                out[key] = sum(values) / len(values)
        seconds = sum(r["T"] for r in rows)
        samples = sum(r["samples"] for r in rows)
        out["eps"] = self.K / out["T"]
        out["env_steps_per_second"] = samples / seconds
        if "learner_samples_per_second" in out:
            out["learner_samples_per_second"] = samples / sum(r["learn_seconds"] for r in rows)
        out["samples"] = samples
        out["row_iterations"] = len(rows)
        return out


class EpisodeStats:
    """Finished episodes as the learner receives them: count, and the last 100 returns and
    lengths. ``final_return`` and ``final_length`` are the means of the last 20 (the figures the
    summary, metrics rows, the progress bar and tests use), ``last100_return`` the mean return
    of the last 100 (CleanRL's benchmark metric)."""

    FINAL = 20

    def __init__(self, window: int = 100):
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.episodes = 0
        # the means, kept until episodes change: the driver reads them after every iteration,
        # which with one-step rollouts is every env step
        self._means: dict[str, float] = {}

    def record(self, slots) -> None:
        for s in slots:
            done = ~np.isnan(s.ep_returns)
            self.add(s.ep_returns[done].tolist(), s.ep_lengths[done].tolist())

    def add(self, returns: list[float], lengths: list[int]) -> None:
        """Episodes that finished elsewhere (a Hogwild! worker reports them)."""
        if returns:
            self._means.clear()
        self.returns.extend(returns)
        self.lengths.extend(lengths)
        self.episodes += len(returns)

    def _mean(self, name: str, values: deque, last: int | None) -> float:
        if name not in self._means:
            kept = list(values)[-last:] if last else values
            self._means[name] = float(np.mean(kept)) if values else math.nan
        return self._means[name]

    @property
    def final_return(self) -> float:
        return self._mean("final_return", self.returns, self.FINAL)

    @property
    def last100_return(self) -> float:
        return self._mean("last100_return", self.returns, None)

    @property
    def final_length(self) -> float:
        """Mean length of the same episodes as ``final_return``."""
        return self._mean("final_length", self.lengths, self.FINAL)

    def state_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "recent_returns": list(self.returns),
            "recent_lengths": list(self.lengths),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episodes = state["episodes"]
        self._means.clear()
        self.returns.clear()  # what it held before is replaced, not added to
        self.lengths.clear()
        self.returns.extend(state["recent_returns"])
        self.lengths.extend(state["recent_lengths"])


class MetricsLog:
    """metrics.jsonl (one line per row of ``log_every`` iterations, see RowWindow) and
    TensorBoard scalars in the run directory; and the same scalars to a ``tracker`` (W&B,
    :class:`asyncrl.tracking.Tracker`) if given."""

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool,
        resume_at: int | None = None,
        tracker: Any = None,
    ):
        """``resume_at``: the env steps of the checkpoint a resumed run starts from; the rows
        written after it (by the run that went on past its checkpoint, then stopped) are
        dropped from metrics.jsonl and hidden in TensorBoard, so curves never go backwards."""
        self.tracker = tracker
        path = run_dir / "metrics.jsonl"
        if resume_at is not None and path.exists():
            _drop_rows_after(path, resume_at)
        self.file = path.open("a")
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_at is None else resume_at + 1
            self.tb = SummaryWriter(str(run_dir / "tb"), purge_step=purge)

    def write(self, step: int, row: dict[str, Any], policy: int | None = None) -> None:
        """One row at ``step`` env steps of the run; a population's rows each carry their
        ``policy``, and its TensorBoard tags go under ``policy_<i>/``."""
        line = {"env_steps": step, **row}
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()
        if self.tb is None and self.tracker is None:
            return
        prefix = "" if policy is None else f"policy_{policy}/"
        scalars = {
            prefix + _tb_name(key): value
            for key, value in row.items()
            if isinstance(value, int | float) and math.isfinite(value)
        }
        if self.tb is not None:
            for name, value in scalars.items():
                self.tb.add_scalar(name, value, step)
        if self.tracker is not None:
            self.tracker.log(step, scalars)

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()


def _drop_rows_after(path: Path, env_steps: int) -> None:
    """Keep the rows of metrics.jsonl up to ``env_steps`` (and any line that does not parse
    as a row, such as a last line cut short by a kill, is dropped too); written to a temporary
    file and renamed, so a kill meanwhile leaves the old file whole."""
    kept = []
    with path.open() as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("env_steps", 0) <= env_steps:
                kept.append(line if line.endswith("\n") else line + "\n")
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text("".join(kept))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _tb_name(key: str) -> str:
    """CleanRL-style groups: charts/, losses/, throughput/."""
    if "/" in key:
        return key.replace("loss/", "losses/")
    if key in ("episodic_return", "episodic_length", "lr"):
        return f"charts/{key}"
    return f"throughput/{key}"


class ProgressDisplay:
    """A live bar: env steps, mean return, EPS and policy lag. Silent when disabled."""

    REFRESH = 0.2  # seconds between updates: a SAC iteration can be one env step

    def __init__(self, total: int, enabled: bool, done: int = 0):
        self.enabled = enabled
        self.total = total
        self.last = -math.inf
        if not enabled:
            return
        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} steps"),
            TextColumn("return {task.fields[ret]}"),
            TextColumn("EPS {task.fields[eps]}"),
            TextColumn("steps/s {task.fields[sps]}"),
            TextColumn("lag {task.fields[lag]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task(
            "train", total=total, completed=done, ret="-", eps="-", sps="-", lag="-"
        )
        self.progress.start()

    def update(self, steps: int, ret: float, eps: float, sps: float, lag: float) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last >= self.REFRESH or steps >= self.total:
            self.last = now
            self.progress.update(
                self.task,
                completed=steps,
                ret="-" if math.isnan(ret) else f"{ret:.1f}",
                eps=f"{eps:.1f}",
                sps=f"{sps:,.0f}",
                lag=f"{lag:.2f}",
            )

    def close(self) -> None:
        if self.enabled:
            self.progress.stop()
