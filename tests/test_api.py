"""The Python API: asyncrl.train from any thread, leaving the process as it was; callbacks that
stop a run; the same settings and errors as the command line; the learner's device."""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import signal
import threading

import numpy as np
import pytest
import torch

import asyncrl
from asyncrl.cli import main
from asyncrl.config import ConfigError
from conftest import how_it_went

SMALL = dict(
    envs_per_actor=4,
    rollout=32,
    minibatch_size=64,
    epochs=2,
    progress=False,
    tensorboard=False,
    checkpoint_every=0,
)


def _in_thread(fn):
    """Run ``fn()`` on a fresh (non-main) thread; its result, or re-raise what it raised."""
    out: dict = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as e:  # handed to the test's thread
            out["error"] = e

    t = threading.Thread(target=target, name="api-test")
    t.start()
    t.join(timeout=170)
    assert not t.is_alive(), "train did not return"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_importing_asyncrl_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, asyncrl; print('torch' in sys.modules, sorted(asyncrl.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, names = out.stdout.split(" ", 1)
    assert loaded == "False"
    for name in ("train", "load", "TrainResult", "Policy", "ConfigError"):
        assert name in names


@pytest.mark.slow
def test_the_api_solves_cartpole_from_a_helper_thread(tmp_path):
    main_threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def run():
        before = torch.get_num_threads()
        result = asyncrl.train(
            "CartPole-v1",
            total_steps=150_000,
            seed=1,
            progress=False,
            tensorboard=False,
            run_dir=str(tmp_path / "run"),
        )
        return result, before, torch.get_num_threads()

    result, before, after = _in_thread(run)
    assert isinstance(result, asyncrl.TrainResult)
    assert after == before and torch.get_num_threads() == main_threads
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert result.run_dir == tmp_path / "run"
    assert result.summary == json.loads((tmp_path / "run" / "summary.json").read_text())
    # the defaults (async, process backend) with seed 1: test_learning.py's CartPole promise for
    # that case is checked here rather than by a second identical run
    assert result.summary["env_steps"] <= 150_000 + 2 * 8 * 32
    assert result.summary["final_return"] >= 475, how_it_went(result.summary)
    assert result.summary["mode"] == "async" and result.summary["backend"] == "process"
    assert result.summary["policy_lag_max"] >= 1
    assert not result.stopped_by_callback and result.config.total_steps == 150_000
    # the trained policy, loaded back, balances the pole far beyond chance (~22 steps)
    evaluation = result.load().evaluate(episodes=5, seed=0)
    assert evaluation.episodes == 5 and evaluation.mean_return >= 195, evaluation


def test_a_run_trains_with_the_learners_threads_and_gives_back_the_callers(tmp_path):
    """The learner in the run's own process (inline, sync: the caller's thread) runs with
    ``threads_learner`` torch threads while the run lasts, whatever the caller had, and the
    caller's count comes back after it."""
    seen = []
    torch.set_num_threads(1)
    try:
        asyncrl.train(
            total_steps=512, run_dir=str(tmp_path / "run"), backend="inline", mode="sync",
            threads_learner=2, callback=lambda row: seen.append(torch.get_num_threads()),
            **SMALL,
        )  # fmt: skip
        assert seen and set(seen) == {2}
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(1)


def _global_state() -> dict:
    return {
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": np.random.get_state(),
        "python_rng": random.getstate(),
        "threads": torch.get_num_threads(),
        "interop": torch.get_num_interop_threads(),
    }


def _same_state(a: dict, b: dict) -> bool:
    return (
        torch.equal(a["torch_rng"], b["torch_rng"])
        and a["numpy_rng"][0] == b["numpy_rng"][0]
        and np.array_equal(a["numpy_rng"][1], b["numpy_rng"][1])
        and a["numpy_rng"][2:] == b["numpy_rng"][2:]
        and a["python_rng"] == b["python_rng"]
        and a["threads"] == b["threads"]
        and a["interop"] == b["interop"]
    )


@pytest.mark.slow
@pytest.mark.parametrize("where", ["main thread", "helper thread"])
@pytest.mark.parametrize("topology", [{}, {"hogwild": 2}])
def test_train_leaves_threads_signals_and_random_states_as_they_were(tmp_path, where, topology):
    def own_handler(signum, frame):  # a caller's handlers, which train must put back
        pass

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, own_handler)
    signal.signal(signal.SIGINT, own_handler)
    torch.manual_seed(123)
    np.random.seed(5)
    random.seed(7)

    def run():
        torch.set_num_threads(3)  # not threads_learner (1): train must restore it
        before = _global_state()
        summary = asyncrl.train(
            total_steps=2_048, run_dir=str(tmp_path / "run"), **SMALL, **topology
        ).summary
        after = _global_state()
        torch.set_num_threads(1)
        return before, after, summary

    try:
        before, after, summary = run() if where == "main thread" else _in_thread(run)
        assert summary["env_steps"] >= 2_048
        assert _same_state(before, after)
        assert signal.getsignal(signal.SIGTERM) is own_handler
        assert signal.getsignal(signal.SIGINT) is own_handler
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        torch.set_num_threads(1)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"total_step": 100},
            "unknown setting(s) total_step (did you mean total_steps?); known settings: algo, env,",
        ),
        (
            {"learning_rate": 1e-3, "zzz": 1},
            "unknown setting(s) learning_rate (did you mean lr?), zzz;",
        ),
        (
            {"policies": 2, "population": {"learning_rate": [1e-3, 1e-4]}},
            "population: unknown setting learning_rate (did you mean lr?)",
        ),
        ({"actors": 0}, "actors: must be >= 1, got 0"),
        ({"progress": "yes"}, "progress: expected true or false, got 'yes'"),
        ({"mode": "fast"}, "mode: 'fast' is not one of sync, async"),
        ({"total_steps": 2.5}, "total_steps: expected a whole number, got 2.5"),
        ({"env": "NoSuchEnv-v9"}, "env: 'NoSuchEnv-v9' is not a registered Gymnasium env id"),
    ],
)
def test_a_bad_setting_raises_config_error_naming_it_before_anything_starts(
    tmp_path, settings, message
):
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as e:
        asyncrl.train(run_dir=str(run), **{"progress": False, **settings})
    assert str(e.value).startswith(message)
    assert len(str(e.value).splitlines()) == 1
    assert not run.exists() and not mp.active_children()


