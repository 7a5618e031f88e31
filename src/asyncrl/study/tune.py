"""``asyncrl tune``: measure, on this machine, which N, K and backend feed the learner fastest.

ALF's guide: T "might be affected by KN because the rollout time of each actor depends on the
computational resource constraints"; it must be verified empirically. So every candidate gets a
short probe (an ordinary training run cut off by a wall-clock limit), and the measured T, EPS,
env steps/s and policy lag are tabulated.

The recommendation ranks by env steps/s, the samples the learner sees per second: EPS = K / T
compares runs with the same training batch, but across N in sync mode the batch (N x K x T)
changes, and env steps/s is the common currency. Among the settings within 5% of the fastest,
the one with the least policy lag (then the fewest envs) is recommended: more actors buy little
speed past that point and cost sample efficiency.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import time
from pathlib import Path
from typing import Any

from asyncrl.config import BACKENDS, ConfigError
from asyncrl.rundir import default_study_dir
from asyncrl.settings import TrainConfig, resolve_for_env, validate

MIN_PROBE_SECONDS = 8.0  # process start-up plus a few iterations
NEAR_BEST = 0.95
FIELDS = (
    "backend",
    "actors",
    "k",
    "T",
    "eps",
    "env_steps_per_second",
    "policy_lag_mean",
    "iterations",
    "seconds",
)


def plan(
    base: TrainConfig, ns: list[int], ks: list[int], backends: list[str], seconds: float, out: Path
) -> list[TrainConfig]:
    if not ns or any(n < 1 for n in ns):
        raise ConfigError(f"ns: must be a list of actor counts >= 1, got {ns}")
    if not ks or any(k < 1 for k in ks):
        raise ConfigError(f"ks: must be a list of env counts >= 1, got {ks}")
    if not backends or any(b not in BACKENDS for b in backends):
        raise ConfigError(
            f"backends: {','.join(backends)!r} must be a list of {', '.join(BACKENDS)}"
        )
    probes = list(itertools.product(dict.fromkeys(backends), dict.fromkeys(ns), dict.fromkeys(ks)))
    share = seconds / len(probes)
    if share < MIN_PROBE_SECONDS:
        raise ConfigError(
            f"seconds: {seconds:g} s for {len(probes)} probes leaves {share:.1f} s each; give at "
            f"least {MIN_PROBE_SECONDS * len(probes):g} s or fewer candidates"
        )
    cfgs = []
    for backend, n, k in probes:
        cfg = dataclasses.replace(
            base,
            backend=backend,
            actors=n,
            envs_per_actor=k,
            total_steps=10**12,  # the wall-clock limit ends a probe
            max_seconds=share,
            run_dir=str(out / "probes" / f"{backend}-N{n}-K{k}"),
            checkpoint_every=0.0,
            progress=False,
            tensorboard=False,
            wandb=False,  # probes measure speed: they are no experiments to track
        )
        try:
            validate(cfg)
        except ConfigError as e:
            raise ConfigError(f"{backend} N={n} K={k}: {e}") from None
        cfgs.append(cfg)
    return cfgs


def recommend(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest measured setting, or a near-fastest one with less lag (see module doc)."""
    measured = [
        r for r in rows if r["iterations"] >= 3 and math.isfinite(r["env_steps_per_second"])
    ]
    if not measured:
        return None
    best = max(r["env_steps_per_second"] for r in measured)
    near = [r for r in measured if r["env_steps_per_second"] >= NEAR_BEST * best]
    lag = lambda r: r["policy_lag_mean"] if math.isfinite(r["policy_lag_mean"]) else 0.0
    return min(
        near, key=lambda r: (round(lag(r), 1), r["actors"] * r["k"], -r["env_steps_per_second"])
    )


