"""The run directory keeps work safe: checkpoints written atomically and kept in a few
generations, a damaged one falls back to the one before, a full disk costs only the new one,
loading never runs code, and a directory holding a run is never written over by accident."""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from asyncrl.cli import main
from asyncrl.config import ConfigError
from asyncrl.envs import check_env
from asyncrl.replay.buffer import FIELDS, ReplayBuffer
from asyncrl.rundir import (
    CheckpointWriteError,
    checkpoint_files,
    claim_run_dir,
    load_best_checkpoint,
    load_checkpoint,
    save_checkpoint,
    save_config,
)
from asyncrl.settings import TrainConfig, load_run_config, resolve


def _state(i: int, keep: int = 2) -> dict:
    return {
        "learner": {"w": torch.full((4,), float(i)), "counters": {"env_steps": i}},
        "config": {"keep_checkpoints": keep},
    }


def _temp_files(run_dir: Path) -> list[str]:
    return [p.name for p in run_dir.iterdir() if ".tmp" in p.name]


# ---------------------------------------------------------------------- generations
def test_checkpoints_are_numbered_the_newest_n_kept_and_checkpoint_pt_is_the_newest(tmp_path):
    for i in range(1, 6):
        path = save_checkpoint(tmp_path, _state(i, keep=3))
        assert path.name == f"checkpoint-{i:06d}.pt"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "checkpoint-000003.pt",
        "checkpoint-000004.pt",
        "checkpoint-000005.pt",
        "checkpoint.pt",
    ]
    assert os.path.samefile(tmp_path / "checkpoint.pt", tmp_path / "checkpoint-000005.pt")
    assert load_checkpoint(tmp_path)["learner"]["counters"]["env_steps"] == 5
    # an explicit keep wins over the config's; numbering goes on from the highest
    assert save_checkpoint(tmp_path, _state(6, keep=3), keep=1).name == "checkpoint-000006.pt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-000006.pt", "checkpoint.pt"]


def test_numbering_follows_writing_order_after_resuming_from_an_older_checkpoint(tmp_path):
    """A damaged newest (number 2) falls back to number 1; the next save is number 3 and is
    the newest, so the damaged one never again counts as newest."""
    save_checkpoint(tmp_path, _state(1))
    save_checkpoint(tmp_path, _state(2))
    (tmp_path / "checkpoint-000002.pt").write_bytes(b"garbage")
    assert load_checkpoint(tmp_path)["learner"]["counters"]["env_steps"] == 1
    save_checkpoint(tmp_path, _state(7))
    assert [p.name for p in checkpoint_files(tmp_path)] == [
        "checkpoint-000003.pt",
        "checkpoint-000002.pt",
    ]
    assert load_checkpoint(tmp_path)["learner"]["counters"]["env_steps"] == 7


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_with_one_warning(
    tmp_path, capsys
):
    save_checkpoint(tmp_path, _state(1))
    newest = save_checkpoint(tmp_path, _state(2))
    size = newest.stat().st_size
    with open(newest, "r+b") as f:  # a real file cut short, as a crash mid-copy leaves it
        f.truncate(size // 2)
    state = load_checkpoint(tmp_path)
    assert torch.equal(state["learner"]["w"], torch.full((4,), 1.0))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(newest) in err[0] and "checkpoint-000001.pt" in err[0]


def test_no_loadable_checkpoint_is_one_config_error_naming_the_run_dir(tmp_path, capsys):
    with pytest.raises(ConfigError, match=f"run_dir: {tmp_path} holds no checkpoint"):
        load_checkpoint(tmp_path)
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match=f"run_dir: {tmp_path} holds no checkpoint that loads"):
        load_checkpoint(tmp_path)
    assert "checkpoint.pt does not load" in capsys.readouterr().err


def test_a_checkpoint_from_before_numbering_still_loads(tmp_path):
    torch.save(_state(3), tmp_path / "checkpoint.pt")
    assert load_checkpoint(tmp_path)["learner"]["counters"]["env_steps"] == 3


