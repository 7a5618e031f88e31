"""``asyncrl check-env ID``: will a run on this env start and stay sane? Gymnasium's own checker,
then what asyncrl needs of an env: spaces its algorithms take (the same check ``asyncrl train``
makes), seeded resets and steps that repeat, observations of the declared dtype inside the
declared bounds, finite values over a short random rollout, and the time per step with the
N x K ``asyncrl tune`` would likely recommend. One row per check: ok, warn, or FAIL where a run
would fail or the env breaks what asyncrl relies on (docs: Guides, Checking an env).
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from asyncrl.config import ConfigError
from asyncrl.envs import check_env as env_spec_of
from asyncrl.envs import env_family, make_env, resolve_id

OK, WARN, FAIL = "ok", "warn", "FAIL"
DETERMINISM_STEPS = 100  # steps two seeded envs are compared over
CLOSE = 1e-5  # Gymnasium's checker's tolerance (rtol and atol) for "equivalent" observations
# Gymnasium warnings about values a run cannot train on: failures here, not warnings
FATAL_WARNINGS = ("NaN value", "inf value", "not within the observation space")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Row:
    check: str
    result: str  # OK, WARN or FAIL
    detail: str


@dataclass
class Report:
    env_id: str
    rows: list[Row] = field(default_factory=list)
    step_seconds: float | None = None  # mean time of one env.step over the rollout

    def add(self, check: str, result: str, detail: str) -> None:
        self.rows.append(Row(check, result, detail))

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if r.result == FAIL]

    def row(self, check: str) -> Row:
        return next(r for r in self.rows if r.check == check)

    def final_line(self) -> str:
        warned = sum(r.result == WARN for r in self.rows)
        if self.failed:
            names = ", ".join(dict.fromkeys(r.check for r in self.failed))
            return f"{self.env_id}: {len(self.failed)} FAIL ({names}), {warned} warn: a run fails"
        return f"{self.env_id}: no FAIL, {warned} warn: a run can start"


def check(env_id: str, steps: int = 1000, seed: int = 0, algo: str | None = None) -> Report:
    """Run every check on ``env_id`` (``module:EnvId`` imports ``module`` first, as ``--env``
    does): a random rollout of ``steps`` env steps seeded with ``seed``; ``algo``: the one
    algorithm the spaces must suit (None: any). An id that names no env is a ConfigError."""
    if steps < 1:
        raise ConfigError(f"steps: must be >= 1, got {steps}")
    resolved = resolve_id(env_id)
    report = Report(env_id)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _checks(report, env_id, resolved, steps, seed, algo)
    _warnings(report, caught)
    return report


def _checks(
    report: Report, env_id: str, resolved: str, steps: int, seed: int, algo: str | None
) -> None:
    try:
        make_env(resolved).close()
    except Exception as e:
        report.add("make", FAIL, _one_line(e))
        return
    spec = _spaces(report, env_id, algo)
    family = env_family(resolved, spec)
    made = f"{resolved}: family {family} (--preset auto takes the {family} preset)"
    report.rows.insert(0, Row("make", OK, made))
    _gymnasium(report, resolved)
    _determinism(report, resolved, seed)
    _rollout(report, resolved, steps, seed, spec)
    if report.step_seconds is not None and not report.failed:  # no N x K for a failing env
        _suggestion(report, env_id, family, algo)


def _warnings(report: Report, caught: list[warnings.WarningMessage]) -> None:
    """One row per distinct warning (Gymnasium's checker and the env checker wrapper of the
    envs stepped here often say the same thing): warn, or FAIL for values no run trains on."""
    seen = set()
    for w in caught:
        text = _ANSI.sub("", str(w.message)).strip()
        if text in seen:
            continue
        seen.add(text)
        if text.startswith("WARN: "):  # Gymnasium's logger
            check, text = "gymnasium warning", text.removeprefix("WARN: ")
        else:
            check = f"warning ({w.category.__name__})"
        fatal = any(s in text for s in FATAL_WARNINGS)
        report.add(check, FAIL if fatal else WARN, text)


def _one_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else 'no detail'}"


def _spaces(report: Report, env_id: str, algo: str | None) -> Any:
    """The spec as ``asyncrl train`` reads it and which algorithms take it: the checks, and the
    one-line refusals, of ``settings.env_spec``, which a run makes before it starts."""
    from asyncrl.algos import algorithms
    from asyncrl.settings import TrainConfig, env_spec

    try:
        spec = env_spec_of(env_id)
    except ConfigError as e:
        report.add("spaces", FAIL, str(e))
        return None
    env = make_env(resolve_id(env_id))
    spaces = f"observation {_space(env.observation_space)}, action {_space(env.action_space)}"
    env.close()
    refusals = {a.name: a.accepts(spec) for a in algorithms()}
    takers = [name for name, why in refusals.items() if why is None]
    if algo is not None:
        try:
            env_spec(TrainConfig(env=env_id, algo=algo))  # the refusal train would print
        except ConfigError as e:
            report.add("spaces", FAIL, f"{e}; {spaces}")
            return spec
    if not takers:
        report.add("spaces", FAIL, f"{spaces}; " + "; ".join(filter(None, refusals.values())))
        return spec
    report.add("spaces", OK, f"{spaces}; taken by {', '.join(takers)}")
    return spec


def _space(space: gym.Space) -> str:
    """A Box by shape, dtype and bounds' range (its repr lists every bound); others as named."""
    if isinstance(space, gym.spaces.Box):
        return f"Box{space.shape} {space.dtype} {_bounds(space)}"
    return str(space)


