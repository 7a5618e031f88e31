"""Hogwild!: the parameter sync's exact bookkeeping, workers training one global network, learning
with M = 2 in both sync modes, and clear errors for impossible settings."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from torch import nn

from asyncrl.algos import algorithm
from asyncrl.cli import main
from asyncrl.config import ConfigError, worker_config
from asyncrl.envs import check_env
from asyncrl.nets import FlatParams, RunningNorm, floating_state
from asyncrl.rundir import load_checkpoint
from asyncrl.runtime.faults import ActorError
from asyncrl.runtime.hogwild import HogwildSync
from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig, validate
from conftest import how_it_went


def _module(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _flat(m: nn.Module) -> np.ndarray:
    f = FlatParams(m)
    out = np.empty(f.numel, np.float32)
    f.write_to(out)
    return out


def _change(m: nn.Module, by: float) -> np.ndarray:
    """Add ``by`` times a fixed pattern to every parameter; returns the change as a flat vector."""
    before = _flat(m)
    with torch.no_grad():
        for i, p in enumerate(m.parameters()):
            p.add_(by * (i + 1))
    return _flat(m) - before


def test_shared_workers_changes_all_reach_the_global_vector_exactly():
    """Two workers read, both step, both add their change: nothing is lost or counted twice."""
    init = _flat(_module(0))
    global_ = init.copy()
    a, b = _module(1), _module(2)  # local copies start elsewhere: the pull overwrites them
    sa = HogwildSync(list(a.parameters()), global_, "shared", 0)
    sb = HogwildSync(list(b.parameters()), global_, "shared", 0)
    sa.before_update()
    sb.before_update()
    assert np.array_equal(_flat(a), init) and np.array_equal(_flat(b), init)
    da = _change(a, 0.5)
    sa.after_update()
    db = _change(b, -0.25)  # b stepped from the old parameters, as a concurrent worker would
    sb.after_update()
    np.testing.assert_allclose(global_, init + da + db, rtol=0, atol=1e-6)
    # the next step reads both changes
    sa.before_update()
    np.testing.assert_allclose(_flat(a), init + da + db, rtol=0, atol=1e-6)
    # a push with no change since is a no-op
    sa.push()
    np.testing.assert_allclose(global_, init + da + db, rtol=0, atol=1e-6)


def test_synced_worker_trains_alone_between_syncs_and_agrees_with_global_after_one():
    init = _flat(_module(0))
    global_ = init.copy()
    a, b = _module(1), _module(2)
    sa = HogwildSync(list(a.parameters()), global_, "synced", 3)
    sb = HogwildSync(list(b.parameters()), global_, "synced", 3)
    sa.pull()
    sb.pull()
    db = _change(b, 1.0)
    for sync in (sb, sb, sb):  # b's third step syncs
        sync.before_update()
        sync.after_update()
    assert sb.syncs == 1
    np.testing.assert_allclose(global_, init + db, atol=1e-6)
    total_a = np.zeros_like(init)
    for step in range(1, 4):
        sa.before_update()
        np.testing.assert_allclose(_flat(a), init + total_a, atol=1e-6)  # b unseen yet
        total_a += _change(a, 0.1)
        sa.after_update()
        if step < 3:
            np.testing.assert_allclose(global_, init + db, atol=1e-6)  # nothing pushed yet
    assert sa.syncs == 1
    # right after a sync the worker holds exactly the global parameters, both changes in them
    assert np.array_equal(_flat(a), global_)
    np.testing.assert_allclose(global_, init + db + total_a, atol=1e-5)


class _Normed(nn.Module):
    """A weight layer behind an observation normaliser, as PPO's networks have them."""

    def __init__(self):
        super().__init__()
        self.norm = RunningNorm((3,))
        self.lin = nn.Linear(3, 2)


