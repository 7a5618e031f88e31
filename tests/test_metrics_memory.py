"""Memory over long runs. The per-iteration bookkeeping of a run holds O(1) memory in the
number of iterations: a one-env SAC run makes an iteration per env step, 10M of them for 10M
steps. And every metrics row carries each process's resident memory, with one warning line for
a process that keeps growing past what its buffers explain (a leaking env, in a real run)."""

from __future__ import annotations

import io
import json
import mmap
import os
import re
import time
import tracemalloc

import pytest

from asyncrl.metrics import RowWindow, Throughput
from asyncrl.runtime.memory import MB, Growth, MemoryWatch, Process, resident_bytes
from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig

ITERATIONS = 1_000_000
LOG_EVERY = 1_000  # the default for one-env SAC: a row per 1,000 env steps
BOUND = 2 * 1024 * 1024  # bytes; lists of every interval and lag took ~150 MB here


def test_a_million_iterations_keep_memory_bounded():
    stats = {
        "samples": 1.0,
        "policy_lag_mean": 0.5,
        "policy_lag_max": 1.0,
        "actor_wait_seconds": 0.0,
        "rollout_seconds": 1e-4,
        "learn_seconds": 1e-4,
        "loss/q": 0.1,
    }
    meter = Throughput(envs_per_actor=1)
    window = RowWindow(envs_per_actor=1)
    t0 = time.perf_counter()
    tracemalloc.start()
    try:
        for i in range(1, ITERATIONS + 1):
            window.add({**stats, **meter.iteration(0.0, stats)})
            if i % LOG_EVERY == 0:
                window.fold()
            if i == 10 * LOG_EVERY:  # warmed up: every lazily made object exists by now
                tracemalloc.reset_peak()
                base, _ = tracemalloc.get_traced_memory()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    seconds = time.perf_counter() - t0
    assert peak - base < BOUND, f"peak grew {peak - base:,} bytes over {ITERATIONS:,} iterations"
    assert current - base < 64 * 1024, f"{current - base:,} bytes still held"
    assert meter.iterations == ITERATIONS and meter.lag_summary() == (0.5, 1.0)
    print(f"{ITERATIONS:,} iterations in {seconds:.1f} s")


# ------------------------------------------------------------------ resident memory


def _feed(growth: Growth, mb: list[float], replay_mb: list[float] | None = None) -> list[int]:
    """The samples (indices) at which ``growth`` says the process keeps growing; one sample
    per 1,000 env steps."""
    replay_mb = replay_mb or [0.0] * len(mb)
    return [
        i
        for i, (m, r) in enumerate(zip(mb, replay_mb, strict=True))
        if growth.add(1000 * i, int(m * MB), int(r * MB))
    ]


def test_a_flat_process_with_noise_and_a_warm_up_is_not_growing():
    # the first updates compile and allocate (+200 MB), then a few MB of noise for a long run
    mb = [300, 450, 500, 500] + [500 + (7 * i % 11) for i in range(2000)]
    assert _feed(Growth(), mb) == []


def test_one_late_allocation_is_not_a_leak():
    # a checkpoint or an evaluation late in the run: one step of 300 MB, then flat
    mb = [500] * 50 + [800] * 500
    assert _feed(Growth(), mb) == []


def test_a_steady_leak_is_found_once_past_its_limit():
    mb = [400.0 + 10 * i for i in range(200)]  # 10 MB a sample, from the start
    found = _feed(Growth(), mb)
    assert len(found) == 1  # once, not at every sample after
    base = mb[Growth.WARMUP]
    limit = max(Growth.MIN_MB, Growth.FRACTION * base)
    assert mb[found[0]] - base > limit  # only past the limit
    assert mb[found[0] - 1] - base <= limit  # and as soon as it is past


def test_a_slow_leak_is_found_too():
    # 1 MB a sample (under the tolerance of a rise): the rises come every few samples
    mb = [400.0 + i for i in range(400)]
    assert len(_feed(Growth(), mb)) == 1


def test_a_replay_that_fills_explains_its_growth():
    # SAC: the replay fills 2 GB over the run, the process grows with it (page by page)
    replay = [min(2048.0, 8.0 * i) for i in range(600)]
    mb = [600 + r + (5 * i % 7) for i, r in enumerate(replay)]
    assert _feed(Growth(), mb, replay) == []
    # the same growth with no buffer to explain it is a leak
    assert len(_feed(Growth(), mb)) == 1
    # and a leak beside a filling replay is still found
    leaking = [m + 2.0 * i for i, m in enumerate(mb)]
    assert len(_feed(Growth(), leaking, replay)) == 1


