"""DQN's update rule against a straightforward reference, its exploration schedule, and the
exploration probability travelling with each published version."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from asyncrl.algos.dqn.config import DQNConfig, epsilon
from asyncrl.algos.dqn.networks import QNetwork
from asyncrl.algos.dqn.update import DQN
from asyncrl.envs import check_env
from asyncrl.settings import TrainConfig, resolve


def _batch(g: torch.Generator, n: int = 32) -> dict[str, torch.Tensor]:
    return {
        "obs": torch.randn(n, 4, generator=g),
        "action": torch.randint(2, (n,), generator=g),
        "reward": torch.randn(n, generator=g),
        "next_obs": torch.randn(n, 4, generator=g),
        "discount": 0.9**2 * (torch.rand(n, generator=g) > 0.2).float(),
    }


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_one_step_is_the_reference_double_dqn_step(double, loss):
    spec = check_env("CartPole-v1")
    torch.manual_seed(0)
    q = QNetwork(spec, [16, 16], "mlp")
    cfg = DQNConfig(lr=1e-2, double=double, td_loss=loss, max_grad_norm=0.0)
    rule = DQN(q, cfg, target_updates_every=1000)
    ref_q, ref_target = copy.deepcopy(q), copy.deepcopy(q)
    # the target network lags the online one: make them differ
    rule.update(_batch(torch.Generator().manual_seed(1)))
    ref_q.load_state_dict(q.state_dict())
    b = _batch(torch.Generator().manual_seed(2))
    with torch.no_grad():  # the reference: written out, as in the paper
        nxt = ref_target(b["next_obs"])
        pick = (ref_q if double else ref_target)(b["next_obs"]).argmax(-1)
        target = b["reward"] + b["discount"] * nxt.gather(1, pick[:, None]).squeeze(1)
    taken = ref_q(b["obs"]).gather(1, b["action"][:, None]).squeeze(1)
    err = taken - target
    ref_loss = (
        torch.where(err.abs() < 1, 0.5 * err**2, err.abs() - 0.5).mean()
        if loss == "huber"
        else (err**2).mean()
    )
    stats = rule.update(b)
    assert stats[0].item() == pytest.approx(ref_loss.item(), rel=1e-5)
    assert stats[1].item() == pytest.approx(taken.mean().item(), rel=1e-5)
    # and the online network moved, the target network did not
    assert not torch.equal(q.head[0].weight, ref_q.head[0].weight)
    assert torch.equal(rule.q_target.head[0].weight, ref_target.head[0].weight)


def test_the_target_network_takes_the_online_one_every_n_updates_and_tau_blends():
    spec = check_env("CartPole-v1")
    q = QNetwork(spec, [8], "mlp")
    rule = DQN(q, DQNConfig(lr=1e-2, tau=1.0), target_updates_every=3)
    g = torch.Generator().manual_seed(0)
    for i in range(1, 7):
        rule.update(_batch(g))
        same = torch.equal(rule.q_target.head[0].weight, q.head[0].weight)
        assert same == (i % 3 == 0), i
    half = DQN(QNetwork(spec, [8], "mlp"), DQNConfig(lr=1e-2, tau=0.5), target_updates_every=1)
    before = half.q_target.head[0].weight.clone()
    half.update(_batch(g))
    blended = 0.5 * before + 0.5 * half.q.head[0].weight
    assert torch.allclose(half.q_target.head[0].weight, blended)
    # exploration stays each worker's own: not among the tensors Hogwild! shares
    assert all(t.dim() > 0 for t in rule.state_tensors())


def test_epsilon_falls_linearly_over_its_fraction_of_the_budget_then_stays():
    cfg = resolve(TrainConfig(algo="dqn", total_steps=1000, exploration_fraction=0.5), "classic")
    assert epsilon(cfg, 0) == cfg.epsilon_start == 1.0
    assert epsilon(cfg, 250) == pytest.approx(1.0 + 0.5 * (cfg.epsilon_end - 1.0))
    assert epsilon(cfg, 500) == epsilon(cfg, 900) == pytest.approx(cfg.epsilon_end)


def test_actors_explore_with_the_probability_of_the_version_they_act_with():
    spec = check_env("CartPole-v1")
    q = QNetwork(spec, [8], "mlp")
    obs = torch.randn(4000, 4)
    greedy, _ = q.act(obs, deterministic=True)
    q.epsilon.fill_(0.0)
    assert torch.equal(q.act(obs, generator=torch.Generator().manual_seed(0))[0], greedy)
    q.epsilon.fill_(0.5)
    acted, _ = q.act(obs, generator=torch.Generator().manual_seed(0))
    # half explore, half of those pick the greedy action anyway: ~25% differ
    assert 0.2 < (acted != greedy).float().mean().item() < 0.3
    flat = np.concatenate([t.detach().reshape(-1).numpy() for t in q.state_dict().values()])
    assert 0.5 in flat  # epsilon is part of what a version publishes


@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("eps", [0.0, 0.05, 0.5, 1.0])
def test_acting_computes_values_only_where_a_row_exploits_with_the_same_draws_and_actions(n, eps):
    """``act`` draws exploration before the values and skips them where every row explores:
    the actions and the generator's state after each call are those of drawing after the
    forward (greedy, then torch.where), over 300 calls of n rows at each epsilon."""
    spec = check_env("CartPole-v1")
    q = QNetwork(spec, [16, 16], "mlp")
    q.epsilon.fill_(eps)
    obs = torch.randn(300, n, 4, generator=torch.Generator().manual_seed(1))
    ours, theirs = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    for x in obs:
        action, _ = q.act(x, generator=ours)
        greedy = q(x).argmax(-1)  # the order before: values, then the draws
        explore = torch.rand(n, generator=theirs) < q.epsilon
        random = torch.randint(2, (n,), generator=theirs)
        assert torch.equal(action, torch.where(explore, random, greedy))
        assert action.dtype == torch.int64 and action.shape == (n,)
        assert torch.equal(ours.get_state(), theirs.get_state())
