"""Resume is exact, or says why not.

An inline sync run of 2S env steps, and a run stopped at S and resumed for S more, end with the
same parameters, optimizer state, random states and counters, bit for bit: PPO, and SAC with
--save-replay. What may change on resume takes effect (SAC's learning rates, derived settings)
without a jump in the schedules; what the checkpoint depends on is refused in one line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import asyncrl
from asyncrl.algos.ppo.learner import PPOLearner
from asyncrl.api import make_config
from asyncrl.cli import main as cli_main
from asyncrl.config import ConfigError
from asyncrl.envs import check_env
from asyncrl.metrics import MetricsLog
from asyncrl.rundir import load_checkpoint, save_config
from asyncrl.runtime.lifecycle import Interrupted
from asyncrl.settings import TrainConfig, check_resume, load_run_config, resolve, underive

PPO = dict(
    env="CartPole-v1",
    backend="inline",
    mode="sync",
    actors=2,
    envs_per_actor=4,
    rollout=16,
    minibatch_size=32,
    epochs=2,
    progress=False,
    tensorboard=False,
    checkpoint_every=0,
    seed=3,
)
SAC = dict(
    env="Pendulum-v1",
    algo="sac",
    backend="inline",
    mode="sync",
    actors=1,
    envs_per_actor=2,
    rollout=1,
    hidden=[32, 32],
    learning_starts=64,
    batch_size=32,
    buffer_size=1_000,  # full and wrapping by the end
    save_replay=True,
    progress=False,
    tensorboard=False,
    checkpoint_every=0,
    seed=3,
)
DQN = dict(
    env="CartPole-v1",
    algo="dqn",
    backend="inline",
    mode="sync",
    actors=1,
    envs_per_actor=4,
    hidden=[32, 32],
    learning_starts=200,
    buffer_size=1_000,
    save_replay=True,
    exploration_fraction=0.0,  # epsilon_end throughout: its schedule runs over the budget,
    epsilon_end=0.2,  # which differs between the S-step leg and the 2S-step run
    progress=False,
    tensorboard=False,
    checkpoint_every=0,
    seed=3,
)
TIMED = {"learn_seconds", "wall_seconds"}  # clocks, not state


def _differences(a, b, path="") -> list[str]:
    """Where two checkpoint states differ (empty: bit-identical), clocks left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a if k not in TIMED for d in _differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} vs {len(b)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{path}/{i}")
        ]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return [] if same else [path]
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return []
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def _final(run: Path) -> dict:
    state = load_checkpoint(run)
    return {"learner": state["learner"], "actors": state["actors"]}


def _assert_same(run_a: Path, run_b: Path, skip: tuple[str, ...] = ()) -> None:
    a, b = _final(run_a), _final(run_b)
    assert a["learner"]["counters"]["env_steps"] == b["learner"]["counters"]["env_steps"]
    for key in skip:
        a["learner"].pop(key, None), b["learner"].pop(key, None)
    assert _differences(a, b) == []


@pytest.mark.slow
@pytest.mark.parametrize("settings", [PPO, SAC, DQN], ids=["ppo", "sac", "dqn"])
def test_s_steps_resumed_for_s_more_equal_2s_steps_bit_for_bit(tmp_path, settings):
    """As a user does it: a run of S steps, then --resume with --total-steps 2S. Constant
    schedules: a linear one ends at 0 at S by definition, and continues without a jump."""
    S = 512 if settings is PPO else 300
    same = dict(settings, lr_schedule="constant", clip_schedule="constant")
    asyncrl.train(total_steps=2 * S, run_dir=str(tmp_path / "whole"), **same)
    asyncrl.train(total_steps=S, run_dir=str(tmp_path / "halves"), **same)
    asyncrl.train(resume=tmp_path / "halves", total_steps=2 * S)
    # the schedules' bookkeeping differs (one leg over 2S vs a new leg from S), not used by
    # constant schedules; everything else is the same
    _assert_same(tmp_path / "whole", tmp_path / "halves", skip=("schedule",))


