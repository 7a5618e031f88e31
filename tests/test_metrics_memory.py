"""The per-iteration bookkeeping of a run holds O(1) memory in the number of iterations: a
one-env SAC run makes an iteration per env step, 10M of them for 10M steps."""

from __future__ import annotations

import time
import tracemalloc

from asyncrl.metrics import RowWindow, Throughput

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
