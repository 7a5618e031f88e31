"""Metrics rows: iterations folded into one row, and how often a run writes one."""

from __future__ import annotations

import json

import pytest

from asyncrl.config import TrainConfig, resolve
from asyncrl.metrics import RowWindow
from asyncrl.runtime.trainer import train


def test_a_row_averages_figures_keeps_the_newest_totals_and_recomputes_rates():
    w = RowWindow(envs_per_actor=4)
    w.add({"T": 0.1, "samples": 8.0, "loss/q": 1.0, "policy_lag_max": 2.0, "gradient_steps": 5.0})
    w.add({"T": 0.3, "samples": 8.0, "policy_lag_max": 1.0, "gradient_steps": 5.0})
    w.add({"T": 0.2, "samples": 8.0, "loss/q": 3.0, "policy_lag_max": 0.0, "gradient_steps": 7.0})
    row = w.fold()
    assert row["T"] == pytest.approx(0.2)
    assert row["eps"] == pytest.approx(4 / 0.2)  # K / mean interval
    assert row["env_steps_per_second"] == pytest.approx(24 / 0.6)
    assert row["samples"] == 24.0 and row["row_iterations"] == 3
    assert row["loss/q"] == 2.0  # over the iterations that report it
    assert row["policy_lag_max"] == 2.0
    assert row["gradient_steps"] == 7.0  # a running total: the newest
    assert len(w) == 0


def test_learner_samples_per_second_is_over_the_window():
    w = RowWindow(envs_per_actor=1)
    for seconds in (0.1, 0.3):
        w.add(
            {
                "T": 0.5,
                "samples": 100.0,
                "learn_seconds": seconds,
                "learner_samples_per_second": 100 / seconds,
            }
        )
    assert w.fold()["learner_samples_per_second"] == pytest.approx(200 / 0.4)


def test_log_every_defaults_to_one_row_per_1000_sac_steps_and_every_ppo_iteration():
    sac = resolve(TrainConfig(algo="sac", env="Pendulum-v1", actors=2, envs_per_actor=3))
    assert sac.log_every == 167  # ceil(1000 / (2 x 3 x rollout 1))
    assert resolve(TrainConfig()).log_every == 1
    assert resolve(TrainConfig(algo="sac", env="Pendulum-v1", log_every=5)).log_every == 5


def test_sac_run_writes_a_row_per_log_every_iterations_and_one_at_the_end(tmp_path):
    cfg = TrainConfig(
        algo="sac",
        env="Pendulum-v1",
        mode="sync",
        backend="inline",
        actors=1,
        envs_per_actor=4,
        hidden=[16, 16],
        batch_size=32,
        learning_starts=200,
        total_steps=2_400,  # 600 iterations of 4 transitions
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        run_dir=str(tmp_path / "run"),
    )
    summary = train(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["env_steps"] for r in rows] == [1_000, 2_000, 2_400]  # log_every 250, then the rest
    assert [r["row_iterations"] for r in rows] == [250, 250, 100]
    assert sum(r["samples"] for r in rows) == 2_400
    assert rows[-1]["gradient_steps"] == summary["gradient_steps"] == 2_200
    assert rows[-1]["iteration"] == summary["iterations"] == 600
