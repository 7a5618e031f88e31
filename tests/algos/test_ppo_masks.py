"""PPO on seats of multi-agent envs: masked logits when acting and in the loss, and GAE over
each seat's own steps (seat_gae) against GAE on the seat's steps taken out by hand."""

from __future__ import annotations

import numpy as np
import torch

from asyncrl.algos.ppo.networks import ActorCritic
from asyncrl.algos.ppo.returns import gae, seat_gae
from asyncrl.envs import EnvSpec

N = 5  # actions


def _policy() -> ActorCritic:
    torch.manual_seed(0)
    spec = EnvSpec("masked", (3 + N,), True, (), N, action_mask=True)
    return ActorCritic(spec, [16], "tanh", norm_obs=True)


def _obs(rng: np.random.Generator, batch: int) -> torch.Tensor:
    mask = rng.random((batch, N)) < 0.4
    mask[np.arange(batch), rng.integers(N, size=batch)] = True  # at least one legal move
    return torch.from_numpy(np.concatenate([rng.normal(size=(batch, 3)), mask], 1).astype("f4"))


def test_a_masked_policy_only_takes_legal_actions_and_its_loss_ignores_illegal_ones():
    policy, rng = _policy(), np.random.default_rng(1)
    obs = _obs(rng, 2000)
    legal = obs[:, 3:] > 0
    actions, logp = policy.act(obs, generator=torch.Generator().manual_seed(2))
    assert legal[torch.arange(2000), actions].all()
    greedy, _ = policy.act(obs, deterministic=True)
    assert legal[torch.arange(2000), greedy].all()
    logp2, entropy, _ = policy.log_prob_entropy(obs, actions)
    assert torch.allclose(logp, logp2, atol=1e-6)
    # the distribution is over the legal actions alone: its entropy is at most log(#legal)
    assert torch.isfinite(entropy).all()
    assert (entropy <= legal.sum(1).float().log() + 1e-5).all()
    # a seat with one legal move takes it with probability 1
    one = legal.sum(1) == 1
    assert one.any() and torch.allclose(logp[one], torch.zeros(int(one.sum())), atol=1e-5)


def test_the_mask_is_read_as_it_came_not_normalised_and_not_by_the_layers():
    policy, rng = _policy(), np.random.default_rng(3)
    policy.obs_norm.update(_obs(rng, 500))
    obs = _obs(rng, 64)
    assert torch.equal(policy.features(obs)[:, 3:], obs[:, 3:])
    assert policy.pi[0].in_features == 3 and policy.v[0].in_features == 3


def _reference(rewards, values, terminated, truncated, trunc_values, own, gamma, lam):
    """GAE on each column's own steps taken out: a step's reward sums what came until the next
    own step; an episode end in between ends the step's episode."""
    T, B = rewards.shape
    adv = torch.zeros(T, B)
    for b in range(B):
        steps = [t for t in range(T) if own[t, b]]
        r, term, trunc, tv = [], [], [], []
        for i, t in enumerate(steps):
            stop = steps[i + 1] if i + 1 < len(steps) else T
            total, te, tr, v = 0.0, False, False, 0.0
            for u in range(t, stop):
                total += float(rewards[u, b])
                if terminated[u, b] or truncated[u, b]:
                    te, tr = bool(terminated[u, b]), bool(truncated[u, b] and not terminated[u, b])
                    v = float(trunc_values[u, b])
                    break
            r.append(total), term.append(te), trunc.append(tr), tv.append(v)
        if not steps:
            continue
        vals = torch.cat([values[steps, b], values[T, b : b + 1]])
        a, _ = gae(
            torch.tensor(r)[:, None],
            vals[:, None],
            torch.tensor(term)[:, None],
            torch.tensor(trunc)[:, None],
            torch.tensor(tv)[:, None],
            gamma,
            lam,
        )
        adv[steps, b] = a[:, 0]
    return adv


def test_seat_gae_is_gae_over_each_seats_own_steps():
    g = torch.Generator().manual_seed(4)
    T, B = 40, 6
    rewards = torch.randn(T, B, generator=g)
    values = torch.randn(T + 1, B, generator=g)
    ends = torch.rand(T, B, generator=g)
    terminated, truncated = ends < 0.08, (ends >= 0.08) & (ends < 0.12)
    trunc_values = torch.where(truncated, torch.randn(T, B, generator=g), 0.0)
    own = torch.rand(T, B, generator=g) < 0.5
    own[:, 0] = torch.arange(T) % 2 == 0  # a seat that alternates, as in a two-player game
    args = (rewards, values, terminated, truncated, trunc_values)
    adv, ret = seat_gae(*args, own, 0.97, 0.9)
    want = _reference(*args, own, 0.97, 0.9)
    assert torch.allclose(adv, want, atol=1e-5)
    assert torch.allclose(ret[own], (want + values[:-1])[own], atol=1e-5)
    # every step its own: GAE itself
    all_adv, _ = seat_gae(*args, torch.ones(T, B, dtype=torch.bool), 0.97, 0.9)
    assert torch.allclose(all_adv, gae(*args, 0.97, 0.9)[0], atol=1e-5)
