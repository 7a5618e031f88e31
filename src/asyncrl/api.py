"""The Python API: ``asyncrl.train(...)`` and ``asyncrl.load(...)``.

``train`` takes the settings ``asyncrl train`` takes, by the same names (``--envs-per-actor 8``
is ``envs_per_actor=8``), builds the config the way the command line does and runs the same
function: the command line calls :func:`train` too. A bad setting raises the same ConfigError,
naming the field, before anything starts.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.config import load_yaml
from asyncrl.settings import TrainConfig, from_dict, load_run_config, underive

if TYPE_CHECKING:
    from asyncrl.policy import Policy
    from asyncrl.runtime.trainer import Callback


@dataclass(frozen=True)
class TrainResult:
    """What a finished run left: its summary (as in ``summary.json``), its run directory and
    its resolved config (as in ``config.yaml``)."""

    summary: dict[str, Any]
    run_dir: Path
    config: TrainConfig

    @property
    def stopped_by_callback(self) -> bool:
        """Whether the callback ended the run before its step budget or time limit."""
        return bool(self.summary.get("stopped_by_callback"))

    def load(self, checkpoint: str = "latest", seed: int = 0, policy: int | None = None) -> Policy:
        """The trained policy: the run's newest checkpoint, or ``"best"``, the one that
        evaluated best during training (with ``eval_every``); ``policy``: a population's
        policy i. See :func:`asyncrl.load`."""
        from asyncrl.policy import load

        return load(self.run_dir, checkpoint, seed, policy)


def _trainer() -> Any:
    """The trainer module. Importing it the first time imports rich (the progress display),
    which draws once from Python's global random generator (``rich/style.py``); train() must
    leave that generator as it found it, so the draw is undone."""
    state = random.getstate()
    try:
        from asyncrl.runtime import trainer
    finally:
        random.setstate(state)
    return trainer


def make_config(
    settings: dict[str, Any],
    config: str | Path | None = None,
    resume: str | Path | None = None,
) -> TrainConfig:
    """The run's config as ``asyncrl train`` builds it: defaults (or, with ``resume``, the saved
    run's config) < the YAML file ``config`` < ``settings``. Unknown names and values of the
    wrong type raise ConfigError naming the setting; :func:`asyncrl.config.validate` (called
    by the trainer before anything starts) checks the rest."""
    settings = dict(settings)
    if resume:  # the run's settings, those resolve() derived left to derive again
        base = underive(load_run_config(resume))
        settings["run_dir"] = str(resume)
    else:
        base = TrainConfig()
    if config:
        values = load_yaml(config)
        # A run's saved config.yaml names that run's directory: used as the template of a new
        # run it must not send the new run there. Only run_dir (or resume) chooses one.
        values.pop("run_dir", None)
        base = from_dict(values, base)
    return from_dict(settings, base)


def train(
    env: str | Callable[[], Any] | None = None,
    algo: str | None = None,
    callback: Callback | None = None,
    *,
    config: str | Path | None = None,
    resume: str | Path | None = None,
    overwrite: bool = False,
    **settings: Any,
) -> TrainResult:
    """Train a policy; returns a :class:`TrainResult` once the run has ended.

    ``env`` and ``algo`` and every keyword in ``settings`` are settings of ``asyncrl train``
    under their Python names (``asyncrl train --help`` lists them with their defaults):
    ``asyncrl.train("HalfCheetah-v5", "sac", total_steps=100_000, eval_every=10_000)``.
    ``env`` may also be a function defined at the top level of an importable module, called
    with no arguments and returning a PettingZoo ParallelEnv or AECEnv (an env's own arguments
    fixed inside it): the run keeps it as the name ``pettingzoo:<module>:<function>``, which
    its config, checkpoints and ``asyncrl.load`` hold and its actors import.
    ``config``: a YAML file of settings, as ``--config`` (keywords given here win).
    ``resume``: a run directory to continue, as ``--resume``; ``overwrite``: start over in a
    ``run_dir`` that holds a run, as ``--overwrite``.

    ``callback(row)`` is called after every training iteration with a dict of what the
    trainer knows then: ``env_steps``, ``iteration``, ``episodic_return`` and
    ``episodic_length`` (means of the last 20 training episodes), ``wall_seconds``, ``eps``,
    ``env_steps_per_second``, the losses, the fault counters and, in the iteration an
    evaluation during training comes back, its ``eval/mean_return``, ``eval/mean_length``, ...
    and ``eval/env_steps`` (the env steps of the evaluated weights). Return ``False`` to end the
    run early (as Stable-Baselines3's callbacks do; ``None`` or anything else goes on): it ends
    as a finished run does -- final checkpoint, summary with ``stopped_by_callback: true``. An
    exception raised by the callback ends the run (actors stopped, final checkpoint written:
    the learner is between iterations) and propagates. A Hogwild! run calls it once per worker
    iteration.

    Raises ConfigError, naming the setting and what it allows, for an unknown setting or a
    value that cannot work, before any env, process or file is made.

    Works from any thread (a notebook's helper thread, say) and leaves the process as it
    found it: the calling thread's torch thread count is restored; torch's, numpy's and
    Python's global random states are not changed (the run draws from generators of its own);
    and SIGINT/SIGTERM handlers (which stop the run at the next iteration boundary, with a
    final checkpoint; a second signal aborts) are installed only when called on the main
    thread, and the previous ones put back afterwards.
    Processes are started with ``spawn``: a script that calls ``train`` must do so under
    ``if __name__ == "__main__":`` (notebooks need nothing).
    """
    given = dict(settings)
    if env is not None:
        given["env"] = env
    if algo is not None:
        given["algo"] = algo
    cfg = make_config(given, config, resume)
    summary = _trainer().train(cfg, resume=bool(resume), overwrite=overwrite, callback=callback)
    run_dir = Path(summary["run_dir"])
    return TrainResult(summary, run_dir, load_run_config(run_dir))