def tune(
    base: TrainConfig,
    ns: list[int],
    ks: list[int],
    backends: list[str],
    seconds: float,
    out: Path | str = "",
    echo=print,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    from asyncrl.runtime.trainer import train

    base = resolve_for_env(base)[0]  # the family as a run decides it: the env made once
    out = Path(out) if out else default_study_dir("tune", base)
    cfgs = plan(base, ns, ks, backends, seconds, out)
    start = time.perf_counter()
    rows = []
    for i, cfg in enumerate(cfgs, 1):
        echo(
            f"[{i}/{len(cfgs)}] probing {cfg.backend} N={cfg.actors} K={cfg.envs_per_actor} "
            f"for {cfg.max_seconds:.0f} s"
        )
        s = train(cfg, overwrite=True)  # a probe is disposable: rerun into the same place
        rows.append(
            {
                "backend": cfg.backend,
                "actors": cfg.actors,
                "k": cfg.envs_per_actor,
                "T": s["T"],
                "eps": s["eps"],
                "env_steps_per_second": s["env_steps_per_second"],
                "policy_lag_mean": s["policy_lag_mean"],
                "iterations": s["iterations"],
                "seconds": s["wall_seconds"],
            }
        )
    elapsed = time.perf_counter() - start
    best = recommend(rows)
    text = report(base, rows, best, elapsed, seconds)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tune.md").write_text(text + "\n")
    with (out / "tune.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    echo(text)
    return rows, best


def _f(x: float, spec: str) -> str:
    return format(x, spec) if math.isfinite(x) else "-"


def report(
    base: TrainConfig,
    rows: list[dict[str, Any]],
    best: dict[str, Any] | None,
    elapsed: float,
    budget: float,
) -> str:
    lines = [
        f"{base.env}, {base.algo}, {base.mode} mode, rollout {base.rollout}: "
        f"{len(rows)} probes in {elapsed:.0f} s (budget {budget:g} s)",
        "",
        "| backend | N | K | T (s) | EPS | env steps/s | policy lag | iterations |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        mark = " **<-**" if r is best else ""
        lines.append(
            f"| {r['backend']} | {r['actors']} | {r['k']} | {_f(r['T'], '.3g')} | "
            f"{_f(r['eps'], '.1f')} | {_f(r['env_steps_per_second'], ',.0f')}{mark} | "
            f"{_f(r['policy_lag_mean'], '.2f')} | {r['iterations']} |"
        )
    lines.append("")
    if best is None:
        lines.append(
            "no recommendation: no probe finished 3 training iterations; give more seconds"
        )
    else:
        lines.append(
            f"recommended: --backend {best['backend']} --actors {best['actors']} "
            f"--envs-per-actor {best['k']} ({best['env_steps_per_second']:,.0f} env steps/s, "
            f"EPS {best['eps']:.1f}, policy lag {_f(best['policy_lag_mean'], '.2f')})"
        )
    return "\n".join(lines)


# An env step slower than this costs the same per env whatever K is (PyBullet's ~1.2 ms steps:
# EPS flat in K on When does async help?); faster ones gain from a larger K, which spreads one
# batched action choice over more envs (HalfCheetah, CartPole: EPS rises with K).
SLOW_STEP_SECONDS = 5e-4
START_SECONDS = 4.0  # a probe's process start-up, before its first iteration
PROBE_ITERATIONS = 10  # iterations a probe should reach (recommend() needs 3)


@dataclasses.dataclass(frozen=True)
class Suggestion:
    """A starting point for N, K and backend, guessed from one env's time per step; and the
    ``asyncrl tune`` grid that measures it."""

    backend: str
    actors: int
    k: int
    ns: list[int]
    ks: list[int]
    seconds: float

    @property
    def flags(self) -> str:
        return f"--backend {self.backend} --actors {self.actors} --envs-per-actor {self.k}"

    def command(self, env_id: str, flags: str = "") -> str:
        ns, ks = ",".join(map(str, self.ns)), ",".join(map(str, self.ks))
        return f"asyncrl tune --env {env_id}{flags} --ns {ns} --ks {ks} --seconds {self.seconds:g}"


def suggest(
    base: TrainConfig, step_seconds: float, cpus: int, ks: tuple[int, ...] = (8, 16, 32)
) -> Suggestion:
    """What tune tends to recommend, without running a probe, from ``step_seconds`` (one env's
    measured time per step) and the CPUs of this machine, by the rules this project's study
    measured: the process backend (it overlaps stepping and learning on separate cores); one
    actor per CPU (on 2 cores N = 2 beat N = 1 and N = 3); the largest K where batching pays,
    the smallest for an env slower than SLOW_STEP_SECONDS a step, where T only grows with K.
    ``base`` is a resolved config (its rollout sizes the probes: each long enough for
    PROBE_ITERATIONS iterations of the largest K). A guess; the tune command measures it."""
    actors = max(1, cpus)
    k = ks[0] if step_seconds >= SLOW_STEP_SECONDS else ks[-1]
    ns = sorted({1, actors})
    iteration = base.rollout * max(ks) * step_seconds
    share = max(MIN_PROBE_SECONDS, START_SECONDS + PROBE_ITERATIONS * iteration)
    seconds = 10.0 * math.ceil(share * len(ns) * len(ks) / 10.0)
    return Suggestion("process", actors, k, ns, list(ks), seconds)
