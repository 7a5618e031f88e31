"""The run shell: what every run is wrapped in, whatever trains inside it -- the actor-learner
pipeline or Hogwild! workers. It owns the metrics log (metrics.jsonl, TensorBoard, and W&B with
``--wandb``), the evaluations during training, the progress line, the throughput meter, how the
run stops and ends (:class:`~asyncrl.runtime.lifecycle.RunEnd`), its checkpoints and its summary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from asyncrl.core import Algorithm
from asyncrl.metrics import EpisodeStats, MetricsLog, ProgressDisplay, Throughput
from asyncrl.rundir import load_wandb_run, save_checkpoint, save_wandb_run
from asyncrl.runtime.evaluator import Evaluations
from asyncrl.runtime.lifecycle import RunEnd, StopSignals
from asyncrl.tracking import Tracker

if TYPE_CHECKING:
    from asyncrl.settings import TrainConfig

Callback = Callable[[dict[str, Any]], Any]
"""Called after every training iteration with that iteration's figures; returning ``False``
(exactly ``False``, not any false value) ends the run early, as a finished one ends."""

# the endings after which the evaluation in progress is waited for
CALM_ENDINGS = ("budget", "time_limit", "callback")
# the exit status of `asyncrl train` after each ending (1 after any other), as W&B is told
EXIT_CODES = {"budget": 0, "time_limit": 0, "callback": 0, "signal": 130, "aborted": 130}


class Learning(Protocol):
    """What a run's shell hosts (``trainer.hosted``): the actor-learner pipeline or Hogwild!
    workers, made with the prepared run (``settings.Prepared``), its directory, ``resume``
    and the cleanup that closes them, a resumed run's state loaded. :meth:`drive` trains until the
    shell says stop; the shell then ends the run with the rest."""

    resumed_from: Path | None  # the checkpoint a resumed run starts from
    earlier_seconds: float  # the wall seconds of the legs before

    def env_steps(self) -> int: ...

    def drive(self, shell: RunShell, on_start: Callable[[Any], None] | None) -> None: ...

    def checkpoint(self) -> Path: ...

    def summary(self, fields: dict[str, Any]) -> dict[str, Any]: ...

    def stop_updates(self) -> None:
        """Stop what still changes the state, before the final checkpoint."""


def open_tracker(cfg: TrainConfig, run_dir: Path, resume: bool) -> Tracker:
    """The W&B run of the run in ``run_dir``: with ``resume`` the one it logged to before (its
    wandb-run.json), if any, else a new one, which wandb-run.json then names."""
    earlier = load_wandb_run(run_dir) if resume else None
    tracker = Tracker(cfg, run_dir, earlier["id"] if earlier else None)
    try:
        if tracker.identity is not None:
            save_wandb_run(run_dir, tracker.identity)
    except BaseException:
        tracker.finish(1)
        raise
    return tracker


class RunShell:
    """One run's shell, for a run that starts (or resumed) at ``env_steps`` and checkpoint
    ``resumed_from`` after ``earlier_seconds`` of earlier runs. Close it with :meth:`close`
    (every part is closed, even if one fails)."""

    def __init__(
        self,
        cfg: TrainConfig,
        spec: Any,
        algo: Algorithm,
        run_dir: Path,
        stop: StopSignals,
        resume: bool,
        env_steps: int,
        resumed_from: Path | None = None,
        earlier_seconds: float = 0.0,
        callback: Callback | None = None,
    ):
        self.cfg, self.run_dir, self.resume, self.callback = cfg, run_dir, resume, callback
        self.steps_at_start, self.earlier_seconds = env_steps, earlier_seconds
        self._closing = contextlib.ExitStack()
        self.end = RunEnd(run_dir, stop, cfg.checkpoint_every, resumed_from, env_steps)
        self.tracker: Tracker | None = None
        try:
            if cfg.wandb:
                self.tracker = open_tracker(cfg, run_dir, resume)
                self._closing.callback(self._finish_tracker)
            # a resumed run's curves go on from its checkpoint: rows written after it are dropped
            resume_at = env_steps if resume else None
            self.log = MetricsLog(run_dir, cfg.tensorboard, resume_at, self.tracker)
            self._closing.callback(self.log.close)
            self.progress = ProgressDisplay(cfg.total_steps, cfg.progress, env_steps)
            self._closing.callback(self.progress.close)
            self.meter = Throughput(cfg.envs_per_actor)
            self.evals = Evaluations(cfg, spec, algo, run_dir, self.log, env_steps, resume)
            self._closing.callback(self.evals.close)
        except BaseException:
            self._closing.close()
            raise

    @property
    def wall_seconds(self) -> float:
        """Seconds of training of this run and the ones it resumed."""
        return self.earlier_seconds + self.meter.wall

    def should_stop(self, env_steps: int) -> bool:
        return self.end.should_stop(
            env_steps, self.cfg.total_steps, self.meter.wall, self.cfg.max_seconds
        )

    def after_iteration(
        self,
        env_steps: int,
        row: dict[str, Any],
        episodes: EpisodeStats,
        policy_vector: Callable[[], np.ndarray],
        info: Callable[[], dict[str, Any]],
    ) -> bool:
        """The live line, evaluations and the caller's callback after an iteration of
        ``row``'s figures (``info()``: more for the callback, asked only when there is one);
        False if the callback ends the run."""
        self.progress.update(
            env_steps,
            episodes.final_return,
            row["eps"],
            row["env_steps_per_second"],
            row["policy_lag_mean"],
        )
        evaluated = self.evals.step(env_steps, policy_vector)
        if self.callback is not None and not self.end.kind:
            if self.callback({"env_steps": env_steps, **row, **info(), **evaluated}) is False:
                self.end.stopped_by_callback()
                return False
        return True

    def checkpoint(self, state: dict[str, Any]) -> Path:
        """Write a checkpoint of ``state`` with the run's config and clock."""
        state = {**state, "config": self.cfg.to_dict(), "wall_seconds": self.wall_seconds}
        return save_checkpoint(self.run_dir, state, keep=self.cfg.keep_checkpoints)

    def summary(self, fields: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
        """The summary: ``own`` figures of the loop, the evaluations' (the one in progress is
        waited for after a calm ending, off the run's clock) and how the run ended."""
        out = dict(own)
        self.evals.finish(wait=self.end.kind in CALM_ENDINGS)
        out.update(self.evals.summary())
        out.update(fields, resumed=self.resume, run_dir=str(self.run_dir))
        if self.tracker is not None:
            self.tracker.summary(out)
        return out

    def close(self) -> None:
        self._closing.close()

    def _finish_tracker(self) -> None:
        """The W&B run ends with the exit status the run ends with; a run that left before
        its ending (an error while starting) failed."""
        code = EXIT_CODES.get(self.end.kind or "budget", 1) if self.end.stop.ending else 1
        self.tracker.finish(code)


def run_figures(cfg: TrainConfig, episodes: EpisodeStats) -> dict[str, Any]:
    """What every summary starts with: the run's layout and its episodes' returns."""
    return {
        "env": cfg.env,
        "algo": cfg.algo,
        "episodes": episodes.episodes,
        "final_return": episodes.final_return,
        "last100_return": episodes.last100_return,
        "final_length": episodes.final_length,
    }