def _gymnasium(report: Report, env_id: str) -> None:
    """Gymnasium's checker on the env itself (the registered env without asyncrl's or
    Gymnasium's wrappers, as the checker asks). Rendering is not checked: training never
    renders."""
    from gymnasium.utils.env_checker import check_env

    env = make_env(env_id, atari_preprocessing=False)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    except Exception as e:
        report.add("gymnasium check_env", FAIL, _one_line(e))
        return
    finally:
        env.close()
    report.add("gymnasium check_env", OK, "passed (render not checked: training never renders)")


def _leaves(obs: Any) -> Iterator[np.ndarray]:
    """The arrays of an observation of any space (Dict and Tuple ones nest)."""
    if isinstance(obs, dict):
        for value in obs.values():
            yield from _leaves(value)
    elif isinstance(obs, tuple | list):
        for value in obs:
            yield from _leaves(value)
    else:
        yield np.asarray(obs)


def _compare(a: Any, b: Any) -> tuple[str, float]:
    """``same`` (bit for bit, NaN equal to NaN: a NaN env repeats itself too), ``close``
    (within the tolerance of Gymnasium's checker, which asserts that and only warns about
    the rest) or ``differs``; and the largest difference."""
    la, lb = list(_leaves(a)), list(_leaves(b))
    if len(la) != len(lb) or any(x.shape != y.shape for x, y in zip(la, lb, strict=True)):
        return "differs", np.inf
    verdict, worst = "same", 0.0
    for x, y in zip(la, lb, strict=True):
        if x.dtype.kind not in "biuf" or y.dtype.kind not in "biuf":
            if not np.array_equal(x, y):
                return "differs", np.inf
            continue
        x, y = x.astype(np.float64), y.astype(np.float64)
        if np.array_equal(x, y, equal_nan=True):
            continue
        with np.errstate(invalid="ignore"):
            diff = np.where(np.isnan(x) & np.isnan(y), 0.0, np.abs(x - y))
        worst = max(worst, float(np.nan_to_num(diff, nan=np.inf).max()))
        if not np.allclose(x, y, rtol=CLOSE, atol=CLOSE, equal_nan=True):
            verdict = "differs"
        elif verdict == "same":
            verdict = "close"
    return verdict, worst


