"""The learner keeps return normalisation: one statistic over every actor's envs, keyed by the
producing actor, saved in checkpoints; logged returns stay unscaled."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from asyncrl.algos import algorithm
from asyncrl.algos.ppo.learner import PPOLearner
from asyncrl.envs import check_env
from asyncrl.rundir import load_checkpoint, save_checkpoint
from asyncrl.runtime.trainer import train
from asyncrl.runtime.transport import SlotLayout, SlotStore
from asyncrl.settings import TrainConfig, resolve

T, K, N, ROLLOUTS = 16, 3, 2, 4


def _learner(**kw) -> PPOLearner:
    cfg = resolve(
        TrainConfig(
            norm_reward=True,
            actors=N,
            envs_per_actor=K,
            rollout=T,
            minibatch_size=16,
            epochs=1,
            **kw,
        ),
        "classic",
    )
    return PPOLearner(cfg, check_env(cfg.env))


def _rollouts(spec, seed: int = 0):
    """ROLLOUTS slots per actor of made-up CartPole data; rewards and episode ends vary, and
    are kept per env (actor a, env k) as whole streams for the reference."""
    rng = np.random.default_rng(seed)
    layout = SlotLayout.for_rollout(spec, T, K, algorithm("ppo").slot_fields(spec, T, K))
    store = SlotStore(layout, N * ROLLOUTS, shared=False)
    rewards = (rng.standard_normal((ROLLOUTS * T, N * K)) * 2 + 0.5).astype(np.float32)
    ends = rng.random((ROLLOUTS * T, N * K)) < 0.05
    slots = {}
    for a in range(N):
        for i in range(ROLLOUTS):
            s = store.slots[a * ROLLOUTS + i]
            rows, cols = slice(i * T, (i + 1) * T), slice(a * K, (a + 1) * K)
            s.obs[:] = rng.standard_normal(s.obs.shape).astype(np.float32)
            s.actions[:] = rng.integers(0, 2, s.actions.shape)
            s.logp[:] = np.log(0.5)
            s.rewards[:] = rewards[rows, cols]
            s.terminated[:] = ends[rows, cols]
            s.truncated[:] = False
            s.trunc_values[:] = 0.0
            s.versions[:] = 0
            s.ep_returns[:] = np.nan
            s.ep_lengths[:] = 0
            s.actor[0], s.env_steps[0] = a, T * K
            s.rollout_seconds[0] = s.wait_seconds[0] = 0.0
            slots[a, i] = s
    return store, slots, rewards, ends


def _reference_var(rewards: np.ndarray, ends: np.ndarray, gamma: float) -> float:
    seen = []
    for env in range(rewards.shape[1]):
        g = 0.0
        for t in range(rewards.shape[0]):
            g = gamma * g + float(rewards[t, env])
            seen.append(g)
            g = 0.0 if ends[t, env] else g
    return float(np.var(seen))


ORDERS = {  # the batches of rollout i, in the order the learner gets them
    "async-actor-0-first": lambda i: [[(0, i)], [(1, i)]],
    "async-actor-1-first": lambda i: [[(1, i)], [(0, i)]],
    "sync": lambda i: [[(0, i), (1, i)]],  # both actors' slots in one batch
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_every_env_keeps_its_own_return_whatever_batch_it_arrives_in(order):
    learner = _learner(mode="sync" if order == "sync" else "async")
    store, slots, rewards, ends = _rollouts(learner.spec)
    for i in range(ROLLOUTS):
        for batch in ORDERS[order](i):
            stats = learner.train([slots[a, j] for a, j in batch])
            assert stats["reward_norm/return_std"] == learner.reward_norm.return_std
    store.close()
    want = _reference_var(rewards, ends, learner.cfg.gamma)
    np.testing.assert_allclose(float(learner.reward_norm.stat.var), want, rtol=1e-6)
    assert round(float(learner.reward_norm.stat.count)) == rewards.size


def test_slots_are_not_written_and_the_state_round_trips_through_a_checkpoint(tmp_path):
    learner = _learner(mode="async")
    store, slots, rewards, _ = _rollouts(learner.spec, seed=1)
    before = slots[0, 0].rewards.copy()
    learner.train([slots[0, 0]])
    learner.train([slots[1, 0]])
    np.testing.assert_array_equal(slots[0, 0].rewards, before)  # scaled rewards are a copy
    save_checkpoint(tmp_path, {"learner": learner.state_dict(), "config": learner.cfg.to_dict()})
    again = _learner(mode="async")
    again.load_state_dict(load_checkpoint(tmp_path)["learner"])
    for key, value in learner.reward_norm.stat.state_dict().items():
        assert torch.equal(again.reward_norm.stat.state_dict()[key], value), key
    assert again.reward_norm.return_std == learner.reward_norm.return_std
    store.close()


def test_a_run_normalises_every_sample_once_logs_unscaled_returns_and_resumes(tmp_path):
    cfg = TrainConfig(
        env="CartPole-v1",
        backend="inline",
        norm_reward=True,
        actors=2,
        envs_per_actor=4,
        rollout=32,
        minibatch_size=64,
        total_steps=2_048,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        run_dir=str(tmp_path / "run"),
    )
    first = train(cfg)
    state = load_checkpoint(tmp_path / "run")["learner"]
    assert round(float(state["reward_norm"]["count"])) == first["env_steps"]
    # CartPole pays 1 per step: an unscaled return is the episode's length
    episodes = state["episodes"]
    assert episodes["recent_returns"] and episodes["recent_returns"] == [
        float(n) for n in episodes["recent_lengths"]
    ]
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").open()]
    assert all(r["reward_norm/return_std"] > 1 for r in rows)  # returns of 1-rewards exceed 1
    second = train(dataclasses.replace(cfg, total_steps=4_096), resume=True)
    state = load_checkpoint(tmp_path / "run")["learner"]
    # the statistic went on from the saved one: it has seen every sample of both parts
    assert round(float(state["reward_norm"]["count"])) == second["env_steps"] >= 4_096


class _Handed(Exception):
    """Raised where the update would start: the batch has been put together."""


def test_the_batch_reaches_the_device_with_rewards_normalised_on_the_host(monkeypatch):
    """A learner on another device (--device cuda|auto with the mujoco preset's return
    normalisation) used to call .numpy() on rollout tensors already moved there: the first
    update failed. Without a GPU the device here is "meta" (tensors with shapes and no data,
    whose .numpy() raises as a CUDA tensor's does), and the test stops where the update
    would start. It shows every tensor handed to the update is on the learner's device and
    that the normaliser saw the host's rewards (its statistic equals a CPU learner's); it does
    not run CUDA kernels, nor the update on the device."""
    cpu, meta = _learner(mode="async"), _learner(mode="async")
    store, slots, _, _ = _rollouts(cpu.spec)
    handed = {}

    def targets(rollout):
        handed.update(rollout)
        raise _Handed

    meta.device = torch.device("meta")
    monkeypatch.setattr(meta.algo, "targets", targets)
    with pytest.raises(_Handed):
        meta.train([slots[0, 0]])
    cpu.train([slots[0, 0]])
    store.close()
    assert set(handed) == {
        "obs",
        "actions",
        "logp",
        "rewards",
        "terminated",
        "truncated",
        "trunc_values",
    }
    assert all(t.device.type == "meta" for t in handed.values())
    assert handed["rewards"].dtype == torch.float32
    for key, value in cpu.reward_norm.stat.state_dict().items():
        assert torch.equal(meta.reward_norm.stat.state_dict()[key], value), key
