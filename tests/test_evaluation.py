"""Evaluation: during training (eval rows, best checkpoint, off the training path), loaded
policies acting as ``asyncrl eval`` acts, and videos."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import asyncrl
from asyncrl.cli import main
from asyncrl.envs import eval_seeds, make_env
from asyncrl.policy import run_episodes

SMALL = dict(
    envs_per_actor=4,
    rollout=32,
    minibatch_size=64,
    epochs=2,
    progress=False,
    tensorboard=False,
    checkpoint_every=0,
)


def _rows(run: Path) -> tuple[list[dict], list[dict]]:
    """(training rows, evaluation rows) of a run's metrics.jsonl."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    evals = [r for r in rows if "eval/mean_return" in r]
    return [r for r in rows if "eval/mean_return" not in r], evals


@pytest.mark.slow
@pytest.mark.parametrize("topology", [{}, {"hogwild": 2}])
def test_eval_during_training_logs_rows_and_keeps_the_best_checkpoint(tmp_path, topology, capsys):
    run = tmp_path / "run"
    every, received, waits = 1_500, [], []

    def pace(row):
        """The evaluator runs at the lowest priority: on a busy machine it may get no CPU
        until training ends. Pause training while an evaluation is due, so that several come
        back within this short run: 0.25 s, then twice as long at each iteration it is still
        due, up to 2 s (a fixed 0.25 s was too short beside a CI run and two training runs:
        the child had not imported torch by the run's end). (Hogwild! workers train on while
        the parent, which calls this, pauses: there only the evaluation the end of the run
        waits for is certain.)"""
        if "eval/mean_return" in row:
            received.append(row["eval/env_steps"])
            waits.clear()
        if row["env_steps"] >= every * (len(received) + 1):
            waits.append(min(2.0, 0.25 * 2 ** len(waits)))
            time.sleep(waits[-1])

    result = asyncrl.train(
        total_steps=8_192,
        eval_every=every,
        eval_episodes=3,
        callback=pace,
        run_dir=str(run),
        **{**SMALL, "tensorboard": True},
        **topology,
    )
    train_rows, eval_rows = _rows(run)
    assert len(eval_rows) >= (1 if topology else 2)
    steps = [r["env_steps"] for r in eval_rows]
    assert steps == sorted(steps) and steps[0] >= every  # at the env step of the weights
    assert received == steps[: len(received)]  # the callback saw them as they came back
    for r in eval_rows:
        assert r["eval/episodes"] == 3 and r["eval/std_return"] >= 0
        # CartPole pays 1 per step: an episode's return is its length
        assert r["eval/mean_return"] == r["eval/mean_length"]
    # training rows carry episode lengths too (the same last-20 episodes as the return)
    finished = [r for r in train_rows if np.isfinite(r["episodic_return"])]
    assert finished and all(r["episodic_length"] == r["episodic_return"] for r in finished)
    # the summary and the best checkpoint agree with the rows
    s = result.summary
    best = max(eval_rows, key=lambda r: r["eval/mean_return"])  # max keeps the first of ties
    assert s["evaluations"] == len(eval_rows)
    assert s["eval_best_return"] == best["eval/mean_return"]
    assert s["eval_best_env_steps"] == best["env_steps"]
    policy = result.load("best")
    assert policy.env_steps == best["env_steps"]
    assert policy.evaluation["mean_return"] == best["eval/mean_return"]
    # it holds exactly the evaluated weights: the same episodes give the same returns
    env = make_env("CartPole-v1")
    again = run_episodes(policy, env, eval_seeds(result.config.seed, 3))
    env.close()
    assert again.mean_return == best["eval/mean_return"]
    # asyncrl eval reads either checkpoint
    capsys.readouterr()
    assert main(["eval", str(run), "--checkpoint", "best", "--episodes", "2"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["env_steps"] == best["env_steps"]
    # TensorBoard has the evaluation scalars at the same steps
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = EventAccumulator(str(run / "tb"))
    tb.Reload()
    assert [e.step for e in tb.Scalars("eval/mean_return")] == steps


@pytest.mark.slow
def test_evaluation_changes_nothing_in_training(tmp_path):
    """Separate envs, own seeds, not counted: an inline run trains bit for bit the same."""
    states, rows = {}, {}
    for every in (0, 512):
        run = tmp_path / str(every)
        asyncrl.train(
            total_steps=3_072,
            backend="inline",
            mode="sync",
            eval_every=every,
            eval_episodes=2,
            run_dir=str(run),
            **SMALL,
        )
        states[every] = torch.load(run / "checkpoint.pt", weights_only=True)["learner"]
        rows[every] = _rows(run)
    assert not rows[0][1] and rows[512][1]  # evaluations only where asked for
    assert states[0]["counters"]["env_steps"] == states[512]["counters"]["env_steps"]
    for key, value in states[0]["policy"].items():
        assert torch.equal(states[512]["policy"][key], value), key
    losses = [(r["loss/policy"], r["loss/value"]) for r in rows[0][0]]
    assert losses == [(r["loss/policy"], r["loss/value"]) for r in rows[512][0]]


@pytest.mark.slow
def test_a_failing_evaluator_is_reported_once_and_training_goes_on(tmp_path, capsys):
    """CrashAfter raises at step 300: the training envs are recreated in place, the
    evaluator's episode cannot finish, so evaluation stops for the run, with one warning."""
    result = asyncrl.train(
        env="fake_envs:CrashAfter-v0",
        total_steps=4_096,
        on_env_error="restart",
        eval_every=500,
        eval_episodes=1,
        run_dir=str(tmp_path / "run"),
        **SMALL,
    )
    s = result.summary
    assert s["env_steps"] >= 4_096 and s["evaluations"] == 0
    assert "boom: simulated env failure" in s["eval_failure"]
    warnings = [line for line in capsys.readouterr().err.splitlines() if "evaluator" in line]
    assert len(warnings) == 1 and "no more evaluations in this run" in warnings[0]


class _Recorder(gym.Wrapper):
    """Records each observation an env shows and the action it is given for it."""

    seen: list[tuple[np.ndarray, np.ndarray]] = []

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        self.last = obs
        return obs, info

    def step(self, action):
        _Recorder.seen.append((np.array(self.last), np.array(action)))
        obs, *rest = self.env.step(action)
        self.last = obs
        return (obs, *rest)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env_id", "extra"),
    [
        ("CartPole-v1", {"norm_obs": True}),
        ("CartPole-v1", {"norm_obs": True, "norm_obs_min_std": 0.5}),  # a floor, as for Ant-v5
        ("Pendulum-v1", {}),
    ],
)
def test_load_act_gives_the_actions_asyncrl_eval_takes(tmp_path, monkeypatch, env_id, extra):
    run = tmp_path / "run"
    asyncrl.train(env_id, total_steps=2_048, backend="inline", run_dir=str(run), **SMALL, **extra)
    _Recorder.seen = []
    monkeypatch.setattr(
        "asyncrl.policy.make_env", lambda env, render_mode=None, **kw: _Recorder(make_env(env))
    )
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    monkeypatch.undo()
    obs = np.stack([o for o, _ in _Recorder.seen])
    taken = np.stack([a for _, a in _Recorder.seen])
    policy = asyncrl.load(run)
    # asyncrl eval acts on one observation at a time: so does load(...).act, exactly
    ones = [policy.act(o) for o in obs]
    assert np.array_equal(np.stack(ones), taken)
    # a batch gives the same actions, up to the last bit of a float (a batched matrix
    # product may sum in another order)
    batch = policy.act(obs)
    assert batch.shape == taken.shape
    np.testing.assert_allclose(batch, taken, rtol=0, atol=1e-6)
    one = ones[0]
    if env_id == "CartPole-v1":
        assert isinstance(one, int) and np.array_equal(batch, taken)
        # computed by hand from the checkpoint: normalised with the saved statistics
        state = torch.load(run / "checkpoint.pt", weights_only=True)["learner"]["policy"]
        mean, var = state["obs_norm.mean"].numpy(), state["obs_norm.var"].numpy()
        assert np.abs(mean).max() > 0  # the statistics moved: they matter for the actions
        std = np.sqrt(var)
        floor = extra.get("norm_obs_min_std", 0.0)
        if floor:  # narrower dimensions only centred, wider ones scaled: both kinds present
            assert (std < floor).any() and (std > floor).any()
            std = np.maximum(std, floor)
        x = np.clip((obs - mean) / (std + 1e-8), -10, 10).astype(np.float32)
        for i in (0, 2):
            w, b = state[f"pi.{i}.weight"].numpy(), state[f"pi.{i}.bias"].numpy()
            x = np.tanh(x @ w.T + b)
        logits = x @ state["pi.4.weight"].numpy().T + state["pi.4.bias"].numpy()
        assert np.array_equal(logits.argmax(1), taken)
    else:  # continuous: the mean, clipped to the action space, as the env receives it
        assert one.shape == (1,) and one.dtype == np.float32
        assert np.all(np.abs(taken) <= 2.0)
    with pytest.raises(ValueError, match="expected"):
        policy.act(np.zeros(7, np.float32))


@pytest.mark.slow
def test_eval_video_is_a_gif_with_a_frame_per_reset_and_step(tmp_path, capsys):
    pytest.importorskip("pygame")
    from PIL import Image, ImageSequence

    run = tmp_path / "run"
    asyncrl.train(total_steps=1_024, backend="inline", run_dir=str(run), **SMALL)
    video = tmp_path / "cartpole.gif"
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2", "--video", str(video)]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    with Image.open(video) as gif:
        assert gif.format == "GIF" and gif.size == (600, 400)
        frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(gif)]
        assert gif.info["duration"] == 20  # CartPole's 50 frames per second
    # every frame is kept, also one identical to the one before (the pole barely moves in
    # one step), so the count is exact
    assert len(frames) == sum(result["lengths"]) + 2
    first_episode = frames[: result["lengths"][0] + 1]
    assert not np.array_equal(first_episode[0], first_episode[-1])  # the cart and pole moved
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file