def _determinism(report: Report, env_id: str, seed: int) -> None:
    """Two envs made as actors make them, reset with one seed and stepped with one seeded
    sequence of random actions, must agree at every step; one env reset again with the seed
    must start as before. Evaluation seeds, restarted envs and the inline backend's repeatable
    runs all rest on it. Differences within Gymnasium's tolerance (float residue a simulator
    carries across resets) are a warning: the run is then repeatable only nearly."""
    envs = [make_env(env_id) for _ in range(2)]
    found: list[tuple[str, float, str]] = []  # (verdict, largest difference, where) of each
    t = 0
    try:
        first = [env.reset(seed=seed)[0] for env in envs]
        found.append((*_compare(*first), f"reset(seed={seed}) of two envs"))
        envs[0].action_space.seed(seed)
        for t in range(1, DETERMINISM_STEPS + 1):
            action = envs[0].action_space.sample()
            a, b = (env.step(action) for env in envs)
            found.append(
                (*_compare(a[:4], b[:4]), f"step {t} after reset(seed={seed}) of two envs")
            )
            if a[2] or a[3] or found[-1][0] == "differs":
                break
        again = envs[0].reset(seed=seed)[0]
        found.append((*_compare(again, first[0]), f"reset(seed={seed}) again after {t} steps"))
    except Exception as e:
        report.add("seeded determinism", FAIL, f"raised: {_one_line(e)}")
        return
    finally:
        for env in envs:
            env.close()
    declared = envs[0].spec is not None and envs[0].spec.nondeterministic
    for verdict, _, where in found:
        if verdict == "differs":
            result = WARN if declared else FAIL
            why = " (registered as nondeterministic)" if declared else ""
            report.add("seeded determinism", result, f"non-deterministic: {where} differs{why}")
            return
    close = [(worst, where) for verdict, worst, where in found if verdict == "close"]
    if close:
        worst, where = close[0]
        report.add(
            "seeded determinism",
            WARN,
            f"{where} differs by {worst:.2g}, within {CLOSE:g}: repeatable only nearly",
        )
        return
    report.add("seeded determinism", OK, f"reset(seed={seed}) and {t} random steps repeat exactly")


def _rollout(report: Report, env_id: str, steps: int, seed: int, spec: Any) -> None:
    """``steps`` random steps of one env as an actor makes it (resetting at each episode's end):
    each observation of the space's shape and dtype, inside its bounds, finite, each reward
    finite; and the time one step takes."""
    env = make_env(env_id)
    space = env.observation_space
    env.action_space.seed(seed)
    episodes, first_bad, outside, dtypes, t = 0, None, None, set(), 0
    stepped = 0.0

    def seen(obs: Any, when: str) -> None:
        nonlocal first_bad, outside
        dtypes.update(str(x.dtype) for x in _leaves(obs))
        if outside is None and (where := _outside(space, obs)):
            outside = f"{when}: {where}"
        if first_bad is None and (what := _non_finite(obs)):
            first_bad = f"observation has {what} {when}"

    try:
        obs, _ = env.reset(seed=seed)
        seen(obs, "at the first reset")
        for t in range(1, steps + 1):
            action = env.action_space.sample()
            start = time.perf_counter()
            obs, reward, terminated, truncated, _ = env.step(action)
            stepped += time.perf_counter() - start
            seen(obs, f"at step {t}")
            if first_bad is None and (what := _bad_reward(reward)):
                first_bad = f"reward is {what} at step {t}"
            if terminated or truncated:
                episodes += 1
                obs, _ = env.reset()
                seen(obs, f"at the reset after step {t}")
    except Exception as e:
        report.add("random rollout", FAIL, f"the env raised at step {t}: {_one_line(e)}")
        return
    finally:
        env.close()
    report.step_seconds = stepped / steps
    _dtype(report, space, dtypes, spec)
    if outside is None:
        report.add("observation bounds", OK, f"all {steps} steps inside: {_bounds(space)}")
    else:
        report.add("observation bounds", FAIL, f"outside its space {outside}")
    ran = f"{steps} random steps, {episodes} episode{'' if episodes == 1 else 's'} ended"
    if first_bad is None:
        report.add("finite values", OK, f"{ran}: observations and rewards finite")
    else:
        report.add("finite values", FAIL, f"{first_bad} ({ran})")
    per_second = 1.0 / report.step_seconds if report.step_seconds > 0 else float("inf")
    report.add(
        "time per step",
        OK,
        f"{report.step_seconds * 1e6:,.1f} us per env.step ({per_second:,.0f} steps/s on one "
        f"core; mean of {steps})",
    )


