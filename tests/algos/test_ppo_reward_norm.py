"""Return normalisation against a plain-loop reference, and independent of how envs are grouped."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asyncrl.algos.ppo.reward_norm import RewardNormalizer

GAMMA = 0.99


def reference(batches, gamma: float, clip: float, eps: float = 1e-8):
    """SB3's VecNormalize reward path written as plain loops: per env, G = gamma G + r; every G
    enters the statistic; G restarts at 0 after an episode end (terminated or truncated). Here a
    whole batch enters before its rewards are scaled. Returns the scaled batches and (mean, var)
    of all returns seen."""
    acc: dict[int, float] = {}
    seen: list[float] = []
    scaled = []
    for rewards, ends, streams in batches:
        T, B = rewards.shape
        for b in range(B):
            for t in range(T):
                g = acc.get(int(streams[b]), 0.0) * gamma + float(rewards[t, b])
                seen.append(g)
                acc[int(streams[b])] = 0.0 if ends[t, b] else g
        std = np.sqrt(np.var(seen) + eps)
        out = np.empty((T, B))
        for t in range(T):
            for b in range(B):
                x = float(rewards[t, b]) / std
                out[t, b] = min(max(x, -clip), clip) if clip > 0 else x
        scaled.append(out)
    return scaled, float(np.mean(seen)), float(np.var(seen))


def env_streams(envs: int, steps: int, seed: int):
    """Reward and episode-end streams of ``envs`` envs: rewards of varied scale and sign, ends
    at random (both terminations and truncations count as ends)."""
    rng = np.random.default_rng(seed)
    rewards = (rng.standard_normal((steps, envs)) * 3.0 + 1.0).astype(np.float32)
    ends = rng.random((steps, envs)) < 0.04
    return rewards, ends


def batches_of(rewards, ends, actors: int, per_actor: int, rollout: int, order: str, seed: int):
    """The streams as a learner receives them from N actors of K envs: rollouts of T steps,
    each actor's in its own order, the actors interleaved at random (async) or joined per
    rollout in actor order (sync). Stream ids are actor x K + env index."""
    steps = rewards.shape[0]
    per = [
        [
            (
                rewards[t : t + rollout, a * per_actor : (a + 1) * per_actor],
                ends[t : t + rollout, a * per_actor : (a + 1) * per_actor],
                a * per_actor + np.arange(per_actor),
            )
            for t in range(0, steps, rollout)
        ]
        for a in range(actors)
    ]
    if order == "sync":
        return [
            tuple(np.concatenate(parts, axis=-1) for parts in zip(*rollouts, strict=True))
            for rollouts in zip(*per, strict=True)
        ]
    rng = np.random.default_rng(seed)
    queues = [list(p) for p in per]
    out = []
    while any(queues):
        a = rng.choice([i for i, q in enumerate(queues) if q])
        out.append(queues[a].pop(0))
    return out


@pytest.mark.parametrize("clip", [10.0, 0.0, 0.5])
@pytest.mark.parametrize("order", ["sync", "async"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_the_plain_loop_reference(clip, order, seed):
    rewards, ends = env_streams(envs=6, steps=64, seed=seed)
    batches = batches_of(rewards, ends, actors=3, per_actor=2, rollout=16, order=order, seed=seed)
    want, mean, var = reference(batches, GAMMA, clip)
    norm = RewardNormalizer(GAMMA, clip)
    for (r, e, s), expected in zip(batches, want, strict=True):
        got = norm(r, e, s)
        assert got.dtype == np.float32 and got.shape == r.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(norm.stat.mean), mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(float(norm.stat.var), var, rtol=1e-6)
    if clip:
        assert np.abs(norm.scale(rewards)).max() <= clip


def test_a_return_restarts_after_every_episode_end():
    """Terminated or truncated, the next episode's return starts at 0 (SB3's VecNormalize)."""
    norm = RewardNormalizer(gamma=0.5)
    rewards = np.array([[1.0], [1.0], [1.0], [1.0]], dtype=np.float32)
    ends = np.array([[False], [True], [False], [False]])
    g = norm.discounted_returns(rewards, ends, np.array([0]))
    np.testing.assert_allclose(g[:, 0], [1.0, 1.5, 1.0, 1.5])
    # the accumulator carries into the next batch of the same stream, not of another
    g = norm.discounted_returns(rewards[:1], ends[:1], np.array([0]))
    assert g[0, 0] == pytest.approx(1.75)
    g = norm.discounted_returns(rewards[:1], ends[:1], np.array([5]))
    assert g[0, 0] == pytest.approx(1.0)


@pytest.mark.parametrize("seed", [0, 3])
def test_how_envs_are_split_among_actors_does_not_change_the_statistic(seed):
    """The same 8 env streams through N x K = 1x8, 2x4, 4x2, 8x1, rollouts of 8 or 16 steps,
    sync or async order: one statistic, equal to the reference over all returns."""
    rewards, ends = env_streams(envs=8, steps=96, seed=seed)
    _, mean, var = reference([(rewards, ends, np.arange(8))], GAMMA, 10.0)
    stats = []
    for actors, per_actor in ((1, 8), (2, 4), (4, 2), (8, 1)):
        for rollout in (8, 16):
            for order in ("sync", "async"):
                norm = RewardNormalizer(GAMMA)
                for batch in batches_of(rewards, ends, actors, per_actor, rollout, order, seed):
                    norm(*batch)
                stats.append((float(norm.stat.mean), float(norm.stat.var), float(norm.stat.count)))
    for m, v, c in stats:
        np.testing.assert_allclose(m, mean, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(v, var, rtol=1e-9)
        assert round(c) == rewards.size


def test_state_dict_round_trip_keeps_the_statistic_not_the_accumulators():
    rewards, ends = env_streams(envs=4, steps=32, seed=5)
    norm = RewardNormalizer(GAMMA)
    norm(rewards, ends, np.arange(4))
    state = norm.state_dict()
    again = RewardNormalizer(GAMMA)
    again.load_state_dict(state)
    for key, value in norm.stat.state_dict().items():
        assert torch.equal(again.stat.state_dict()[key], value), key
    assert again.return_std == norm.return_std
    np.testing.assert_array_equal(again.scale(rewards), norm.scale(rewards))
    # a resumed run's actors start new episodes: returns accumulate from 0
    assert again.returns.size == 0
    state["var"].fill_(123.0)  # the saved state is a copy, not the live statistic
    assert float(norm.stat.var) != 123.0
