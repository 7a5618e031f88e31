"""``asyncrl sweep``: the sweep file's checks, the metrics-to-Optuna reporting, and the sweep
end to end on CartPole (pruned, interrupted by Ctrl+C, resumed, best.yaml trained)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

optuna = pytest.importorskip("optuna")

from asyncrl.cli import main  # noqa: E402
from asyncrl.config import ConfigError  # noqa: E402
from asyncrl.study.sweep import (  # noqa: E402
    TrialRun,
    _fail_left_running,
    counted,
    parse,
    report_rows,
)

BASE = {"env": "CartPole-v1", "total_steps": 2000}


def _sweep(**kw) -> dict:
    return {"base": dict(BASE), "space": {"lr": {"low": 1e-5, "high": 1e-2, "log": True}}, **kw}


def test_a_sweep_file_parses_to_typed_ranges_and_defaults():
    sweep = parse(
        _sweep(
            space={
                "lr": {"low": 1e-5, "high": 1e-2, "log": True},
                "epochs": {"low": 2, "high": 8.0},
                "hidden": {"choices": [[64, 64], [128]]},
                "norm-obs": {"choices": [True, False]},
            }
        )
    )
    assert sweep.space["epochs"].low == 2 and isinstance(sweep.space["epochs"].high, int)
    assert sweep.space["lr"].log and not sweep.space["epochs"].log
    assert sweep.space["hidden"].choices == ([64, 64], [128])
    assert str(sweep.objective) == "final_return" and sweep.objective.column == "episodic_return"
    assert sweep.direction == "maximize"
    # reported every 1/20 of the budget, prunable after its first fifth
    assert (sweep.every, sweep.warmup) == (100, 400)
    # each setting is drawn as its type; a list goes through Optuna as JSON and comes back
    trial = optuna.trial.FixedTrial({"lr": 1e-3, "epochs": 4, "hidden": "[128]", "norm_obs": False})
    drawn = {name: p.suggest(trial) for name, p in sweep.space.items()}
    assert drawn == {"lr": 1e-3, "epochs": 4, "hidden": [128], "norm_obs": False}
    at = parse(_sweep(objective="loss/value@1e3", direction="minimize"))
    assert (at.objective.name, at.objective.step, at.objective.column) == (
        "loss/value",
        1000,
        "loss/value",
    )


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (_sweep(trials=3), "sweep: unknown key(s) trials"),
        (_sweep(space={"lrr": {"low": 1, "high": 2}}), "unknown setting lrr (did you mean lr?)"),
        (_sweep(base={"lrr": 1}), "unknown setting(s) lrr (did you mean lr?)"),
        (_sweep(base={"run_dir": "x"}), "base: run_dir: the sweep gives each trial its own"),
        (_sweep(space={"run_dir": {"choices": ["a"]}}), "space: run_dir: the sweep sets it"),
        (_sweep(space={"lr": {"low": 0.1, "high": 0.01}}), "space: lr: low must be below high"),
        (_sweep(space={"lr": {"low": 0, "high": 0.1, "log": True}}), "space: lr: log needs low"),
        (_sweep(space={"lr": {"low": 0.1}}), "space: lr: give low and high"),
        (_sweep(space={"lr": {"low": 0.1, "high": 1, "step": 2}}), "unknown key(s) step"),
        (_sweep(space={"mode": {"low": 1, "high": 2}}), "space: mode: unknown key(s) high, low"),
        (_sweep(space={"epochs": {"low": 1.5, "high": 4}}), "expected a whole number"),
        (_sweep(space={"mode": {"choices": []}}), "space: mode: choices must be a non-empty"),
        # a value asyncrl train would refuse, found before any trial starts
        (_sweep(space={"actors": {"low": 0, "high": 2}}), "actors: must be >= 1, got 0 (with"),
        (_sweep(space={"mode": {"choices": ["sync", "a"]}}), "mode: 'a' is not one of sync"),
        (_sweep(base={"lr": 1e-3}), "space: lr: given in base too"),
        (_sweep(objective="return"), "objective: 'return' is not a summary field"),
        (_sweep(objective="episodic_return@-5"), "objective: 'episodic_return@-5' must be"),
        (_sweep(objective="eval_best_return"), "objective: eval_best_return needs evaluations"),
        (_sweep(direction="up"), "direction: 'up' is not one of"),
        (_sweep(prune={"every": 0}), "prune: every must be >= 1"),
        (_sweep(prune={"patience": 2}), "prune: unknown key(s) patience"),
        (_sweep(enqueue=[{"lr": 1.0}]), "enqueue: lr 1.0 is outside its space"),
        (_sweep(enqueue=[{"gamma": 0.9}]), "enqueue: gamma is not in space"),
    ],
)
def test_a_bad_sweep_file_is_refused_in_one_line_naming_the_key(data, error):
    with pytest.raises(ConfigError) as e:
        parse(data)
    assert error in str(e.value) and "\n" not in str(e.value)


def test_a_resumed_sweep_keeps_its_own_settings_and_a_new_one_needs_a_file(tmp_path, capsys):
    assert main(["sweep", "--resume", str(tmp_path), "--storage", "sqlite://"]) == 2
    assert "storage: a resumed sweep keeps its own" in capsys.readouterr().err
    assert main(["sweep", "--resume", str(tmp_path)]) == 2
    assert f"resume: {tmp_path} holds no sweep" in capsys.readouterr().err
    assert main(["sweep"]) == 2
    assert "give a sweep file, or --resume" in capsys.readouterr().err


class _Trial:
    def __init__(self) -> None:
        self.reports: list[tuple[float, int]] = []

    def report(self, value: float, step: int) -> None:
        self.reports.append((value, step))


def test_the_objective_is_reported_at_the_same_grid_of_env_steps_for_every_batch_size(tmp_path):
    sweep = parse(_sweep(prune={"every": 100}))
    run = TrialRun(_Trial(), {}, tmp_path, proc=None, next_report=sweep.every)
    rows = [
        {"env_steps": 96, "episodic_return": 10.0},
        {"env_steps": 192, "episodic_return": float("nan")},  # no episode ended yet
        {"env_steps": 288, "episodic_return": 12.0},
        {"env_steps": 288, "policy": 0, "episodic_return": 99.0},  # a population's row
        {"env_steps": 384, "eval/mean_return": 50.0},  # an evaluation's row
        {"env_steps": 480, "episodic_return": 15.0},
    ]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    cut = text.index('{"env_steps": 480') + 10
    (tmp_path / "metrics.jsonl").write_text(text[:cut])  # the last line half written
    assert report_rows(run, sweep)
    # 100 is passed by a row with no finite return yet; rows without the column pass nothing
    assert run.trial.reports == [(12.0, 200)]
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write(text[cut:])
    assert report_rows(run, sweep)
    assert run.trial.reports == [(12.0, 200), (15.0, 300), (15.0, 400)]
    assert run.last_step == 400 and run.next_report == 500


def test_the_target_counts_finished_trials_and_trials_failed_on_their_own(tmp_path):
    """Trials Ctrl+C stopped, and those a killed sweep left running (marked failed on resume),
    are tried anew; a trial that failed on its own settings counts, or a sweep of a setting
    combination that cannot work would never end."""
    from optuna.trial import TrialState

    study = optuna.create_study()
    ended = {}
    for name in ("complete", "pruned", "interrupted", "error", "left", "elsewhere"):
        trial = study.ask()
        here = tmp_path if name != "elsewhere" else tmp_path / "other"
        trial.set_user_attr("run_dir", str(here / f"trial-{trial.number:04d}"))
        ended[name] = trial
    study.tell(ended["complete"], 1.0)
    study.tell(ended["pruned"], state=TrialState.PRUNED)
    ended["interrupted"].set_user_attr("failed", "interrupted")
    study.tell(ended["interrupted"], state=TrialState.FAIL)
    ended["error"].set_user_attr("failed", "exit 2: asyncrl: error: ...")
    study.tell(ended["error"], state=TrialState.FAIL)
    _fail_left_running(study, tmp_path)
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "PRUNED", "FAIL", "FAIL", "FAIL", "RUNNING"]
    assert counted(study.trials) == 3


def _own_processes(path: Path) -> list[str]:
    """Command lines of live processes that name ``path`` (trials of a sweep there)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in cmd:
            found.append(cmd)
    return found


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "asyncrl.cli", *args]