def test_two_workers_pushing_statistics_at_once_merge_them_as_their_data():
    """Both workers read the initial statistics (mean 0, var 1, count ~0), each sees its own
    observations -- one dimension of them nearly constant -- and both push. Their pushes used to
    add differences: mean A + mean B (double), var A + var B - 1 (negative: sqrt NaN). Merged,
    the global statistics are those of all the observations together, and the weights' changes
    still add."""
    init = _Normed()
    global_ = _flat(init)
    rng = np.random.default_rng(0)
    data = []
    workers = []
    for _ in range(2):
        m = _Normed()
        sync = HogwildSync(floating_state(m), global_, "shared", 0, [m.norm])
        sync.pull()
        workers.append((m, sync))
    for m, _ in workers:  # both step and see observations before either pushes
        x = rng.normal([5.0, 0.0, -3.0], [0.01, 1.0, 2.0], size=(256, 3))
        data.append(x)
        m.norm.update(torch.from_numpy(x))
        _change(m.lin, 0.5)
    for _, sync in workers:
        sync.push()
    everything = np.concatenate(data)
    held = _Normed()
    FlatParams(held).read_from(global_)
    np.testing.assert_allclose(held.norm.count.item(), 512, rtol=1e-6)
    np.testing.assert_allclose(held.norm.mean.numpy(), everything.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(held.norm.var.numpy(), everything.var(0), rtol=1e-4, atol=1e-7)
    assert (held.norm.var.numpy() > 0).all()
    # the weights took both changes
    want = _flat(init)[-8:] + 2 * (_flat(workers[0][0])[-8:] - _flat(init)[-8:])
    np.testing.assert_allclose(global_[-8:], want, atol=1e-5)


@pytest.mark.parametrize("sync", [("synced", 10**6), ("shared", 0)])
def test_hogwild_workers_keep_valid_observation_statistics(tmp_path, sync):
    """Two worker processes normalising observations whose second dimension is always 1.0: the
    global statistics end with mean 1 and variance ~0 there (not 2 and -1), counting what both
    saw. Synced with a period longer than the run, both push once, at the end, from the same
    start: their pushes always overlap."""
    cfg = _cfg(
        tmp_path,
        hogwild=2,
        sync_mode=sync[0],
        sync_every=sync[1],
        env="fake_envs:Countdown-v0",
        norm_obs=True,
        total_steps=2_048,
        envs_per_actor=4,
        rollout=16,
        minibatch_size=32,
        epochs=1,
    )
    summary = train(cfg)
    policy = load_checkpoint(tmp_path / "run")["learner"]["policy"]
    mean, var, count = (policy[f"obs_norm.{k}"] for k in ("mean", "var", "count"))
    assert abs(float(mean[1]) - 1.0) < 1e-5 and 0 <= float(var[1]) < 1e-5, (mean, var)
    assert 0 < float(var[0]) and float(mean[0]) > 0
    assert 0.5 * summary["env_steps"] <= float(count) <= summary["env_steps"]


def test_sac_shares_every_float_an_update_changes():
    cfg = TrainConfig(algo="sac", env="Pendulum-v1", hidden=[16, 16])
    spec = check_env(cfg.env)
    from asyncrl.settings import resolve

    learner = algorithm(cfg.algo).learner(resolve(cfg, "classic"), spec)
    shared = {id(t) for t in learner.shared_tensors()}
    sac = learner.sac
    for module in (sac.actor, sac.q, sac.q_target):
        assert all(id(p) in shared for p in module.parameters())
    assert id(sac.log_alpha) in shared


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(progress=False, tensorboard=False, run_dir=str(tmp_path / "run"))
    return TrainConfig(**{**base, **kw})


def test_two_workers_train_one_global_network_concurrently(tmp_path):
    cfg = _cfg(
        tmp_path,
        hogwild=2,
        total_steps=4_096,
        envs_per_actor=4,
        rollout=32,
        epochs=2,
        minibatch_size=64,
    )
    summary = train(cfg)
    # both workers collected and stepped, and the totals are their sums
    assert all(n > 0 for n in summary["worker_env_steps"])
    assert sum(summary["worker_env_steps"]) == summary["env_steps"] >= 4_096
    assert all(n > 0 for n in summary["worker_gradient_steps"])
    assert summary["gradient_steps"] == sum(summary["worker_gradient_steps"])
    # 2 epochs x 2 minibatches per iteration of each worker
    assert summary["gradient_steps"] == 4 * summary["iterations"]
    # the global network moved away from where it started
    spec = check_env(cfg.env)
    from asyncrl.settings import resolve

    start = algorithm(cfg.algo).learner(worker_config(resolve(cfg, "classic"), 0), spec)
    start = start.policy.state_dict()
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    end = state["learner"]["policy"]
    assert any(not torch.equal(start[k], end[k]) for k in start if "obs_norm" not in k)
    # metrics: per-worker and total frames on every line
    import json

    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
    assert {r["worker"] for r in rows} == {0, 1}
    assert all(f"worker_env_steps/{r['worker']}" in r for r in rows)
    assert [r["env_steps"] for r in rows] == sorted(r["env_steps"] for r in rows)


def test_hogwild_worker_crash_names_the_worker_and_env(tmp_path, capsys):
    cfg = _cfg(
        tmp_path,
        hogwild=2,
        env="fake_envs:CrashAfter-v0",
        total_steps=10**7,
        envs_per_actor=4,
        rollout=16,
        minibatch_size=32,
        epochs=1,
    )
    with pytest.raises(ActorError) as e:
        train(cfg)
    msg = str(e.value)
    assert msg.startswith("hogwild worker ") and "(env fake_envs:CrashAfter-v0 x 4) failed" in msg
    assert "Traceback" in msg and "boom: simulated env failure" in msg
    # the run's lifecycle, the pipeline's: the global network kept, one line saying so
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["ended"] == "actor_error" and summary["checkpoint"]
    assert load_checkpoint(tmp_path / "run")["learner"]["counters"]["env_steps"] > 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("asyncrl: stopped")]
    assert len(lines) == 1 and lines[0].endswith(f"checkpoint saved: {summary['checkpoint']}")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(hogwild=-1), "hogwild: must be >= 1 workers"),
        (dict(hogwild=2, sync_mode="synced"), "sync_every: --sync-mode synced needs"),
        (dict(hogwild=2, sync_every=4), "sync_every: only --sync-mode synced"),
        (dict(hogwild=2, sync_mode="lockstep"), "sync_mode: 'lockstep' is not one of shared"),
        (dict(hogwild=2, algo="sac", env="Pendulum-v1", save_replay=True), "save_replay"),
        (dict(hogwild=2, minibatch_size=1024), "minibatch_size: 1024 is larger"),
    ],
)
def test_impossible_hogwild_settings_fail_before_anything_starts(tmp_path, kw, match):
    with pytest.raises(ConfigError, match=match):
        validate(_cfg(tmp_path, **kw), "classic")
    with pytest.raises(ConfigError, match=match):
        train(_cfg(tmp_path, **kw))
    assert not (tmp_path / "run").exists()


