"""Recurrent PPO (--recurrent lstm|gru) through the runtime: every backend, mode and
correction; exact resume with the actors' hidden states; the Python API and ``asyncrl eval``
acting alike; evaluations during training; settings refused before anything starts."""

from __future__ import annotations

import dataclasses
import json
import sys
import types

import gymnasium as gym
import numpy as np
import pytest
import torch

import asyncrl
from asyncrl.cli import main as cli_main
from asyncrl.config import ConfigError
from asyncrl.envs import (
    MASKED_CARTPOLE,
    MASKED_LUNARLANDER,
    MaskObservation,
    env_family,
    make_env,
)
from asyncrl.rundir import load_checkpoint
from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig, validate

SMALL = dict(
    env=MASKED_CARTPOLE,
    actors=2,
    envs_per_actor=4,
    rollout=16,
    recurrence=8,
    minibatch_size=32,
    epochs=2,
    hidden=[16],
    rnn_size=8,
    progress=False,
    tensorboard=False,
    checkpoint_every=0,
    seed=3,
)
# What learns the masked-velocity CartPole (the slow tests below): sequences of 16 steps,
# minibatches of 16 of them, observations and returns normalised
LEARNS = dict(
    SMALL,
    envs_per_actor=8,
    rollout=64,
    recurrence=16,
    minibatch_size=256,
    epochs=4,
    lr=1e-3,
    lr_schedule="linear",  # as measured (the generic and classic presets' rate is constant)
    gamma=0.99,
    gae_lambda=0.95,
    hidden=[64],
    rnn_size=64,
    norm_obs=True,
    norm_reward=True,
)


# Position-only classic-control tasks registered here, not by the package: no preset names
# them, so `auto` gives them the generic preset, as it gives a user's own env
def _position_cartpole(**kw) -> gym.Env:
    return MaskObservation(gym.make("CartPole-v1", **kw), keep=(0, 2))  # [x, theta]


def _position_pendulum(**kw) -> gym.Env:
    return MaskObservation(gym.make("Pendulum-v1", **kw), keep=(0, 1))  # [cos, sin], no speed


gym.register("PositionCartPole-v0", entry_point=_position_cartpole)
gym.register("PositionPendulum-v0", entry_point=_position_pendulum)
# "module:EnvId": the actor processes import this module, which registers them
POSITION_CARTPOLE = f"{__name__}:PositionCartPole-v0"
POSITION_PENDULUM = f"{__name__}:PositionPendulum-v0"


def _cfg(tmp_path, name="run", **kw) -> TrainConfig:
    return TrainConfig(**{**SMALL, "run_dir": str(tmp_path / name), **kw})


def test_the_masked_cartpole_observes_position_and_angle_only():
    env = make_env(MASKED_CARTPOLE)
    full = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=4)
    state, _ = full.reset(seed=4)
    assert env.observation_space.shape == (2,)
    np.testing.assert_array_equal(obs, state[[0, 2]])
    for _ in range(5):
        obs, *_ = env.step(1)
        state, *_ = full.step(1)
    np.testing.assert_array_equal(obs, state[[0, 2]])
    assert env.spec.max_episode_steps == 500
    wrapped = MaskObservation(gym.make("Pendulum-v1"), keep=(2,))  # any user's flat Box
    assert wrapped.reset(seed=0)[0].shape == (1,)


def test_the_masked_lunar_lander_observes_positions_angle_and_legs_only(monkeypatch):
    """LunarLander's observation is [x, y, vx, vy, angle, angular velocity, left leg, right
    leg] (Gymnasium's docs); the masked one keeps entries 0, 1, 4, 6, 7. Box2D itself is not
    installed in CI, so a stand-in with LunarLander's spaces serves as the inner env."""

    class StandIn(gym.Env):
        observation_space = gym.spaces.Box(-10.0, 10.0, (8,), np.float32)
        action_space = gym.spaces.Discrete(4)

        def reset(self, *, seed=None, options=None):
            return np.arange(8, dtype=np.float32), {}

        def step(self, action):
            return np.arange(8, dtype=np.float32) + 10 * (action + 1), 0.0, False, False, {}

    module = types.ModuleType("gymnasium.envs.box2d.lunar_lander")
    module.LunarLander = StandIn
    monkeypatch.setitem(sys.modules, "gymnasium.envs.box2d", types.ModuleType("box2d"))
    monkeypatch.setitem(sys.modules, "gymnasium.envs.box2d.lunar_lander", module)
    env = make_env(MASKED_LUNARLANDER)
    assert env.observation_space.shape == (5,)
    np.testing.assert_array_equal(env.reset(seed=0)[0], [0, 1, 4, 6, 7])
    np.testing.assert_array_equal(env.step(2)[0], [30, 31, 34, 36, 37])
    assert env.spec.max_episode_steps == 1000