def test_a_norm_reward_run_resumed_equals_the_unbroken_run_bit_for_bit(tmp_path):
    """--norm-reward keeps each env's discounted return across its episode; an inline sync
    run's envs continue their episodes on resume, so their returns go on too (they were reset
    to 0, and every reward scaled after the resume differed)."""
    S = 256
    same = dict(PPO, norm_reward=True, lr_schedule="constant", clip_schedule="constant")
    asyncrl.train(total_steps=2 * S, run_dir=str(tmp_path / "whole"), **same)
    asyncrl.train(total_steps=S, run_dir=str(tmp_path / "halves"), **same)
    asyncrl.train(resume=tmp_path / "halves", total_steps=2 * S)
    _assert_same(tmp_path / "whole", tmp_path / "halves", skip=("schedule",))
    # the envs were mid-episode at the stop: there were returns to carry on
    returns = load_checkpoint(tmp_path / "halves")["learner"]["reward_norm"]["returns"]
    assert returns.shape == (PPO["actors"] * PPO["envs_per_actor"],) and bool(returns.any())


@pytest.mark.slow
def test_a_dqn_self_play_run_resumed_completes_its_seats_open_transitions(tmp_path):
    """DQN on connect four: a seat's transition spans its move to its next, across slots, so
    at a checkpoint some seats' transitions are open; saved with the replay, the resumed run
    completes them as the unbroken run does, and ends bit for bit where it ends."""
    pytest.importorskip("pettingzoo")
    S = 1_000
    game = "pettingzoo:pettingzoo.classic.connect_four_v3"
    same = dict(DQN, env=game, lr_schedule="constant")
    asyncrl.train(total_steps=2 * S, run_dir=str(tmp_path / "whole"), **same)
    asyncrl.train(total_steps=S, run_dir=str(tmp_path / "halves"), **same)
    seats = load_checkpoint(tmp_path / "halves")["learner"]["seats"]
    assert any(bool(p["open"].any()) for p in seats["actors"])  # transitions left open
    asyncrl.train(resume=tmp_path / "halves", total_steps=2 * S)
    _assert_same(tmp_path / "whole", tmp_path / "halves", skip=("schedule",))


def test_a_checkpoint_without_the_per_env_returns_still_loads(tmp_path):
    """Checkpoints written before the returns were kept: the statistic loads, the returns
    start from 0 as they did then."""
    spec, cfg = _spec_and_cfg(norm_reward=True)
    before = PPOLearner(cfg, spec)
    before.reward_norm.update(np.ones((3, 8)), np.zeros((3, 8), bool), np.arange(8))
    state = before.state_dict()
    del state["reward_norm"]["returns"]
    after = PPOLearner(cfg, spec)
    after.load_state_dict(state)
    after.episodes_continue([0, 1])
    assert after.reward_norm.return_std == before.reward_norm.return_std
    assert after.reward_norm.returns.size == 0


@pytest.mark.slow
@pytest.mark.parametrize("settings", [PPO, SAC], ids=["ppo", "sac"])
def test_a_run_interrupted_by_sigint_at_a_random_moment_resumes_bit_for_bit(tmp_path, settings):
    """SIGINT from another thread at a random moment of a 2S run (linear schedules, the
    default); the run stops at the next iteration boundary, and resuming it ends where an
    uninterrupted run ends."""
    total = 2048 if settings is PPO else 600
    t0 = time.perf_counter()
    asyncrl.train(total_steps=total, run_dir=str(tmp_path / "whole"), **settings)
    seconds = time.perf_counter() - t0
    cut = _interrupted_at_a_random_moment(tmp_path, dict(settings, total_steps=total), seconds)
    stopped_at = load_checkpoint(cut)["learner"]["counters"]["env_steps"]
    assert 0 <= stopped_at < total
    asyncrl.train(resume=cut)
    _assert_same(tmp_path / "whole", cut)


def _interrupted_at_a_random_moment(tmp_path: Path, settings: dict, seconds: float) -> Path:
    """The run dir of a run SIGINT stopped at a random moment of its first ``seconds``. The
    first run of a process pays for imports and warm-up, so a later one can end before the
    moment drawn: then a moment in the first half of the window is drawn, and so on."""
    rng = random.Random()
    late = []  # a signal that lands between runs, when no run's handler is installed
    previous = signal.signal(signal.SIGINT, lambda *_: late.append(True))
    try:
        for attempt in range(4):
            run_dir = tmp_path / f"cut{attempt}"
            delay = rng.uniform(0.1, 0.7) * seconds / 2**attempt
            timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
            timer.start()
            try:
                asyncrl.train(run_dir=str(run_dir), **settings)
            except Interrupted:
                return run_dir
            finally:
                timer.cancel()
                timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    pytest.fail(f"4 runs ended before SIGINT came (windows from {seconds:.2f} s, halved)")


def _spec_and_cfg(**kw) -> tuple:
    cfg = resolve(TrainConfig(**{**PPO, **kw}), "classic")
    return check_env(cfg.env), cfg


