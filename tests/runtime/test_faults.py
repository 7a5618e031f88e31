"""Faults end runs quickly and cleanly: actor crashes, Ctrl+C, SIGTERM."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asyncrl.runtime.evaluator import NICE
from asyncrl.runtime.faults import ActorError
from asyncrl.runtime.trainer import train
from conftest import alive, descendants, shm_segments


@pytest.mark.parametrize(
    ("mode", "backend"), [("sync", "process"), ("async", "process"), ("async", "thread")]
)
def test_env_exception_in_actor_ends_the_run_naming_the_actor(small_cfg, mode, backend):
    cfg = dataclasses.replace(
        small_cfg, env="fake_envs:CrashAfter-v0", total_steps=10**7, mode=mode, backend=backend
    )
    t0 = time.monotonic()
    with pytest.raises(ActorError) as e:
        train(cfg)
    assert time.monotonic() - t0 < 60
    msg = str(e.value)
    assert msg.startswith("actor ") and "(env fake_envs:CrashAfter-v0 x 4) failed" in msg
    assert "Traceback" in msg and "boom: simulated env failure" in msg


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test():
    """A test that fails before its run ends (an assertion before the signal) kills the run and
    its children: one left would train for its 10^8 steps beside the rest of the suite."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            for pid in [*descendants(proc.pid), proc.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()


def _start_cli(
    tmp_path: Path, *extra: str, env_id: str = "CartPole-v1", new_session: bool = False
) -> subprocess.Popen:
    tests = str(Path(__file__).parents[1])  # fake_envs; the code under test stays first
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, (os.getenv("PYTHONPATH"), tests)))
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "asyncrl.cli",
            "train",
            "--env",
            env_id,
            "--total-steps",
            "100000000",
            "--no-progress",
            "--no-tensorboard",
            "--run-dir",
            str(tmp_path / "run"),
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,  # a process group of its own, to be killed whole
    )
    _STARTED.append(proc)
    return proc


def _wait_for_training(
    proc: subprocess.Popen, run: Path, timeout: float = 90, rows: int = 3
) -> None:
    deadline = time.monotonic() + timeout
    metrics = run / "metrics.jsonl"
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if metrics.exists() and len(metrics.read_text().splitlines()) >= rows:
            return
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("training did not start")


def _spawned(pids: set[int]) -> list[int]:
    """The processes multiprocessing spawned to run our code (not its resource tracker)."""
    found = []
    for pid in pids:
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def _nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


HOGWILD = ("--hogwild", "2")