def test_the_position_only_tasks_are_generic_envs_that_observe_positions_only():
    assert env_family(POSITION_CARTPOLE) == env_family(POSITION_PENDULUM) == "generic"
    for env_id, full_id, keep in (
        (POSITION_CARTPOLE, "CartPole-v1", [0, 2]),
        (POSITION_PENDULUM, "Pendulum-v1", [0, 1]),
    ):
        env, full = make_env(env_id), gym.make(full_id)
        np.testing.assert_array_equal(env.reset(seed=5)[0], full.reset(seed=5)[0][keep])
        action = env.action_space.sample()
        np.testing.assert_array_equal(env.step(action)[0], full.step(action)[0][keep])


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_derives_the_measured_settings_where_the_user_left_them_unset(kind):
    """--recurrent on the generic, classic and mujoco families: sequences of 16 steps in
    rollouts of 64, minibatches of 16 sequences, 4 epochs, lr 1e-3 annealed, observations and
    returns normalised (docs, Guides: presets); what the user gave, the values tuned on one env
    and feed-forward runs stay as they were; the preset line names what the switch gave, and
    box2d, where they measured level with its preset's, keeps the preset's."""
    from asyncrl.settings import preset_line, resolve

    measured = dict(
        rollout=64,
        recurrence=16,
        minibatch_size=256,
        epochs=4,
        lr=1e-3,
        lr_schedule="linear",
        norm_obs=True,
        norm_reward=True,
    )
    families = ((POSITION_CARTPOLE, "generic"), ("Pendulum-v1", "classic"), ("Hopper-v5", "mujoco"))
    for env, family in families:
        given = TrainConfig(env=env, recurrent=kind)
        cfg = resolve(given, family)
        assert {n: getattr(cfg, n) for n in measured} == measured
        validate(given, family)
        line = preset_line(given, cfg)
        assert f"; for --recurrent {kind}: rollout 64, recurrence 16, minibatch_size 256" in line
        assert "derived to agree" not in line
        feed_forward = resolve(TrainConfig(env=env), family)
        assert (feed_forward.rollout, feed_forward.lr, feed_forward.epochs) == (128, 3e-4, 10)
    mine = resolve(TrainConfig(env=POSITION_CARTPOLE, recurrent=kind, lr=2e-4, epochs=6), "generic")
    assert (mine.lr, mine.epochs, mine.rollout) == (2e-4, 6, 64)
    # a minibatch given that holds no whole 16-step sequence: sequences that fit it, as before
    odd = resolve(TrainConfig(env=POSITION_CARTPOLE, recurrent=kind, minibatch_size=100), "generic")
    assert (odd.rollout, odd.recurrence, odd.minibatch_size) == (64, 4, 100)
    # a rollout given or tuned on the env: sequences of the rollout, as before
    given_rollout = resolve(TrainConfig(env="Pendulum-v1", recurrent=kind, rollout=128), "classic")
    assert (given_rollout.recurrence, given_rollout.minibatch_size) == (0, 256)
    # values tuned on the env for a feed-forward policy give way to the recurrent ones (they
    # were tuned without the core); what the switch does not set stays as tuned
    tuned = resolve(TrainConfig(env="CartPole-v1", recurrent=kind), "classic")
    assert (tuned.lr, tuned.rollout, tuned.norm_obs, tuned.recurrence) == (1e-3, 64, True, 16)
    assert (tuned.gamma, tuned.gae_lambda, tuned.total_steps) == (0.98, 0.8, 150_000)
    box2d = resolve(TrainConfig(env="LunarLander-v3", recurrent=kind), "box2d")
    assert (box2d.lr, box2d.rollout, box2d.epochs) == (3e-4, 128, 10)
    # mujoco's line: what differs from its preset (its schedule and normalisers are the same);
    # the family's sync mode and clipped value loss stay
    given = TrainConfig(env="Hopper-v5", recurrent=kind)
    hopper = resolve(given, "mujoco")
    assert preset_line(given, hopper).endswith(
        f"; for --recurrent {kind}: rollout 64, recurrence 16, minibatch_size 256, epochs 4, "
        "lr 0.001"
    )
    assert (hopper.mode, hopper.value_clip) == ("sync", 0.2)


