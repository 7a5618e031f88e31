"""Metrics rows: iterations folded into one row, and how often a run writes one."""

from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest

from asyncrl import metrics
from asyncrl.metrics import RowWindow
from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig, resolve


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
    sac = resolve(TrainConfig(algo="sac", env="Pendulum-v1", actors=2, envs_per_actor=3), "classic")
    assert sac.log_every == 167  # ceil(1000 / (2 x 3 x rollout 1))
    assert resolve(TrainConfig(), "classic").log_every == 1
    assert (
        resolve(TrainConfig(algo="sac", env="Pendulum-v1", log_every=5), "classic").log_every == 5
    )


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


def _old_figures(intervals: list[float], lags: list[tuple[float, float, float]]):
    """mean T and the lag summary as Throughput computed them from lists of every iteration."""
    xs = intervals[1:] or intervals
    mean_T = sum(xs) / len(xs) if xs else math.nan
    total = sum(n for *_, n in lags)
    if not total:
        return mean_T, (math.nan, math.nan)
    return mean_T, (sum(m * n for m, _, n in lags) / total, max(mx for _, mx, _ in lags))


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("iterations", [0, 1, 2, 3, 50, 2_000])
def test_throughput_keeps_sums_that_give_exactly_the_figures_of_the_lists(iterations, monkeypatch):
    """Running sums in place of lists change no figure, to the last bit: intervals of wildly
    different sizes (start-up, stalls) and lags weighted by varying sample counts."""
    rng = random.Random(iterations)
    now = [100.0]

    def clock() -> float:
        return now[0]

    monkeypatch.setattr(metrics, "time", SimpleNamespace(perf_counter=clock))
    meter = metrics.Throughput(envs_per_actor=8)
    intervals, lags = [], []
    for i in range(iterations):
        T = rng.lognormvariate(-3, 3) if i % 97 else rng.uniform(0, 1e3)
        now[0] += T
        stats = {
            "samples": float(rng.choice([0, 1, 8, 256, rng.randint(1, 10_000)])),
            "policy_lag_mean": rng.uniform(0, 5) * rng.choice([0, 1, 1e-9, 1e6]),
            "policy_lag_max": float(rng.randint(0, 9)),
            "actor_wait_seconds": rng.random(),
            "rollout_seconds": rng.random(),
        }
        row = meter.iteration(rng.random(), stats)
        intervals.append(row["T"])
        lags.append((stats["policy_lag_mean"], stats["policy_lag_max"], stats["samples"]))
    mean_T, (lag_mean, lag_max) = _old_figures(intervals, lags)
    assert _same(meter.mean_T, mean_T)
    got_mean, got_max = meter.lag_summary()
    assert _same(got_mean, lag_mean) and _same(got_max, lag_max)
    now[0] += 1.0  # a run's wall clock is never zero
    summary = meter.summary(new_steps=1_000, actors=2)
    assert _same(summary["T"], mean_T) and _same(summary["eps"], 8 / mean_T)
    assert _same(summary["policy_lag_mean"], lag_mean)
    assert _same(summary["policy_lag_max"], lag_max)


def test_episode_stats_report_the_last_20_and_the_last_100_returns():
    from asyncrl.metrics import EpisodeStats

    stats = EpisodeStats()
    assert math.isnan(stats.final_return) and math.isnan(stats.last100_return)
    returns = [float(i) for i in range(150)]
    stats.add(returns[:7], [1] * 7)
    assert stats.final_return == np.mean(returns[:7]) == stats.last100_return
    stats.add(returns[7:], [1] * 143)
    assert stats.episodes == 150
    assert stats.final_return == np.mean(returns[-20:])
    assert stats.last100_return == np.mean(returns[-100:])
    again = EpisodeStats()
    again.load_state_dict(stats.state_dict())
    assert (again.final_return, again.last100_return) == (stats.final_return, stats.last100_return)
    # the means are kept between reads: a loaded state replaces them too
    earlier = EpisodeStats()
    earlier.add(returns[:3], [2] * 3)
    stats.load_state_dict(earlier.state_dict())
    assert stats.final_return == np.mean(returns[:3]) == stats.last100_return
    assert stats.final_length == 2