def test_a_larger_total_steps_continues_the_schedule_from_where_it_was():
    """The rule: with the same total_steps the schedule is the one of the run that did not
    stop; with another, the fraction reached goes on linearly to 0 at the new total -- never
    back up (it was 1 - env_steps / total_steps, which a larger total moved up)."""
    spec, cfg = _spec_and_cfg(total_steps=1000)
    before = PPOLearner(cfg, spec)
    before.env_steps = 600
    lr_at_stop = before.lr_now()
    assert lr_at_stop == pytest.approx(cfg.lr * 0.4)
    state = before.state_dict()
    for total in (1000, 2000, 700):
        after = PPOLearner(dataclasses.replace(cfg, total_steps=total), spec)
        after.load_state_dict(state)
        assert after.lr_now() == pytest.approx(lr_at_stop), total  # no jump
        after.env_steps = total
        assert after.lr_now() == 0.0
    same = PPOLearner(cfg, spec)
    same.load_state_dict(state)
    same.env_steps = 800
    assert same.lr_now() == cfg.lr * (1.0 - 800 / 1000)  # exactly the unresumed rule


def test_sacs_learning_rates_given_on_resume_take_effect(tmp_path):
    run = tmp_path / "run"
    asyncrl.train(total_steps=80, run_dir=str(run), **{**SAC, "learning_starts": 32})
    asyncrl.train(resume=run, total_steps=120, q_lr=1e-4, policy_lr=2e-4)
    sac = load_checkpoint(run)["learner"]["sac"]
    assert [g["lr"] for g in sac["q_opt"]["param_groups"]] == [1e-4]
    assert [g["lr"] for g in sac["actor_opt"]["param_groups"]] == [2e-4]
    assert [g["lr"] for g in sac["alpha_opt"]["param_groups"]] == [2e-4]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"replay_ratio": 0.25}, {"replay_ratio": 1.0}),
        ({"learning_starts": 64}, {"learning_starts": 500}),
    ],
    ids=["replay_ratio", "learning_starts"],
)
def test_a_resume_changing_the_ratio_or_warm_up_owes_no_earlier_updates(tmp_path, before, after):
    """The limiter's debt is re-based: after the resume, gradient steps are due at the new
    ratio for the new env steps only. It used to count the new ratio over every earlier insert
    (0.25 -> 1 after 600 steps: 402 updates owed at once), or to wait for inserts to pass the
    new warm-up counted from zero again (64 -> 500: none for 436 more steps)."""
    run = tmp_path / "run"
    first = asyncrl.train(total_steps=600, run_dir=str(run), **{**SAC, **before}).summary
    second = asyncrl.train(resume=run, total_steps=900, **after).summary
    assert second["env_steps"] - first["env_steps"] == 300
    assert second["gradient_steps"] - first["gradient_steps"] == 300


def test_a_resume_changing_the_network_or_data_is_refused_naming_them(tmp_path, capsys):
    run = tmp_path / "run"
    asyncrl.train(total_steps=128, run_dir=str(run), **PPO)
    config = (run / "config.yaml").read_bytes()
    code = cli_main(["train", "--resume", str(run), "--hidden", "16,16"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("asyncrl: error: hidden: cannot change on resume")
    assert "hidden 64,64 -> 16,16" in err[0]
    assert (run / "config.yaml").read_bytes() == config  # the run is left as it was
    with pytest.raises(ConfigError, match=r"^env: .*env CartPole-v1 -> Acrobot-v1, activation"):
        asyncrl.train(resume=run, env="Acrobot-v1", activation="relu")
    assert (run / "config.yaml").read_bytes() == config


def test_a_resume_changing_what_reads_the_observations_is_refused_in_one_line(tmp_path, capsys):
    """The encoder, the Atari preprocessing and the vectorizer decide the networks' input (and
    shapes): a changed one is refused in one line, not a size-mismatch traceback on loading."""
    run = tmp_path / "run"
    asyncrl.train(total_steps=128, run_dir=str(run), **{**PPO, "env": "fake_envs:DotSide-v0"})
    config = (run / "config.yaml").read_bytes()
    code = cli_main(["train", "--resume", str(run), "--encoder", "mlp"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("asyncrl: error: encoder: cannot change on resume"), err
    assert "encoder cnn -> mlp" in err[0]
    assert (run / "config.yaml").read_bytes() == config
    saved = load_run_config(run)
    for name, value in (("atari_preprocessing", False), ("vectorizer", "envpool")):
        with pytest.raises(ConfigError, match=rf"^{name}: cannot change on resume"):
            check_resume(saved, dataclasses.replace(saved, **{name: value}))


def test_derived_settings_are_derived_again_on_resume(tmp_path):
    saved = resolve(TrainConfig(**{**SAC, "replay_ratio": 1.0, "log_every": 0}), "classic")
    save_config(tmp_path, saved)
    cfg = resolve(make_config({"replay_ratio": 4.0}, resume=tmp_path), "classic")
    assert (
        cfg.ratio_tolerance
        == resolve(TrainConfig(**{**SAC, "replay_ratio": 4.0}), "classic").ratio_tolerance
    )
    assert cfg.ratio_tolerance != saved.ratio_tolerance
    # a value the user gave (not the derived one) stays
    given = resolve(TrainConfig(**{**SAC, "ratio_tolerance": 7.0}), "classic")
    assert underive(given).ratio_tolerance == 7.0


def test_metrics_rows_after_the_resumed_checkpoint_are_dropped(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"env_steps": s, "x": 1}) + "\n" for s in (100, 200, 300, 400))
        + '{"env_steps": 500, "x"'  # a last line cut short by a kill
    )
    log = MetricsLog(tmp_path, tensorboard=False, resume_at=200)
    log.write(300, {"x": 2})
    log.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["env_steps"], r["x"]) for r in rows] == [(100, 1), (200, 1), (300, 2)]


