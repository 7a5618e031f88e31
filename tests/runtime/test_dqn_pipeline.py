"""DQN through the pipeline: Atari frames stored once in its replay, the replay ratio held in
async mode, an exact resume, and CartPole solved in both modes by the command with no flag but
the env."""

from __future__ import annotations

import dataclasses

import pytest

import asyncrl
from asyncrl.rundir import load_checkpoint
from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig, resolve
from test_resume import _differences


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(
        algo="dqn",
        env="CartPole-v1",
        actors=1,
        envs_per_actor=4,
        hidden=[32, 32],
        batch_size=32,
        learning_starts=200,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        run_dir=str(tmp_path / "run"),
    )
    base.update(kw)
    return TrainConfig(**base)


def test_atari_frames_are_stored_once_in_the_replay(tmp_path, capsys):
    pytest.importorskip("ale_py")
    from asyncrl.algos.dqn.learner import DQNLearner
    from asyncrl.replay import FrameReplay

    seen: list = []
    real = DQNLearner.train

    def keep(self, slots):
        seen.append(self.replay)
        return real(self, slots)

    mp = pytest.MonkeyPatch()
    mp.setattr(DQNLearner, "train", keep)
    try:
        s = train(
            _cfg(
                tmp_path,
                env="ALE/Breakout-v5",
                backend="inline",
                mode="async",
                envs_per_actor=2,
                rollout=4,
                hidden=[32],
                learning_starts=64,
                batch_size=8,
                buffer_size=2_000,
                total_steps=400,
            )
        )
    finally:
        mp.undo()
    replay = seen[-1]
    assert isinstance(replay, FrameReplay) and replay.stack == 4
    assert s["gradient_steps"] > 0 and len(replay) == 400
    frame = 84 * 84
    whole = 2 * 4 * frame + 8 + 4 + 2  # two stacks of 4 frames, action, reward, two flags
    assert replay.bytes_per_transition == frame + 8 + 4 + 5
    assert whole / replay.bytes_per_transition > 7.9
    line = [x for x in capsys.readouterr().out.splitlines() if "B per transition" in x][0]
    assert f"replay {frame + 17:,} B per transition" in line
    assert f"{whole:,} B with whole observations" in line
    # a sample rebuilds stacks of 4 frames, the next observation one frame on
    b = replay.take(replay.draw_indices(16))
    assert b["obs"].shape == b["next_obs"].shape == (16, 4, 84, 84)
    moved = (b["obs"][:, 1:] == b["next_obs"][:, :-1]).all(axis=(1, 2, 3))
    assert moved.sum() >= 14  # all but a game's reset in between


def test_async_holds_the_replay_ratio_within_tolerance(tmp_path):
    cfg = _cfg(tmp_path, mode="async", replay_ratio=0.5, total_steps=3_000, rollout=2)
    s = train(cfg)
    post = s["env_steps"] - 200
    tolerance = resolve(cfg, "classic").ratio_tolerance  # auto: 2 x max(1, 0.5 x 4 x 2) = 8
    assert tolerance == 8.0
    assert abs(s["gradient_steps"] - 0.5 * post) <= tolerance
    assert s["replay_ratio_achieved"] == pytest.approx(0.5, abs=tolerance / post + 1e-9)
    assert s["policy_lag_max"] >= 1


def test_a_run_stopped_and_resumed_ends_bit_for_bit_where_an_unbroken_one_ends(tmp_path):
    """inline, sync: the same run, stopped half-way (by its callback) and resumed with its
    replay, ends where the run that did not stop ends: networks, optimizer, replay, counters."""
    same = dict(backend="inline", mode="sync", rollout=1, total_steps=1_200, save_replay=True)
    whole = _cfg(tmp_path, run_dir=str(tmp_path / "whole"), **same)
    train(whole)
    halves = dataclasses.replace(whole, run_dir=str(tmp_path / "halves"))
    train(halves, callback=lambda row: row["env_steps"] < 600)
    assert load_checkpoint(tmp_path / "halves")["learner"]["counters"]["env_steps"] == 600
    asyncrl.train(resume=tmp_path / "halves")
    a, b = (load_checkpoint(tmp_path / run) for run in ("whole", "halves"))
    assert a["learner"]["counters"]["env_steps"] == 1_200
    assert (
        _differences(
            {"learner": a["learner"], "actors": a["actors"]},
            {"learner": b["learner"], "actors": b["actors"]},
        )
        == []
    )


@pytest.mark.parametrize("backend", ["inline", "process"])
def test_sync_rollouts_of_the_updates_period_compute_what_single_steps_do(tmp_path, backend):
    """Sync, 2 envs, a gradient step per 5 batched env steps (ratio 0.1) with every update
    falling due at a 5th step: rollouts of 5 (what the rollout derives to) end where rollouts
    of 1 end, bit for bit -- networks, optimizer, replay, epsilon and a falling learning rate
    read where each update fell due, the actors' envs and generators; only the iterations
    counted differ."""
    same = dict(
        backend=backend, mode="sync", envs_per_actor=2, n_step=1, replay_ratio=0.1,
        learning_starts=60, target_every=50, lr_schedule="linear", total_steps=1_000,
    )  # fmt: skip
    derived = resolve(_cfg(tmp_path, **same), "classic")
    assert derived.rollout == 5
    states = []
    for rollout in (1, 5):
        run = tmp_path / f"rollout-{rollout}"
        s = train(_cfg(tmp_path, run_dir=str(run), rollout=rollout, **same))
        assert (s["env_steps"], s["gradient_steps"]) == (1_000, 94)
        state = load_checkpoint(run)
        assert state["learner"]["counters"].pop("iterations") == 1_000 // (2 * rollout)
        states.append({"learner": state["learner"], "actors": state["actors"]})
    assert _differences(*states) == []


# `asyncrl train --algo dqn --env CartPole-v1 --seed 1`, nothing else that changes learning:
# the classic preset's values tuned on CartPole-v1 (RL Zoo's tuned DQN for it with CleanRL's
# squared error, a rate falling to 0, 3-step returns on async rollouts of 4; 100k steps). In
# sync mode the rollout and n_step derive to 1 (docs, benchmarks/dqn and defaults-generality)
MODES = {"async": None, "sync": "sync"}  # async: the mode left unset, the preset's
# Inline, in both modes: a run that repeats. Sync is the same bits on every backend (495.25
# inline and process, seed 1). Async on the process backend is a race: the default command
# ended at 500 in 8 of 9 runs there, and at 450.1 in one CI rehearsal beside another test
# (2026-11-29; docs, benchmarks/defaults-generality); inline async runs the same settings on
# the emulated schedule, which repeats (seeds 1-3: 500)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_the_default_command_solves_cartpole_within_its_100k_steps(tmp_path, mode):
    given = TrainConfig(
        algo="dqn",
        env="CartPole-v1",
        mode=MODES[mode],
        backend="inline",
        seed=1,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        run_dir=str(tmp_path / "run"),
    )
    cfg = resolve(given, "classic")
    assert (cfg.total_steps, cfg.actors, cfg.envs_per_actor) == (100_000, 2, 4)
    s = train(given)
    assert s["env_steps"] <= 100_000 + 2 * 4 * cfg.rollout
    assert s["final_return"] >= 475, s
