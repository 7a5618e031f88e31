"""RateLimiter: Reverb's SampleToInsertRatio window, sync scheduling, threads, and shutdown."""

from __future__ import annotations

import math
import random
import threading
import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncrl.replay.rate_limiter import LimiterClosed, RateLimiter


def in_window(lim: RateLimiter, snap: dict) -> bool:
    """The invariant: inside [-eb, eb] after warm-up; before it, no samples at all."""
    if snap["inserts"] < lim.min_size_to_sample:
        return snap["samples"] == 0
    return -lim.error_buffer - 1e-9 <= snap["error"] <= lim.error_buffer + 1e-9


# ---------------------------------------------------------------- construction
@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(samples_per_insert=0.0), "samples_per_insert"),
        (dict(samples_per_insert=-1.0), "samples_per_insert"),
        (dict(samples_per_insert=math.inf), "samples_per_insert"),
        (dict(samples_per_insert=math.nan), "samples_per_insert"),
        (dict(min_size_to_sample=0), "min_size_to_sample"),
        (dict(min_size_to_sample=2.5), "min_size_to_sample"),
        (dict(error_buffer=0.5), "error_buffer"),  # < max(1, spi) = 1 (Reverb's rule)
        (dict(samples_per_insert=4.0, error_buffer=3.9), "error_buffer"),  # < spi
        (dict(max_insert_batch=8, samples_per_insert=0.5, error_buffer=3.5), "error_buffer"),
        (dict(max_sample_batch=3, error_buffer=2.0), "error_buffer"),
        (dict(max_insert_batch=0), "max_insert_batch"),
        (dict(max_sample_batch=0), "max_sample_batch"),
    ],
)
def test_construction_errors_name_the_argument(kwargs, name):
    args = dict(samples_per_insert=1.0, min_size_to_sample=10, error_buffer=2.0) | kwargs
    with pytest.raises(ValueError, match=name):
        RateLimiter(**args)


def test_narrowest_allowed_windows_construct():
    RateLimiter(1.0, 1, 1.0)  # Reverb's minimum for batches of one
    RateLimiter(4.0, 1, 4.0)
    RateLimiter(0.25, 1, 1.0)
    RateLimiter(0.5, 1, 4.0, max_insert_batch=8)
    RateLimiter(0.25, 1, 3.0, max_insert_batch=4, max_sample_batch=3)


def test_oversized_batches_are_refused():
    lim = RateLimiter(1.0, 1, 4.0, max_insert_batch=4, max_sample_batch=2)
    with pytest.raises(ValueError, match="n=5"):
        lim.await_can_insert(5, timeout=0)
    with pytest.raises(ValueError, match="n=3"):
        lim.await_can_sample(3, timeout=0)
    with pytest.raises(ValueError, match="n"):
        lim.await_can_insert(0, timeout=0)


# ---------------------------------------------------------------- single thread
def test_single_thread_ratio_one():
    lim = RateLimiter(1.0, min_size_to_sample=4, error_buffer=2.0)
    assert not lim.await_can_sample(1, timeout=0)  # warm-up: nothing to sample
    for _ in range(4):  # warm-up inserts are free
        assert lim.await_can_insert(1, timeout=0)
    assert lim.error == 0.0 and math.isnan(lim.achieved_ratio)
    assert lim.await_can_insert(1, timeout=0) and lim.error == 1
    assert lim.await_can_insert(1, timeout=0) and lim.error == 2
    assert not lim.await_can_insert(1, timeout=0)  # would be 3 > 2: actors too far ahead
    assert lim.inserts == 6
    for e in (1, 0, -1, -2):
        assert lim.await_can_sample(1, timeout=0) and lim.error == e
    assert not lim.await_can_sample(1, timeout=0)  # would be -3: learner too far ahead
    assert lim.samples == 4 and lim.achieved_ratio == 2.0
    assert lim.await_can_insert(1, timeout=0) and lim.error == -1


def test_single_thread_ratio_four_and_sample_batches():
    lim = RateLimiter(4.0, min_size_to_sample=2, error_buffer=4.0, max_sample_batch=4)
    assert lim.await_can_insert(1, timeout=0) and lim.await_can_insert(1, timeout=0)
    assert lim.await_can_insert(1, timeout=0) and lim.error == 4
    assert not lim.await_can_insert(1, timeout=0)
    assert lim.await_can_sample(4, timeout=0) and lim.error == 0
    assert lim.await_can_sample(4, timeout=0) and lim.error == -4
    assert not lim.await_can_sample(1, timeout=0)
    assert lim.await_can_insert(1, timeout=0) and lim.error == 0


