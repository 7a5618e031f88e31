"""PBT's exploit, unit by unit: after ``adopt`` the copier holds the source's weights, optimizer
state, normalisers and hyperparameters, keeps its own counters, episodes and random streams,
and from then on the two evolve independently (an update of either leaves the other bit for
bit as it was). On learners in the driver's process (inline and thread backends) and in
learner processes (process and Ray backends), through the handles the training loop uses."""

from __future__ import annotations

import copy
import dataclasses
import multiprocessing as mp
from typing import Any

import numpy as np
import pytest
import torch

from asyncrl.algos import algorithm
from asyncrl.envs import check_env
from asyncrl.runtime.learners import LocalLearner, RemoteLearner
from asyncrl.runtime.transport import PolicyStore, SlotLayout, SlotStore
from asyncrl.settings import TrainConfig, resolve

T, K = 16, 4
SETTINGS = {
    # normalisers on: the observation statistics and the return statistics are copied too
    "ppo": dict(env="CartPole-v1", norm_obs=True, norm_reward=True, minibatch_size=32),
    "sac": dict(env="Pendulum-v1", learning_starts=32, batch_size=32, buffer_size=4096),
    "dqn": dict(env="CartPole-v1", learning_starts=32, batch_size=32, buffer_size=4096),
}
# counters and what each policy keeps of its own: never compared between the two
OWN_KEYS = {"counters", "episodes", "schedule", "generator", "limiter", "replay"}


def _cfg(algo: str, seed: int, tmp_path) -> Any:
    cfg = TrainConfig(
        algo=algo,
        mode="sync",
        backend="inline",
        actors=1,
        envs_per_actor=K,
        rollout=T,
        epochs=1,
        hidden=(16, 16),
        seed=seed,
        progress=False,
        tensorboard=False,
        run_dir=str(tmp_path / "run"),
        **SETTINGS[algo],
    )
    return resolve(cfg, "classic")


def _fill(slot: Any, rng: np.random.Generator, spec: Any) -> None:
    """Made-up but valid steps: actions in the space, a few episode ends and finished
    episodes (so that each learner has episodes of its own to keep)."""
    for name in slot.names:
        a = getattr(slot, name)
        if a.dtype == np.bool_:
            a[:] = rng.random(a.shape) < 0.05
        elif np.issubdtype(a.dtype, np.integer):
            a[:] = rng.integers(0, 2, a.shape)
        else:
            a[:] = rng.standard_normal(a.shape).astype(a.dtype) * 0.5
    if not spec.discrete:
        slot.actions[:] = np.clip(slot.actions, spec.action_low, spec.action_high)
    if hasattr(slot, "logp"):
        slot.logp[:] = np.log(0.5)
    slot.versions[:] = 0
    slot.ep_returns[:] = np.nan
    slot.ep_returns[-1, :2] = rng.uniform(0, 100, 2)
    slot.ep_lengths[:] = 0
    slot.ep_lengths[-1, :2] = rng.integers(1, 100, 2)
    slot.actor[0], slot.env_steps[0] = 0, T * K
    slot.rollout_seconds[0] = slot.wait_seconds[0] = 0.0


