"""One lifecycle: how every run stops and ends (runtime/lifecycle.py).

Signals set a flag read at the iteration boundary; every ending writes a final checkpoint when
the learner's state is consistent, summary.json says how it ended, and one line says what
happened and where the checkpoint is. In-process runs on the inline backend: signals are sent
to this process (pytest runs tests on the main thread) at chosen moments.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import signal

import numpy as np
import pytest
import torch

from asyncrl.algos.ppo.learner import PPOLearner
from asyncrl.replay.buffer import ReplayBuffer
from asyncrl.rundir import CheckpointWriteError, checkpoint_files, load_checkpoint
from asyncrl.runtime.faults import ActorError
from asyncrl.runtime.lifecycle import Aborted, Interrupted, StopSignals
from asyncrl.runtime.trainer import train


@pytest.fixture
def inline_cfg(small_cfg):
    return dataclasses.replace(
        small_cfg, backend="inline", mode="sync", actors=1, total_steps=10**6, log_every=1
    )


def _ended_lines(text: str) -> list[str]:
    """Lines that say how a run ended (the preset line and warnings are not among them)."""
    words = ("finished", "interrupted", "aborted", "stopped", "time limit", "the learner failed")
    return [
        line for line in text.splitlines() if line.startswith(tuple(f"asyncrl: {w}" for w in words))
    ]


def test_stop_signals_flag_the_first_abort_on_the_second_and_restore_handlers():
    def mine(signum, frame):
        pass

    saved = {s: signal.signal(s, mine) for s in StopSignals.SIGNALS}
    try:
        stop = StopSignals()
        with stop.installed():
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.signal == "SIGTERM" and stop  # no exception: a flag
            with pytest.raises(Aborted):
                os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # while aborting: ignored
        ended = StopSignals()
        with ended.installed():
            os.kill(os.getpid(), signal.SIGINT)
            ended.ending = True  # the final checkpoint is written: only cleanup is left
            os.kill(os.getpid(), signal.SIGINT)  # ignored: it would cut the cleanup short
        assert all(signal.getsignal(s) is mine for s in StopSignals.SIGNALS)
        deferred = StopSignals()
        with deferred.installed():
            os.kill(os.getpid(), signal.SIGINT)
            done = []
            with pytest.raises(Aborted):
                with deferred.abort_deferred():
                    os.kill(os.getpid(), signal.SIGTERM)  # its abort waits for the block's end
                    done.append(1)
            assert done == [1] and deferred.aborted
        third = StopSignals()
        with third.installed():
            os.kill(os.getpid(), signal.SIGINT)
            with pytest.raises(Aborted), third.abort_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)  # a third: at once
                done.append(2)
            assert done == [1]
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def test_sigint_during_a_ppo_update_stops_after_it_and_saves_the_updated_state(
    inline_cfg, monkeypatch, capsys
):
    """The signal arrives half-way through the 3rd update; the update still completes, and the
    checkpoint holds the learner as it was after it -- not a half-updated one."""
    original = PPOLearner.train
    calls, completed = [], []

    def train_with_signal(self, slots):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)  # a handler raising would leave here
        stats = original(self, slots)
        completed.append(self.iterations)
        return stats

    monkeypatch.setattr(PPOLearner, "train", train_with_signal)
    with pytest.raises(Interrupted):
        train(inline_cfg)
    assert len(calls) == 3 and completed == [1, 2, 3]  # no 4th iteration began
    state = load_checkpoint(inline_cfg.run_dir)["learner"]
    assert state["counters"]["iterations"] == 3 and state["counters"]["version"] == 3
    summary = json.loads(
        (checkpoint_files(inline_cfg.run_dir)[0].parent / "summary.json").read_text()
    )
    assert summary["ended"] == "signal" and summary["interrupted"] is True
    assert summary["checkpoint"] == str(checkpoint_files(inline_cfg.run_dir)[0])
    lines = _ended_lines(capsys.readouterr().err)
    assert (
        len(lines) == 1 and "interrupted (SIGINT) at 192 env steps; checkpoint saved: " in lines[0]
    )


def test_sigint_after_a_replay_insert_keeps_counters_and_replay_in_step(small_cfg, monkeypatch):
    """A signal right after SAC's insert, before the learner counts the inserted steps: the
    checkpoint's env steps equal the replay's transitions (today's exception in between left
    the ring one batch ahead of the counters)."""
    cfg = dataclasses.replace(
        small_cfg,
        env="Pendulum-v1",
        algo="sac",
        backend="inline",
        mode="sync",
        actors=1,
        envs_per_actor=2,
        rollout=1,
        hidden=[16, 16],
        learning_starts=8,
        batch_size=8,
        total_steps=10**6,
        save_replay=True,
    )
    original = ReplayBuffer.add_batch
    inserts = []

    def add_then_signal(self, *args, **kw):
        original(self, *args, **kw)
        inserts.append(1)
        if len(inserts) == 5:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(ReplayBuffer, "add_batch", add_then_signal)
    with pytest.raises(Interrupted):
        train(cfg)
    state = load_checkpoint(cfg.run_dir)["learner"]
    assert state["counters"]["env_steps"] == state["replay"]["total_inserted"] == 5 * 2
    assert len(state["replay"]["reward"]) == 10


def test_a_second_signal_aborts_at_once_without_claiming_a_checkpoint(inline_cfg, capsys):
    def callback(row):
        if row["iteration"] == 2:
            os.kill(os.getpid(), signal.SIGINT)  # the first: a flag
            os.kill(os.getpid(), signal.SIGINT)  # the second: abort here

    with pytest.raises(Aborted):
        train(dataclasses.replace(inline_cfg, checkpoint_every=0), callback=callback)
    assert checkpoint_files(inline_cfg.run_dir) == []
    lines = _ended_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert "aborted by a second signal" in lines[0] and "no final checkpoint written" in lines[0]
    assert "checkpoint saved" not in lines[0] and "no checkpoint was written before" in lines[0]


def test_a_second_signal_during_an_update_aborts_when_the_update_ends(
    inline_cfg, monkeypatch, capsys
):
    """Not inside it: an exception raised at an arbitrary point of torch's code can break torch
    for the process (an abort inside a first, compiling update left torch's fake-tensor mode
    on, and every tensor op after it in the process failed)."""
    original = PPOLearner.train
    finished = []

    def signalled_on_the_third(self, slots):
        if len(finished) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # the first: a flag
            os.kill(os.getpid(), signal.SIGINT)  # the second: an abort when the update ends
        out = original(self, slots)
        finished.append(self.algo.optimizer.state_dict()["state"][0]["step"].item())
        return out

    monkeypatch.setattr(PPOLearner, "train", signalled_on_the_third)
    with pytest.raises(Aborted):
        train(dataclasses.replace(inline_cfg, checkpoint_every=0))
    assert len(finished) == 3 and finished[2] > finished[1] > 0  # the third update ran whole
    lines = _ended_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "aborted by a second signal" in lines[0], lines


def test_an_actor_failure_keeps_the_learners_work_and_says_so(inline_cfg, capsys):
    cfg = dataclasses.replace(inline_cfg, env="fake_envs:CrashAfter-v0", envs_per_actor=2)
    with pytest.raises(ActorError):
        train(cfg)
    newest = checkpoint_files(cfg.run_dir)
    assert newest, "no final checkpoint"
    state = load_checkpoint(cfg.run_dir)["learner"]
    summary = json.loads((newest[0].parent / "summary.json").read_text())
    assert summary["ended"] == "actor_error" and summary["checkpoint"] == str(newest[0])
    assert summary["env_steps"] == state["counters"]["env_steps"] > 0
    lines = _ended_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert (
        "boom: simulated env failure" in lines[0] and f"checkpoint saved: {newest[0]}" in lines[0]
    )


def test_a_learner_exception_mid_update_writes_no_checkpoint_and_points_at_the_last(
    inline_cfg, monkeypatch, capsys
):
    original = PPOLearner.train
    calls = []

    def fail_on_the_fifth(self, slots):
        calls.append(1)
        if len(calls) == 5:
            self.policy.pi[0].weight.data.add_(1.0)  # half-way: the weights moved already
            raise RuntimeError("boom: learner bug")
        return original(self, slots)

    monkeypatch.setattr(PPOLearner, "train", fail_on_the_fifth)
    cfg = dataclasses.replace(inline_cfg, checkpoint_every=1e-9)  # one after every iteration
    with pytest.raises(RuntimeError, match="boom: learner bug"):
        train(cfg)
    files = checkpoint_files(cfg.run_dir)
    state = load_checkpoint(cfg.run_dir)["learner"]
    assert state["counters"]["iterations"] == 4  # the periodic one after the 4th
    summary = json.loads((files[0].parent / "summary.json").read_text())
    assert summary["ended"] == "learner_error" and summary["checkpoint"] is None
    lines = _ended_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert "the learner failed during an update" in lines[0] and "boom: learner bug" in lines[0]
    assert "not consistent" in lines[0]
    assert f"the newest checkpoint is {files[0]} (256 env steps)" in lines[0]


def test_an_error_between_iterations_keeps_the_learners_work(inline_cfg, capsys):
    def callback(row):
        if row["iteration"] == 3:
            raise ValueError("boom: callback bug")

    with pytest.raises(ValueError, match="boom: callback bug"):
        train(inline_cfg, callback=callback)
    state = load_checkpoint(inline_cfg.run_dir)["learner"]
    assert state["counters"]["iterations"] == 3
    lines = _ended_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "boom: callback bug" in lines[0] and "checkpoint saved" in lines[0]


def test_checkpoints_failing_twice_end_the_run_saying_where_the_last_one_is(
    inline_cfg, monkeypatch, capsys
):
    from asyncrl.runtime import shell

    real = shell.save_checkpoint
    saved = []

    def full_after_the_first(run_dir, state, keep=None):
        if saved:
            raise CheckpointWriteError(errno.ENOSPC, "checkpoint not written: disk full", "x")
        saved.append(real(run_dir, state, keep))
        return saved[-1]

    monkeypatch.setattr(shell, "save_checkpoint", full_after_the_first)
    cfg = dataclasses.replace(inline_cfg, checkpoint_every=1e-9)
    with pytest.raises(CheckpointWriteError):
        train(cfg)
    err = capsys.readouterr().err
    assert err.count("will retry") == 2
    lines = _ended_lines(err)
    assert len(lines) == 1, lines
    assert "checkpoints cannot be written" in lines[0]
    assert "the final checkpoint could not be written" in lines[0]
    assert f"the newest checkpoint is {saved[0]} (64 env steps)" in lines[0]
    assert json.loads((saved[0].parent / "summary.json").read_text())["ended"] == "io_error"


@pytest.mark.parametrize("how", ["budget", "time_limit", "callback"])
def test_normal_endings_say_how_in_one_line_and_in_the_summary(inline_cfg, capsys, how):
    cfg = dataclasses.replace(
        inline_cfg,
        total_steps=256 if how == "budget" else 10**6,
        max_seconds=0.5 if how == "time_limit" else 0,
    )
    summary = train(cfg, callback=(lambda row: False) if how == "callback" else None)
    newest = checkpoint_files(cfg.run_dir)[0]
    assert summary["ended"] == how and summary["checkpoint"] == str(newest)
    lines = _ended_lines(capsys.readouterr().out)
    assert len(lines) == 1 and lines[0].endswith(f"; checkpoint saved: {newest}"), lines
    assert np.isfinite(summary["env_steps"]) and torch.load(newest, weights_only=True)