# ---------------------------------------------------------------------- loading runs no code
class _Payload:
    """Unpickling it would run a shell command that creates ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_by_load_checkpoint_and_eval(tmp_path, capsys):
    from asyncrl.evaluate import evaluate

    marker = tmp_path / "code-ran"
    run = tmp_path / "run"
    run.mkdir()
    save_config(run, resolve(TrainConfig(run_dir=str(run)), "classic"))
    torch.save({"learner": {"policy": _Payload(marker)}}, run / "checkpoint.pt")
    # the threat is real: the loading asyncrl did before would have run the command
    torch.load(run / "checkpoint.pt", weights_only=False)
    assert marker.exists()
    marker.unlink()
    with pytest.raises(ConfigError, match="holds no checkpoint that loads"):
        load_checkpoint(run)
    with pytest.raises(ConfigError, match="holds no checkpoint that loads"):
        evaluate(str(run), episodes=1)
    assert main(["eval", str(run), "--episodes", "1"]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "loading it could run code" in err and "system" in err


def test_a_payload_in_the_newest_checkpoint_falls_back_to_a_clean_one(tmp_path):
    marker = tmp_path / "code-ran"
    save_checkpoint(tmp_path, _state(1))
    torch.save({"learner": _Payload(marker)}, tmp_path / "checkpoint-000002.pt")
    assert load_checkpoint(tmp_path)["learner"]["counters"]["env_steps"] == 1
    assert not marker.exists()


def test_what_the_learners_save_loads_without_running_code(tmp_path):
    """Every learner's real state dict, replay buffer included, goes through the weights-only
    loader: numpy arrays and scalars become tensors and numbers on the way in."""
    from asyncrl.algos.ppo.learner import PPOLearner
    from asyncrl.algos.sac.learner import SACLearner

    ppo_cfg = resolve(TrainConfig(norm_obs=True), "classic")
    ppo = PPOLearner(ppo_cfg, check_env(ppo_cfg.env))
    sac_cfg = resolve(
        TrainConfig(
            algo="sac", env="Pendulum-v1", save_replay=True, buffer_size=64, learning_starts=8
        ),
        "classic",
    )
    sac_spec = check_env(sac_cfg.env)
    sac = SACLearner(sac_cfg, sac_spec)
    rng = np.random.default_rng(0)
    n = 20
    sac.replay.add_batch(
        obs=rng.standard_normal((n, 3)).astype(np.float32),
        action=rng.standard_normal((n, 1)).astype(np.float32),
        reward=rng.standard_normal(n).astype(np.float32),
        next_obs=rng.standard_normal((n, 3)).astype(np.float32),
        terminated=rng.random(n) < 0.2,
        truncated=rng.random(n) < 0.2,
    )
    sac.replay.sample(4)  # move its rng on
    ppo.env_steps, sac.env_steps, sac.updates = 640, 20, 12
    restored = {}
    for name, learner, fresh in (
        ("ppo", ppo, lambda: PPOLearner(ppo_cfg, check_env(ppo_cfg.env))),
        ("sac", sac, lambda: SACLearner(sac_cfg, sac_spec)),
    ):
        run = tmp_path / name
        run.mkdir()
        save_checkpoint(run, {"learner": learner.state_dict(), "config": ppo_cfg.to_dict()})
        restored[name] = fresh()
        restored[name].load_state_dict(load_checkpoint(run)["learner"])
        assert restored[name].state_dict()["counters"] == learner.state_dict()["counters"]
        for key, x in learner.policy.state_dict().items():  # norm_obs statistics included
            assert torch.equal(restored[name].policy.state_dict()[key], x), (name, key)
    replay = restored["sac"].replay
    assert len(replay) == n
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(replay, f), getattr(sac.replay, f))
    mine, theirs = sac.replay.sample(8), replay.sample(8)  # the same draws from here on
    for f in FIELDS:
        np.testing.assert_array_equal(theirs[f], mine[f])


def test_a_replay_round_trip_keeps_dtypes_data_and_sampling(tmp_path):
    buf = ReplayBuffer(10, (2, 2), np.uint8, (1,), seed=1)  # image-like observations
    rng = np.random.default_rng(1)
    buf.add_batch(
        obs=rng.integers(0, 256, (13, 2, 2), dtype=np.uint8),
        action=rng.standard_normal((13, 1)).astype(np.float32),
        reward=rng.standard_normal(13).astype(np.float32),
        next_obs=rng.integers(0, 256, (13, 2, 2), dtype=np.uint8),
        terminated=rng.random(13) < 0.5,
        truncated=rng.random(13) < 0.5,
    )
    save_checkpoint(tmp_path, {"replay": buf.state_dict(), "scalar": np.float32(1.5)})
    state = load_checkpoint(tmp_path)
    assert state["scalar"] == 1.5 and type(state["scalar"]) is float
    clone = ReplayBuffer(10, (2, 2), np.uint8, (1,), seed=99)
    clone.load_state_dict(state["replay"])
    for f in FIELDS:
        assert getattr(clone, f).dtype == getattr(buf, f).dtype
        np.testing.assert_array_equal(getattr(clone, f), getattr(buf, f))
    mine, theirs = buf.sample(6), clone.sample(6)
    for f in FIELDS:
        np.testing.assert_array_equal(theirs[f], mine[f])


# ---------------------------------------------------------------------- a failed write
def _assert_failed_write_left_the_previous(run_dir: Path, error: CheckpointWriteError) -> None:
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert _temp_files(run_dir) == []
    assert [p.name for p in checkpoint_files(run_dir)] == ["checkpoint-000001.pt"]
    assert os.path.samefile(run_dir / "checkpoint.pt", run_dir / "checkpoint-000001.pt")
    assert load_checkpoint(run_dir)["learner"]["counters"]["env_steps"] == 1


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MB tmpfs: a real filesystem that runs out of space (needs mount rights: root)."""
    where = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def test_a_full_disk_keeps_the_previous_checkpoint_and_leaves_no_temp_file(small_disk):
    save_checkpoint(small_disk, _state(1))
    big = {"learner": {"w": torch.zeros(400_000)}, "config": {}}  # 1.6 MB: does not fit
    with pytest.raises(CheckpointWriteError) as e:
        save_checkpoint(small_disk, big)
    _assert_failed_write_left_the_previous(small_disk, e.value)
    # once there is room again, saving goes on where it left off
    assert save_checkpoint(small_disk, _state(2)).name == "checkpoint-000002.pt"


