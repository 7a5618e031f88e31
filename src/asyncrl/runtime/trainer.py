"""The training loop: the same lines for every mode and backend.

    publish version 0 -> start actors -> repeat: [work ahead] next batch -> train -> publish
    -> release

Sync vs async is decided by how many slots a batch holds and when an actor may start its next
rollout (the backends' SlotBook); the backend decides where actors run and how rollouts and
policy versions travel, and supervises its actors. The loop itself owns the run directory, the
periodic and final checkpoints and the summary, and adds the backend's fault counters
(``health()``) to both; it hands policies to the evaluations during training
(``runtime/evaluator.py``) and asks the caller's callback after every iteration whether to go
on.

How a run stops and ends -- budget, time limit, callback, signal, a failing actor or learner,
a disk that stays full -- is the same here and in Hogwild! (:mod:`asyncrl.runtime.lifecycle`):
signals set a flag read at the iteration boundary, and every ending writes a final checkpoint
when the learner's state is consistent and says so in one line.

A run may be started from any thread and leaves its process as it found it
(:func:`process_state_kept`): the torch thread count is restored, global random states are
never changed, and SIGINT/SIGTERM handlers are installed only on the main thread, and the ones
before put back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from asyncrl.config import (
    TrainConfig,
    check_resume,
    for_env,
    learner_threads,
    preset_line,
    resolve,
    validate,
)
from asyncrl.envs import check_env, env_family
from asyncrl.metrics import MetricsLog, ProgressDisplay, RowWindow, Throughput
from asyncrl.rundir import (
    default_run_dir,
    load_run_config,
    restore_learner,
    run_dir_held,
    save_checkpoint,
    save_config,
)
from asyncrl.runtime.backends import check_backend, make_backend
from asyncrl.runtime.backends.base import Backend
from asyncrl.runtime.evaluator import Evaluations
from asyncrl.runtime.learner import Learner
from asyncrl.runtime.lifecycle import Interrupted, RunEnd, StopSignals
from asyncrl.runtime.transport import memory_line

__all__ = ["Callback", "Interrupted", "make_learner", "process_state_kept", "train"]

Callback = Callable[[dict[str, Any]], Any]
"""Called after every training iteration with that iteration's figures; returning ``False``
(exactly ``False``, not any false value) ends the run early, as a finished one ends."""


@contextlib.contextmanager
def process_state_kept(cfg: TrainConfig) -> Iterator[StopSignals]:
    """Run a training run inside: what it changes in its process is put back afterwards,
    however it ends; yields the run's :class:`StopSignals`.

    * the calling thread's torch thread count (set to ``threads_learner`` meanwhile);
    * SIGINT and SIGTERM set the run's stop flag (the loop stops at its next iteration
      boundary; a second signal aborts) only when the run is on the main thread -- Python
      lets only that thread install handlers, and only it receives signals -- and the
      handlers before are restored.

    Global random states are not restored here because a run does not change them: torch's
    is used only to draw initial networks and put back at once (see the learners), every
    other draw comes from a generator of the run's own, and numpy's and Python's global
    states are never used. (Restoring them afterwards would rewind the draws a caller's other
    threads made meanwhile.)
    """
    threads = torch.get_num_threads()
    stop = StopSignals()
    try:
        with stop.installed():
            torch.set_num_threads(learner_threads(cfg))
            yield stop
    finally:
        torch.set_num_threads(threads)


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
    callback: Callback | None = None,
) -> dict[str, Any]:
    """Train to ``cfg.total_steps`` env steps; returns the summary (also in summary.json).
    A ``cfg.run_dir`` that holds a run is refused unless ``resume`` (continue it) or
    ``overwrite`` (start over). ``on_start(backend)`` is called once the actors are started
    (tools and fault tests watch the fleet through it). ``callback(row)`` is called after every
    training iteration (see :data:`Callback`); when it returns ``False`` the run ends as a
    finished one does, with ``stopped_by_callback`` in the summary. May be called from any
    thread; leaves the process's settings as they were (:func:`process_state_kept`).
    Settings left unset (None) are filled from ``cfg.preset`` (auto: the env's family), and
    one line says which and with what."""
    given, cfg = cfg, resolve(cfg, env_family(cfg.env))
    validate(cfg)
    # before any process or segment exists
    spec = check_env(cfg.env, cfg.algo, cfg.atari_preprocessing, cfg.vectorizer)
    cfg, env_lines = for_env(cfg, spec, given)  # what depends on the observations
    check_backend(cfg)  # e.g. a Ray cluster too small: before --overwrite deletes anything
    run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(cfg, create=True)
    cfg.run_dir = str(run_dir)
    if resume:  # before anything is written: a refused resume leaves the run as it was
        check_resume(load_run_config(run_dir), cfg)
    with run_dir_held(run_dir, resume=resume, overwrite=overwrite):  # locked till the end
        if not resume:  # a resumed run's, once its checkpoint has loaded
            save_config(run_dir, cfg)
        line = preset_line(given, cfg)
        for text in ([line] if line else []) + env_lines + [memory_line(cfg, spec)]:
            print(text, flush=True)
        with process_state_kept(cfg) as stop:
            if cfg.hogwild:
                from asyncrl.runtime.hogwild import train_hogwild

                return train_hogwild(cfg, spec, run_dir, resume, callback, stop)
            return _train_pipeline(cfg, spec, run_dir, resume, on_start, callback, stop)


def _train_pipeline(
    cfg: TrainConfig,
    spec: Any,
    run_dir: Path,
    resume: bool,
    on_start: Callable[[Backend], None] | None,
    callback: Callback | None,
    stop: StopSignals | None = None,
) -> dict[str, Any]:
    """The actor-learner run of :func:`train`, which has checked ``cfg`` and claimed
    ``run_dir``; it ends as :mod:`asyncrl.runtime.lifecycle` says."""
    stop = stop if stop is not None else StopSignals()
    with contextlib.ExitStack() as cleanup:  # every close runs, even if one raises
        learner = make_learner(cfg, spec)
        cleanup.callback(learner.close)
        earlier_seconds, resumed_from, state = 0.0, None, {}
        if resume:
            state, resumed_from = restore_learner(run_dir, learner)
            earlier_seconds = state.get("wall_seconds", 0.0)
            save_config(run_dir, cfg)  # the checkpoint loaded: the run goes on with these
        steps_at_start = learner.env_steps
        backend = make_backend(cfg, spec, learner.flat.numel)
        cleanup.callback(backend.close)
        if "actors" in state:
            backend.load_actor_state(state["actors"])
        learner.publish(backend)
        # a resumed run's curves go on from its checkpoint: rows written after it are dropped
        log = MetricsLog(run_dir, cfg.tensorboard, learner.env_steps if resume else None)
        cleanup.callback(log.close)
        evals = Evaluations(cfg, spec, run_dir, log, learner.env_steps, resume)
        cleanup.callback(evals.close)
        progress = ProgressDisplay(cfg.total_steps, cfg.progress, learner.env_steps)
        cleanup.callback(progress.close)
        meter = Throughput(cfg.envs_per_actor)
        window = RowWindow(cfg.envs_per_actor)
        end = RunEnd(run_dir, stop, cfg.checkpoint_every, resumed_from, learner.env_steps)

        def counters() -> dict[str, Any]:
            return {
                **backend.health(),
                "episodic_return": learner.final_return,
                "episodic_length": learner.final_length,
                "iteration": learner.iterations,
                "wall_seconds": earlier_seconds + meter.wall,
            }

        def write_row() -> None:
            row = window.fold()
            row.update(counters())
            log.write(learner.env_steps, row)

        def checkpoint() -> Path:
            return save_checkpoint(
                run_dir,
                {
                    "learner": learner.state_dict(),
                    "policy": learner.policy.state_dict(),  # what acts (shares the tensors)
                    "config": cfg.to_dict(),
                    "wall_seconds": earlier_seconds + meter.wall,
                    "actors": backend.actor_state(),
                },
                keep=cfg.keep_checkpoints,
            )

        try:
            backend.start()
            if on_start is not None:
                on_start(backend)
            while not end.should_stop(
                learner.env_steps, cfg.total_steps, meter.wall, cfg.max_seconds
            ):
                with end.updating():
                    learner.work_ahead()  # what it can do before the batch arrives
                t0 = time.perf_counter()
                batch = backend.next_batch()
                waited = time.perf_counter() - t0
                with end.updating():
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
                evaluated = evals.step(learner.env_steps, learner.policy_vector)
                if callback is not None:
                    info = {"env_steps": learner.env_steps, **row, **counters(), **evaluated}
                    if callback(info) is False:
                        end.stopped_by_callback()
                        break
                end.periodic(checkpoint, learner.env_steps)
            if len(window):
                write_row()
        except BaseException as e:
            end.failed(e)

        def summary(fields: dict[str, Any]) -> dict[str, Any]:
            out = _summary(cfg, learner, meter, learner.env_steps - steps_at_start)
            out.update(backend.health())
            # the evaluation in progress, off the run's clock; not waited for when stopping
            evals.finish(wait=end.kind in ("budget", "time_limit", "callback"))
            out.update(evals.summary())
            out.update(fields, resumed=resume, run_dir=str(run_dir))
            return out

        progress.close()  # before the line that says how the run ended
        # async optimizers stop first, so the counters saved are final
        return end.conclude(lambda: learner.env_steps, checkpoint, summary, learner.close)
    raise AssertionError("unreachable")


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
        "final_length": learner.final_length,
        **meter.summary(new_steps, cfg.actors),
        "learn_seconds": learner.learn_seconds,
        **learner.summary_fields(meter.wall),
    }