def _flatten(state: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested state (tensors, arrays, numbers) under a dotted path."""
    if isinstance(state, dict):
        out: dict[str, Any] = {}
        for k, v in state.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(state, (list, tuple)):
        out = {}
        for i, v in enumerate(state):
            out.update(_flatten(v, f"{prefix}{i}."))
        return out
    return {prefix.rstrip("."): state}


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b, equal_nan=True)
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return a == b


def _learned(state: dict[str, Any]) -> dict[str, Any]:
    """What an exploit copies: the state but the policy's own books and streams."""
    flat = _flatten({k: v for k, v in state.items() if k not in OWN_KEYS})
    return {k: v for k, v in flat.items() if not _own(k)}


def _own(key: str) -> bool:
    """A random stream, an optimizer's rate (a hyperparameter: the copier's follows the values
    it is given) and each env's running discounted return (its envs go on with their episodes)."""
    return key.endswith(("generator", "reward_norm.returns")) or ".param_groups." in key


def _differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    assert a.keys() == b.keys()
    return [k for k in a if not _equal(a[k], b[k])]


class _Population:
    """Two learners of ``algo`` behind the handles the training loop holds, each with its own
    slots and policy store (shared memory for learner processes)."""

    def __init__(self, algo: str, where: str, tmp_path):
        self.cfgs = [_cfg(algo, seed, tmp_path) for seed in (1, 2)]
        self.spec = check_env(self.cfgs[0].env)
        shared = where == "process"
        fields = algorithm(algo).slot_fields(self.spec, T, K, self.cfgs[0])
        layout = SlotLayout.for_rollout(self.spec, T, K, fields)
        self.rng = np.random.default_rng(0)
        self.slots = [SlotStore(layout, 2, shared=shared) for _ in self.cfgs]
        numel = algorithm(algo).learner(self.cfgs[0], self.spec).numel
        self.stores = [PolicyStore(numel, shared=shared) for _ in self.cfgs]
        self.handles: list[Any] = []
        for p, cfg in enumerate(self.cfgs):
            if shared:
                h = RemoteLearner(
                    mp.get_context("spawn"), p, cfg, self.spec, algorithm(algo), self.slots[p],
                    self.stores[p], None, None, False,
                )  # fmt: skip
                self.handles.append(h)
                h.ready()
            else:
                learner = algorithm(algo).learner(cfg, self.spec)
                self.handles.append(LocalLearner(learner, algorithm(algo)))

    def train(self, p: int) -> None:
        slot = self.slots[p].slots[0]
        _fill(slot, self.rng, self.spec)
        self.handles[p].train([slot])
        self.handles[p].record([slot])

    def state(self, p: int) -> dict[str, Any]:
        """A copy (an inline learner's state holds its live tensors)."""
        return copy.deepcopy(self.handles[p].state()["learner"])

    def close(self) -> None:
        for h in self.handles:
            h.close()
        for s in (*self.slots, *self.stores):
            s.close()


@pytest.fixture
def population(request, tmp_path):
    pops: list[_Population] = []

    def make(algo: str, where: str) -> _Population:
        pops.append(_Population(algo, where, tmp_path))
        return pops[-1]

    yield make
    for pop in pops:
        pop.close()


@pytest.mark.parametrize("where", ["inline", "process"])
@pytest.mark.parametrize("algo", ["ppo", "sac", "dqn"])
def test_an_exploit_copies_the_learned_state_and_the_two_then_evolve_independently(
    population, algo, where
):
    pop = population(algo, where)
    source, copier = pop.handles
    for _ in range(3):  # both past learning_starts, with moments and statistics of their own
        pop.train(0)
        pop.train(1)
    before = pop.state(1)
    assert _differing(_learned(pop.state(0)), _learned(before))  # two different policies
    mutable = algorithm(algo).mutable
    values = {name: getattr(pop.cfgs[0], name) for name in mutable}
    values[next(iter(mutable))] *= 1.5  # PBT perturbs what it copies

    copier.adopt(source.state()["learner"], values, pop.stores[1])

    after = pop.state(1)
    # the copier holds the source's weights, optimizer state and normalisers ...
    assert not _differing(_learned(after), _learned(pop.state(0)))
    # ... its own counters (one version on), episodes and random streams ...
    assert after["counters"]["version"] == before["counters"]["version"] + 1
    for key in ("env_steps", "iterations"):
        assert after["counters"][key] == before["counters"][key]
    assert after["episodes"] == before["episodes"]
    assert not _differing(_flatten(after.get("generator")), _flatten(before.get("generator")))
    streams = {k: v for k, v in _flatten(before).items() if _own(k) and "param_groups" not in k}
    assert not _differing(streams, {k: _flatten(after)[k] for k in streams})
    # ... and the values it was given, which it trains with
    if where == "inline":
        assert {n: getattr(copier.learner.cfg, n) for n in mutable} == values
    # the copier published its new weights as a new version
    assert pop.stores[1].read_if_newer(-1, lambda a: None) == after["counters"]["version"]

    # independent: an update of the copier leaves the source bit for bit as it was ...
    source_state = _flatten(pop.state(0))
    pop.train(1)
    assert not _differing(_flatten(pop.state(0)), source_state)
    assert _differing(_learned(pop.state(1)), _learned(after))  # (the copier did train)
    # ... and an update of the source leaves the copier as it was
    copier_state = _flatten(pop.state(1))
    pop.train(0)
    assert not _differing(_flatten(pop.state(1)), copier_state)


def test_an_exploit_keeps_the_copiers_episode_statistics(tmp_path):
    """A copier with 5 episodes at return 10 that adopts a source with 30 at 500 still reports
    its own 5 at 10 (the leader, per-policy rows and the summary read them)."""
    from asyncrl.metrics import EpisodeStats

    cfg = _cfg("ppo", 1, tmp_path)
    spec = check_env(cfg.env)
    copier, source = (algorithm("ppo").learner(c, spec) for c in (cfg, dataclasses.replace(cfg)))
    copier.episode_stats.add([10.0] * 5, [10] * 5)
    source.episode_stats.add([500.0] * 30, [500] * 30)
    handle = LocalLearner(copier, algorithm("ppo"))
    held = handle.episode_stats
    state = LocalLearner(source, algorithm("ppo")).state()["learner"]
    handle.adopt(state, {}, PolicyStore(copier.numel, shared=False))
    for stats in (copier.episode_stats, held):
        assert stats.episodes == 5 and stats.final_return == 10.0
    assert source.episode_stats.episodes == 30 and source.episode_stats.final_return == 500.0
    fresh = EpisodeStats()
    fresh.add([1.0], [1])
    fresh.load_state_dict(source.episode_stats.state_dict())  # a load replaces, never adds
    assert fresh.episodes == 30 and list(fresh.returns) == [500.0] * 30
