"""``asyncrl compare``: the sync-vs-async study over K, as one command.

For every K and mode it trains one run (one after another, so runs never compete for cores),
then tabulates T and EPS = K / T per mode and the EPS ratio async/sync, with the env steps and
seconds each run needed to reach a target return, and draws the curves. The study's directory:

    <out>/runs/<mode>-K<k>/   one ordinary run directory per configuration
    <out>/compare.md          the table (also printed)
    <out>/compare.csv         one row per run, every figure of the table and more
    <out>/return_vs_wall.png, return_vs_steps.png, eps.png

With ``reuse`` a run whose directory already holds a finished run of the same configuration is
read instead of trained again, so a long study can be stopped and resumed.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.config import MODES, ConfigError
from asyncrl.rundir import default_study_dir
from asyncrl.settings import (
    TrainConfig,
    for_env,
    load_run_config,
    resolve,
    resolve_for_env,
    validate,
)
from asyncrl.study.runs import StudyRun, read_summary, study_curve

if TYPE_CHECKING:
    from asyncrl.envs import EnvSpec

RUN_FIELDS = (
    "k",
    "mode",
    "actors",
    "T",
    "eps",
    "env_steps_per_second",
    "policy_lag_mean",
    "env_steps",
    "wall_seconds",
    "final_return",
    "steps_to_target",
    "seconds_to_target",
    "run_dir",
)


def _parse_modes(modes: list[str]) -> list[str]:
    if not modes or any(m not in MODES for m in modes):
        raise ConfigError(f"modes: {','.join(modes)!r} must be a list of {', '.join(MODES)}")
    return list(dict.fromkeys(modes))


def plan(
    base: TrainConfig, ks: list[int], modes: list[str], steps: int, minutes: float, out: Path
) -> list[TrainConfig]:
    """The configuration of every run, validated before anything is trained."""
    return _planned(base, ks, modes, steps, minutes, out)[0]


def _planned(
    base: TrainConfig, ks: list[int], modes: list[str], steps: int, minutes: float, out: Path
) -> tuple[list[TrainConfig], EnvSpec]:
    """:func:`plan`, and the env's spec: the env made once, for the first run, whose family
    (as ``asyncrl train`` decides it) resolves the others."""
    modes = _parse_modes(modes)
    if not ks or any(k < 1 for k in ks):
        raise ConfigError(f"ks: must be a list of env counts >= 1, got {ks}")
    if steps < 1:
        raise ConfigError(f"steps: must be >= 1, got {steps}")
    if minutes < 0:
        raise ConfigError(f"minutes: must be >= 0 (0: no time limit), got {minutes}")
    cfgs: list[TrainConfig] = []
    family = spec = None
    for k in dict.fromkeys(ks):
        for mode in modes:
            cfg = dataclasses.replace(
                base,
                envs_per_actor=k,
                mode=mode,
                total_steps=steps,
                max_seconds=60.0 * minutes,
                run_dir=str(out / "runs" / f"{mode}-K{k}"),
            )
            try:
                if spec is None:
                    cfg, family, spec = resolve_for_env(cfg)
                else:  # the same env, the same family
                    cfg = resolve(cfg, family)
                    validate(cfg)
            except ConfigError as e:
                raise ConfigError(f"{mode} K={k}: {e}") from None
            cfgs.append(cfg)
    assert spec is not None  # ks and modes are not empty
    return cfgs, spec


def _finished_same_run(cfg: TrainConfig, spec: Any) -> dict[str, Any] | None:
    """The summary of the run in cfg.run_dir if it is finished and has the same settings
    (compared as the run saved them: resolved against the env's ``spec`` too)."""
    run_dir = Path(cfg.run_dir)
    summary = read_summary(run_dir)
    if summary is None:
        return None
    saved = load_run_config(run_dir).to_dict()
    wanted = for_env(cfg, spec)[0].to_dict()
    same = all(saved.get(k) == v for k, v in wanted.items() if k not in ("run_dir", "progress"))
    return summary if same else None


def compare(
    base: TrainConfig,
    ks: list[int],
    modes: list[str],
    steps: int,
    minutes: float = 0.0,
    target_return: float | None = None,
    out: Path | str = "",
    reuse: bool = False,
    echo=print,
) -> list[StudyRun]:
    """Train (or reuse) every configuration in turn; write the table, CSV and plots to out."""
    from asyncrl.runtime.trainer import train

    out = Path(out) if out else default_study_dir("compare", base)
    cfgs, spec = _planned(base, ks, modes, steps, minutes, out)
    if not reuse:
        taken = [c.run_dir for c in cfgs if Path(c.run_dir).exists()]
        if taken:
            raise ConfigError(
                f"out: {out} already holds run {taken[0]}; pass --reuse to keep finished runs "
                f"of the same settings, or choose another --out"
            )
    runs = []
    for i, cfg in enumerate(cfgs, 1):
        label = f"[{i}/{len(cfgs)}] {cfg.mode} K={cfg.envs_per_actor}"
        summary = _finished_same_run(cfg, spec) if reuse else None
        reused = summary is not None
        if reused:
            echo(f"{label}: reusing {cfg.run_dir}")
        else:
            echo(f"{label}: training into {cfg.run_dir}")
            summary = train(cfg, overwrite=True)  # a run not reused is started over
        runs.append(
            StudyRun(
                cfg.envs_per_actor,
                cfg.mode,
                Path(cfg.run_dir),
                summary,
                study_curve(cfg.run_dir, summary),
                reused,
            )
        )
    write_outputs(runs, out, base, target_return)
    echo(markdown_table(runs, target_return))
    echo(f"table, CSV and plots in {out}")
    return runs


def _fmt(x: Any, spec: str) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, spec)