@pytest.mark.slow
def test_a_sweep_prunes_stops_on_ctrl_c_resumes_and_its_best_yaml_trains(tmp_path):
    # Pruning made certain: the first three trials are enqueued -- two with the learning rate
    # CartPole's preset is tuned near (its return passes 30 by 1,024 env steps), then one with
    # lr 1e-8, which leaves the policy as it started (a return near 20, never above 23 in its
    # first 1,536 steps). The bad trial starts once a good one has completed (2 jobs), so at
    # 1,024 steps the median pruner, which needs one completed trial, compares it with a
    # completed good trial and prunes it. The inline backend makes each trial's run the same
    # at every try.
    file = tmp_path / "sweep.yaml"
    file.write_text(
        yaml.safe_dump(
            {
                "base": {
                    "env": "CartPole-v1",
                    "backend": "inline",
                    "actors": 1,
                    "envs_per_actor": 4,
                    "total_steps": 1536,
                    "seed": 1,
                    "tensorboard": False,
                    "checkpoint_every": 0,
                },
                "space": {"lr": {"low": 1e-8, "high": 1e-2, "log": True}},
                "prune": {"every": 256, "warmup": 1024, "startup_trials": 1},
                "enqueue": [{"lr": 0.003}, {"lr": 0.003}, {"lr": 1e-8}],
            }
        )
    )
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        _cli("sweep", str(file), "--out", str(out), "--trials", "6", "--jobs", "2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group: the Ctrl+C below reaches only the sweep
    )
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("trial 4 started"):  # 2 jobs: the third trial has just ended
                os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl+C
                break
        lines += proc.stdout.readlines()
        assert proc.wait(120) == 130, "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(lines)
    done_at_stop = int(re.search(r"sweep interrupted: (\d) of 6 trials done", text)[1])
    assert not _own_processes(out), "a trial outlived the sweep"
    storage = f"sqlite:///{out / 'optuna.db'}"
    study = optuna.load_study(study_name="sweep", storage=storage)
    states = [t.state.name for t in study.trials]
    assert states[:2] == ["COMPLETE", "COMPLETE"] and "PRUNED" in states[2:4], states
    # trials 2 and 3 may end in one poll: 4 and 5 then start together, before the Ctrl+C lands
    started = len(re.findall(r"^trial \d+ started", text, re.M))
    assert started in (5, 6) and len(states) == started, text
    assert done_at_stop == started - states.count("FAIL") >= 3
    assert all(s == "FAIL" for s in states[4:]), states
    # trial 4, started just before Ctrl+C, is failed and says why; the finished ones stay
    assert states[4] == "FAIL" and study.trials[4].user_attrs["failed"] == "interrupted"
    assert "| 4 | fail (interrupted) |" in text

    done = subprocess.run(
        _cli("sweep", "--resume", str(out), "--jobs", "2"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    study = optuna.load_study(study_name="sweep", storage=storage)
    counted = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(counted) == 6
    assert not any(t.state.name == "RUNNING" for t in study.trials)
    assert not _own_processes(out)
    assert study.trials[2].state.name in ("PRUNED", "FAIL")  # the bad one: never complete
    for t in counted:  # every trial a normal run directory
        summary = json.loads((Path(t.user_attrs["run_dir"]) / "summary.json").read_text())
        assert summary["ended"] in ("budget", "signal")
        assert t.state.name == "PRUNED" or not summary["interrupted"]
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["lr"] == study.best_trial.params["lr"]
    assert f"| {study.best_trial.number} **<-** | complete |" in done.stdout

    trained = subprocess.run(
        _cli(
            "train",
            "--config",
            str(out / "best.yaml"),
            "--total-steps",
            "256",
            "--run-dir",
            str(tmp_path / "best-run"),
            "--no-progress",
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert trained.returncode == 0, trained.stdout + trained.stderr
    saved = yaml.safe_load((tmp_path / "best-run" / "config.yaml").read_text())
    assert (saved["lr"], saved["backend"], saved["envs_per_actor"]) == (best["lr"], "inline", 4)
