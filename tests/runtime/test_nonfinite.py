"""Never silently wrong: a NaN or inf on the training path ends the run naming where it came
from (``ended: nonfinite``), or with --on-nonfinite skip is dropped and counted; a checkpoint
holding non-finite weights is never written, so the rotation never loses the finite ones.

The envs (tests/fake_envs.py) turn their observations NaN or inf, or their rewards NaN, after a
few hundred steps; or pay a finite reward of 3e38 whose discounted sums overflow float32 inside
the update, so that the inputs pass and the gradient does not.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asyncrl.core import NonFiniteError
from asyncrl.rundir import checkpoint_files, nonfinite_weights, save_checkpoint
from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig

PPO = dict(
    actors=2,
    envs_per_actor=2,
    rollout=32,
    minibatch_size=32,
    epochs=2,
    total_steps=4_000,
    progress=False,
    tensorboard=False,
    checkpoint_every=0,
)
SAC = dict(
    algo="sac",
    actors=1,
    envs_per_actor=2,
    rollout=1,
    hidden=[32, 32],
    learning_starts=64,
    batch_size=32,
    total_steps=800,
    progress=False,
    tensorboard=False,
    checkpoint_every=0,
)


def _all_finite(run: Path) -> None:
    """Every checkpoint left in ``run`` holds finite weights (and there is one)."""
    files = checkpoint_files(run)
    assert files
    for path in files:
        state = torch.load(path, map_location="cpu", weights_only=True)
        assert nonfinite_weights(state) == [], path


def test_nan_observations_end_a_cli_run_as_nonfinite_naming_actor_env_and_step(tmp_path):
    """The issue's run: a CartPole whose observations turn NaN. It ended `budget`, exit 0, its
    episodic_return frozen; now the CLI (actors in processes) exits 1 with one line naming the
    actor, env and step, summary.json says nonfinite, and the final checkpoint is finite."""
    tests = str(Path(__file__).parents[1])
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, (os.getenv("PYTHONPATH"), tests)))
    )
    run = tmp_path / "run"
    args = ["--actors", "2", "--envs-per-actor", "2", "--total-steps", "20000"]
    proc = subprocess.run(
        [sys.executable, "-m", "asyncrl.cli", "train", "--env", "fake_envs:NaNObsCartPole-v0",
         "--backend", "process", "--no-progress", "--no-tensorboard", "--run-dir", str(run),
         *args],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    ended = [line for line in proc.stderr.splitlines() if line.startswith("asyncrl: stopped")]
    assert len(ended) == 1, proc.stderr
    assert (
        "NonFiniteError: actor " in ended[0] and "wrote a non-finite observation (nan)" in ended[0]
    )
    assert "; checkpoint saved: " in ended[0], ended
    assert "Traceback" not in proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ended"] == "nonfinite" and summary["env_steps"] < 20_000
    _all_finite(run)


CASES = {
    "ppo-inf-obs": ("InfObsCartPole-v0", PPO, "wrote a non-finite observation (inf)"),
    "ppo-nan-reward": ("NaNRewardCartPole-v0", PPO, "wrote a non-finite reward (nan)"),
    "ppo-gradient": ("HugeRewardCartPole-v0", PPO, "the policy gradient norm is nan in update"),
    "sac-nan-reward": ("NaNRewardPendulum-v0", SAC, "wrote a non-finite reward (nan)"),
    # raised in async SAC's optimizer thread
    "sac-gradient": ("HugeRewardPendulum-v0", SAC, "the critic gradient norm is nan in update"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_nan_or_inf_ends_the_run_as_nonfinite_saying_where(tmp_path, case):
    env_id, settings, where = CASES[case]
    cfg = TrainConfig(
        env=f"fake_envs:{env_id}", backend="thread", run_dir=str(tmp_path / "run"), **settings
    )
    with pytest.raises(NonFiniteError, match=re.escape(where)):
        train(cfg)
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["ended"] == "nonfinite" and summary["checkpoint"], summary
    _all_finite(tmp_path / "run")


@pytest.mark.parametrize(
    ("env_id", "settings", "counted"),
    [
        ("NaNObsCartPole-v0", PPO, "nonfinite_skipped_rollouts"),
        ("HugeRewardCartPole-v0", PPO, "nonfinite_skipped_steps"),
        ("HugeRewardPendulum-v0", SAC, "nonfinite_skipped_steps"),
    ],
)
def test_skip_drops_what_is_not_finite_counts_it_and_trains_on(
    tmp_path, env_id, settings, counted, capfd
):
    cfg = TrainConfig(
        env=f"fake_envs:{env_id}",
        backend="inline",
        mode="sync",
        on_nonfinite="skip",
        run_dir=str(tmp_path / "run"),
        **settings,
    )
    summary = train(cfg)
    assert summary["ended"] == "budget" and summary[counted] > 0, summary
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").open()]
    assert rows[-1][counted] == summary[counted]
    warnings = [line for line in capfd.readouterr().err.splitlines() if "--on-nonfinite" in line]
    assert len(warnings) == 1, warnings  # the first one, then counted
    _all_finite(tmp_path / "run")


def test_a_hogwild_worker_meeting_nan_ends_the_run_as_nonfinite(tmp_path):
    cfg = TrainConfig(
        env="fake_envs:NaNObsCartPole-v0", hogwild=2, run_dir=str(tmp_path / "run"), **PPO
    )
    with pytest.raises(NonFiniteError, match=r"^hogwild worker \d: actor \d env \d wrote a non"):
        train(cfg)
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["ended"] == "nonfinite" and summary["checkpoint"]
    _all_finite(tmp_path / "run")


def test_weights_gone_nan_are_never_checkpointed_and_the_finite_checkpoints_stay(
    tmp_path, monkeypatch, capfd
):
    """Weights that went NaN past every guard (here: set so after the 4th update): the periodic
    checkpoint is refused, the run ends nonfinite without a final one, and the two finite
    checkpoints the rotation keeps are still there -- before, every good one was replaced."""
    from asyncrl.algos.ppo.learner import PPOLearner

    original = PPOLearner.train

    def poisoned(self, slots):
        stats = original(self, slots)
        if self.iterations == 4:
            with torch.no_grad():
                next(self.policy.parameters()).fill_(float("nan"))
        return stats

    monkeypatch.setattr(PPOLearner, "train", poisoned)
    run = tmp_path / "run"
    cfg = TrainConfig(env="CartPole-v1", run_dir=str(run), **{**PPO, "checkpoint_every": 1e-9})
    cfg = dataclasses.replace(cfg, backend="inline", mode="sync", keep_checkpoints=2)
    with pytest.raises(NonFiniteError, match=r"checkpoint checkpoint-\d+\.pt not written: "):
        train(cfg)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ended"] == "nonfinite" and summary["checkpoint"] is None
    assert len(checkpoint_files(run)) == 2
    _all_finite(run)
    err = capfd.readouterr().err
    assert "its weights are not finite, so no final checkpoint was written" in err
    assert "the newest checkpoint is " in err


def test_save_checkpoint_refuses_non_finite_weights_and_deletes_nothing(tmp_path):
    good = {"learner": {"w": torch.ones(3)}, "policy": {"w": torch.ones(3)}}
    for _ in range(2):
        save_checkpoint(tmp_path, good, keep=1)
    before = sorted(p.name for p in tmp_path.iterdir())
    bad = {"learner": {"w": torch.tensor([1.0, float("inf")])}, "policy": {"w": torch.ones(3)}}
    with pytest.raises(NonFiniteError, match=r"learner/w hold NaN or inf"):
        save_checkpoint(tmp_path, bad, keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    # a replay buffer may hold what it holds: only the networks' state is checked
    save_checkpoint(tmp_path, {"learner": {"replay": {"obs": torch.tensor([float("nan")])}}})