def test_cli_reports_a_bad_hogwild_setting_in_one_line(capsys):
    assert main(["train", "--hogwild", "2", "--sync-mode", "synced"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asyncrl: error: sync_every:") and err.count("\n") == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sync_mode", "every", "lr"), [("shared", 0, 2.5e-4), ("synced", 10, 5e-4)]
)
def test_hogwild_ppo_solves_cartpole_within_150k_total_steps(tmp_path, sync_mode, every, lr):
    # Several minibatches per epoch: a worker's Adam momentum is stale when its next batch starts
    # (the other worker moved the parameters meanwhile). With one minibatch per epoch (the
    # classic preset's 256 then) only 1 of 3 seeds solved within 150k steps; with 4 (64, the
    # preset's value now), 3 of 3 did by ~60k.
    # Shared: two workers apply two workers' steps to one vector, so the preset's lr 5e-4 is
    # twice the single learner's step rate. At 5e-4, 2 of 7 seeds fell back to a 20-episode
    # mean of 118 and 161 after solving (one CI run ended at 100); at 2.5e-4, 4 of 4 seeds
    # (1, 5, 7, 8) solved by 55-81k and never fell below 482 afterwards.
    cfg = _cfg(
        tmp_path,
        hogwild=2,
        sync_mode=sync_mode,
        sync_every=every,
        lr=lr,
        minibatch_size=64,
        total_steps=150_000,
        seed=1,
    )
    summary = train(cfg)
    assert summary["env_steps"] <= 150_000 + 2 * 8 * 32
    assert summary["final_return"] >= 475, how_it_went(summary)


