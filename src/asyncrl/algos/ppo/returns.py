"""Advantage and value-target estimators: GAE and V-trace.

Both work on time-major tensors of shape [T, B] (T steps of B envs) and share one convention for
episode ends, so the learner never special-cases them:

* ``terminated[t]``: the episode ended at step t by reaching a terminal state. Nothing follows it,
  so the next value is 0.
* ``truncated[t]``: the episode was cut by a time limit at step t. The state it was cut in still
  had a future, so the next value is the value of that final observation, ``trunc_values[t]``
  (computed by whoever saw the final observation; 0 where not truncated).
* otherwise the next value is ``values[t + 1]`` (``values`` has T + 1 rows: the last row is the
  bootstrap value of the observation after the rollout).

At an episode end the recursion is cut: nothing from the next episode leaks backwards.
"""

from __future__ import annotations

import torch


def next_values(
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    trunc_values: torch.Tensor,
) -> torch.Tensor:
    """The value of the state after each step, [T, B], with the episode-end convention above."""
    nxt = values[1:]
    nxt = torch.where(truncated, trunc_values, nxt)
    return torch.where(terminated, torch.zeros_like(nxt), nxt)


def linear_scan(x, carry, reverse: bool = False):
    """``out[t] = x[t] + carry[t] * out[t - 1]`` along axis 0 (``reverse``: ``out[t + 1]``),
    nothing before the first term; torch tensors or numpy arrays. Doubling (Hillis and Steele):
    log2(T) rounds of whole-array ops instead of T Python steps, which cost a PPO iteration on
    64 steps ~0.3 ms and grow with the rollout."""
    out, a = x + 0, carry + 0  # copies, either kind
    step = 1
    while step < x.shape[0]:
        if reverse:  # each term takes on the next `step` terms' sum; the carries multiply
            out[:-step] += a[:-step] * out[step:]
            a[:-step] = a[:-step] * a[step:]
        else:
            out[step:] += a[step:] * out[:-step]
            a[step:] = a[step:] * a[:-step]
        step *= 2
    return out


def _backward_scan(deltas: torch.Tensor, carry: torch.Tensor) -> torch.Tensor:
    """``out[t] = deltas[t] + carry[t] * out[t + 1]`` with ``out[T] = 0``: the recursion both
    estimators share (carry is 0 at an episode end, which cuts it)."""
    return linear_scan(deltas, carry, reverse=True)


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    trunc_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016).

    Returns ``(advantages, returns)``, both [T, B]; ``returns = advantages + values[:-1]`` are the
    value targets (TD(lambda) returns).
    """
    done = terminated | truncated
    deltas = (
        rewards + gamma * next_values(values, terminated, truncated, trunc_values) - values[:-1]
    )
    adv = _backward_scan(deltas, gamma * lam * (~done).to(rewards.dtype))
    return adv, adv + values[:-1]


def seat_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    trunc_values: torch.Tensor,
    own: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over each seat's own steps (``own`` [T, B]: the steps its agent acted), for seats of a
    multi-agent env that wait their turn: a step's reward is every reward the seat received
    from it until its next own step (a loss at the opponent's move), and its next value the
    value at that step (``values[T]`` after the rollout), unless the episode ended between
    (the episode-end convention above). Steps not own get 0 and are not read.

    Returns ``(advantages, returns)`` as :func:`gae`."""
    T, B = rewards.shape
    adv = torch.zeros_like(rewards)
    next_value, next_adv = values[T], torch.zeros_like(values[T])
    received = torch.zeros_like(values[T])  # rewards after the seat's last step seen
    ended = torch.zeros_like(terminated[0])  # an episode end before its next own step
    end_value = torch.zeros_like(values[T])  # the next value there (truncation: V(final))
    for t in range(T - 1, -1, -1):
        done = terminated[t] | truncated[t]
        received = torch.where(done, rewards[t], rewards[t] + received)
        cut = truncated[t] & ~terminated[t]
        end_value = torch.where(done, torch.where(cut, trunc_values[t], 0.0), end_value)
        ended = ended | done
        nxt = torch.where(ended, end_value, next_value)
        delta = received + gamma * nxt - values[t]
        a = delta + gamma * lam * torch.where(ended, 0.0, next_adv)
        mine = own[t]
        adv[t] = torch.where(mine, a, 0.0)
        next_value = torch.where(mine, values[t], next_value)
        next_adv = torch.where(mine, a, next_adv)
        received = torch.where(mine, 0.0, received)
        ended = ended & ~mine
    return adv, adv + values[:-1]


def vtrace(
    behaviour_logp: torch.Tensor,
    target_logp: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    trunc_values: torch.Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace off-policy targets (Espeholt et al. 2018, IMPALA, eq. 1 and section 4.2).

    ``v_s = V(x_s) + sum_{t>=s} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t`` with
    ``delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))``, ``rho_t = min(rho_bar, pi/mu)`` and
    ``c_i = lam * min(c_bar, pi/mu)``; the sum stops at the end of an episode.

    Returns ``(advantages, vs)``: ``vs`` are the value targets and the advantages are
    ``r_s + gamma v_{s+1} - V(x_s)`` (IMPALA's policy-gradient advantage *without* its rho_s
    factor: the PPO surrogate that consumes them already weights each sample by pi/mu, so
    multiplying by rho_s again would count the importance weight twice).
    """
    done = terminated | truncated
    ratio = torch.exp(target_logp - behaviour_logp)
    rho = torch.clamp(ratio, max=rho_bar)
    c = lam * torch.clamp(ratio, max=c_bar)
    nxt = next_values(values, terminated, truncated, trunc_values)
    deltas = rho * (rewards + gamma * nxt - values[:-1])
    vs = _backward_scan(deltas, gamma * c * (~done).to(rewards.dtype)) + values[:-1]
    # v_{s+1}: the V-trace target of the next state inside the episode; at an episode end the
    # same bootstrap as above (0 after termination, V(final obs) after truncation).
    vs_next = torch.cat([vs[1:], values[-1:]], dim=0)
    vs_next = torch.where(done, nxt, vs_next)
    adv = rewards + gamma * vs_next - values[:-1]
    return adv, vs