def _non_finite(obs: Any) -> str | None:
    for x in _leaves(obs):
        if x.dtype.kind in "fc" and not np.isfinite(x).all():
            kind = "NaN" if np.isnan(x).any() else "inf"
            return f"{kind} ({int((~np.isfinite(x)).sum())} of {x.size} values)"
    return None


def _bad_reward(reward: Any) -> str | None:
    try:
        value = float(reward)
    except (TypeError, ValueError):
        return f"not a number ({reward!r})"
    return None if np.isfinite(value) else str(value)


def _outside(space: gym.Space, obs: Any) -> str | None:
    """Where an observation leaves its space (None: it does not). For a Box: its shape, or the
    first value beyond a bound; a NaN is no excursion here (the finite-values check names it),
    nor is a dtype (the dtype check's)."""
    if not isinstance(space, gym.spaces.Box):
        return None if space.contains(obs) else f"{obs!r} is not in {space}"
    x = np.asarray(obs)
    if x.shape != space.shape:
        return f"shape {x.shape}, the space's is {space.shape}"
    with np.errstate(invalid="ignore"):
        below, above = x < space.low, x > space.high
    for mask, bound, sign, name in (
        (below, space.low, "<", "low"),
        (above, space.high, ">", "high"),
    ):
        if mask.any():
            i = tuple(int(v) for v in np.argwhere(mask)[0])
            beyond = int((below | above).sum())
            return f"value {x[i]:g} at {i} {sign} {name} {bound[i]:g} ({beyond} of {x.size} values)"
    return None


def _bounds(space: gym.Space) -> str:
    if not isinstance(space, gym.spaces.Box):
        return f"{type(space).__name__} space"
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)
    unbounded = int((~np.isfinite(low) | ~np.isfinite(high)).sum())
    if unbounded == low.size:
        return f"unbounded (all {low.size} values)"
    finite = np.concatenate([low[np.isfinite(low)], high[np.isfinite(high)]])
    text = f"[{finite.min():g}, {finite.max():g}]"
    if unbounded:
        text += f" ({unbounded} of {low.size} values unbounded)"
    return text


def _dtype(report: Report, space: gym.Space, dtypes: set[str], spec: Any) -> None:
    """The dtype observations come in, against the space's; what asyncrl keeps them as."""
    if spec is None or not isinstance(space, gym.spaces.Box):
        report.add("observation dtype", OK, f"{', '.join(sorted(dtypes))} (spaces not taken)")
        return
    kept = f"kept as {spec.obs_dtype}"
    if dtypes != {str(space.dtype)}:
        came = ", ".join(sorted(dtypes))
        what = f"observations are {came}, the space says {space.dtype}; {kept}"
        report.add("observation dtype", WARN, what)
    else:
        report.add("observation dtype", OK, f"{space.dtype}, as the space says; {kept}")


def _suggestion(report: Report, env_id: str, family: str, algo: str | None) -> None:
    from asyncrl.settings import TrainConfig, resolve
    from asyncrl.study.tune import suggest
    from asyncrl.system import cpus_allowed

    cpus = cpus_allowed()
    base = resolve(TrainConfig(env=env_id, algo=algo or "ppo"), family)
    s = suggest(base, report.step_seconds or 0.0, cpus)
    report.add(
        "tune suggests",
        OK,
        f"{s.flags} (a guess from the time per step and {cpus} CPUs); measure: "
        f"{s.command(env_id, '' if algo in (None, 'ppo') else f' --algo {algo}')}",
    )


def render(report: Report, console: Any = None) -> None:
    """The table, then the final line."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"check-env {report.env_id}")
    table.add_column("check", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold")
    style = {OK: "green", WARN: "yellow", FAIL: "bold red"}
    for r in report.rows:
        table.add_row(r.check, Text(r.result, style[r.result]), Text(r.detail))
    console = console or Console()
    console.print(table)
    console.print(report.final_line(), markup=False, highlight=False)