@pytest.mark.slow
@pytest.mark.parametrize(("sync_mode", "every"), [("shared", 0), ("synced", 2)])
def test_hogwild_sac_reaches_minus_250_on_pendulum_within_30k_total_steps(
    tmp_path, sync_mode, every
):
    # Each worker warms up its own buffer: 500 random steps each is the single learner's 1,000.
    # Both modes race, so seed 1 does not fix the outcome. At 20k steps the last 20 episodes
    # began ~16k, within ~6k steps of the return first passing -200 (9.6-16.2k), when a swing-up
    # still failed now and then (~-1,300: one moves the mean by ~-56, and seed 1's start states
    # leave a margin of about one); 3 suite runs failed. In 36 runs to 30k none failed past 20k.
    # Measurements: Benchmarks, Hogwild!, the Pendulum test's budget.
    cfg = _cfg(
        tmp_path,
        algo="sac",
        env="Pendulum-v1",
        hogwild=2,
        sync_mode=sync_mode,
        sync_every=every,
        envs_per_actor=4,
        hidden=[64, 64],
        learning_starts=500,
        total_steps=30_000,
        seed=1,
        checkpoint_every=0,
    )
    summary = train(cfg)
    assert summary["env_steps"] <= 30_000 + 2 * 4
    assert summary["final_return"] >= -250, how_it_went(summary)
    # each worker holds the replay ratio on its own data: total updates ~ ratio x total steps
    warm_up = 2 * cfg.learning_starts
    assert summary["gradient_steps"] == pytest.approx(summary["env_steps"] - warm_up, abs=16)


def test_worker_config_is_the_single_actor_sync_loop_with_its_own_seed():
    cfg = TrainConfig(hogwild=3, total_steps=10_000, seed=5)
    w = worker_config(cfg, 2)
    assert (w.hogwild, w.actors, w.mode, w.backend, w.seed) == (0, 1, "sync", "inline", 7)
    assert w.total_steps == 3_334  # its share: the schedules end when the run does
    assert (
        dataclasses.replace(
            w,
            seed=5,
            total_steps=10_000,
            hogwild=3,
            actors=cfg.actors,
            mode=cfg.mode,
            backend=cfg.backend,
            progress=True,
            tensorboard=True,
        )
        == cfg
    )


def test_resume_continues_the_global_network_and_the_total_step_count(tmp_path):
    cfg = _cfg(
        tmp_path,
        hogwild=2,
        total_steps=1_024,
        envs_per_actor=4,
        rollout=32,
        epochs=1,
        minibatch_size=64,
    )
    first = train(cfg)
    saved = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["learner"]
    assert saved["counters"]["env_steps"] == first["env_steps"] >= 1_024
    second = train(dataclasses.replace(cfg, total_steps=2_048), resume=True)
    assert second["resumed"] and second["env_steps"] >= 2_048
    # the second run's own steps are counted on top of the first's, per worker
    assert second["env_steps"] == first["env_steps"] + sum(second["worker_env_steps"])
    assert second["episodes"] > first["episodes"]
    # the resumed workers' envs took the next generation's seeds, not the first ones again
    assert load_checkpoint(tmp_path / "run")["actors"]["generations"] == [1, 1]
    # the learning rate goes on from where it was -- the first run's linear schedule ended at
    # 0 -- and does not jump back up for the larger total (it was 1 - 512 / 1024 of lr)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    before = [r["lr"] for r in rows if "lr" in r and r["env_steps"] <= first["env_steps"]]
    after = [r["lr"] for r in rows if "lr" in r and r["env_steps"] > first["env_steps"]]
    assert before and after and max(after) <= min(before[-2:]) + 1e-12, (before[-2:], after[:4])


@pytest.mark.slow  # two worker processes: ~10-60 s with the machine's load
def test_two_dqn_workers_train_one_global_network_with_the_fused_step(tmp_path):
    """DQN's fused step trains its online and target networks where Hogwild! shares them
    (state_tensors): the global networks move, as both workers' gradient steps say."""
    cfg = _cfg(
        tmp_path,
        algo="dqn",
        env="CartPole-v1",
        hogwild=2,
        total_steps=1_000,
        envs_per_actor=2,
        hidden=[16],
        learning_starts=100,
        batch_size=32,
        buffer_size=1_000,
        target_every=50,
    )
    summary = train(cfg)
    assert all(n > 0 for n in summary["worker_gradient_steps"])
    from asyncrl.settings import resolve

    start = algorithm(cfg.algo).learner(
        worker_config(resolve(cfg, "classic"), 0), check_env(cfg.env)
    )
    assert start.rule.fused is not None  # the MLP takes the fused step
    before = start.rule.state_dict()
    end = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["learner"]["dqn"]
    for net in ("q", "q_target"):
        moved = [k for k in before[net] if k != "epsilon"]
        assert all(not torch.equal(before[net][k], end[net][k]) for k in moved), net
