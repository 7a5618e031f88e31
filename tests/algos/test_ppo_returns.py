"""GAE and V-trace against the textbook formulas, written as explicit sums (not recursions)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asyncrl.algos.ppo.returns import gae, vtrace


def _episode_end(term: np.ndarray, trunc: np.ndarray, s: int, b: int) -> int:
    """Last step of the episode that contains step s of env b, within the rollout."""
    T = term.shape[0]
    for t in range(s, T):
        if term[t, b] or trunc[t, b]:
            return t
    return T - 1


def _next_value(values, term, trunc, tv, t, b) -> float:
    """V of the state after step t: 0 after termination, V(final obs) after truncation."""
    if term[t, b]:
        return 0.0
    if trunc[t, b]:
        return tv[t, b]
    return values[t + 1, b]


def reference_gae(r, values, term, trunc, tv, gamma, lam):
    T, B = r.shape
    adv = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            end = _episode_end(term, trunc, s, b)
            adv[s, b] = sum(
                (gamma * lam) ** (t - s)
                * (r[t, b] + gamma * _next_value(values, term, trunc, tv, t, b) - values[t, b])
                for t in range(s, end + 1)
            )
    return adv, adv + values[:-1]


def reference_vtrace(mu_logp, pi_logp, r, values, term, trunc, tv, gamma, rho_bar, c_bar, lam):
    """IMPALA eq. (1): v_s = V(x_s) + sum_t gamma^(t-s) (prod_{i<t} c_i) rho_t delta_t."""
    T, B = r.shape
    ratio = np.exp(pi_logp - mu_logp)
    rho, c = np.minimum(rho_bar, ratio), lam * np.minimum(c_bar, ratio)
    vs = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            end = _episode_end(term, trunc, s, b)
            total = 0.0
            for t in range(s, end + 1):
                delta = r[t, b] + gamma * _next_value(values, term, trunc, tv, t, b) - values[t, b]
                total += gamma ** (t - s) * np.prod(c[s:t, b]) * rho[t, b] * delta
            vs[s, b] = values[s, b] + total
    adv = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            if term[s, b] or trunc[s, b]:
                nxt = _next_value(values, term, trunc, tv, s, b)
            elif s == T - 1:
                nxt = values[T, b]
            else:
                nxt = vs[s + 1, b]
            adv[s, b] = r[s, b] + gamma * nxt - values[s, b]
    return adv, vs


def _random_rollout(seed: int):
    rng = np.random.default_rng(seed)
    T, B = int(rng.integers(1, 21)), int(rng.integers(1, 6))
    r = rng.normal(size=(T, B))
    values = rng.normal(size=(T + 1, B))
    term = rng.random((T, B)) < 0.15
    trunc = rng.random((T, B)) < 0.15  # sometimes both at once: termination wins
    tv = np.where(trunc, rng.normal(size=(T, B)), 0.0)
    mu = rng.normal(size=(T, B))
    pi = mu + rng.normal(scale=0.7, size=(T, B))  # ratios on both sides of 1
    return r, values, term, trunc, tv, mu, pi


def _t(*arrays):
    return [
        torch.as_tensor(a, dtype=torch.float64) if a.dtype != bool else torch.as_tensor(a)
        for a in arrays
    ]


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (0.9, 1.0), (0.5, 0.0), (1.0, 0.7)])
def test_gae_matches_explicit_sum(seed, gamma, lam):
    r, values, term, trunc, tv, *_ = _random_rollout(seed)
    want_adv, want_ret = reference_gae(r, values, term, trunc, tv, gamma, lam)
    adv, ret = gae(*_t(r, values, term, trunc, tv), gamma, lam)
    torch.testing.assert_close(adv, torch.as_tensor(want_adv))
    torch.testing.assert_close(ret, torch.as_tensor(want_ret))


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize(
    ("gamma", "rho_bar", "c_bar", "lam"),
    [(0.99, 1.0, 1.0, 1.0), (0.9, 2.0, 0.5, 1.0), (0.95, 0.8, 1.0, 0.9), (1.0, 1.0, 1.0, 0.5)],
)
def test_vtrace_matches_impala_equation(seed, gamma, rho_bar, c_bar, lam):
    r, values, term, trunc, tv, mu, pi = _random_rollout(seed)
    want_adv, want_vs = reference_vtrace(
        mu, pi, r, values, term, trunc, tv, gamma, rho_bar, c_bar, lam
    )
    mu_t, pi_t, r_t, v_t, term_t, trunc_t, tv_t = _t(mu, pi, r, values, term, trunc, tv)
    adv, vs = vtrace(mu_t, pi_t, r_t, v_t, term_t, trunc_t, tv_t, gamma, rho_bar, c_bar, lam)
    torch.testing.assert_close(vs, torch.as_tensor(want_vs))
    torch.testing.assert_close(adv, torch.as_tensor(want_adv))


def test_on_policy_vtrace_equals_gae_lambda_one():
    for seed in range(10):
        r, values, term, trunc, tv, mu, _ = _random_rollout(seed)
        args = _t(r, values, term, trunc, tv)
        _, ret = gae(*args, 0.97, 1.0)
        _, vs = vtrace(*_t(mu, mu), *args, 0.97)
        torch.testing.assert_close(vs, ret)


def test_hand_checked_termination_and_truncation():
    # One env, T = 3, rewards 1, 2, 4, values V = [10, 20, 30, 40], gamma 0.5, lambda 1.
    r = np.array([[1.0], [2.0], [4.0]])
    values = np.array([[10.0], [20.0], [30.0], [40.0]])
    none = np.zeros((3, 1), dtype=bool)
    ends = none.copy()
    ends[1] = True
    tv = np.zeros((3, 1))
    # Termination at t=1: nothing after it counts. Return at 0 is 1 + 0.5 * 2 = 2, at 1 it is 2;
    # at 2 a new episode bootstraps from V(x_3): 4 + 0.5 * 40 = 24.
    _, ret = gae(*_t(r, values, ends, none, tv), 0.5, 1.0)
    np.testing.assert_allclose(ret.numpy().ravel(), [2.0, 2.0, 24.0])
    # Truncation at t=1 with V(final obs) = 8: the cut state still had a future worth 0.5 * 8.
    tv[1] = 8.0
    _, ret = gae(*_t(r, values, none, ends, tv), 0.5, 1.0)
    np.testing.assert_allclose(
        ret.numpy().ravel(), [1.0 + 0.5 * (2.0 + 0.5 * 8.0), 2.0 + 0.5 * 8.0, 24.0]
    )


def test_truncation_differs_from_termination_by_the_discounted_bootstrap():
    rng = np.random.default_rng(0)
    T, gamma, lam = 8, 0.9, 0.8
    r, values = rng.normal(size=(T, 1)), rng.normal(size=(T + 1, 1))
    flag = np.zeros((T, 1), dtype=bool)
    flag[5] = True
    tv = np.zeros((T, 1))
    tv[5] = 3.0
    none = np.zeros_like(flag)
    _, ret_term = gae(*_t(r, values, flag, none, tv), gamma, lam)
    _, ret_trunc = gae(*_t(r, values, none, flag, tv), gamma, lam)
    diff = (ret_trunc - ret_term).numpy().ravel()
    want = [(gamma * lam) ** (5 - s) * gamma * 3.0 if s <= 5 else 0.0 for s in range(T)]
    np.testing.assert_allclose(diff, want, rtol=1e-12, atol=1e-12)


def test_vtrace_clipping_matters():
    r, values, term, trunc, tv, mu, _ = _random_rollout(3)
    pi = mu + 2.0  # every ratio e^2 > both clips
    a = vtrace(*_t(mu, pi, r, values, term, trunc, tv), 0.9, 1.0, 1.0)[1]
    b = vtrace(*_t(mu, pi, r, values, term, trunc, tv), 0.9, 5.0, 5.0)[1]
    assert not torch.allclose(a, b)