def test_a_write_failing_at_fsync_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    """The same promise where no filesystem can be mounted: the flush to disk fails (as it can
    with ENOSPC on filesystems that allocate late)."""
    save_checkpoint(tmp_path, _state(1))
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if ".checkpoint-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(CheckpointWriteError) as e:
        save_checkpoint(tmp_path, _state(2))
    _assert_failed_write_left_the_previous(tmp_path, e.value)


# ---------------------------------------------------------------------- claiming a directory
def _a_run(run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(run_dir, TrainConfig(run_dir=str(run_dir)))
    save_checkpoint(run_dir, _state(1))
    (run_dir / "metrics.jsonl").write_text("{}\n")
    (run_dir / "summary.json").write_text("{}\n")
    (run_dir / "tb").mkdir()
    (run_dir / "tb" / "events.out.tfevents.1").write_text("x")


@pytest.mark.parametrize("part", ["config.yaml", "checkpoint-000001.pt", "metrics.jsonl"])
def test_a_directory_holding_a_run_is_refused_naming_both_ways_out(tmp_path, part):
    _a_run(tmp_path / "run")
    for p in (tmp_path / "run").iterdir():
        if p.name != part and p.is_file():
            p.unlink()
    with pytest.raises(ConfigError) as e:
        claim_run_dir(tmp_path / "run", resume=False, overwrite=False)
    message = str(e.value)
    assert len(message.splitlines()) == 1
    assert str(tmp_path / "run") in message and "--resume" in message and "--overwrite" in message
    assert (tmp_path / "run" / part).exists()


def test_new_empty_and_resumed_directories_are_claimed_without_change(tmp_path):
    assert claim_run_dir(tmp_path / "new", resume=False, overwrite=False) == tmp_path / "new"
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("mine")
    claim_run_dir(tmp_path / "empty", resume=False, overwrite=False)
    _a_run(tmp_path / "run")
    before = sorted(p.name for p in (tmp_path / "run").iterdir())
    claim_run_dir(tmp_path / "run", resume=True, overwrite=False)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == before
    with pytest.raises(ConfigError, match="holds no run to resume"):
        claim_run_dir(tmp_path / "empty", resume=True, overwrite=False)
    with pytest.raises(ConfigError, match="give one of them"):
        claim_run_dir(tmp_path / "run", resume=True, overwrite=True)


def test_overwrite_removes_only_the_runs_own_files_and_leftover_temp_files(tmp_path):
    run = tmp_path / "run"
    _a_run(run)
    (run / "notes.txt").write_text("mine")
    (run / "plots").mkdir()
    (run / ".checkpoint-000002.pt.tmp4242").write_bytes(b"half a checkpoint")
    claim_run_dir(run, resume=False, overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt", "plots"]


def test_overwrite_of_a_population_run_removes_its_policy_dirs_and_no_other_policy_files(
    tmp_path,
):
    """A real population run's policy_<i>/ directories go with --overwrite; a user's
    policy_notes.md, policy_notes/ (and policy_07/, a name asyncrl does not write) stay."""
    from asyncrl.runtime.trainer import train

    run = tmp_path / "run"
    kw = dict(total_steps=256, actors=1, envs_per_actor=4, rollout=16, minibatch_size=32)
    kw.update(epochs=1, policies=2, progress=False, tensorboard=False, backend="inline")
    train(TrainConfig(run_dir=str(run), **kw))
    assert (run / "policy_0" / "checkpoint.pt").is_file() and (run / "policy_1").is_dir()
    (run / "policy_notes.md").write_text("mine")
    (run / "policy_notes").mkdir()
    (run / "policy_notes" / "a.txt").write_text("mine")
    (run / "policy_07").mkdir()
    claim_run_dir(run, resume=False, overwrite=True)
    assert not (run / "policy_0").exists() and not (run / "policy_1").exists()
    assert (run / "policy_notes.md").read_text() == "mine"
    assert (run / "policy_notes" / "a.txt").read_text() == "mine"
    assert (run / "policy_07").is_dir()


def test_cli_refuses_a_used_run_dir_and_overwrite_starts_over(tmp_path, capsys, runs_seen):
    run = tmp_path / "run"
    _a_run(run)
    (run / "notes.txt").write_text("mine")
    assert main(["train", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("asyncrl: error: run_dir: ")
    assert "--resume" in err and "--overwrite" in err and not runs_seen
    assert main(["train", "--run-dir", str(run), "--overwrite", "--total-steps", "100"]) == 0
    _, resume, files = runs_seen[0]
    # the old run's files are gone; the new run has written its config (and the marker that
    # makes the directory its own) and holds the lock file, nothing else yet
    assert files == [".asyncrl-run", ".asyncrl.lock", "config.yaml", "notes.txt"]
    assert resume is False
    with pytest.raises(SystemExit) as e:
        main(["train", "--resume", str(run), "--overwrite"])
    assert e.value.code == 2
    assert "not allowed with argument --resume" in capsys.readouterr().err


def test_overwrite_deletes_nothing_when_the_new_settings_cannot_work(tmp_path, capsys):
    run = tmp_path / "run"
    _a_run(run)
    before = sorted(p.name for p in run.iterdir())
    assert main(["train", "--run-dir", str(run), "--overwrite", "--actors", "0"]) == 2
    assert main(["train", "--run-dir", str(run), "--overwrite", "--env", "NoSuchEnv-v9"]) == 2
    assert sorted(p.name for p in run.iterdir()) == before
    assert "actors: must be >= 1" in capsys.readouterr().err


def test_a_resume_without_a_run_dir_is_refused_before_any_directory_is_made(tmp_path, monkeypatch):
    """train(cfg, resume=True) with no run_dir: one ConfigError naming the setting, and no
    run directory made (a default name would be a new, empty one)."""
    from asyncrl.runtime.trainer import train

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="^run_dir: a resumed run"):
        train(TrainConfig(env="CartPole-v1", backend="inline", total_steps=1_000), resume=True)
    assert list(tmp_path.iterdir()) == []


def test_a_saved_config_as_template_does_not_send_the_new_run_to_its_directory(
    tmp_path, monkeypatch, runs_seen
):
    old = tmp_path / "old"
    _a_run(old)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", str(old / "config.yaml")]) == 0
    new_dir = Path(runs_seen[0][0].run_dir)
    assert new_dir.parts[0] == "runs" and new_dir.resolve() != old.resolve()
    assert main(["train", "--config", str(old / "config.yaml"), "--run-dir", "mine"]) == 0
    assert runs_seen[1][0].run_dir == "mine"


def test_a_default_run_dir_never_names_an_existing_one(tmp_path, monkeypatch):
    from asyncrl.rundir import default_run_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("asyncrl.rundir.time.strftime", lambda fmt: "20261123-120000")
    cfg = resolve(TrainConfig(), "classic")  # a run names its directory once resolved
    first = default_run_dir(cfg)
    assert first == Path("runs/CartPole-v1-ppo-async-20261123-120000")
    first.mkdir(parents=True)
    second = default_run_dir(cfg)  # a second run started in the same second
    assert second == Path("runs/CartPole-v1-ppo-async-20261123-120000-2")


# ---------------------------------------------------------------------- with the trainer
def test_a_resumed_run_keeps_keep_checkpoints_generations_and_eval_reads_the_newest(small_cfg):
    from asyncrl.evaluate import evaluate
    from asyncrl.runtime.trainer import train

    cfg = dataclasses.replace(small_cfg, backend="inline", total_steps=128, keep_checkpoints=1)
    train(cfg)
    train(dataclasses.replace(cfg, total_steps=256), resume=True)
    run = Path(cfg.run_dir)
    assert sorted(p.name for p in run.glob("checkpoint*.pt")) == [
        "checkpoint-000002.pt",
        "checkpoint.pt",
    ]
    assert load_checkpoint(run)["learner"]["counters"]["env_steps"] == 256
    assert evaluate(str(run), episodes=1)["episodes"] == 1


# ---------------------------------------------------------------------- one run per directory
def _cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "asyncrl.cli", *map(str, args)]


def _env() -> dict[str, str]:
    """This environment, with the tests' fake envs importable (and any PYTHONPATH kept)."""
    tests = str(Path(__file__).parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, PYTHONPATH]))}