def test_a_resume_whose_checkpoints_do_not_load_leaves_config_yaml_as_it_was(tmp_path, capsys):
    run = tmp_path / "run"
    asyncrl.train(total_steps=128, run_dir=str(run), **PPO)
    config = (run / "config.yaml").read_bytes()
    for path in run.glob("checkpoint-*.pt"):
        path.write_bytes(path.read_bytes()[:100])  # truncated: a kill during a copy, say
    assert cli_main(["train", "--resume", str(run), "--total-steps", "512"]) == 2
    assert "holds no checkpoint that loads" in capsys.readouterr().err
    assert (run / "config.yaml").read_bytes() == config  # still the run's: eval, resume work


def test_tensorboard_steps_after_the_resumed_checkpoint_are_purged(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLog(tmp_path, tensorboard=True)
    for step in (100, 200, 300, 400):
        log.write(step, {"x": 1.0})
    log.close()
    log = MetricsLog(tmp_path, tensorboard=True, resume_at=200)
    log.write(300, {"x": 2.0})
    log.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    scalars = [(e.step, e.value) for e in events.Scalars("throughput/x")]
    assert scalars == [(100, 1.0), (200, 1.0), (300, 2.0)]


def test_a_resume_that_fails_at_once_keeps_the_good_checkpoint(tmp_path, monkeypatch, capsys):
    """The newest checkpoint is damaged, so a resume falls back to the one before, and then
    fails in its first iteration (an env that now raises, in real actor processes). It writes
    no checkpoint -- it has nothing new -- so rotation cannot drop the good one it came from,
    and its one line names that one as the newest."""
    from asyncrl.runtime.faults import ActorError

    flag = tmp_path / "crash"
    monkeypatch.setenv("ASYNCRL_TEST_CRASH_FLAG", str(flag))
    run = tmp_path / "run"
    settings = {**PPO, "env": "fake_envs:CrashIfFlag-v0", "backend": "process"}
    asyncrl.train(**settings, total_steps=128, run_dir=str(run))
    asyncrl.train(**settings, total_steps=256, resume=run)
    newest = run / "checkpoint-000002.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short (checkpoint.pt is the same file)
    flag.touch()
    before = {p.name: p.read_bytes() for p in run.glob("checkpoint*.pt")}
    assert sorted(before) == ["checkpoint-000001.pt", "checkpoint-000002.pt", "checkpoint.pt"]
    capsys.readouterr()
    with pytest.raises(ActorError, match="the crash flag is set"):
        asyncrl.train(**settings, total_steps=512, resume=run)
    assert {p.name: p.read_bytes() for p in run.glob("checkpoint*.pt")} == before
    ended = [line for line in capsys.readouterr().err.splitlines() if " stopped at " in line]
    assert len(ended) == 1 and "no checkpoint was written" in ended[0], ended
    assert f"the newest checkpoint is {run / 'checkpoint-000001.pt'} (128 env steps)" in ended[0]
    assert json.loads((run / "summary.json").read_text())["checkpoint"] is None
    assert load_checkpoint(run)["learner"]["counters"]["env_steps"] == 128  # still falls back
