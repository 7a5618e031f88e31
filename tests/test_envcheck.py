"""``asyncrl check-env``: Gymnasium's classic envs pass; each faulty env of fake_envs fails by
the check that names its fault, and only by it; the refusal of spaces is train's own line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncrl.cli import build_parser, main
from asyncrl.config import ConfigError
from asyncrl.envcheck import FAIL, OK, WARN, check
from asyncrl.settings import TrainConfig, env_spec, resolve
from asyncrl.study.tune import plan, suggest

STEPS = 500
CHECKS = [
    "make",
    "spaces",
    "gymnasium check_env",
    "seeded determinism",
    "observation dtype",
    "observation bounds",
    "finite values",
    "time per step",
    "tune suggests",
]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCar-v0", "Acrobot-v1"])
def test_classic_envs_pass_every_check(env_id):
    report = check(env_id, steps=STEPS)
    assert not report.failed, report.rows
    assert [r.check for r in report.rows if r.result == OK] == CHECKS
    # Gymnasium's warnings (CartPole's infinite bounds, Pendulum's [-2, 2] actions) stay warnings
    assert {r.check for r in report.rows if r.result == WARN} <= {"gymnasium warning"}
    assert 0 < report.step_seconds < 0.01
    assert report.final_line() == f"{env_id}: no FAIL, {len(report.rows) - 9} warn: a run can start"


FAULTS = [
    ("fake_envs:DictObs-v0", {"spaces"}, "has observation space Dict("),
    ("fake_envs:NaNObsCartPole-v0", {"finite values"}, "has NaN (4 of 4 values) at step 300"),
    (
        "fake_envs:UnseededReset-v0",
        {"gymnasium check_env", "seeded determinism"},
        "non-deterministic: reset(seed=0) of two envs differs",
    ),
    ("fake_envs:LeavesBox-v0", {"observation bounds"}, "at step 11: value 1.1 at (0,) > high 1"),
    ("fake_envs:NaNRewardPendulum-v0", {"finite values"}, "reward is nan at step 150"),
]  # fmt: skip


@pytest.mark.parametrize(("env_id", "failing", "named"), FAULTS)
def test_each_fault_fails_by_the_check_that_names_it(env_id, failing, named):
    report = check(env_id, steps=STEPS)
    assert {r.check for r in report.failed} == failing, report.rows
    assert any(named in r.detail for r in report.failed), [r.detail for r in report.failed]
    assert report.final_line().startswith(f"{env_id}: {len(report.failed)} FAIL (")
    assert "tune suggests" not in [r.check for r in report.rows]  # no N x K for a failing env


def test_float_residue_across_resets_is_a_warning():
    """A reset that repeats within Gymnasium's tolerance (as PyBullet's, off by ~1e-6 after
    steps) warns that runs repeat only nearly; it is no fault."""
    report = check("fake_envs:ResidueReset-v0", steps=200)
    row = report.row("seeded determinism")
    assert not report.failed and row.result == WARN, report.rows
    assert row.detail.startswith("reset(seed=0) again after 50 steps differs by 1.2e-07"), row


def test_a_refused_space_is_the_line_train_prints():
    """check-env and train agree: the spaces row carries settings.env_spec's refusal, word for
    word, for an observation space no algorithm takes and for an action space one does not."""
    for env_id, algo in (("fake_envs:DictObs-v0", None), ("CartPole-v1", "sac")):
        with pytest.raises(ConfigError) as e:
            env_spec(TrainConfig(env=env_id, algo=algo or "ppo"))
        row = check(env_id, steps=50, algo=algo).row("spaces")
        assert row.result == FAIL and row.detail.startswith(str(e.value)), (row, str(e.value))
    assert check("CartPole-v1", steps=50).row("spaces").detail.endswith("taken by ppo, dqn")


def test_the_cli_exits_1_naming_the_fault():
    tests = str(Path(__file__).parent)  # fake_envs
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, (os.getenv("PYTHONPATH"), tests)))
    )
    cmd = [
        sys.executable,
        "-m",
        "asyncrl.cli",
        "check-env",
        "fake_envs:LeavesBox-v0",
        "--steps",
        "200",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr[-2000:])
    assert "observation bounds" in out.stdout and "FAIL" in out.stdout, out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("fake_envs:LeavesBox-v0: 1 FAIL (observation bounds)"), out.stdout


def test_the_cli_exits_0_on_a_sound_env_and_2_on_an_unknown_id(capsys):
    assert main(["check-env", "CartPole-v1", "--steps", "200"]) == 0
    out = capsys.readouterr().out
    assert "seeded determinism" in out and out.strip().endswith("a run can start"), out
    assert main(["check-env", "CartPole-v9"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("asyncrl: error: env: 'CartPole-v9' is not a registered")
        and len(err.splitlines()) == 1
    ), err
    assert main(["check-env", "CartPole-v1", "--steps", "0"]) == 2
    assert capsys.readouterr().err.strip() == "asyncrl: error: steps: must be >= 1, got 0"


def test_the_suggested_tune_command_is_one_tune_takes(tmp_path):
    """Fast envs get the largest K, slow ones (PyBullet's ~1 ms a step) the smallest; the
    printed ``asyncrl tune`` command parses and plans (each probe gets its minimum time)."""
    base = resolve(TrainConfig(env="CartPole-v1"), "classic")
    fast, slow = suggest(base, 20e-6, cpus=2), suggest(base, 1.2e-3, cpus=2)
    assert (fast.actors, fast.k, slow.k) == (2, 32, 8)
    assert slow.seconds > fast.seconds  # probes long enough for iterations of a slow env
    for s in (fast, slow, suggest(base, 20e-6, cpus=1)):
        args = build_parser().parse_args(s.command("CartPole-v1").split()[1:])
        assert (args.ns, args.ks, args.seconds) == (s.ns, s.ks, s.seconds)
        plan(base, args.ns, args.ks, args.backends, args.seconds, tmp_path)