def test_the_cli_and_the_api_refuse_cuda_without_cuda_in_one_line(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    run = tmp_path / "run"
    assert main(["train", "--device", "cuda", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("asyncrl: error: device: cuda asked for, but ")
    assert "use --device cpu or auto" in err[0]
    with pytest.raises(ConfigError, match="^device: cuda asked for"):
        asyncrl.train(device="cuda", run_dir=str(run))
    assert not run.exists() and not mp.active_children()


@pytest.mark.slow
def test_device_auto_is_the_cpu_here_and_trains_exactly_as_cpu(tmp_path):
    """``auto`` without CUDA is the CPU; the device code path changes no number there."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    states = {}
    for device in ("cpu", "auto"):
        run = tmp_path / device
        settings = dict(total_steps=1_024, backend="inline", mode="sync", device=device)
        asyncrl.train(run_dir=str(run), **settings, **SMALL)
        states[device] = torch.load(run / "checkpoint.pt", weights_only=True)["policy"]
    for key, value in states["cpu"].items():
        assert torch.equal(states["auto"][key], value), key


@pytest.mark.slow
@pytest.mark.parametrize("topology", [{}, {"hogwild": 2}])
def test_a_callback_returning_false_ends_the_run_early_as_a_finished_run(tmp_path, topology):
    rows: list[dict] = []

    def callback(row):
        rows.append(row)
        if row["env_steps"] >= 1_000:
            return False
        return None  # go on

    result = asyncrl.train(
        total_steps=1_000_000, run_dir=str(tmp_path / "run"), callback=callback, **SMALL, **topology
    )
    s = result.summary
    assert result.stopped_by_callback and s["stopped_by_callback"] is True
    assert not s["time_limited"] and not s["interrupted"]
    # it stopped at the first row past 1,000 of the 1,000,000 steps (an iteration: 4 x 32)
    iteration, workers = 4 * 32, topology.get("hogwild", 0)
    assert all(r["env_steps"] < 1_000 for r in rows[:-1]) and rows[-1]["env_steps"] >= 1_000
    if not workers:  # the loop itself stops: not one more iteration
        assert rows[-1]["env_steps"] < 1_000 + iteration
        assert s["env_steps"] == rows[-1]["env_steps"]
    else:
        # Hogwild! workers train on while the parent handles their reports; told to stop, each
        # ends the iteration it is in (and may have begun one between the row's count and the
        # stop)
        assert rows[-1]["env_steps"] <= s["env_steps"]
        assert s["env_steps"] <= rows[-1]["env_steps"] + 2 * workers * iteration
    for key in ("env_steps", "episodic_return", "episodic_length", "eps", "loss/policy"):
        assert key in rows[-1], key
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["stopped_by_callback"] is True
    # a final checkpoint was written and the policy in it acts
    policy = result.load()
    assert policy.env_steps == s["env_steps"]
    assert policy.act(np.zeros(4, np.float32)) in (0, 1)
