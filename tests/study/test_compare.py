"""``asyncrl compare`` and ``asyncrl tune`` end to end on CartPole with tiny budgets."""

from __future__ import annotations

import csv
import json
import struct
import time

import pytest

from asyncrl.cli import main
from asyncrl.config import ConfigError
from asyncrl.settings import TrainConfig
from asyncrl.study.compare import compare, markdown_table
from asyncrl.study.runs import Curve, read_curve
from asyncrl.study.tune import recommend, tune

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _base(**kw) -> TrainConfig:
    settings = dict(
        actors=2, rollout=16, minibatch_size=32, epochs=2, progress=False, tensorboard=False
    )
    return TrainConfig(**{**settings, **kw})


@pytest.mark.slow
def test_compare_writes_table_csv_and_plots_with_every_series(tmp_path, monkeypatch):
    drawn = {}
    import asyncrl.study.plots as plots

    real_plot = plots.plot_returns

    def spy(runs, path, x, title, target=None):
        drawn[path.name] = sorted((r.mode, r.k, len(r.curve.returns)) for r in runs)
        real_plot(runs, path, x, title, target)

    monkeypatch.setattr(plots, "plot_returns", spy)
    out = tmp_path / "study"
    lines = []
    runs = compare(
        _base(),
        [4, 8],
        ["sync", "async"],
        steps=6_000,
        target_return=20.0,
        out=out,
        echo=lines.append,
    )
    assert [(r.mode, r.k) for r in runs] == [("sync", 4), ("async", 4), ("sync", 8), ("async", 8)]
    # the table: one row per K with both modes' (T, EPS) and their ratio
    table = (out / "compare.md").read_text()
    assert "| K | sync (T s, EPS) | async (T s, EPS) | EPS ratio async/sync |" in table
    for r in runs:
        assert f"{r.summary['eps']:.1f}" in table
        assert r.summary["eps"] == pytest.approx(r.k / r.summary["T"])
    ratio_k4 = runs[1].summary["eps"] / runs[0].summary["eps"]
    assert "| 4 | " in table and f"{ratio_k4:.2f}" in table
    sync4, async4 = (r.summary["env_steps_per_second"] for r in runs[:2])
    assert f"{sync4:,.0f}, {async4:,.0f} ({async4 / sync4:.2f})" in table
    assert markdown_table(runs, 20.0) in lines  # also printed
    # the CSV: a row per run, consistent with the run's own summary and curve
    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert len(rows) == 4
    for row, r in zip(rows, runs, strict=True):
        assert int(row["k"]) == r.k and row["mode"] == r.mode
        assert float(row["eps"]) == pytest.approx(r.summary["eps"])
        reached = r.curve.first_reaching(20.0)
        assert (row["steps_to_target"] == "") == (reached is None)
        if reached:
            assert int(row["steps_to_target"]) == reached[0]
    # CartPole's return passes 20 early: every run reaches it, within its budget
    assert all(row["steps_to_target"] for row in rows)
    # plots: real PNGs, and each learning-curve plot drew all four runs with their curves
    for name in ("return_vs_wall.png", "return_vs_steps.png", "eps.png"):
        w, h = _png_size(out / name)
        assert w >= 300 and h >= 200
    expected = sorted((r.mode, r.k, len(r.curve.returns)) for r in runs)
    assert drawn == {"return_vs_wall.png": expected, "return_vs_steps.png": expected}
    assert all(n > 1 for *_, n in expected)

    # --reuse reads the finished runs instead of training them again
    again = compare(
        _base(), [4, 8], ["sync", "async"], steps=6_000, out=out, reuse=True, echo=lambda _: None
    )
    assert all(r.reused for r in again)
    assert [r.summary for r in again] == [r.summary for r in runs]
    # without --reuse an existing study is not overwritten
    with pytest.raises(ConfigError, match="--reuse"):
        compare(_base(), [4], ["sync"], steps=6_000, out=out, echo=lambda _: None)


def test_compare_reuse_retrains_only_runs_whose_settings_changed(tmp_path):
    out = tmp_path / "study"
    first = compare(
        _base(backend="inline"),
        [4],
        ["sync", "async"],
        steps=1_000,
        out=out,
        echo=lambda _: None,
    )
    again = compare(
        _base(backend="inline"),
        [4],
        ["sync", "async"],
        steps=2_000,
        out=out,
        reuse=True,
        echo=lambda _: None,
    )
    assert [r.reused for r in again] == [False, False]  # the step budget changed
    assert all(r.summary["env_steps"] >= 2_000 for r in again)
    assert all(a.summary["env_steps"] < 2_000 for a in first)
    # a retrained run's curve starts afresh (metrics.jsonl is not appended to)
    for r in again:
        steps = read_curve(r.run_dir).env_steps
        assert steps == sorted(steps) and len(steps) == r.summary["iterations"]