def test_recurrent_on_atari_names_cleanrls_ppo_atari_lstm_sequences():
    """Atari's --recurrent values are CleanRL's ppo_atari_lstm.py's: the atari preset's rollout,
    minibatch, epochs and rate, with each env's whole 128-step rollout one sequence; the
    preset line names the sequences (the rest are the preset's already)."""
    from asyncrl.settings import preset_line, resolve

    given = TrainConfig(env="ALE/Breakout-v5", recurrent="lstm")
    cfg = resolve(given, "atari")
    validate(given, "atari")
    got = (cfg.rollout, cfg.recurrence, cfg.minibatch_size, cfg.epochs, cfg.lr, cfg.lr_schedule)
    assert got == (128, 128, 256, 4, 2.5e-4, "linear")
    assert preset_line(given, cfg).endswith("; for --recurrent lstm: recurrence 128")
    # a rollout given: its sequences are the rollout, as on every family
    short = resolve(TrainConfig(env="ALE/Breakout-v5", recurrent="gru", rollout=64), "atari")
    assert (short.recurrence, short.minibatch_size) == (0, 256)
    # pixels (image envs outside Atari) keeps its preset's values: CleanRL's are Atari's
    pixels = resolve(TrainConfig(env="ALE/Breakout-v5", recurrent="lstm"), "pixels")
    assert (pixels.rollout, pixels.recurrence, pixels.minibatch_size) == (128, 0, 256)


@pytest.mark.parametrize(
    ("mode", "backend", "kind", "correction", "compile"),
    [
        ("sync", "inline", "lstm", "none", False),
        ("async", "inline", "gru", "vtrace", False),
        ("sync", "thread", "gru", "decoupled", False),
        ("async", "thread", "lstm", "decoupled", True),
        ("async", "process", "lstm", "vtrace", False),
        ("sync", "process", "gru", "none", False),
        ("async", "ray", "gru", "none", False),
    ],
)
def test_recurrent_runs_on_every_backend_mode_and_correction(
    tmp_path, capsys, monkeypatch, mode, backend, kind, correction, compile
):
    if backend == "ray":
        pytest.importorskip("ray")
    from asyncrl.algos.ppo import fused

    steps = []  # the learner's step (the learner runs in this process on every backend)
    init = fused.SequenceStep.__init__
    monkeypatch.setattr(
        fused.SequenceStep, "__init__", lambda s, *a, **k: (init(s, *a, **k), steps.append(s))[0]
    )
    cfg = _cfg(
        tmp_path,
        mode=mode,
        backend=backend,
        recurrent=kind,
        correction=correction,
        total_steps=1024,
        compile=compile,
    )
    summary = train(cfg)
    assert [s.compiled for s in steps] == [compile]
    assert summary["ended"] == "budget" and summary["env_steps"] >= 1024
    assert summary["episodes"] > 0 and np.isfinite(summary["final_return"])
    rows = 2 if kind == "lstm" else 1
    # the memory line counts the stored states: 2 chunk starts of rows x 8 float32 per env
    assert (
        f"{kind} states {rows} x 8 float32 at each of 2 chunk start(s)" in capsys.readouterr().out
    )
    state = load_checkpoint(tmp_path / "run")
    assert state["learner"]["policy"]["core.weight_hh_l0"].shape[0] == (4 if rows == 2 else 3) * 8