PYTHONPATH = os.environ.get("PYTHONPATH", "")
QUICK = ("--no-progress", "--no-tensorboard", "--backend", "inline")


def _snapshot(run: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".asyncrl.lock"
    }


def test_a_directory_in_use_is_refused_in_one_line_and_freed_when_its_run_is_killed(tmp_path):
    """A second run of a directory a live run holds -- resumed or started over -- is refused
    in one line and changes nothing there; once the first is SIGKILLed (no cleanup runs) the
    kernel has dropped its lock and the directory resumes."""
    run = tmp_path / "run"
    first = subprocess.Popen(
        _cli(
            "train", "--run-dir", run, "--total-steps", 10**8, "--checkpoint-every", "0.5", *QUICK
        ),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not (run / "checkpoint-000002.pt").exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first run never checkpointed"
            time.sleep(0.1)
        for second in (
            ("--resume", run, "--total-steps", 10**8),
            ("--run-dir", run, "--overwrite", "--total-steps", 10**8),
        ):
            first.send_signal(signal.SIGSTOP)  # a still picture of its files meanwhile
            before = _snapshot(run)
            out = subprocess.run(
                _cli("train", *second, *QUICK),
                env=_env(),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert _snapshot(run) == before
            first.send_signal(signal.SIGCONT)
            err = out.stderr.strip().splitlines()
            assert out.returncode == 2 and len(err) == 1, out.stderr
            assert err[0].startswith(f"asyncrl: error: run_dir: {run} is in use by another run")
            assert f"pid {first.pid} " in err[0] and "--run-dir" in err[0]
        assert first.poll() is None
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    reached = load_checkpoint(run)["learner"]["counters"]["env_steps"]
    out = subprocess.run(
        _cli("train", "--resume", run, "--total-steps", reached + 256, *QUICK),
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert load_checkpoint(run)["learner"]["counters"]["env_steps"] >= reached + 256


SLOW_CLAIM = """
import sys, time
from pathlib import Path
import asyncrl.rundir as rundir

time.strftime = lambda fmt: "20261123-120000"  # both runs start in the same second
real = rundir.claim_run_dir

def slow(*a, **kw):  # a slow (network) filesystem: the claim takes a while
    time.sleep(2.0)
    return real(*a, **kw)

rundir.claim_run_dir = slow
import asyncrl.runtime.trainer  # what main() imports, before the start line
from asyncrl.cli import main

go = Path(sys.argv[1])
(go.parent / f"ready-{sys.argv[2]}").touch()
while not go.exists():  # both runs choose their directory at once
    time.sleep(0.001)
sys.exit(main(sys.argv[3:]))
"""


def test_runs_started_at_once_with_default_names_get_a_directory_each(tmp_path):
    """A seed sweep launched in one second: two runs choosing their default directory at the
    same moment each get their own (the name is taken with an exclusive mkdir), and each
    directory holds one run's config and checkpoint."""
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                SLOW_CLAIM,
                str(go),
                str(seed),
                "train",
                "--total-steps",
                "64",
                "--seed",
                str(seed),
                *QUICK,
            ],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < 2:  # both have imported asyncrl and wait
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        assert time.monotonic() < deadline, "the runs never got ready"
        time.sleep(0.01)
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    runs = sorted((tmp_path / "runs").iterdir())
    assert [r.name for r in runs] == [
        "CartPole-v1-ppo-async-20261123-120000",
        "CartPole-v1-ppo-async-20261123-120000-2",
    ]
    seeds = {load_run_config(r).seed for r in runs}
    assert seeds == {1, 2}
    for r in runs:
        assert [p.name for p in checkpoint_files(r)] == ["checkpoint-000001.pt"]


def test_overwrite_refuses_a_directory_asyncrl_did_not_mark_and_deletes_nothing(tmp_path):
    """Another tool's directory with a config.yaml, summary.json, metrics.jsonl and tb/ is not
    an asyncrl run: --overwrite refuses it in one line and leaves every file."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.yaml").write_text("model: resnet50\n")
    (other / "summary.json").write_text("{}\n")
    (other / "metrics.jsonl").write_text('{"loss": 1.0}\n')
    (other / "tb").mkdir()
    (other / "tb" / "events.out.tfevents.1").write_text("theirs")
    before = sorted(str(p.relative_to(other)) for p in other.rglob("*"))
    out = subprocess.run(
        _cli("train", "--run-dir", other, "--overwrite", "--total-steps", 64, *QUICK),
        env=_env(),
        capture_output=True,
        text=True,
    )
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1, out.stderr
    assert err[0].startswith(f"asyncrl: error: run_dir: {other} holds files that asyncrl did not")
    assert sorted(str(p.relative_to(other)) for p in other.rglob("*")) == before
    assert (other / "config.yaml").read_text() == "model: resnet50\n"
    # a run asyncrl wrote is marked, and --overwrite starts it over
    mine = tmp_path / "mine"
    for extra in ((), ("--overwrite",)):
        out = subprocess.run(
            _cli("train", "--run-dir", mine, *extra, "--total-steps", 64, *QUICK),
            env=_env(),
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
    assert [p.name for p in checkpoint_files(mine)] == ["checkpoint-000001.pt"]


# ---------------------------------------------------------------------- falling back
MEMORY_CAPPED = """
import resource, sys
import asyncrl.cli, gymnasium, torch

size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
# what the run needs past its imports is ~80 MB; the 512 MiB tensor does not fit
resource.setrlimit(resource.RLIMIT_AS, (size + 256 * 2**20, resource.RLIM_INFINITY))
sys.exit(asyncrl.cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_checkpoint_that_does_not_fit_in_memory_is_reported_not_fallen_back_from(tmp_path):
    """A large newest checkpoint (a 512 MiB replay, say) that a process with less memory cannot
    load is not damaged: the resume ends in one line naming it, and neither falls back to the
    older checkpoint nor cuts metrics.jsonl back to it."""
    run = tmp_path / "run"
    small = ("--actors", 2, "--envs-per-actor", 4, "--rollout", 16, *QUICK)  # 128 steps a batch
    for args in (("--run-dir", run, "--total-steps", 128), ("--resume", run, "--total-steps", 256)):
        out = subprocess.run(_cli("train", *args, *small), env=_env(), capture_output=True)
        assert out.returncode == 0, out.stderr.decode()
    newest = run / "checkpoint-000002.pt"
    state = torch.load(newest, weights_only=True)
    state["replay"] = torch.zeros(2**29, dtype=torch.uint8)
    torch.save(state, newest)  # in place: checkpoint.pt is the same file
    del state
    before = _snapshot(run)
    resume = ["train", "--resume", str(run), "--total-steps", "512", *QUICK]
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_CAPPED, *resume],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    err = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(err) == 1, out.stderr
    assert err[0].startswith(f"asyncrl: error: checkpoint {newest} could not be read (")
    assert "allocate memory" in err[0] and "it is not damaged" in err[0]
    assert _snapshot(run) == before  # metrics.jsonl, checkpoints and config as they were


def test_an_io_error_reading_a_checkpoint_is_reported_not_fallen_back_from(tmp_path, monkeypatch):
    """An I/O error reading the newest (a network filesystem's hiccup) is no reason to use the
    older one; a damaged newest still is."""
    from asyncrl.rundir import CheckpointReadError

    save_checkpoint(tmp_path, _state(1))
    save_checkpoint(tmp_path, _state(2))
    real_load = torch.load

    def load(path, *a, **kw):
        if Path(path).name == "checkpoint-000002.pt":
            raise OSError(errno.EIO, "Input/output error")
        return real_load(path, *a, **kw)

    monkeypatch.setattr(torch, "load", load)
    with pytest.raises(CheckpointReadError) as e:
        load_checkpoint(tmp_path)
    assert e.value.errno == errno.EIO and "checkpoint-000002.pt could not be read" in str(e.value)
    monkeypatch.setattr(torch, "load", real_load)
    (tmp_path / "checkpoint-000002.pt").write_bytes(b"PK\x03\x04 cut short")
    assert load_checkpoint(tmp_path)["learner"]["counters"]["env_steps"] == 1


# ---------------------------------------------------------------------- a torch that is safe
def test_the_torch_floor_is_one_whose_weights_only_loader_runs_no_code():
    """weights_only=True is bypassable before torch 2.6 (CVE-2025-32434) and can corrupt memory
    before 2.10 (CVE-2026-24747): the project must not allow those."""
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    (floor,) = re.findall(r'"torch>=([\d.]+)', text)
    assert tuple(int(x) for x in floor.split(".")[:2]) >= (2, 10), floor


@pytest.mark.parametrize("version", ["2.5.1+cpu", "2.9.1"])
def test_an_unsafe_torch_is_refused_in_one_line_before_any_checkpoint_is_read(
    tmp_path, monkeypatch, version
):
    save_checkpoint(tmp_path, _state(1))
    (tmp_path / "checkpoint-best.pt").write_bytes((tmp_path / "checkpoint.pt").read_bytes())
    monkeypatch.setattr(torch, "__version__", version)
    read: list = []
    monkeypatch.setattr(torch, "load", lambda *a, **kw: read.append(a))
    for load in (load_checkpoint, load_best_checkpoint):
        with pytest.raises(ConfigError) as e:
            load(tmp_path)
        message = str(e.value)
        assert len(message.splitlines()) == 1 and message.startswith(f"torch: {version} ")
        assert "CVE-2025-32434" in message and "torch>=2.10" in message
    assert read == []
