"""The training loop: the same lines for every mode and backend.

    publish version 0 -> start actors -> repeat: [work ahead] next batch -> train -> publish
    -> release

Sync vs async is decided by how many slots a batch holds and when an actor may start its next
rollout (the backends' SlotBook); the backend decides where actors run and how rollouts and
policy versions travel, and supervises its actors. The loop itself owns the run directory, the
periodic and final checkpoints and the summary, and adds the backend's fault counters
(``health()``) to both.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from asyncrl.config import TrainConfig, preset_line, resolve, validate
from asyncrl.envs import check_env, env_family
from asyncrl.metrics import MetricsLog, ProgressDisplay, RowWindow, Throughput
from asyncrl.rundir import (
    CheckpointWriteError,
    claim_run_dir,
    default_run_dir,
    restore_learner,
    save_checkpoint,
    save_config,
    save_summary,
)
from asyncrl.runtime.backends import make_backend
from asyncrl.runtime.backends.base import ActorError, Backend
from asyncrl.runtime.learner import Learner


class Interrupted(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl+C: checkpoint, stop the actors, free shared memory, exit."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Interrupted(f"signal {signum}")


def make_learner(cfg: TrainConfig, spec):
    if cfg.algo == "sac":
        from asyncrl.runtime.sac_learner import SACLearner

        return SACLearner(cfg, spec)
    return Learner(cfg, spec)


def train(
    cfg: TrainConfig,
    resume: bool = False,
    on_start: Callable[[Backend], None] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Train to ``cfg.total_steps`` env steps; returns the summary (also in summary.json).
    A ``cfg.run_dir`` that holds a run is refused unless ``resume`` (continue it) or
    ``overwrite`` (start over). ``on_start(backend)`` is called once the actors are started
    (tools and fault tests watch the fleet through it). Settings left unset (None) are filled
    from ``cfg.preset`` (auto: the env's family), and one line says which and with what."""
    given, cfg = cfg, resolve(cfg, env_family(cfg.env))
    validate(cfg)
    spec = check_env(cfg.env, cfg.algo)  # before any process or segment exists
    run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(cfg)
    cfg.run_dir = str(run_dir)
    claim_run_dir(run_dir, resume=resume, overwrite=overwrite)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(run_dir, cfg)
    line = preset_line(given, cfg)
    if line:
        print(line, flush=True)
    torch.set_num_threads(cfg.threads_learner)
    if cfg.hogwild:
        from asyncrl.runtime.hogwild import train_hogwild

        return train_hogwild(cfg, spec, run_dir, resume)

    backend = None
    log = None
    progress = None
    learner = None
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    interrupted = False
    try:
        learner = make_learner(cfg, spec)
        earlier_seconds = restore_learner(run_dir, learner) if resume else 0.0
        steps_at_start = learner.env_steps
        backend = make_backend(cfg, spec, learner.flat.numel)
        learner.publish(backend)
        log = MetricsLog(run_dir, cfg.tensorboard)
        progress = ProgressDisplay(cfg.total_steps, cfg.progress, learner.env_steps)
        meter = Throughput(cfg.envs_per_actor)
        window = RowWindow(cfg.envs_per_actor)
        backend.start()
        if on_start is not None:
            on_start(backend)
        last_ckpt = time.perf_counter()

        def write_row() -> None:
            row = window.fold()
            row.update(backend.health())
            row["episodic_return"] = learner.final_return
            row["iteration"] = learner.iterations
            row["wall_seconds"] = earlier_seconds + meter.wall
            log.write(learner.env_steps, row)

        def checkpoint() -> None:
            save_checkpoint(
                run_dir,
                {
                    "learner": learner.state_dict(),
                    "config": cfg.to_dict(),
                    "wall_seconds": earlier_seconds + meter.wall,
                },
                keep=cfg.keep_checkpoints,
            )

        failed_writes = 0

        try:
            while learner.env_steps < cfg.total_steps and not (
                cfg.max_seconds and meter.wall >= cfg.max_seconds
            ):
                learner.work_ahead()  # what it can do before the batch arrives
                t0 = time.perf_counter()
                batch = backend.next_batch()
                waited = time.perf_counter() - t0
                stats = learner.train(batch)
                learner.publish(backend)
                backend.release(batch)
                row = {**stats, **meter.iteration(waited, stats)}
                progress.update(
                    learner.env_steps,
                    learner.final_return,
                    row["eps"],
                    row["env_steps_per_second"],
                    row["policy_lag_mean"],
                )
                window.add(row)
                if learner.iterations % cfg.log_every == 0:
                    write_row()
                if cfg.checkpoint_every and time.perf_counter() - last_ckpt > cfg.checkpoint_every:
                    last_ckpt = time.perf_counter()
                    try:
                        checkpoint()
                        failed_writes = 0
                    except CheckpointWriteError as e:  # nothing half-written is left
                        failed_writes += 1
                        print(f"asyncrl: warning: {e}; will retry", file=sys.stderr, flush=True)
                        if failed_writes >= 2:
                            break  # the disk stays full: stop while a checkpoint may fit
        except KeyboardInterrupt:
            interrupted = True
        except ActorError:
            # the learner is between iterations, its state consistent: keep its work
            if hasattr(learner, "close"):
                learner.close()
            checkpoint()
            raise
        if len(window):
            write_row()
        if hasattr(learner, "close"):
            learner.close()  # stop async optimizers first, so the counters saved are final
        checkpoint()
        summary = _summary(cfg, learner, meter, learner.env_steps - steps_at_start)
        summary.update(backend.health())
        summary.update(
            interrupted=interrupted,
            resumed=resume,
            time_limited=learner.env_steps < cfg.total_steps and not interrupted,
            run_dir=str(run_dir),
        )
        save_summary(run_dir, summary)
        if interrupted:
            raise KeyboardInterrupt
        return summary
    finally:
        signal.signal(signal.SIGTERM, previous)
        if progress is not None:
            progress.close()
        if learner is not None and hasattr(learner, "close"):
            learner.close()
        if backend is not None:
            backend.close()
        if log is not None:
            log.close()


def _summary(cfg: TrainConfig, learner: Learner, meter: Throughput, new_steps: int) -> dict:
    return {
        "env": cfg.env,
        "algo": cfg.algo,
        "mode": cfg.mode,
        "backend": cfg.backend,
        "actors": cfg.actors,
        "envs_per_actor": cfg.envs_per_actor,
        "rollout": cfg.rollout,
        "env_steps": learner.env_steps,
        "iterations": learner.iterations,
        "episodes": learner.episodes,
        "final_return": learner.final_return,
        "last100_return": learner.episode_stats.last100_return,
        **meter.summary(new_steps, cfg.actors),
        "learn_seconds": learner.learn_seconds,
        **_off_policy_summary(learner, meter.wall),
    }


def _off_policy_summary(learner, wall: float) -> dict:
    if not hasattr(learner, "limiter"):
        return {}
    lim = learner.limiter
    return {
        "gradient_steps": learner.updates,
        "gradient_steps_per_second": learner.updates / wall,
        "env_steps_per_second_learning": learner.learning_rate_of_env_steps(),
        "update_seconds_mean": learner.learn_seconds / max(learner.updates, 1),
        "replay_ratio": learner.cfg.replay_ratio,
        "replay_ratio_achieved": lim.achieved_ratio,
        "insert_blocked_seconds": lim.insert_blocked_seconds,
        "sample_blocked_seconds": lim.sample_blocked_seconds,
    }