def test_actors_store_each_chunks_starting_state_and_reset_it_at_episode_ends(tmp_path):
    """One actor's slots over 3 rollouts: chunk 0's stored state is the one carried in from
    the previous rollout, chunk 1's the state after step 7, zeroed where an episode ended; the
    stored states and observations give back the log-probs the actor recorded."""
    from asyncrl.algos import algorithm
    from asyncrl.algos.ppo.networks import build_policy
    from asyncrl.nets import FlatParams
    from asyncrl.runtime.actor import Actor
    from asyncrl.runtime.transport import PolicyStore, SlotStore, rollout_layout
    from asyncrl.settings import env_spec, resolve

    cfg = resolve(_cfg(tmp_path, recurrent="lstm", actors=1, total_steps=64), "generic")
    spec = env_spec(cfg)
    policy = build_policy(spec, cfg.hidden, cfg.activation, cfg.norm_obs, "auto", "lstm", 8)
    flat = FlatParams(policy)
    store = PolicyStore(flat.numel, shared=False)
    store.publish(1, flat.write_to)
    layout = rollout_layout(cfg, spec, algorithm(cfg.algo))
    slot = SlotStore(layout, 1, shared=False).slots[0]
    assert slot.rnn_states.shape == (2, 4, 2, 8)  # chunks, envs, (h, c), rnn_size
    actor = Actor(0, cfg, spec, algorithm(cfg.algo), store)
    ended = 0
    for i in range(3):
        carried = None if i == 0 else actor.acting.state.clone()
        actor.collect(slot)
        if carried is None:
            assert not slot.rnn_states[0].any()  # the first episodes start from zeros
        else:
            np.testing.assert_array_equal(slot.rnn_states[0], carried.numpy())
        done = slot.terminated | slot.truncated
        ended += int(done.sum())
        h = torch.from_numpy(slot.rnn_states[0].copy())
        with torch.no_grad():
            for t in range(cfg.rollout):
                if t == cfg.recurrence:
                    np.testing.assert_allclose(slot.rnn_states[1], h.numpy(), atol=1e-6)
                out, h = policy.step(policy.features(torch.from_numpy(slot.obs[t])), h)
                logp, _, _ = policy.evaluate_features(out, torch.from_numpy(slot.actions[t]))
                np.testing.assert_allclose(logp.numpy(), slot.logp[t], atol=1e-5)
                h = h * torch.from_numpy(~done[t]).float()[:, None, None]
    assert ended > 0  # episodes did end inside these rollouts
    actor.close()


def test_a_recurrent_run_resumed_on_inline_sync_ends_bit_for_bit_where_an_unbroken_one_ends(
    tmp_path,
):
    from tests.test_resume import _assert_same

    same = dict(
        backend="inline",
        mode="sync",
        recurrent="lstm",
        lr_schedule="constant",
        clip_schedule="constant",
    )
    train(_cfg(tmp_path, "whole", total_steps=1024, **same))
    train(_cfg(tmp_path, "halves", total_steps=512, **same))
    asyncrl.train(resume=tmp_path / "halves", total_steps=1024)
    _assert_same(tmp_path / "whole", tmp_path / "halves", skip=("schedule",))
    actors = load_checkpoint(tmp_path / "whole")["actors"]["actors"]
    states = [a["acting"]["rnn_state"] for a in actors]
    assert all(s.shape == (4, 2, 8) and s.abs().sum() > 0 for s in states)  # carried, nonzero


def test_load_act_with_state_takes_the_actions_asyncrl_eval_takes(tmp_path, monkeypatch, capsys):
    # long enough that the policy acts on what it remembers (at 2,048 steps it did not)
    kw = dict(LEARNS, recurrent="gru", total_steps=16_384, backend="inline", mode="sync")
    train(TrainConfig(**kw, run_dir=str(tmp_path / "run")))
    taken: list[list[int]] = []

    class Recording(gym.Wrapper):
        def reset(self, **kw):
            taken.append([])
            return self.env.reset(**kw)

        def step(self, action):
            taken[-1].append(int(action))
            return self.env.step(action)

    import asyncrl.policy

    monkeypatch.setattr(asyncrl.policy, "make_env", lambda *a, **k: Recording(make_env(*a, **k)))
    assert cli_main(["eval", str(tmp_path / "run"), "--episodes", "3"]) == 0
    evaluated = json.loads(capsys.readouterr().out.splitlines()[-1])

    policy = asyncrl.load(tmp_path / "run")
    assert policy.recurrent and policy.initial_state().shape == (1, 64)
    env = make_env(MASKED_CARTPOLE)
    mine, without_state = [], []
    for i in range(3):
        obs, _ = env.reset(seed=10_000 + i)
        state, actions, done = policy.initial_state(), [], False
        while not done:
            action, state = policy.act(obs, state)
            forgetful, _ = policy.act(obs)  # every step as if an episode started there
            without_state.append(forgetful != action)
            actions.append(action)
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
        mine.append(actions)
    assert mine == taken
    assert [len(a) for a in mine] == evaluated["lengths"]
    assert any(without_state)  # the state changes actions: eval did carry it
    # a batch of 3 envs acts as 3 single ones
    obs = np.stack([env.reset(seed=s)[0] for s in range(3)])
    actions, states = policy.act(obs, policy.initial_state(3))
    assert actions.shape == (3,) and states.shape == (3, 1, 64)
    single = [policy.act(o, policy.initial_state()) for o in obs]
    assert list(actions) == [a for a, _ in single]
    np.testing.assert_allclose(states, np.stack([s for _, s in single]), atol=1e-6)
    with pytest.raises(ValueError, match=r"state of shape \(2, 64\): expected \(1, 64\)"):
        policy.act(obs[0], np.zeros((2, 64), np.float32))
    # --video acts as eval does: the same actions in the first episode
    pytest.importorskip("pygame")
    taken.clear()
    video = tmp_path / "eval.gif"
    assert cli_main(["eval", str(tmp_path / "run"), "--episodes", "1", "--video", str(video)]) == 0
    assert taken == mine[:1] and video.stat().st_size > 0


