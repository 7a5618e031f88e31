"""SIGINT at 50 random moments of PPO and SAC runs: every checkpoint left passes a consistency
check -- it loads, its parameters are finite, and its counters, replay ring and rate limiter
agree with each other (a signal that raised inside an update or an insert broke them).

In-process runs on the main thread (where a terminal's Ctrl+C arrives), signalled from a timer
thread; inline and thread backends, sync and async. Some runs get a second SIGINT right after
the first: they abort without a final checkpoint, and what is there must still be sound.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from pathlib import Path

import pytest
import torch

import asyncrl
from asyncrl.rundir import checkpoint_files
from asyncrl.runtime.lifecycle import Aborted, Interrupted, StopSignals

COMMON = dict(
    total_steps=10**8,
    max_seconds=20,  # a safety net: every run here ends by the signal long before
    progress=False,
    tensorboard=False,
    checkpoint_every=0.05,  # periodic checkpoints too, so an abort leaves some
    keep_checkpoints=3,
)
PPO = dict(env="CartPole-v1", actors=2, envs_per_actor=4, rollout=16, minibatch_size=32, epochs=2)
SAC = dict(
    env="Pendulum-v1",
    algo="sac",
    actors=2,
    envs_per_actor=2,
    rollout=1,
    hidden=[32, 32],
    learning_starts=32,
    batch_size=32,
    buffer_size=100,  # wraps within a run: position and size are checked past the wrap
    save_replay=True,
)
LAYOUTS = [("inline", "sync"), ("inline", "async"), ("thread", "sync"), ("thread", "async")]


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _tensors(v)


def _check(path: Path, algo: str, mode: str) -> None:
    """The consistency check of one checkpoint file."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    learner = state["learner"]
    for t in _tensors({k: v for k, v in learner.items() if k != "replay"}):
        if t.is_floating_point():
            assert torch.isfinite(t).all(), f"{path}: non-finite parameters"
    c = learner["counters"]
    if algo == "ppo":
        per_batch = 16 * 4 * (2 if mode == "sync" else 1)  # one slot per actor, or one
        assert c["version"] == c["iterations"], c
        assert c["env_steps"] == c["iterations"] * per_batch, c
        return
    replay, limiter = learner["replay"], learner["limiter"]
    per_batch = 2 * (2 if mode == "sync" else 1)
    total, capacity = replay["total_inserted"], replay["capacity"]
    assert c["env_steps"] == total == limiter["inserts"] == c["iterations"] * per_batch, (c, total)
    size = min(total, capacity)
    for field in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
        assert len(replay[field]) == size, (field, len(replay[field]), size)
    assert replay["position"] == total % capacity
    assert c["updates"] == limiter["samples"] == c["version"], (c, limiter)


def _run_signals() -> StopSignals | None:
    """The StopSignals of the run in progress, once it handles SIGINT."""
    return getattr(signal.getsignal(signal.SIGINT), "__self__", None)


@pytest.mark.slow
def test_sigint_at_50_random_moments_always_leaves_consistent_checkpoints(tmp_path):
    seed = random.randrange(10**6)
    rng = random.Random(seed)
    checked = aborted = 0
    for i in range(50):
        algo = "ppo" if i % 2 == 0 else "sac"
        backend, mode = LAYOUTS[(i // 2) % len(LAYOUTS)]
        twice = i % 5 == 4
        delay = rng.uniform(0.0, 1.5)
        run = tmp_path / f"run{i}"
        settings = {**COMMON, **(PPO if algo == "ppo" else SAC), "backend": backend, "mode": mode}
        what = f"run {i} ({algo} {backend} {mode}, SIGINT {delay:.2f} s in, twice={twice})"
        what += f", seed {seed}"
        done = threading.Event()

        def interrupt(delay=delay, twice=twice, done=done):
            # the moment is counted from when the run handles SIGINT (before that it would be
            # pytest's Ctrl+C): it falls in start-up, updates, inserts, checkpoints, anywhere
            while not isinstance(stop := _run_signals(), StopSignals):
                if done.wait(0.001):
                    return
            if done.wait(delay):
                return
            os.kill(os.getpid(), signal.SIGINT)
            if twice:  # once the first was handled: two pending signals are delivered as one
                while not stop.signal and not done.wait(0.001):
                    pass
                os.kill(os.getpid(), signal.SIGINT)

        thread = threading.Thread(target=interrupt)
        thread.start()
        # twice: the second signal aborts -- unless the final checkpoint was written before
        # it came, and only cleanup was left, which no signal cuts short
        iterations: list[int] = []  # the callback is called after every iteration
        with pytest.raises((Aborted, Interrupted) if twice else Interrupted) as e:
            try:
                asyncrl.train(
                    callback=lambda row, seen=iterations: seen.append(1),
                    run_dir=str(run),
                    **settings,
                )
            finally:
                done.set()
                thread.join()
        files = checkpoint_files(run)
        if twice and isinstance(e.value, Aborted):
            aborted += 1
        elif iterations:
            assert files, f"{what}: no final checkpoint"
        else:  # stopped in start-up: a run that completed no iteration writes none
            assert not files, f"{what}: a checkpoint with nothing in it"
        assert not [p for p in run.iterdir() if ".tmp" in p.name], f"{what}: temp file left"
        for path in files:
            try:
                _check(path, algo, mode)
            except AssertionError as e:
                raise AssertionError(f"{what}: {path.name}: {e}") from None
            checked += 1
    assert checked >= 40 and aborted >= 5, (checked, aborted)
