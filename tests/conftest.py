"""Shared test helpers: a small fast config, and probes for leftover processes and segments."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from asyncrl.nets import FlatParams
from asyncrl.rundir import METRICS
from asyncrl.settings import TrainConfig
from asyncrl.study.runs import read_curve

# Tests share 2 cores with the actor processes they start and with the other test worker
# (-n 2): one torch thread in this process, as the learner has in a run (threads_learner
# defaults to 1).
torch.set_num_threads(1)


def how_it_went(summary: dict) -> str:
    """A learning run's figures and its curve (the mean return every ~32 iterations), in full,
    for a failed bar: a run on a live schedule does not repeat, so this is all there is to go on.
    Of a population, each policy's figures and curve."""
    keys = ("final_return", "episodes", "env_steps", "policy_lag_mean", "policy_lag_max",
            "actor_restarts", "env_restarts", "dropped_rollouts", "wall_seconds")  # fmt: skip
    run_dir = Path(summary.get("run_dir", ""))
    logged = (run_dir / METRICS).is_file()
    parts = [(r["policy"], r) for r in summary.get("population") or []] or [(None, summary)]
    out = []
    for policy, row in parts:
        figures = {k: row[k] for k in keys if k in row}
        name = "" if policy is None else f"policy {policy}: "
        if not logged:
            out.append(f"{name}{figures}; no {METRICS}")
            continue
        c = read_curve(run_dir, policy)
        curve = [(n, round(r)) for n, r in zip(c.env_steps, c.returns, strict=True) if r == r]
        out.append(f"{name}{figures}; curve {curve[::32] + curve[-1:]}")
    return "\n".join(out)


def shm_segments(pid: int | None = None) -> set[str]:
    """Names of this project's shared-memory segments (of one creating process, if given)."""
    prefix = "asyncrl_" if pid is None else f"asyncrl_{pid}_"
    return {p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(prefix)}


def descendants(pid: int) -> set[int]:
    """Pids of all live processes below ``pid``, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - found
        found |= frontier
    return found


def move_parameters(params: list[torch.Tensor]) -> np.ndarray:
    """Swap ``params``' storage for a new vector, values kept, as FlatParams.view_into does
    for Hogwild! and the policy stores; returns the vector."""
    flat = FlatParams.of(params)
    vector = np.empty(flat.numel, np.float32)
    flat.write_to(vector)
    assert flat.view_into(vector)
    return vector


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def population_cfg(tmp_path, **kw) -> TrainConfig:
    """A small population of two on CartPole-v1 (the population tests' settings); ``kw`` on
    top."""
    base = dict(
        total_steps=4096,
        actors=2,
        envs_per_actor=4,
        rollout=16,
        minibatch_size=32,
        epochs=1,
        progress=False,
        tensorboard=False,
        run_dir=str(tmp_path / "run"),
        checkpoint_every=0,
        policies=2,
    )
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture
def small_cfg(tmp_path) -> TrainConfig:
    return TrainConfig(
        total_steps=2048,
        actors=2,
        envs_per_actor=4,
        rollout=16,
        minibatch_size=32,
        epochs=2,
        progress=False,
        tensorboard=False,
        run_dir=str(tmp_path / "run"),
        checkpoint_every=0,
    )


@pytest.fixture
def runs_seen(monkeypatch) -> list:
    """Replace the training itself -- not the checks and the claim of the run directory before
    it -- by a recorder: each run appends ``(cfg, resume, files in its run directory)``."""
    seen: list = []

    def record(learning, run, run_dir, resume, on_start, callback, stop):
        seen.append((run.cfg, resume, sorted(p.name for p in run_dir.iterdir())))
        return {"run_dir": str(run_dir)}

    monkeypatch.setattr("asyncrl.runtime.trainer.hosted", record)
    return seen


# ---------------------------------------------------------------------- skips in CI
# CI (.ci/run sets ASYNCRL_CI_NO_SKIP=1) installs every extra, so a skip there means tests that
# quietly stopped running (an extra that no longer installs, a tool gone from the machine): it
# fails the run unless its reason starts with one of these. A local run skips as it likes.
ALLOWED_SKIPS = (
    "this machine has CUDA",  # CPU-only checks, on a machine with a GPU (CI has none)
    "a display is present",  # the no-display video error, where there is a display
    "no native bfloat16",  # bf16 steps where a run would refuse --precision bf16 (emulated)
)
_unexpected_skips: list[tuple[str, str]] = []
_xdist_worker = False  # an xdist worker: its reports reach the controller, which judges them


def pytest_configure(config) -> None:
    global _xdist_worker
    _xdist_worker = hasattr(config, "workerinput")


def _ci_no_skip() -> bool:
    return os.environ.get("ASYNCRL_CI_NO_SKIP", "") not in ("", "0")


def _note_skip(report) -> None:
    """Remember a skip CI does not allow (on the xdist controller, which sees every report)."""
    if not (_ci_no_skip() and report.skipped) or hasattr(report, "wasxfail") or _xdist_worker:
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    if not reason.startswith(ALLOWED_SKIPS):
        _unexpected_skips.append((report.nodeid, reason))


def pytest_runtest_logreport(report) -> None:
    _note_skip(report)


def pytest_collectreport(report) -> None:
    _note_skip(report)  # a whole module skipped (importorskip at its top)


def pytest_terminal_summary(terminalreporter) -> None:
    if _unexpected_skips:
        terminalreporter.section("skips CI does not allow (ASYNCRL_CI_NO_SKIP)", red=True)
        for nodeid, reason in _unexpected_skips:
            terminalreporter.line(f"{nodeid}: {reason}")
        terminalreporter.line(
            f"{len(_unexpected_skips)} unexpected skip(s): install what they need, or add the "
            "reason to ALLOWED_SKIPS in tests/conftest.py with why"
        )


def pytest_sessionfinish(session, exitstatus) -> None:
    if _unexpected_skips and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _no_leaks():
    """Every test must leave no segment and no child process of this test process behind."""
    before = shm_segments(os.getpid())
    yield
    assert shm_segments(os.getpid()) - before == set(), "shared-memory segments left behind"
    import multiprocessing as mp

    for child in mp.active_children():
        if child.name.startswith("asyncrl"):
            raise AssertionError(f"child process {child.name} left running")