def test_feed_forward_policies_keep_their_call(tmp_path):
    train(_cfg(tmp_path, total_steps=512, backend="inline", mode="sync", recurrence=0))
    policy = asyncrl.load(tmp_path / "run")
    assert not policy.recurrent
    assert policy.act(np.zeros(2, np.float32)) in (0, 1)
    with pytest.raises(TypeError, match="feed-forward policy has no state"):
        policy.initial_state()
    with pytest.raises(TypeError, match="deterministic is a keyword argument"):
        policy.act(np.zeros(2, np.float32), False)


def test_evaluations_during_training_act_with_the_recurrent_policy(tmp_path):
    cfg = _cfg(
        tmp_path,
        recurrent="lstm",
        total_steps=2048,
        eval_every=1024,
        eval_episodes=2,
        backend="thread",
        mode="async",
    )
    train(cfg)
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    evals = [r for r in rows if "eval/mean_return" in r]
    assert evals and all(np.isfinite(r["eval/mean_return"]) for r in evals)
    best = asyncrl.load(tmp_path / "run", "best")
    assert best.recurrent and best.evaluation is not None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            dict(recurrent="lstm", rollout=16, recurrence=5),
            "recurrence: must divide rollout (16), got 5",
        ),
        (
            dict(recurrent="rnn"),
            "recurrent: 'rnn' is not one of none, lstm, gru",
        ),
        (dict(recurrent="gru", rnn_size=0), "rnn_size: must be >= 1, got 0"),
        (
            dict(recurrent="lstm", rollout=16, recurrence=16, minibatch_size=24),
            "minibatch_size: with --recurrent a minibatch is whole sequences",
        ),
        (
            dict(recurrent="lstm", rollout=128, recurrence=0, compile=True),
            "compile: a recurrent step is compiled for --recurrence up to 64 (its graph "
            "unrolls each sequence), got 128",
        ),
        (
            dict(algo="sac", env="Pendulum-v1", recurrent="lstm"),
            "recurrent: sac has no such setting (only ppo); leave it at none",
        ),
        (
            dict(algo="dqn", env="CartPole-v1", rnn_size=64),
            "rnn_size: dqn has no such setting (only ppo); leave it at 128",
        ),
    ],
)
def test_impossible_recurrent_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(ConfigError) as refused:
        cfg = TrainConfig(**{**SMALL, **settings})
        validate(cfg, env_family(cfg.env))
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_cli_refuses_before_anything_starts(tmp_path, capsys):
    run = tmp_path / "run"
    code = cli_main(
        ["train", "--env", MASKED_CARTPOLE, "--recurrent", "lstm", "--rollout", "32"]
        + ["--recurrence", "12", "--run-dir", str(run)]
    )
    err = capsys.readouterr().err
    assert code != 0 and "recurrence: must divide rollout (32), got 12" in err
    assert not run.exists()


def test_a_recurrent_core_after_the_cnn_encoder_trains_on_pixels(tmp_path, capsys):
    cfg = _cfg(
        tmp_path,
        env="fake_envs:DotSide-v0",
        recurrent="gru",
        hidden=[32],
        total_steps=1024,
        backend="thread",
        mode="async",
    )
    summary = train(cfg)
    assert summary["ended"] == "budget" and summary["episodes"] > 0
    policy = asyncrl.load(tmp_path / "run")
    assert policy.module.encoder_kind == "cnn" and policy.recurrent
    obs = make_env("fake_envs:DotSide-v0").reset(seed=0)[0]
    action, state = policy.act(obs, policy.initial_state())
    assert action in (0, 1) and state.shape == (1, 8)