def test_batched_inserts_must_fit_whole_and_warmup_crossing_lands_inside():
    lim = RateLimiter(0.25, min_size_to_sample=1, error_buffer=2.0, max_insert_batch=8)
    assert lim.await_can_insert(8, timeout=0)  # crosses warm-up: 0.25 * 7 = 1.75 <= 2
    assert lim.error == 1.75
    assert not lim.await_can_insert(8, timeout=0)  # 3.75 > 2
    assert lim.can_insert(1)  # a smaller batch still fits (2.0)
    assert lim.await_can_sample(1, timeout=0) and lim.error == 0.75
    assert not lim.await_can_insert(8, timeout=0)  # 2.75 > 2
    assert lim.await_can_sample(1, timeout=0) and lim.error == -0.25
    assert lim.await_can_insert(8, timeout=0) and lim.error == 1.75


def test_timeout_is_counted_as_blocked_time():
    lim = RateLimiter(1.0, 1, 1.0)
    t0 = time.monotonic()
    assert not lim.await_can_sample(1, timeout=0.05)
    assert time.monotonic() - t0 >= 0.045
    assert lim.sample_blocked_seconds >= 0.045 and lim.insert_blocked_seconds == 0


def test_wait_is_woken_by_the_other_side():
    lim = RateLimiter(1.0, min_size_to_sample=2, error_buffer=1.0)
    got = []
    t = threading.Thread(target=lambda: got.append(lim.await_can_sample(1, timeout=5)))
    t.start()
    time.sleep(0.05)
    assert not got  # still waiting for the warm-up
    lim.await_can_insert(1)
    lim.await_can_insert(1)
    t.join(2)
    assert got == [True] and lim.samples == 1
    assert lim.sample_blocked_seconds > 0.03


def test_state_round_trip():
    lim = RateLimiter(0.5, 4, 2.0)
    for _ in range(7):
        lim.await_can_insert(1, timeout=0)
    lim.await_can_sample(1, timeout=0)
    clone = RateLimiter(0.5, 4, 2.0)
    clone.load_state_dict(lim.state_dict())
    assert clone.stats() == lim.stats()