def test_resident_bytes_of_this_process_and_of_none():
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("no /proc: the figures are absent")
    assert resident_bytes(os.getpid()) > 10 * MB  # a Python with numpy and torch loaded
    assert resident_bytes(2**22 + 1) is None  # above Linux's largest pid: no such process


def test_memory_watch_names_a_growing_process_once_in_one_line():
    """This process, made to grow for real by 4 MB a sample (limits scaled down to match)."""
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("no /proc: the figures are absent")
    out = io.StringIO()
    watch = MemoryWatch(out, warmup=1, min_mb=16, fraction=0.0)
    held = []
    rows = []
    for i in range(16):
        rows.append(watch.sample(100 * i, [Process("actor_mb/3", "actor 3", os.getpid())]))
        held.append(_touched_pages(4 * MB))
    assert all(set(r) == {"memory/actor_mb/3"} for r in rows)
    assert rows[-1]["memory/actor_mb/3"] - rows[0]["memory/actor_mb/3"] >= 16 * 4 - 8
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"asyncrl: warning: actor 3 (pid {os.getpid()}) resident memory")
    assert lines[0].endswith("a leak in the env or a wrapper?")
    # a process that is gone has no figure (and is forgotten)
    assert watch.sample(1600, [Process("actor_mb/0", "actor 0", 2**22 + 1)]) == {}
    assert watch.growth == {}


def _touched_pages(size: int) -> mmap.mmap:
    """``size`` bytes of fresh anonymous pages, each written: resident for certain. (A bytes
    object may reuse heap a long-lived worker freed earlier, and then resident memory stays.)"""
    region = mmap.mmap(-1, size)
    for offset in range(0, size, mmap.PAGESIZE):
        region[offset] = 1
    return region


LEAK_LINE = re.compile(
    r"asyncrl: warning: actor (\d) \(pid (\d+)\) resident memory grew from [\d,]+ MB to "
    r"[\d,]+ MB over [\d,]+ env steps, past what its buffers explain: a leak in the env "
    r"\(fake_envs:Leaky-v0\) or a wrapper\?"
)


def _short_run(tmp_path, env: str) -> TrainConfig:
    """Two actor processes, a row per iteration of 2 x 16 env steps: 30 rows."""
    return TrainConfig(
        env=env,
        backend="process",
        mode="sync",
        actors=2,
        envs_per_actor=1,
        rollout=16,
        minibatch_size=16,
        epochs=1,
        compile=False,
        log_every=1,
        total_steps=30 * 32,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        run_dir=str(tmp_path / "run"),
    )


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="no /proc")
def test_a_leaking_env_is_named_and_a_normal_run_is_not(tmp_path, monkeypatch, capfd):
    """One actor's env keeps 1 MB a step (fake_envs.Leaky): one warning line names that actor
    and its pid; every row carries each process's memory; the same run without the leak warns
    of nothing."""
    monkeypatch.setenv("ASYNCRL_TEST_LEAK_FLAG", str(tmp_path / "leak-flag"))
    pids: dict[int, int] = {}

    def note_pids(backend):
        pids.update(backend.actor_pids())

    train(_short_run(tmp_path / "leak", "fake_envs:Leaky-v0"), on_start=note_pids)
    err = capfd.readouterr().err
    found = LEAK_LINE.findall(err)
    assert len(found) == 1, err  # the leaking actor, once; not the other one, nor the learner
    actor, pid = int(found[0][0]), int(found[0][1])
    assert pids[actor] == pid
    rows = [json.loads(line) for line in (tmp_path / "leak" / "run" / "metrics.jsonl").open()]
    keys = {"memory/driver_mb", "memory/actor_mb/0", "memory/actor_mb/1"}
    assert all(keys <= set(r) for r in rows)
    other = 1 - actor
    grew = rows[-1][f"memory/actor_mb/{actor}"] - rows[0][f"memory/actor_mb/{actor}"]
    assert grew > 200  # ~16 MB a row
    assert abs(rows[-1][f"memory/actor_mb/{other}"] - rows[0][f"memory/actor_mb/{other}"]) < 50

    train(_short_run(tmp_path / "normal", "fake_envs:Countdown-v0"))
    err = capfd.readouterr().err
    assert "resident memory" not in err, err
    rows = [json.loads(line) for line in (tmp_path / "normal" / "run" / "metrics.jsonl").open()]
    assert len(rows) == 30 and all(keys <= set(r) for r in rows)