@pytest.mark.parametrize(
    ("sig", "mode", "algo", "topology"),
    [
        (signal.SIGINT, "async", "ppo", ()),
        (signal.SIGTERM, "sync", "ppo", ()),
        # async SAC: the loop blocks on the rate limiter and the optimizer thread on the replay
        (signal.SIGINT, "async", "sac", ()),
        (signal.SIGTERM, "sync", "sac", ()),
        # Hogwild!: workers, global parameters and counters in shared memory
        (signal.SIGINT, "sync", "ppo", HOGWILD),
        (signal.SIGTERM, "sync", "sac", (*HOGWILD, "--sync-mode", "synced", "--sync-every", "4")),
        # with the evaluator process of evaluation during training
        (signal.SIGINT, "async", "ppo", ("--eval-every", "300")),
        (signal.SIGTERM, "sync", "ppo", (*HOGWILD, "--eval-every", "300")),
    ],
)
def test_interrupt_checkpoints_and_leaves_nothing_behind(tmp_path, sig, mode, algo, topology):
    env_id = "CartPole-v1" if algo == "ppo" else "Pendulum-v1"
    # SAC's presets take one actor: two here, as for PPO
    extra = (
        [] if algo == "ppo" else ["--learning-starts", "64", "--hidden", "32,32", "--actors", "2"]
    )
    proc = _start_cli(tmp_path, "--mode", mode, "--algo", algo, *extra, *topology, env_id=env_id)
    run = tmp_path / "run"
    # SAC logs a row per ~1,000 env steps, each step with its update: one row is training well
    # under way (~1,000 updates), where PPO's rows come every few hundred steps
    _wait_for_training(proc, run, rows=1 if algo == "sac" else 3)
    children = descendants(proc.pid)
    assert len(children) >= 2  # the actors (and multiprocessing's resource tracker)
    # the 2 actors or workers, and the evaluator (the one at the lowest priority) if asked for
    spawned = _spawned(children)
    evaluators = [c for c in spawned if _nice(c) == NICE]
    assert len(spawned) - len(evaluators) == 2, spawned
    assert len(evaluators) == (1 if "--eval-every" in topology else 0), spawned
    assert shm_segments(proc.pid)
    # Ctrl+C in a terminal reaches the whole process group; send it the same way.
    proc.send_signal(sig)
    if sig == signal.SIGINT:
        for child in children:  # as a terminal would: every process of the group gets it
            try:
                os.kill(child, signal.SIGINT)
            except ProcessLookupError:
                pass
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    # one line says what happened and where the checkpoint is
    name = signal.Signals(sig).name
    ended = [line for line in err.splitlines() if line.startswith("asyncrl: interrupted")]
    assert len(ended) == 1 and f"interrupted ({name}) at " in ended[0], err
    assert "; checkpoint saved: " in ended[0] and str(run) in ended[0], err
    deadline = time.monotonic() + 10
    while any(alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [c for c in children if alive(c)], "child processes left behind"
    assert not shm_segments(proc.pid), "shared memory left behind"
    assert (run / "checkpoint.pt").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["env_steps"] > 0


@pytest.mark.slow
def test_a_second_sigint_aborts_the_cli_at_once_claiming_no_checkpoint(tmp_path):
    """Ctrl+C twice within an iteration (1.3 s of slow env steps): exit 130 at once, one line
    naming the newest checkpoint written before (not one it did not write), and no process
    or segment left (the process backend)."""
    extra = ("--mode", "sync", "--rollout", "32", "--checkpoint-every", "0.1")
    proc = _start_cli(tmp_path, *extra, env_id="fake_envs:SlowSteps-v0")
    run = tmp_path / "run"
    _wait_for_training(proc, run)
    metrics = run / "metrics.jsonl"
    rows = len(metrics.read_text().splitlines())
    deadline = time.monotonic() + 30
    while len(metrics.read_text().splitlines()) == rows and time.monotonic() < deadline:
        time.sleep(0.005)
    # a row is written at the end of an iteration; 0.5 s on, the loop waits for the next
    # rollout (1.3 s of env steps)
    time.sleep(0.5)
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)  # two signals pending at once are delivered as one
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    ended = [line for line in err.splitlines() if line.startswith("asyncrl: aborted")]
    assert len(ended) == 1 and "no final checkpoint written" in ended[0], err
    assert "checkpoint saved" not in err and "Traceback" not in err, err
    newest = sorted(run.glob("checkpoint-*.pt"))[-1]
    assert f"the newest checkpoint is {newest} (" in ended[0]
    deadline = time.monotonic() + 10
    while any(alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [c for c in children if alive(c)], "child processes left behind"
    assert not shm_segments(proc.pid), "shared memory left behind"
    assert not [p for p in run.iterdir() if ".tmp" in p.name]


def test_a_run_stopped_and_continued_charges_no_actor_for_the_pause(tmp_path):
    """SIGSTOP to the run's whole process group for 8 s (a suspended job, a frozen container),
    then SIGCONT: the actors were in 0.5-s env steps, timed against a 3-s --env-step-timeout
    while the monotonic clock ran on through the stop; none is read as hung and replaced."""
    extra = ("--envs-per-actor", "1", "--rollout", "4", "--minibatch-size", "4", "--epochs", "1")
    proc = _start_cli(tmp_path, *extra, "--env-step-timeout", "3", env_id="fake_envs:NapSteps-v0")
    run = tmp_path / "run"
    try:
        _wait_for_training(proc, run, rows=2)
        children = descendants(proc.pid)
        group = [proc.pid, *children]
        for pid in group:  # as a job's suspension stops every process of it
            os.kill(pid, signal.SIGSTOP)
        time.sleep(8)
        for pid in group:
            os.kill(pid, signal.SIGCONT)
        time.sleep(4)  # the supervisor looks every 0.2 s: long enough to have judged the actors
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "hung" not in err, err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["actor_restarts"] == 0, summary


def test_segments_of_a_run_killed_with_its_process_group_are_removed_by_the_next_run(
    tmp_path, small_cfg, capfd
):
    """SIGKILL to a run's whole process group (a scheduler's final kill, docker kill) kills
    multiprocessing's resource tracker too: the run's segments stay in /dev/shm. The next run
    removes them at its start -- but not a segment some live process still holds open (a run
    in another pid namespace sharing /dev/shm, whose pid means nothing here)."""
    import fcntl
    from multiprocessing import shared_memory

    proc = _start_cli(tmp_path / "killed", new_session=True)
    try:
        _wait_for_training(proc, tmp_path / "killed" / "run", rows=1)
        children = descendants(proc.pid)
        left = shm_segments(proc.pid)
        assert left
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        deadline = time.monotonic() + 10
        while any(alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [c for c in children if alive(c)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert shm_segments(proc.pid) == left  # no one removed them
    held = shared_memory.SharedMemory(f"asyncrl_{proc.pid}_elsewhere_array0", create=True, size=8)
    fcntl.flock(held._fd, fcntl.LOCK_SH)  # as every process that opens a segment does
    try:
        summary = train(small_cfg)  # the process backend
        assert shm_segments(proc.pid) == {held.name}
    finally:
        held.close()
        held.unlink()
    assert summary["env_steps"] >= small_cfg.total_steps
    err = capfd.readouterr().err
    # (other killed runs' segments on this machine may go with them, under their own pids)
    assert re.search(rf"removed \d+ shared-memory segment\(s\) .*\(pids [^)]*\b{proc.pid}\b", err)
