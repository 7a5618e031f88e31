"""PPO's lag corrections on a hand-made batch: what each puts in the training batch, and that
the decoupled one is PPO itself when nothing lags."""

from __future__ import annotations

import copy

import numpy as np
import torch

from asyncrl.algos.ppo.config import PPOConfig
from asyncrl.algos.ppo.networks import build_policy
from asyncrl.algos.ppo.update import PPO
from asyncrl.envs import EnvSpec

T, B, OBS, ACT = 16, 4, 3, 2
SPEC = EnvSpec(
    "toy", (OBS,), False, (ACT,), ACT, np.full(ACT, -1.0, np.float32), np.ones(ACT, np.float32)
)


def _policy(seed: int = 0):
    torch.manual_seed(seed)
    return build_policy(SPEC, [16, 16], "tanh", norm_obs=False)


def _rollout(policy, lagged: bool) -> dict[str, torch.Tensor]:
    """T x B steps acted by ``policy`` (``lagged``: by a perturbed copy of it, as an actor a few
    versions behind), with episode ends of both kinds."""
    g = torch.Generator().manual_seed(3)
    obs = torch.randn(T + 1, B, OBS, generator=g)
    actor = copy.deepcopy(policy)
    if lagged:
        with torch.no_grad():
            for p in actor.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    actions, logp = actor.act(obs[:T].flatten(0, 1), generator=g)
    terminated = torch.rand(T, B, generator=g) < 0.05
    truncated = ~terminated & (torch.rand(T, B, generator=g) < 0.05)
    return {
        "obs": obs,
        "actions": actions.view(T, B, ACT),
        "logp": logp.view(T, B),
        "rewards": torch.randn(T, B, generator=g),
        "terminated": terminated,
        "truncated": truncated,
        "trunc_values": torch.where(truncated, torch.randn(T, B, generator=g), 0.0),
    }


def _ppo(policy, correction: str, rho_bar: float = 1.0) -> PPO:
    cfg = PPOConfig(epochs=2, minibatch_size=16, correction=correction, vtrace_rho_bar=rho_bar)
    return PPO(policy, cfg, lr=3e-3)


def test_decoupled_clips_around_the_current_policy_and_weights_the_lagged_samples():
    policy = _policy()
    r = _rollout(policy, lagged=True)
    plain = _ppo(policy, "none").targets(r)
    decoupled = _ppo(policy, "decoupled", rho_bar=1.5).targets(r)
    current, _, _ = policy.log_prob_entropy(r["obs"][:T].flatten(0, 1), plain["actions"])
    current = current.detach()
    behaviour = r["logp"].flatten()
    assert not torch.allclose(current, behaviour, atol=1e-3)  # the actor did lag
    torch.testing.assert_close(plain["logp"], behaviour)  # PPO: the clip refers to the actor
    assert torch.equal(plain["weight"], torch.ones(T * B))
    torch.testing.assert_close(decoupled["logp"], current)  # decoupled: to the current policy
    expected = (current - behaviour).exp().clamp(max=1.5)
    torch.testing.assert_close(decoupled["weight"], expected)
    assert (decoupled["weight"] == 1.5).any() and (decoupled["weight"] < 1).any()
    # the same GAE advantages and value targets: only the policy loss changes
    for key in ("adv", "returns", "values"):
        torch.testing.assert_close(decoupled[key], plain[key])


def _after_update(correction: str, lagged: bool) -> torch.Tensor:
    """The parameters after one update of a fresh policy on one rollout."""
    policy = _policy()
    ppo = _ppo(policy, correction)
    batch = ppo.targets(_rollout(policy, lagged=lagged))
    ppo.update(batch, lr=3e-3, generator=torch.Generator().manual_seed(5))
    return torch.cat([p.detach().flatten() for p in policy.parameters()])


def test_with_no_lag_decoupled_is_ppo_itself():
    """Samples of the current policy: the same update as plain PPO, parameter for parameter.
    (Not so V-trace: on-policy it is GAE with lambda 1, not with PPO's 0.95.)"""
    plain = _after_update("none", lagged=False)
    assert not torch.equal(plain, torch.cat([p.flatten() for p in _policy().parameters()]))
    torch.testing.assert_close(
        _after_update("decoupled", lagged=False), plain, atol=1e-5, rtol=1e-5
    )


def test_decoupled_differs_from_ppo_when_samples_lag():
    plain = _after_update("none", lagged=True)
    assert (plain - _after_update("decoupled", lagged=True)).abs().max() > 1e-4
