"""Starting a run: its settings resolved and checked, the env's spec read, the run directory
claimed -- all before any process or segment exists -- then the actor-learner pipeline or
Hogwild! inside the process state the run keeps (:func:`process_state_kept`). How it stops
and ends is the same for both (:mod:`asyncrl.runtime.lifecycle`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from asyncrl.config import ConfigError
from asyncrl.rundir import default_run_dir, run_dir_held, save_config, save_summary
from asyncrl.runtime import hogwild, pipeline
from asyncrl.runtime.lifecycle import Interrupted, StopSignals
from asyncrl.runtime.shell import Callback, Learning, RunShell
from asyncrl.runtime.transport import check_shared_memory, memory_line, run_layouts
from asyncrl.settings import (
    Prepared,
    TrainConfig,
    check_resume,
    load_run_config,
    prepare_settings,
    refuse_unread_pool_settings,
)

__all__ = ["Callback", "Interrupted", "Prepared", "prepare", "process_state_kept", "train"]


@contextlib.contextmanager
def process_state_kept(threads: int) -> Iterator[StopSignals]:
    """Run a training run inside: what it changes in its process is put back afterwards,
    however it ends; yields the run's :class:`StopSignals`.

    * the calling thread's torch thread count (``threads``, the learner's, meanwhile);
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
    before = torch.get_num_threads()
    stop = StopSignals()
    try:
        with stop.installed():
            torch.set_num_threads(threads)
            yield stop
    finally:
        torch.set_num_threads(before)


def prepare(cfg: TrainConfig) -> Prepared:
    """``cfg`` prepared (:func:`asyncrl.settings.prepare_settings`), then what the runtime must know
    before any process, segment or file exists: that the shared memory and the backend can
    hold the run. A setting that cannot work raises ConfigError here."""
    run = prepare_settings(cfg)
    layout, *policies = run_layouts(run)
    check_shared_memory(run.cfg, policies)
    line = memory_line(run.cfg, run.spec, run.algo, layout)
    run = dataclasses.replace(run, lines=[*run.lines, line])
    if not run.cfg.hogwild:  # e.g. a Ray cluster too small: before --overwrite deletes anything
        pipeline.check_backend(run.cfg)
    return run


def train(
    cfg: TrainConfig,
    resume: bool = False,
    on_start: Callable[[Any], None] | None = None,
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
    run = prepare(cfg)
    cfg, spec = run.cfg, run.spec
    if resume:  # before anything is made or written: a refused resume leaves all as it was
        if not cfg.run_dir:
            raise ConfigError("run_dir: a resumed run continues the run saved there; got none")
        check_resume(load_run_config(cfg.run_dir), cfg)
    else:  # (a saved run resumes with the settings it started with)
        refuse_unread_pool_settings(run.given, cfg)
    run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(cfg, create=True)
    cfg.run_dir = str(run_dir)
    with run_dir_held(run_dir, resume=resume, overwrite=overwrite):  # locked till the end
        if not resume:  # a resumed run's, once its checkpoint has loaded
            save_config(run_dir, cfg)
        for text in run.lines:
            print(text, flush=True)
        with process_state_kept(run.threads) as stop:
            learning = hogwild.HogwildRun if cfg.hogwild else pipeline.Pipeline
            result = hosted(learning, run, run_dir, resume, on_start, callback, stop)
        if spec.games and result.get("checkpoint"):
            result = _games(run_dir, result)  # a two-player game: its final policy's play
        return result


def hosted(
    learning: Callable[..., Learning], run: Prepared, run_dir: Path, resume: bool,
    on_start: Callable[[Any], None] | None, callback: Callback | None, stop: StopSignals,
) -> dict[str, Any]:  # fmt: skip
    """A run's training (the pipeline, or Hogwild! workers) inside the run's shell, which ends
    the run as :mod:`asyncrl.runtime.lifecycle` says and returns its summary."""
    cfg, spec, algo = run.cfg, run.spec, run.algo
    with contextlib.ExitStack() as cleanup:  # every close runs, even if one raises
        inside = learning(run, run_dir, resume, cleanup)
        shell = RunShell(
            cfg, spec, algo, run_dir, stop, resume, inside.env_steps(), inside.resumed_from,
            inside.earlier_seconds, callback,
        )  # fmt: skip
        cleanup.callback(shell.close)
        inside.drive(shell, on_start)
        shell.progress.close()  # before the line that says how the run ended
        # async optimizers stop first, so the counters saved are final
        return shell.end.conclude(
            inside.env_steps, inside.checkpoint, inside.summary, inside.stop_updates
        )
    raise AssertionError("unreachable")


GAMES_VS_RANDOM = 200  # games of a multi-agent run's final policy against each opponent


def _games(run_dir: Path, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with the final policy's win, draw and loss rates against a uniform random
    player, and in connect four against the look-ahead player too (half the games as first
    player), as summary.json holds them too."""
    from asyncrl.envs.pettingzoo import is_connect_four
    from asyncrl.policy import load

    policy = load(run_dir)
    for opponent in ("random", "lookahead") if is_connect_four(policy.config.env) else ("random",):
        rates = policy.play_vs(opponent, GAMES_VS_RANDOM)
        result = {**result, **{f"{k}_rate_vs_{opponent}": v for k, v in rates.items()}}
    save_summary(run_dir, result)
    return result
