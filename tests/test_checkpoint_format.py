"""Checkpoints across versions: what an earlier asyncrl wrote loads, evaluates and resumes.

tests/data/checkpoints holds tiny run directories written by b12beae, before checkpoints held a
format (format 0; tests/data/checkpoints/make.py writes them). Every later version loads each
with the Python API, evaluates it with ``asyncrl eval`` and resumes it (a copy: the fixtures are
never written). A checkpoint or run directory of a newer format than this code knows is refused
in one line naming both formats, before anything starts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import asyncrl
from asyncrl.cli import main as cli_main
from asyncrl.config import ConfigError
from asyncrl.rundir import (
    CHECKPOINT_FORMAT,
    FORMAT_KEY,
    MARKER,
    load_checkpoint,
    run_dir_format,
)

FIXTURES = Path(__file__).parent / "data" / "checkpoints"
NAMES = ["ppo", "ppo-lstm", "sac", "dqn", "pbt"]


def _copy(name: str, tmp_path: Path) -> Path:
    run = tmp_path / name
    shutil.copytree(FIXTURES / name, run)
    return run


def _env_steps(run: Path) -> int:
    """The run's env steps at its newest checkpoint (a population's: its policies' sum)."""
    policies = sorted(run.glob("policy_*"))
    if policies:
        return sum(_env_steps(p) for p in policies)
    return int(load_checkpoint(run)["learner"]["counters"]["env_steps"])


def test_the_fixtures_are_of_the_format_before_formats():
    """What the tests below prove depends on it: the files are as b12beae wrote them."""
    for name in NAMES:
        run = FIXTURES / name
        assert run_dir_format(run) == 0, name
        files = sorted(run.rglob("checkpoint-*.pt"))
        assert files, name
        for path in files:
            assert FORMAT_KEY not in torch.load(path, weights_only=True), path


@pytest.mark.parametrize("name", NAMES)
def test_an_old_checkpoint_loads_and_acts(tmp_path, name):
    run = _copy(name, tmp_path)
    policy = asyncrl.load(run)
    own = run if policy.index is None else run / f"policy_{policy.index}"  # a population's best
    assert policy.env_steps == _env_steps(own) > 0
    env = gym.make(policy.spec.env_id)
    obs, _ = env.reset(seed=0)
    if policy.recurrent:
        action, state = policy.act(obs, policy.initial_state())
        assert state.shape == policy.initial_state().shape
    else:
        action = policy.act(obs)
    assert env.action_space.contains(np.asarray(action, dtype=env.action_space.dtype)), action
    env.close()


@pytest.mark.parametrize("name", NAMES)
def test_an_old_checkpoint_evaluates(tmp_path, capsys, name):
    run = _copy(name, tmp_path)
    assert cli_main(["eval", str(run), "--episodes", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes"] == 1 and result["lengths"][0] >= 1


@pytest.mark.parametrize("name", NAMES)
def test_an_old_checkpoint_resumes_and_the_run_is_then_of_this_format(tmp_path, name):
    run = _copy(name, tmp_path)
    before = _env_steps(run)
    more = 32 if name == "pbt" else 16  # a population's: 16 each
    summary = asyncrl.train(resume=run, total_steps=before + more).summary
    assert summary["env_steps"] == before + more == _env_steps(run)
    assert load_checkpoint(run)[FORMAT_KEY] == CHECKPOINT_FORMAT
    assert run_dir_format(run) == CHECKPOINT_FORMAT
    for policy_dir in sorted(run.glob("policy_*")):
        assert load_checkpoint(policy_dir)[FORMAT_KEY] == CHECKPOINT_FORMAT
    asyncrl.load(run)  # and it loads again


def _newer(run: Path) -> tuple[Path, int]:
    """Make ``run``'s checkpoint one of a format newer than this code reads."""
    newer = CHECKPOINT_FORMAT + 1
    (path,) = run.glob("checkpoint-*.pt")
    state = torch.load(path, weights_only=True)
    torch.save({**state, FORMAT_KEY: newer}, path)
    return path, newer


def test_a_checkpoint_of_a_newer_format_is_refused_in_one_line(tmp_path, capsys):
    run = _copy("ppo", tmp_path)
    path, newer = _newer(run)
    config = (run / "config.yaml").read_bytes()
    want = (
        f"asyncrl: error: checkpoint: {path} is checkpoint format {newer}; this asyncrl reads "
        f"formats up to {CHECKPOINT_FORMAT} (upgrade asyncrl)"
    )
    capsys.readouterr()
    for argv in (["eval", str(run), "--episodes", "1"], ["train", "--resume", str(run)]):
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [want], argv
    with pytest.raises(ConfigError, match=rf"is checkpoint format {newer}; .* up to "):
        asyncrl.load(run)
    assert (run / "config.yaml").read_bytes() == config  # the resume changed nothing
    assert sorted(p.name for p in run.glob("checkpoint*.pt")) == [path.name]


def test_a_run_directory_of_a_newer_format_is_refused_in_one_line(tmp_path, capsys):
    """Its marker names the newest format written there; refused before its config is read
    (a newer format may change config.yaml as well)."""
    run = _copy("ppo", tmp_path)
    newer = CHECKPOINT_FORMAT + 1
    (run / MARKER).write_text(f"an asyncrl run directory\nformat {newer}\n")
    (run / "config.yaml").write_text("a: [config of a future version\n")
    capsys.readouterr()
    for argv in (["eval", str(run), "--episodes", "1"], ["train", "--resume", str(run)]):
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert f"{run} (run directory) is checkpoint format {newer};" in err[0], err
        assert f"up to {CHECKPOINT_FORMAT} (upgrade asyncrl)" in err[0], err
    with pytest.raises(ConfigError, match=rf"is checkpoint format {newer}; "):
        asyncrl.load(run)