def test_hogwild_workers_train_a_recurrent_policy(tmp_path):
    summary = train(_cfg(tmp_path, recurrent="lstm", hogwild=2, total_steps=1024))
    assert summary["ended"] == "budget" and summary["env_steps"] >= 1024
    assert asyncrl.load(tmp_path / "run").recurrent


# ---------------------------------------------------------------- learning (slow)
# Budget and seeds measured on 2 cores (docs: Guides, recurrent policies): with these settings
# the LSTM reached a final return of 477-500 at 120k steps with seeds 1-3 in both modes, the
# GRU 500 in sync (inline backend); the feed-forward policy stayed near 40-50. Before 100k the
# returns still dip (one seed at 314 at 90k), so 120k it is.
BUDGET = 120_000


def _learns(tmp_path, **kw) -> dict:
    cfg = TrainConfig(**{**LEARNS, "backend": "inline", "total_steps": BUDGET, "seed": 1, **kw})
    return train(dataclasses.replace(cfg, run_dir=str(tmp_path / "run")))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_lstm_solves_the_masked_cartpole_within_the_budget(tmp_path, mode):
    summary = _learns(tmp_path, recurrent="lstm", mode=mode)
    assert summary["env_steps"] <= 300_000
    assert summary["final_return"] >= 400, summary
    assert (summary["policy_lag_max"] >= 1) == (mode == "async")


@pytest.mark.slow
def test_a_gru_solves_the_masked_cartpole_within_the_budget(tmp_path):
    summary = _learns(tmp_path, recurrent="gru", mode="sync")
    assert summary["final_return"] >= 400, summary


@pytest.mark.slow
def test_a_feed_forward_policy_with_the_same_budget_does_not(tmp_path):
    summary = _learns(tmp_path, mode="sync")
    assert summary["final_return"] < 200, summary


# ------------------------------------- learning with --recurrent and nothing else (slow)
# What `asyncrl train --env E --recurrent lstm --total-steps N --seed S` runs: the generic
# preset, async, 2 actors on the process backend, and what --recurrent derives (issue #54, point
# 2; docs: Benchmarks, defaults on envs nobody tuned for, recurrent rows, where each seed's
# figures are). CartPole: the 300k; seeds 1-3 reached 500 by ~130k and ended at 500.
# Pendulum: 300k, a last-100 return of -345.3 and -266.3 (seeds 1, 2), where a random policy's
# is -1,207.6: gains of 862 and 941; the margin asked is under half of the smaller one. Each
# run takes 3-4 min of 2 idle cores, more than 10 beside other runs: hence the timeouts.
CARTPOLE_STEPS = 300_000
PENDULUM_STEPS = 300_000
PENDULUM_MARGIN = 400.0


def _random_return(env_id: str, episodes: int = 100) -> float:
    """A uniform random policy's mean return over ``episodes`` (seeded)."""
    env = make_env(env_id)
    env.action_space.seed(0)
    returns = []
    for i in range(episodes):
        env.reset(seed=i)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def _defaults_only(tmp_path, env: str, steps: int, seed: int) -> dict:
    cfg = TrainConfig(
        env=env,
        recurrent="lstm",
        total_steps=steps,
        seed=seed,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        run_dir=str(tmp_path / "run"),
    )
    summary = train(cfg)
    assert summary["mode"] == "async" and summary["backend"] == "process"
    assert summary["env_steps"] >= steps and summary["policy_lag_max"] >= 1
    return summary


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_lstm_defaults_solve_the_position_only_cartpole_in_async_mode(tmp_path):
    summary = _defaults_only(tmp_path, POSITION_CARTPOLE, CARTPOLE_STEPS, seed=1)
    assert summary["final_return"] >= 400, summary


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_lstm_defaults_learn_the_position_only_pendulum_above_a_random_policy(tmp_path):
    summary = _defaults_only(tmp_path, POSITION_PENDULUM, PENDULUM_STEPS, seed=1)
    random = _random_return(POSITION_PENDULUM)
    assert summary["last100_return"] >= random + PENDULUM_MARGIN, (random, summary)