def test_compare_of_a_population_reads_its_best_policys_curve(tmp_path):
    """A population's rows alternate between its policies; the study plots and reaches on the
    best policy's rows alone (at its own env steps), whose final return the table shows."""
    out = tmp_path / "study"
    (run,) = compare(
        _base(backend="inline", policies=2, seed=3),
        [4],
        ["async"],
        steps=2_000,
        target_return=15.0,
        out=out,
        echo=lambda _: None,
    )
    best = run.summary["best_policy"]
    rows = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").open()]
    own = [r for r in rows if r.get("policy") == best]
    assert {r["policy"] for r in rows} == {0, 1} and len(own) < len(rows)
    assert run.curve.env_steps == [r["policy_env_steps"] for r in own]
    assert run.curve.returns == [r["episodic_return"] for r in own]
    assert run.curve.env_steps == sorted(run.curve.env_steps)  # one policy's, not a zigzag
    assert run.curve.env_steps[-1] < run.summary["env_steps"]  # its share of the run's steps
    table = (out / "compare.md").read_text()
    assert "N = 2, the best of 2 policies" in table and "best policy's" in table
    assert f"{run.summary['final_return']:.1f} |" in table


def test_compare_rejects_bad_input_before_training(tmp_path):
    with pytest.raises(ConfigError, match="modes"):
        compare(_base(), [4], ["sync", "fast"], steps=100, out=tmp_path)
    with pytest.raises(ConfigError, match="ks"):
        compare(_base(), [0, 4], ["sync"], steps=100, out=tmp_path)
    with pytest.raises(ConfigError, match="minibatch_size"):
        compare(_base(minibatch_size=10_000), [4], ["sync"], steps=100, out=tmp_path)
    assert not (tmp_path / "runs").exists()
    assert main(["compare", "--modes", "sync,later", "--out", str(tmp_path)]) == 2


def test_curve_first_reaching_skips_iterations_without_episodes():
    nan = float("nan")
    curve = Curve([10, 20, 30, 40], [1.0, 2.0, 3.0, 4.0], [nan, 5.0, 12.0, 9.0])
    assert curve.first_reaching(10.0) == (30, 3.0)
    assert curve.first_reaching(5.0) == (20, 2.0)
    assert curve.first_reaching(13.0) is None


def test_recommend_prefers_less_lag_among_near_fastest():
    def row(n, k, sps, lag, iterations=5):
        return {
            "backend": "process",
            "actors": n,
            "k": k,
            "env_steps_per_second": sps,
            "policy_lag_mean": lag,
            "iterations": iterations,
            "eps": 1.0,
            "T": 1.0,
        }

    rows = [row(1, 8, 1000, 0.5), row(2, 8, 1900, 1.5), row(4, 8, 1960, 3.0), row(4, 32, 2000, 3.2)]
    assert recommend(rows) is rows[1]  # within 5% of 2000, and the least lag
    rows.append(row(8, 8, 5000, 0.1, iterations=2))  # too few iterations to be measured
    assert recommend(rows) is rows[1]
    assert recommend([row(1, 8, 1000, 0.0, iterations=1)]) is None


@pytest.mark.slow
def test_tune_prints_table_and_recommendation_within_budget(tmp_path, capsys):
    budget = 40.0
    t0 = time.perf_counter()
    code = main(
        [
            "tune",
            "--ns",
            "1,2",
            "--ks",
            "4,8",
            "--seconds",
            str(budget),
            "--out",
            str(tmp_path / "tune"),
            "--rollout",
            "16",
            "--minibatch-size",
            "32",
            "--epochs",
            "2",
        ]
    )
    elapsed = time.perf_counter() - t0
    out = capsys.readouterr().out
    assert code == 0
    # each probe is cut off at its share of the budget; the last iteration may run over it
    assert elapsed < budget + 15, elapsed
    assert "| backend | N | K | T (s) | EPS | env steps/s | policy lag | iterations |" in out
    for n, k in ((1, 4), (1, 8), (2, 4), (2, 8)):
        assert f"| process | {n} | {k} |" in out
    assert "recommended: --backend process --actors " in out
    rows = list(csv.DictReader((tmp_path / "tune" / "tune.csv").open()))
    assert len(rows) == 4 and all(int(r["iterations"]) >= 3 for r in rows)
    for r in rows:
        assert float(r["seconds"]) <= budget / 4 + 5
    summaries = [
        json.loads(p.read_text()) for p in sorted((tmp_path / "tune").glob("probes/*/summary.json"))
    ]
    assert len(summaries) == 4 and all(s["time_limited"] for s in summaries)


def test_tune_rejects_a_budget_too_small_for_its_probes(tmp_path):
    with pytest.raises(ConfigError, match="seconds: 10 s for 9 probes"):
        tune(_base(), [1, 2, 4], [8, 16, 32], ["process"], 10.0, tmp_path)
    with pytest.raises(ConfigError, match="backends"):
        tune(_base(), [1], [8], ["gpu"], 100.0, tmp_path)
