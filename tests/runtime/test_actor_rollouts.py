"""What an actor writes into a slot: episode ends, truncation bootstrap values, versions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asyncrl.algos import algorithm
from asyncrl.algos.ppo.networks import build_policy
from asyncrl.envs import check_env
from asyncrl.nets import FlatParams
from asyncrl.runtime.actor import Actor
from asyncrl.runtime.transport import PolicyStore, SlotStore, rollout_layout
from asyncrl.settings import TrainConfig, resolve


def _collect(env_id: str, rollout: int = 12, K: int = 2):
    cfg = resolve(
        TrainConfig(env=env_id, envs_per_actor=K, rollout=rollout, norm_obs=False), "classic"
    )
    spec = check_env(env_id)
    learner_policy = build_policy(spec, cfg.hidden, cfg.activation, cfg.norm_obs)
    flat = FlatParams(learner_policy)
    store = PolicyStore(flat.numel, shared=False)
    store.publish(7, flat.write_to)
    slots = SlotStore(rollout_layout(cfg, spec, algorithm(cfg.algo)), 1, shared=False)
    actor = Actor(0, cfg, spec, algorithm(cfg.algo), store)
    slot = slots.slots[0]
    actor.collect(slot)
    actor.close()
    return learner_policy, slot


def test_truncation_records_value_of_final_observation():
    policy, slot = _collect("fake_envs:Countdown-v0")  # TimeLimit 5, never terminates
    assert not slot.terminated.any()
    ends = np.flatnonzero(slot.truncated[:, 0])
    assert list(ends) == [4, 9]
    # the final obs of an episode cut at step 5 is [5, 1]; its value was taken from the policy
    expected = policy.value(torch.tensor([[5.0, 1.0]])).item()
    np.testing.assert_allclose(slot.trunc_values[ends, 0], expected, rtol=1e-5, atol=1e-6)
    assert (slot.trunc_values[~slot.truncated] == 0).all()
    # the obs after a truncation is the reset obs, not the final one
    np.testing.assert_array_equal(slot.obs[5, 0], [0.0, 1.0])
    np.testing.assert_array_equal(slot.ep_returns[4], [5.0, 5.0])
    assert np.isnan(slot.ep_returns[3]).all()
    assert (slot.versions == 7).all()
    assert (slot.actor[0], slot.env_steps[0], slot.env_restarts[0]) == (0, 24, 0)


def test_termination_has_no_bootstrap_value():
    _, slot = _collect("fake_envs:CountdownTerminates-v0")  # terminates at step 3
    assert not slot.truncated.any()
    assert list(np.flatnonzero(slot.terminated[:, 1])) == [2, 5, 8, 11]
    assert (slot.trunc_values == 0).all()


@pytest.mark.parametrize("env_id", ["fake_envs:Countdown-v0"])
def test_logp_matches_learner_recomputation(env_id):
    policy, slot = _collect(env_id)
    obs = torch.from_numpy(slot.obs[:-1]).flatten(0, 1)
    logp, _, _ = policy.log_prob_entropy(obs, torch.from_numpy(slot.actions).flatten())
    np.testing.assert_allclose(logp.detach().numpy(), slot.logp.flatten(), rtol=1e-5, atol=1e-6)
