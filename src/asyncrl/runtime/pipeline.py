"""The actor-learner pipeline: the same lines for every mode and backend.

    publish version 0 -> start actors -> repeat: [work ahead] next batch -> train -> publish
    -> release

Sync vs async is decided by how many slots a batch holds and when an actor may start its next
rollout (the backends' SlotBook); the backend decides where actors run and how rollouts and
policy versions travel, and supervises its actors. This is the one place a backend is made.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asyncrl.algos import algorithm
from asyncrl.metrics import RowWindow
from asyncrl.rundir import restore_learner, save_config
from asyncrl.runtime.backends import check_backend, make_backend
from asyncrl.runtime.backends.base import Backend
from asyncrl.runtime.lifecycle import StopSignals
from asyncrl.runtime.shell import Callback, RunShell, run_figures

__all__ = ["check_backend", "train_pipeline"]  # check_backend: what only a backend can check


def train_pipeline(
    cfg: Any,
    spec: Any,
    run_dir: Path,
    resume: bool,
    on_start: Callable[[Backend], None] | None,
    callback: Callback | None,
    stop: StopSignals | None = None,
) -> dict[str, Any]:
    """The actor-learner run of ``trainer.train``, which has checked ``cfg`` and claimed
    ``run_dir``; it ends as :mod:`asyncrl.runtime.lifecycle` says."""
    stop = stop if stop is not None else StopSignals()
    with contextlib.ExitStack() as cleanup:  # every close runs, even if one raises
        algo = algorithm(cfg.algo)
        learner = algo.learner(cfg, spec)
        cleanup.callback(learner.close)
        earlier_seconds, resumed_from, state = 0.0, None, {}
        if resume:
            state, resumed_from = restore_learner(run_dir, learner)
            earlier_seconds = state.get("wall_seconds", 0.0)
            save_config(run_dir, cfg)  # the checkpoint loaded: the run goes on with these
        backend = make_backend(cfg, spec, learner.numel)
        cleanup.callback(backend.close)
        if "actors" in state:
            backend.load_actor_state(state["actors"])
        learner.publish(backend)
        shell = RunShell(
            cfg, spec, run_dir, stop, resume, learner.env_steps, resumed_from, earlier_seconds,
            callback,
        )  # fmt: skip
        cleanup.callback(shell.close)
        meter, end, episodes = shell.meter, shell.end, learner.episode_stats
        window = RowWindow(cfg.envs_per_actor)

        def counters() -> dict[str, Any]:
            return {
                **backend.health(),
                "episodic_return": episodes.final_return,
                "episodic_length": episodes.final_length,
                "iteration": learner.iterations,
                "wall_seconds": shell.wall_seconds,
            }

        def write_row() -> None:
            row = window.fold()
            row.update(counters())
            shell.log.write(learner.env_steps, row)

        def checkpoint() -> Path:
            state = learner.state_dict()  # consistent, though an optimizer thread runs on
            return shell.checkpoint(
                {
                    "learner": state,
                    "policy": algo.acting_state({"learner": state}),  # what acts, of that state
                    "actors": backend.actor_state(),
                }
            )

        try:
            backend.start()
            if on_start is not None:
                on_start(backend)
            while not shell.should_stop(learner.env_steps):
                with end.updating():
                    learner.work_ahead()  # what it can do before the batch arrives
                t0 = time.perf_counter()
                batch = backend.next_batch(stop)  # a signal ends the wait (hung actors)
                waited = time.perf_counter() - t0
                with end.updating():
                    stats = learner.train(batch)
                learner.publish(backend)
                backend.release(batch)
                row = {**stats, **meter.iteration(waited, stats)}
                window.add(row)
                if learner.iterations % cfg.log_every == 0:
                    write_row()
                if not shell.after_iteration(
                    learner.env_steps, row, episodes, learner.policy_vector, counters()
                ):
                    break
                end.periodic(checkpoint, learner.env_steps)
            if len(window):
                write_row()
        except BaseException as e:
            end.failed(e)

        def summary(fields: dict[str, Any]) -> dict[str, Any]:
            new_steps = learner.env_steps - shell.steps_at_start
            own = {
                **run_figures(cfg, episodes),
                "mode": cfg.mode,
                "backend": cfg.backend,
                "actors": cfg.actors,
                "envs_per_actor": cfg.envs_per_actor,
                "rollout": cfg.rollout,
                "env_steps": learner.env_steps,
                "iterations": learner.iterations,
                **meter.summary(new_steps, cfg.actors),
                "learn_seconds": learner.learn_seconds,
                **learner.summary_fields(meter.wall),
                **learner.nonfinite_counts(),
                **backend.health(),
            }
            return shell.summary(fields, own)

        shell.progress.close()  # before the line that says how the run ended
        # async optimizers stop first, so the counters saved are final
        return end.conclude(lambda: learner.env_steps, checkpoint, summary, learner.close)
    raise AssertionError("unreachable")