def _sync_run(lim: RateLimiter, inserts: int, batch: int = 4) -> int:
    """Sync mode's bookkeeping for ``inserts`` env steps; returns the gradient steps done."""
    done = 0
    for _ in range(inserts // batch):
        lim.record_inserts(batch)
        due = lim.due_samples()
        if due:
            lim.record_samples(due)
            done += due
    return done


@pytest.mark.parametrize(
    ("ratio", "warmup", "new_ratio", "new_warmup", "owed_then"),
    [
        (0.25, 100, 1.0, 100, 0),  # 0.25 -> 1: no debt for the 900 earlier inserts
        (1.0, 100, 0.25, 100, 0),  # 1 -> 0.25: nothing owed back either
        (1.0, 100, 1.0, 600, 0),  # a longer warm-up, which the 1000 inserts are past
        (1.0, 100, 1.0, 50, 0),  # a shorter one, passed long ago: no debt from it
    ],
)
def test_a_resume_at_another_ratio_or_warm_up_re_bases_the_debt(
    ratio, warmup, new_ratio, new_warmup, owed_then
):
    lim = RateLimiter(ratio, warmup, 8.0, max_insert_batch=4)
    _sync_run(lim, 1000)
    saved = lim.state_dict()
    again = RateLimiter(new_ratio, new_warmup, 8.0, max_insert_batch=4)
    again.load_state_dict(saved)
    assert again.inserts == 1000 and again.samples == saved["samples"]
    assert again.due_samples() == owed_then
    assert _sync_run(again, 400) == int(new_ratio * 400)
    # saved at the same settings, it goes on exactly
    same = RateLimiter(new_ratio, new_warmup, 8.0, max_insert_batch=4)
    same.load_state_dict(again.state_dict())
    assert same.stats() == again.stats() and same.due_samples() == again.due_samples()


def test_a_longer_warm_up_than_the_data_waits_for_it_then_owes_nothing_earlier():
    lim = RateLimiter(1.0, 100, 8.0, max_insert_batch=4)
    _sync_run(lim, 200)
    again = RateLimiter(1.0, 500, 8.0, max_insert_batch=4)
    again.load_state_dict(lim.state_dict())
    assert _sync_run(again, 300) == 0  # 500 inserted: the warm-up is over
    assert _sync_run(again, 100) == 100


# ---------------------------------------------------------------- sync mode
@pytest.mark.parametrize("ratio", [0.25, 1.0, 4.0, 0.1, 0.3, 2.5])
def test_sync_schedule_is_exact(ratio):
    rng = random.Random(0)
    warmup = 37
    lim = RateLimiter(ratio, warmup, error_buffer=max(1.0, ratio * 16), max_insert_batch=16)
    updates = 0
    for _ in range(400):
        n = rng.choice([1, 3, 8, 16])
        announced = lim.due_samples(after_inserts=n)  # what a learner working ahead reads
        lim.record_inserts(n)
        due = lim.due_samples()
        assert due >= 0 and due == announced
        if due:
            lim.record_samples(due)
        updates += due
        post = max(0, lim.inserts - warmup)
        assert updates == math.floor(Fraction(str(ratio)) * post) == lim.samples
        assert lim.due_samples() == 0
    assert updates > 0


def test_due_samples_zero_during_warmup():
    lim = RateLimiter(4.0, 10, 40.0, max_insert_batch=10)
    assert lim.due_samples(after_inserts=10) == 0 and lim.due_samples(after_inserts=11) == 4
    lim.record_inserts(10)
    assert lim.due_samples() == 0  # inserts == min_size: nothing after the warm-up yet
    lim.record_inserts(1)
    assert lim.due_samples() == 4


# ---------------------------------------------------------------- threads
def test_stress_producers_and_consumers_keep_the_window():
    ratio, warmup, eb = 0.5, 20, 6.0
    lim = RateLimiter(ratio, warmup, eb, max_insert_batch=4, max_sample_batch=2)
    violations: list[dict] = []
    errors: list[BaseException] = []

    def check():
        snap = lim.stats()
        if not in_window(lim, snap):
            violations.append(snap)

    def producer(seed: int):
        rng = random.Random(seed)
        try:
            for _ in range(250):
                lim.await_can_insert(rng.randint(1, 4))
                check()
                if rng.random() < 0.3:
                    time.sleep(rng.random() * 4e-4)
        except BaseException as e:  # surfaced below
            errors.append(e)

    def consumer(seed: int):
        rng = random.Random(seed)
        try:
            while True:
                lim.await_can_sample(rng.randint(1, 2))
                check()
                if rng.random() < 0.3:
                    time.sleep(rng.random() * 4e-4)
        except LimiterClosed:
            pass
        except BaseException as e:
            errors.append(e)

    stop = threading.Event()

    def observer():
        while not stop.is_set():
            check()

    producers = [threading.Thread(target=producer, args=(i,)) for i in range(3)]
    consumers = [threading.Thread(target=consumer, args=(100 + i,)) for i in range(2)]
    obs = threading.Thread(target=observer)
    for t in [*producers, *consumers, obs]:
        t.start()
    for t in producers:
        t.join(15)
    deadline = time.monotonic() + 5  # let the learners drain what is due, then shut down
    while lim.can_sample(2) and time.monotonic() < deadline:
        time.sleep(0.01)
    lim.close()
    stop.set()
    for t in [*consumers, obs]:
        t.join(2)
    assert not any(t.is_alive() for t in [*producers, *consumers, obs])
    assert not errors, errors
    assert not violations, violations[:3]
    s = lim.stats()
    post = s["inserts"] - warmup
    assert post > 1000
    # the window bounds the final deviation: |samples - ratio * post| <= eb, and the drained
    # learners sit within one sample batch (up to 2 steps) of the lower edge: a consumer that
    # drew a batch of 2 stays blocked at -eb + 1
    assert abs(s["samples"] - ratio * post) <= eb
    assert -eb <= s["error"] < -eb + 2
    assert s["achieved_ratio"] == pytest.approx(ratio, abs=eb / post + 1e-9)


def _run_until_closed(fn, results):
    try:
        while True:
            fn()
    except LimiterClosed:
        results.append("closed")


def test_close_wakes_blocked_producers_and_consumers_promptly():
    # In one limiter both sides cannot be blocked at once (the window rule forbids it), so
    # block each side on its own limiter, plus a live system, and close all three.
    full = RateLimiter(1.0, 1, 1.0)  # no learner: producers block after two inserts
    empty = RateLimiter(1.0, 1000, 1.0)  # no actors: learners block in the warm-up
    live = RateLimiter(2.0, 10, 4.0, max_insert_batch=2)
    results: list[str] = []
    threads = [
        threading.Thread(target=_run_until_closed, args=(lambda: full.await_can_insert(1), results))
        for _ in range(3)
    ]
    threads += [
        threading.Thread(
            target=_run_until_closed, args=(lambda: empty.await_can_sample(1), results)
        )
        for _ in range(3)
    ]
    threads += [
        threading.Thread(
            target=_run_until_closed, args=(lambda: live.await_can_insert(2), results)
        ),
        threading.Thread(
            target=_run_until_closed, args=(lambda: live.await_can_sample(1), results)
        ),
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while full.inserts < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    inserted, blocked = full.inserts, full.insert_blocked_seconds
    t0 = time.monotonic()
    for lim in (full, empty, live):
        lim.close()
    for t in threads:
        t.join(1.0)
    # the window let exactly two in, and the producers waited: none had come back from a wait
    # (a wait's time is counted when it ends)
    assert inserted == 2 and blocked == 0
    assert time.monotonic() - t0 < 1.0
    assert not any(t.is_alive() for t in threads)
    assert results == ["closed"] * len(threads)
    assert full.inserts == 2 and empty.samples == 0 and live.samples > 0
    with pytest.raises(LimiterClosed):  # and later calls fail fast
        full.await_can_insert(1)
    assert not live.can_sample(1)


# ---------------------------------------------------------------- property test
@settings(max_examples=150, deadline=None)
@given(
    ratio=st.sampled_from([0.1, 0.25, 0.5, 1.0, 1.5, 4.0]),
    warmup=st.integers(1, 12),
    n_max=st.integers(1, 6),
    k_max=st.integers(1, 4),
    slack=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
    ops=st.lists(st.tuples(st.booleans(), st.integers(1, 6)), min_size=1, max_size=120),
)
def test_random_interleavings_keep_invariant_and_progress(ratio, warmup, n_max, k_max, slack, ops):
    spi = Fraction(str(ratio))
    eb_exact = max(Fraction(k_max), spi * n_max) + Fraction(str(slack))
    lim = RateLimiter(
        ratio, warmup, float(eb_exact), max_insert_batch=n_max, max_sample_batch=k_max
    )
    inserts = samples = 0
    for is_insert, size in ops:
        if is_insert:
            n = min(size, n_max)
            err_after = spi * (inserts + n - warmup) - samples
            expect = inserts + n <= warmup or err_after <= eb_exact
            assert lim.await_can_insert(n, timeout=0) == expect
            inserts += n * expect
        else:
            k = min(size, k_max)
            err_after = spi * (inserts - warmup) - samples - k
            expect = inserts >= warmup and err_after >= -eb_exact
            assert lim.await_can_sample(k, timeout=0) == expect
            samples += k * expect
        assert (lim.inserts, lim.samples) == (inserts, samples)
        assert in_window(lim, lim.stats())
        if inserts >= warmup:
            assert -eb_exact <= spi * (inserts - warmup) - samples <= eb_exact
        # progress: for every allowed batch size, at least one side may proceed
        for n in range(1, n_max + 1):
            for k in range(1, k_max + 1):
                assert lim.can_insert(n) or lim.can_sample(k), (n, k, lim.stats())


@settings(max_examples=50, deadline=None)
@given(
    spi=st.sampled_from([0.1, 0.25, 0.3, 0.5, 1.0, 2.0, 4.0]),
    min_size=st.integers(1, 50),
    samples=st.integers(1, 40),
)
def test_inserts_due_is_the_first_count_at_which_a_gradient_step_is_due(spi, min_size, samples):
    """What a sync rollout of several steps places its updates by: the ``samples``-th step is
    due after ``inserts_due(samples)`` inserts, not one insert earlier."""
    lim = RateLimiter(spi, min_size, error_buffer=max(1.0, spi) * 2)
    at = lim.inserts_due(samples)
    due = [lim.due_samples(after_inserts=n) for n in (at - 1, at)]
    assert due[0] < samples <= due[1]
