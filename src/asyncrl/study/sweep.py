"""``asyncrl sweep``: a hyperparameter search over training runs, on Optuna.

A sweep file names the base settings of every trial (any setting ``asyncrl train`` takes), a
search space over settings, and the objective. Each trial is an ordinary ``asyncrl train``
child process with its own run directory under the sweep directory, so this process only
samples, watches and records: it reads each trial's metrics.jsonl as it grows, reports the
objective's column to Optuna at a grid of env steps (the same steps for every trial, whatever
its batch size, so that the pruner compares like with like) and stops a trial Optuna prunes
with SIGINT, which ends the run cleanly (final checkpoint, summary.json).

The study lives in Optuna's storage (SQLite in the sweep directory unless ``--storage``), so a
sweep resumes, several machines can work on one study, and Optuna's own tools read it. See
docs/guides/sweeps.md for the file, the output, and how interrupted trials are recorded.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from asyncrl.config import ConfigError, as_field_type, format_value, load_yaml, need
from asyncrl.rundir import METRICS, default_study_dir
from asyncrl.runtime.processes import die_with_parent
from asyncrl.settings import FIELDS, KINDS, from_dict, meant, resolve_for_env, validate
from asyncrl.study.runs import read_summary

KEYS = ("base", "space", "objective", "direction", "prune", "enqueue")
PRUNE_KEYS = ("every", "warmup", "startup_trials")
DIRECTIONS = ("maximize", "minimize")
PRUNERS = ("median", "halving", "none")
SAVED = "sweep.yaml"  # the sweep file and the study's settings, for --resume
BEST = "best.yaml"
DB = "optuna.db"
SPACE_OWNED = ("run_dir", "population", "progress")  # the sweep sets these for each trial
# summary.json fields a sweep may optimise -> the metrics.jsonl column it prunes on
SUMMARY_OBJECTIVES = {
    "final_return": "episodic_return",
    "last100_return": "episodic_return",
    "final_length": "episodic_length",
    "eval_best_return": "eval/mean_return",
    "eval_last_return": "eval/mean_return",
    "env_steps_per_second": "env_steps_per_second",
    "eps": "eps",
}
INTERRUPTED = "interrupted"  # a FAIL trial's "failed" user attr when Ctrl+C stopped it
POLL = 0.5  # seconds between reads of the running trials' metrics
KILL_AFTER = 60.0  # seconds a trial has to end after SIGINT on an error path


@dataclasses.dataclass(frozen=True)
class Param:
    """One setting's search range: ``low``..``high`` (``log``: uniform in log space) for a
    number setting, else ``choices``. Lists (``hidden``) go to Optuna as their JSON text."""

    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        if self.choices:
            return _from_choice(trial.suggest_categorical(self.name, self.optuna_choices))
        if KINDS[self.name] is int:
            return trial.suggest_int(self.name, self.low, self.high, log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    @property
    def optuna_choices(self) -> list[Any]:
        return [json.dumps(c) if isinstance(c, list) else c for c in self.choices]

    def contains(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        return isinstance(value, int | float) and self.low <= value <= self.high

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(format_value(c) for c in self.choices)
        return f"{format_value(self.low)}..{format_value(self.high)}" + (" (log)" * self.log)


def _from_choice(value: Any) -> Any:
    """A categorical value as the setting takes it (lists travel through Optuna as JSON)."""
    return json.loads(value) if isinstance(value, str) and value.startswith("[") else value


@dataclasses.dataclass(frozen=True)
class Objective:
    """A summary.json field (``final_return``) or a metrics.jsonl column at an env step
    (``episodic_return@20000``: the first row at or past that step)."""

    name: str
    step: int | None = None

    @property
    def column(self) -> str | None:
        """The metrics.jsonl column pruning reads (None: the field has none)."""
        return self.name if self.step is not None else SUMMARY_OBJECTIVES[self.name]

    def __str__(self) -> str:
        return self.name if self.step is None else f"{self.name}@{self.step}"

    def value(self, run_dir: Path) -> tuple[float | None, str]:
        """The finished run's value, or None and why there is none."""
        if self.step is None:
            value = (read_summary(run_dir) or {}).get(self.name)
        else:
            rows = [r for r in _rows(run_dir / METRICS) if self.name in r]
            if not rows:
                raise ConfigError(
                    f"objective: the trial's metrics.jsonl ({run_dir}) has no column "
                    f"{self.name!r}; name one of its columns"
                )
            value = next((r[self.name] for r in rows if r["env_steps"] >= self.step), None)
            if value is None:
                return None, f"ended at {rows[-1]['env_steps']:,} env steps, before {self}"
        if not isinstance(value, int | float) or not math.isfinite(value):
            return None, f"{self} is {value!r}"
        return float(value), ""