@pytest.mark.slow
def test_a_video_that_cannot_render_is_one_line_naming_what_is_needed(tmp_path):
    if os.environ.get("DISPLAY"):
        pytest.skip("a display is present: MuJoCo can render through GLFW")
    run = tmp_path / "run"
    asyncrl.train(
        "InvertedPendulum-v5", total_steps=64, backend="inline", run_dir=str(run), **SMALL
    )
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    out = subprocess.run(
        [sys.executable, "-m", "asyncrl.cli", "eval", str(run), "--video", str(tmp_path / "v.gif")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    err = out.stderr.strip().splitlines()
    assert len(err) == 1, out.stderr
    assert err[0].startswith("asyncrl: error: video: InvertedPendulum-v5 cannot render off-screen")
    assert "MUJOCO_GL=egl (needs libEGL) or MUJOCO_GL=osmesa (needs libOSMesa)" in err[0]
    assert not (tmp_path / "v.gif").exists()


@pytest.mark.slow
def test_a_renderer_that_hangs_ends_in_one_line_naming_what_to_install(tmp_path):
    """MUJOCO_GL=egl with an OpenGL library that never answers (stock Debian Mesa hung for
    2 minutes; here the library file is a FIFO, whose open blocks, in real native code): eval
    --video ends within the render timeout, in one line naming what to install."""
    run = tmp_path / "run"
    asyncrl.train(
        "InvertedPendulum-v5", total_steps=64, backend="inline", run_dir=str(run), **SMALL
    )
    libs = tmp_path / "libs"
    libs.mkdir()
    for name in ("libEGL.so", "libEGL.so.1"):
        os.mkfifo(libs / name)
    env = {**os.environ, "MUJOCO_GL": "egl", "LD_LIBRARY_PATH": str(libs)}
    env["ASYNCRL_RENDER_TIMEOUT"] = "5"
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "asyncrl.cli", "eval", str(run), "--video", str(tmp_path / "v.gif")],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 2, out.stderr
    err = out.stderr.strip().splitlines()
    assert len(err) == 1, out.stderr
    assert err[0].startswith(
        "asyncrl: error: video: InvertedPendulum-v5 drew no frame within 5 s with MUJOCO_GL='egl'"
    )
    assert "apt-get install libosmesa6" in err[0] and "MUJOCO_GL=osmesa" in err[0]
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "v.gif").exists()