def markdown_table(runs: list[StudyRun], target: float | None) -> str:
    """K | sync (T, EPS) | async (T, EPS) | EPS ratio, plus time and steps to the target."""
    by = {(r.k, r.mode): r for r in runs}
    ks = list(dict.fromkeys(r.k for r in runs))
    modes = list(dict.fromkeys(r.mode for r in runs))
    head = ["K"] + [f"{m} (T s, EPS)" for m in modes]
    both = set(modes) == {"sync", "async"}
    if both:
        # EPS counts one actor's envs per training iteration; a sync iteration trains on N
        # actors' batches, so the env-step rate is the like-for-like throughput figure.
        head += ["EPS ratio async/sync", "env steps/s sync, async (ratio)"]
    if target is not None:
        head += [f"{m}: to reach {target:g}" for m in modes]
    head += [f"{m} final return" for m in modes]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for k in ks:
        cells = [str(k)]
        for m in modes:
            r = by.get((k, m))
            cells.append(
                f"({_fmt(r.summary['T'], '.3g')}, {_fmt(r.summary['eps'], '.1f')})" if r else "-"
            )
        if both:
            s, a = by.get((k, "sync")), by.get((k, "async"))
            cells.append(_fmt(a.summary["eps"] / s.summary["eps"], ".2f") if s and a else "-")
            if s and a:
                rs, ra = s.summary["env_steps_per_second"], a.summary["env_steps_per_second"]
                cells.append(f"{rs:,.0f}, {ra:,.0f} ({ra / rs:.2f})")
            else:
                cells.append("-")
        if target is not None:
            for m in modes:
                row = by[(k, m)].row(target) if (k, m) in by else {}
                if row.get("steps_to_target") is None:
                    cells.append("not reached")
                else:
                    cells.append(
                        f"{row['steps_to_target']:,} steps in "
                        f"{_fmt(row['seconds_to_target'], '.0f')} s"
                    )
        for m in modes:
            r = by.get((k, m))
            cells.append(_fmt(r.summary["final_return"], ".1f") if r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_outputs(runs: list[StudyRun], out: Path, base: TrainConfig, target: float | None) -> None:
    from asyncrl.study.plots import plot_eps_bars, plot_returns

    out.mkdir(parents=True, exist_ok=True)
    s = runs[0].summary  # the settings as the runs resolved them (base leaves some to presets)
    title = f"{base.env}, {base.algo}, N = {s['actors']}"
    notes = "T: mean seconds between two training iterations; EPS = K / T.\n"
    if "best_policy" in s:  # a population (study_curve read its best policy's rows)
        title += f", the best of {s['policies']} policies"
        notes += (
            "A population's curve, steps to the target and final return are its best policy's, "
            "at that policy's own env steps; its env steps/s are the whole run's.\n"
        )
    (out / "compare.md").write_text(f"# {title}\n\n{markdown_table(runs, target)}\n\n{notes}")
    with (out / "compare.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=RUN_FIELDS)
        writer.writeheader()
        for r in runs:
            writer.writerow(r.row(target))
    plot_returns(runs, out / "return_vs_wall.png", "wall", title, target)
    plot_returns(runs, out / "return_vs_steps.png", "steps", title, target)
    plot_eps_bars(runs, out / "eps.png", title)