def _rows(path: Path) -> Iterator[dict[str, Any]]:
    """A run's own metrics rows (a population's per-policy rows, which carry ``policy``, are
    left out: a trial's value is the run's)."""
    with path.open() as f:
        for line in f:
            row = json.loads(line)
            if "policy" not in row:
                yield row


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A validated sweep file."""

    base: dict[str, Any]
    space: dict[str, Param]
    objective: Objective
    direction: str
    every: int  # env steps between the values reported to Optuna
    warmup: int  # env steps before a trial may be pruned
    startup_trials: int  # finished trials before the median pruner prunes
    enqueue: tuple[dict[str, Any], ...]
    data: dict[str, Any]  # the file as read, saved with the sweep

    def settings(self, params: dict[str, Any]) -> dict[str, Any]:
        """A trial's settings: the base with its sampled values."""
        return {**self.base, **params}

    def definition(self) -> dict[str, Any]:
        """What makes two sweeps one study: stored with it, compared when one joins it."""
        return {k: self.data.get(k) for k in ("base", "space", "objective", "direction")}


def _keys(data: Any, where: str) -> dict[str, Any]:
    need(isinstance(data, dict), f"{where}: must be a mapping, got {data!r}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _number(where: str, value: Any, kind: type = float) -> Any:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    need(ok and math.isfinite(value), f"{where}: expected a number, got {value!r}")
    return as_field_type(where, kind, value)


def _param(name: str, spec: Any) -> Param:
    need(
        name in FIELDS,
        f"space: unknown setting {meant(name)}; a search space ranges over settings of "
        "asyncrl train",
    )
    need(name not in SPACE_OWNED, f"space: {name}: the sweep sets it for every trial")
    spec = _keys(spec, f"space: {name}")
    kind = KINDS[name]
    numeric = kind in (int, float)
    allowed = ("low", "high", "log", "choices") if numeric else ("choices",)
    unknown = sorted(set(spec) - set(allowed))
    need(not unknown, f"space: {name}: unknown key(s) {', '.join(unknown)}; use {allowed}")
    if "choices" in spec:
        need(
            set(spec) == {"choices"},
            f"space: {name}: give either choices or low and high, not both",
        )
        choices = spec["choices"]
        need(
            isinstance(choices, list) and choices,
            f"space: {name}: choices must be a non-empty list, got {choices!r}",
        )
        return Param(name, choices=tuple(as_field_type(name, kind, c) for c in choices))
    need(
        numeric,
        f"space: {name}: a {kind.__name__} setting takes choices: [...]",
    )
    need(
        "low" in spec and "high" in spec,
        f"space: {name}: give low and high (a {kind.__name__} range), or choices: [...]",
    )
    low = _number(f"space: {name}: low", spec["low"], kind)
    high = _number(f"space: {name}: high", spec["high"], kind)
    log = spec.get("log", False)
    need(isinstance(log, bool), f"space: {name}: log must be true or false, got {log!r}")
    need(low < high, f"space: {name}: low must be below high, got {low!r}..{high!r}")
    need(not log or low > 0, f"space: {name}: log needs low > 0, got {low!r}")
    return Param(name, low, high, log)


def _objective(text: Any, base: Any) -> Objective:
    need(isinstance(text, str), f"objective: expected a name, got {text!r}")
    name, at, step_text = text.partition("@")
    if not at:
        need(
            name in SUMMARY_OBJECTIVES,
            f"objective: {name!r} is not a summary field a sweep optimises (one of "
            f"{', '.join(SUMMARY_OBJECTIVES)}), nor a metrics.jsonl column at a step "
            "(name@env_steps)",
        )
        need(
            not name.startswith("eval_") or base.eval_every > 0,
            f"objective: {name} needs evaluations during training; set eval_every in base",
        )
        return Objective(name)
    try:
        step = as_field_type("objective", int, float(step_text.replace("_", "")))
    except ValueError:
        step = -1
    need(
        bool(name) and step >= 1,
        f"objective: {text!r} must be a metrics column at a whole number of env steps >= 1 "
        "(episodic_return@20000)",
    )
    return Objective(name, step)


def parse(data: dict[str, Any]) -> Sweep:
    """Check a sweep file's contents before anything starts: a ConfigError naming the key and
    what it allows otherwise. Every trial's settings are validated at the ends of every range
    and at every choice, as ``asyncrl train`` would validate them."""
    data = _keys(data, "sweep")
    unknown = sorted(set(data) - set(KEYS))
    need(not unknown, f"sweep: unknown key(s) {', '.join(unknown)}; a sweep file has {KEYS}")
    need("space" in data, "space: a sweep needs a search space (space: {setting: range})")
    base = _keys(data.get("base") or {}, "base")
    need("run_dir" not in base, "base: run_dir: the sweep gives each trial its own")
    space = {name: _param(name, spec) for name, spec in _keys(data["space"], "space").items()}
    need(bool(space), "space: a sweep needs at least one setting to search")
    both = sorted(set(base) & set(space))
    need(not both, f"space: {', '.join(both)}: given in base too; give it in one of them")
    cfg = from_dict(base)
    resolved, family, _ = resolve_for_env(cfg)  # the family as a run decides it
    for values in [{p.name: v} for p in space.values() for v in _ends(p)]:
        try:
            if "env" in values:  # another env: its own family
                resolve_for_env(from_dict(values, cfg))
            else:
                validate(from_dict(values, cfg), family)
        except ConfigError as e:
            shown = ", ".join(f"{k} {format_value(v)}" for k, v in values.items())
            raise ConfigError(f"{e}" + (f" (with {shown} from space)" if shown else "")) from None
    direction = data.get("direction", "maximize")
    need(direction in DIRECTIONS, f"direction: {direction!r} is not one of {DIRECTIONS}")
    objective = _objective(data.get("objective", "final_return"), cfg)
    budget = space.get("total_steps")
    steps = min(_ends(budget)) if budget else resolved.total_steps
    prune = _keys(data.get("prune") or {}, "prune")
    unknown = sorted(set(prune) - set(PRUNE_KEYS))
    need(not unknown, f"prune: unknown key(s) {', '.join(unknown)}; use {PRUNE_KEYS}")
    every = _number("prune: every", prune.get("every", max(1, steps // 20)), int)
    warmup = _number("prune: warmup", prune.get("warmup", steps // 5), int)
    startup = _number("prune: startup_trials", prune.get("startup_trials", 3), int)
    need(every >= 1, f"prune: every must be >= 1 env steps, got {every}")
    need(warmup >= 0, f"prune: warmup must be >= 0 env steps, got {warmup}")
    need(startup >= 1, f"prune: startup_trials must be >= 1, got {startup}")
    enqueue = data.get("enqueue") or []
    need(isinstance(enqueue, list), f"enqueue: must be a list of settings, got {enqueue!r}")
    enqueue = [_keys(e, "enqueue") for e in enqueue]
    for e in enqueue:
        for name, value in e.items():
            need(name in space, f"enqueue: {name} is not in space (only its settings are tried)")
            need(
                space[name].contains(value),
                f"enqueue: {name} {value!r} is outside its space, {space[name].describe()}",
            )
    return Sweep(base, space, objective, direction, every, warmup, startup, tuple(enqueue), data)


def _ends(p: Param) -> list[Any]:
    return list(p.choices) if p.choices else [p.low, p.high]


def load(path: str | Path) -> Sweep:
    return parse(load_yaml(path))


# ------------------------------------------------------------------------------ the study
def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ConfigError("sweep: needs Optuna: pip install 'asyncrl[sweep]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # this module says what happened
    return optuna


def make_pruner(kind: str, sweep: Sweep) -> Any:
    optuna = _optuna()
    need(kind in PRUNERS, f"pruner: {kind!r} is not one of {', '.join(PRUNERS)}")
    if kind == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=sweep.startup_trials, n_warmup_steps=sweep.warmup
        )
    if kind == "halving":  # rungs at warmup x 3^k env steps
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(sweep.warmup, sweep.every))
    return optuna.pruners.NopPruner()


def counted(trials: list[Any]) -> int:
    """Trials that count toward the target: finished, pruned, or failed on their own (a trial
    Ctrl+C stopped, or one a dead sweep left running, is tried anew)."""
    states = ("COMPLETE", "PRUNED")
    return sum(
        t.state.name in states
        or (t.state.name == "FAIL" and t.user_attrs.get("failed", INTERRUPTED) != INTERRUPTED)
        for t in trials
    )


def open_study(sweep: Sweep, storage: str, name: str, seed: int, pruner: str) -> Any:
    """Create the study, or join it (a resumed sweep, another machine): its definition must be
    this sweep's. The sampler's seed is ``seed`` plus the trials already there, so that a
    resumed sweep does not draw its first trials' values again."""
    optuna = _optuna()
    try:
        study = optuna.create_study(
            storage=storage,
            study_name=name,
            direction=sweep.direction,
            pruner=make_pruner(pruner, sweep),
            load_if_exists=True,
        )
    except (ValueError, ImportError, optuna.exceptions.StorageInternalError) as e:
        raise ConfigError(f"storage: {storage} is not a storage Optuna can open: {e}") from None
    definition = study.user_attrs.get("asyncrl_sweep")
    if definition is None:
        study.set_user_attr("asyncrl_sweep", sweep.definition())
        for params in sweep.enqueue:
            study.enqueue_trial(
                {k: json.dumps(v) if isinstance(v, list) else v for k, v in params.items()}
            )
    elif definition != json.loads(json.dumps(sweep.definition())):
        raise ConfigError(
            f"storage: the study {name!r} in {storage} is another sweep's (its base, space, "
            "objective or direction differ); give another --study-name"
        )
    existing = len(study.get_trials(deepcopy=False))
    study.sampler = optuna.samplers.TPESampler(seed=seed + existing, constant_liar=True)
    return study


# ------------------------------------------------------------------------------ trials
@dataclasses.dataclass
class TrialRun:
    """A trial's ``asyncrl train`` child, in a process group of its own (Ctrl+C at the terminal
    reaches only the sweep, which decides what each trial gets), and its metrics being read."""

    trial: Any
    params: dict[str, Any]
    run_dir: Path
    proc: subprocess.Popen
    next_report: int
    last_step: int = 0  # of the values reported
    signals: int = 0  # SIGINTs sent to its group
    pruned: bool = False
    offset: int = 0
    partial: str = ""

    def new_rows(self) -> list[dict[str, Any]]:
        path = self.run_dir / METRICS
        if not path.exists():
            return []
        with path.open() as f:
            f.seek(self.offset)
            text = self.partial + f.read()
            self.offset = f.tell()
        *lines, self.partial = text.split("\n")  # the last, unfinished line waits
        rows = (json.loads(line) for line in lines if line.strip())
        return [r for r in rows if "policy" not in r]

    def interrupt(self, times: int = 1) -> None:
        """Send SIGINT to its process group until it has had ``times`` (a first ends the run at
        its next iteration boundary with a final checkpoint; a second aborts it)."""
        while self.signals < times:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            self.signals += 1


def _die_with_sweep() -> None:
    """In the trial's child, before it runs asyncrl: SIGTERM (a clean end, as SIGINT) if the
    sweep dies, so that a killed sweep leaves no trial training on."""
    die_with_parent(signal.SIGTERM)


def start_trial(study: Any, sweep: Sweep, out: Path) -> TrialRun:
    trial = study.ask()
    params = {name: p.suggest(trial) for name, p in sweep.space.items()}
    run_dir = (out / f"trial-{trial.number:04d}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = run_dir / "trial.yaml"
    settings.write_text(yaml.safe_dump(sweep.settings(params), sort_keys=False))
    trial.set_user_attr("run_dir", str(run_dir))
    trial.set_user_attr("host", socket.gethostname())
    cmd = [sys.executable, "-m", "asyncrl.cli", "train", "--config", str(settings)]
    cmd += ["--run-dir", str(run_dir), "--no-progress"]
    with (run_dir / "train.log").open("w") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_sweep,
        )
    return TrialRun(trial, params, run_dir, proc, next_report=sweep.every)


def report_rows(run: TrialRun, sweep: Sweep) -> bool:
    """Report the objective's column of the trial's new rows to Optuna at the grid steps each
    row reaches; True if anything was reported."""
    column, reported = sweep.objective.column, False
    for row in run.new_rows():
        if column not in row:  # another kind of row (an evaluation's): not this column's step
            continue
        value = row[column]
        while run.next_report <= row["env_steps"]:
            if isinstance(value, int | float) and math.isfinite(value):
                run.trial.report(float(value), run.next_report)
                run.last_step, reported = run.next_report, True
            run.next_report += sweep.every
    return reported


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if line]
    return lines[-1] if lines else "no output"


def finish_trial(study: Any, run: TrialRun, sweep: Sweep, stopping: bool) -> str:
    """Record how the trial ended in the study; returns the line to print."""
    from optuna.trial import TrialState

    code = run.proc.wait()
    report_rows(run, sweep)
    if run.pruned:
        study.tell(run.trial, state=TrialState.PRUNED)
        return f"pruned at {run.last_step:,} env steps"
    if code == 0:
        try:
            value, why = sweep.objective.value(run.run_dir)
        except ConfigError as e:  # the objective names no column of the runs: stop the sweep
            run.trial.set_user_attr("failed", str(e))
            study.tell(run.trial, state=TrialState.FAIL)
            raise
        if value is not None:
            study.tell(run.trial, value)
            return f"finished: {sweep.objective} {value:.4g}"
        run.trial.set_user_attr("failed", why)
        study.tell(run.trial, state=TrialState.FAIL)
        return f"failed: {why}"
    why = INTERRUPTED if stopping else f"exit {code}: {_last_line(run.run_dir / 'train.log')}"
    run.trial.set_user_attr("failed", why)
    study.tell(run.trial, state=TrialState.FAIL)
    return f"failed ({why})"


class _Signals:
    """SIGINT and SIGTERM counted: the loop hands each running trial as many SIGINTs."""

    def __init__(self) -> None:
        self.count = 0

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1

    @contextmanager
    def installed(self) -> Iterator[_Signals]:
        sigs = (signal.SIGINT, signal.SIGTERM)
        previous = {s: signal.signal(s, self._handle) for s in sigs}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, signal.SIG_DFL if handler is None else handler)


@dataclasses.dataclass
class SweepResult:
    trials: list[Any]
    best: Any | None
    interrupted: bool
    table: str


def run_sweep(
    sweep: Sweep,
    out: Path,
    trials: int,
    jobs: int,
    study: Any,
    echo: Callable[[str], None] = print,
) -> SweepResult:
    """Run trials, ``jobs`` at a time, until the study holds ``trials`` that count (see
    :func:`counted`) or Ctrl+C; then the table and best.yaml."""
    running: list[TrialRun] = []
    signals = _Signals()
    with signals.installed():
        try:
            while True:
                if not signals.count and len(running) < jobs:
                    done = counted(study.get_trials(deepcopy=False))
                    while len(running) < jobs and done + len(running) < trials:
                        run = start_trial(study, sweep, out)
                        running.append(run)
                        shown = ", ".join(f"{k} {format_value(v)}" for k, v in run.params.items())
                        echo(f"trial {run.trial.number} started: {shown} ({run.run_dir})")
                if not running:
                    break
                for run in list(running):
                    run.interrupt(signals.count)
                    if report_rows(run, sweep) and not run.pruned and run.trial.should_prune():
                        run.pruned = True
                        run.interrupt(max(1, signals.count))
                    if run.proc.poll() is not None:
                        running.remove(run)
                        ended = finish_trial(study, run, sweep, stopping=signals.count > 0)
                        echo(f"trial {run.trial.number} {ended}")
                time.sleep(POLL)
        finally:
            _stop_all(study, running, sweep)
    all_trials = study.get_trials(deepcopy=False)
    best = _best(study)
    table = render(all_trials, sweep, best)
    echo(table)
    if best is not None:
        write_best(out / BEST, sweep, best)
        echo(
            f"best: trial {best.number}, {sweep.objective} {best.value:.4g}; its settings: "
            f"{out / BEST} (asyncrl train --config {out / BEST})"
        )
    if signals.count:
        echo(
            f"sweep interrupted: {counted(all_trials)} of {trials} trials done; go on with "
            f"asyncrl sweep --resume {out}"
        )
    return SweepResult(all_trials, best, signals.count > 0, table)


def _stop_all(study: Any, running: list[TrialRun], sweep: Sweep) -> None:
    """An error in the sweep itself: stop the trials still running (SIGINT, then SIGKILL of
    their group if one has not ended within KILL_AFTER seconds) and mark them failed."""
    for run in running:
        run.interrupt(1)
    for run in running:
        try:
            run.proc.wait(KILL_AFTER)
        except subprocess.TimeoutExpired:
            os.killpg(run.proc.pid, signal.SIGKILL)
        try:
            finish_trial(study, run, sweep, stopping=True)
        except Exception:  # the storage may be what failed: the trial stays RUNNING there
            pass


def _fail_left_running(study: Any, out: Path) -> None:
    """Mark failed the trials of this directory that a killed sweep (SIGKILL: no time to record
    their end) left RUNNING in the study; like interrupted ones, they do not count."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if Path(t.user_attrs.get("run_dir", "/")).parent == out.resolve():
            study.tell(t.number, state=TrialState.FAIL)


def _best(study: Any) -> Any | None:
    try:
        return study.best_trial
    except ValueError:  # no trial completed
        return None


def best_params(sweep: Sweep, trial: Any) -> dict[str, Any]:
    return {k: _from_choice(v) if sweep.space[k].choices else v for k, v in trial.params.items()}


def write_best(path: Path, sweep: Sweep, trial: Any) -> None:
    """The best trial's settings (the base with its sampled values) as a ``--config`` file."""
    head = (
        f"# asyncrl sweep: trial {trial.number}, {sweep.objective} {trial.value:.6g} "
        f"({trial.user_attrs.get('run_dir', '')})\n"
    )
    settings = sweep.settings(best_params(sweep, trial))
    path.write_text(head + yaml.safe_dump(settings, sort_keys=False))


def render(trials: list[Any], sweep: Sweep, best: Any | None) -> str:
    names = list(sweep.space)
    lines = [
        f"| trial | state | {sweep.objective} | " + " | ".join(names) + " | run dir |",
        "| --- " * (4 + len(names)) + "|",
    ]
    for t in trials:
        state = t.state.name.lower()
        if t.state.name == "FAIL":
            state += f" ({t.user_attrs.get('failed', 'left running by a killed sweep')})"
        if t.value is not None:
            value = f"{t.value:.4g}"
        elif t.intermediate_values:  # a pruned trial: its last reported value
            value = f"({t.intermediate_values[t.last_step]:.4g})"
        else:
            value = "-"
        params = best_params(sweep, t) if t.params else {}
        shown = [format_value(params[n]) if n in params else "-" for n in names]
        mark = " **<-**" if best is not None and t.number == best.number else ""
        lines.append(
            f"| {t.number}{mark} | {state} | {value} | "
            + " | ".join(shown)
            + f" | {t.user_attrs.get('run_dir', '-')} |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------ entry
def sweep(
    file: str | Path | None = None,
    out: str | Path = "",
    trials: int | None = None,
    jobs: int | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    seed: int | None = None,
    pruner: str | None = None,
    resume: str | Path | None = None,
    echo: Callable[[str], None] = print,
) -> SweepResult:
    """A new sweep from ``file`` into ``out``, or (``resume``) the sweep saved in that
    directory, going on to ``trials`` (the saved target if not given). Every setting is
    checked before a trial starts."""
    if resume:
        given = {"file": file, "out": out, "storage": storage, "study_name": study_name,
                 "seed": seed, "pruner": pruner}  # fmt: skip
        for key, value in given.items():
            need(
                value in (None, ""),
                f"{key}: a resumed sweep keeps its own (saved in {Path(resume) / SAVED}); "
                "give only --trials and --jobs with --resume",
            )
        out = Path(resume)
        need((out / SAVED).is_file(), f"resume: {out} holds no sweep (no {SAVED})")
        data = load_yaml(out / SAVED)
        saved = _keys(data.pop("study", {}), "study")
        spec = parse(data)
        storage, study_name = saved.get("storage"), saved["name"]
        seed, pruner = saved["seed"], saved["pruner"]
        trials = trials or saved["trials"]
    else:
        need(file is not None, "sweep: give a sweep file, or --resume SWEEP_DIR")
        spec = load(file)
        seed = 0 if seed is None else seed
        pruner = pruner or "median"
        trials = 20 if trials is None else trials
        out = Path(out) if out else default_study_dir("sweep", from_dict(spec.base))
        need(
            not (out / SAVED).exists(),
            f"out: {out} already holds a sweep; go on with asyncrl sweep --resume {out}",
        )
        study_name = study_name or out.resolve().name
    jobs = 1 if jobs is None else jobs
    need(trials >= 1, f"trials: must be >= 1, got {trials}")
    need(jobs >= 1, f"jobs: must be >= 1 trials at a time, got {jobs}")
    need(pruner in PRUNERS, f"pruner: {pruner!r} is not one of {', '.join(PRUNERS)}")
    url = storage or f"sqlite:///{(out / DB).resolve()}"
    out.mkdir(parents=True, exist_ok=True)
    study = open_study(spec, url, study_name, seed, pruner)
    if resume:
        _fail_left_running(study, out)
    if not resume:
        keep = {"name": study_name, "storage": storage, "seed": seed, "pruner": pruner,
                "trials": trials}  # fmt: skip
        (out / SAVED).write_text(yaml.safe_dump({**spec.data, "study": keep}, sort_keys=False))
    echo(
        f"sweep {study_name}: {trials} trials, {jobs} at a time, {pruner} pruner, "
        f"{spec.direction} {spec.objective}; storage {url}"
    )
    return run_sweep(spec, out, trials, jobs, study, echo)
