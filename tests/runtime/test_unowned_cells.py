"""--policy-mapping random: a policy's slot holds every env's steps, its own marked ``own``; the
other cells keep whatever an earlier rollout left there (a NaN that rollout was skipped for,
with --on-nonfinite skip). None of that may reach this policy's returns, statistics or update,
nor may the learner write into the slot."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asyncrl.algos import algorithm
from asyncrl.algos.ppo.learner import PPOLearner
from asyncrl.envs import check_env
from asyncrl.runtime.transport import SlotStore, rollout_layout
from asyncrl.settings import TrainConfig, policy_config, resolve, validate

T, K = 16, 4


def _config(env: str, correction: str):
    """Policy 0's settings of a population a run could have (norm_reward: refused with the
    random mapping)."""
    run = TrainConfig(
        env=env,
        policies=2,
        policy_mapping="random",
        mode="async",
        envs_per_actor=K,
        rollout=T,
        minibatch_size=16,
        epochs=1,
        norm_obs=True,
        correction=correction,
        norm_reward=False,
        on_nonfinite="skip",
    )
    validate(run, "classic")
    return policy_config(resolve(run, "classic"), 0)


def _ownership() -> tuple[np.ndarray, np.ndarray]:
    """(own, terminated) [T, K], whole episodes to a policy as the actor gives them: env 0 all
    this policy's; env 1 until its episode ends at step 5; env 2 from step 9 (another policy's
    episode ended at 8); env 3 all, its episode ending at the last step (the row-T observation
    then belongs to whichever policy the env drew next)."""
    own = np.zeros((T, K), dtype=bool)
    terminated = np.zeros((T, K), dtype=bool)
    own[:, 0] = True
    own[:6, 1], terminated[5, 1] = True, True
    own[9:, 2], terminated[8, 2] = True, True
    own[:, 3], terminated[T - 1, 3] = True, True
    return own, terminated


def _fill(slot, spec, unowned: float) -> None:
    """The same owned cells in every slot; ``unowned`` in every float cell of the others (and
    in the row-T observations of envs 1 and 3, which this policy does not act on there)."""
    rng = np.random.default_rng(0)
    own, terminated = _ownership()
    slot.obs[:] = rng.standard_normal(slot.obs.shape).astype(np.float32)
    if spec.discrete:
        slot.actions[:] = rng.integers(0, spec.n_actions, slot.actions.shape)
    else:
        slot.actions[:] = rng.uniform(-1, 1, slot.actions.shape).astype(np.float32)
    slot.logp[:] = rng.uniform(-2, -0.1, slot.logp.shape).astype(np.float32)
    slot.rewards[:] = rng.standard_normal(slot.rewards.shape).astype(np.float32)
    slot.terminated[:] = terminated
    slot.truncated[:] = False
    slot.trunc_values[:] = 0.0
    slot.own[:] = own
    for name in ("obs", "logp", "rewards", "trunc_values") + (
        () if spec.discrete else ("actions",)
    ):
        getattr(slot, name)[:T][~own] = unowned
    slot.obs[T, [1, 3]] = unowned
    slot.versions[:] = 0
    slot.ep_returns[:] = np.nan
    slot.ep_lengths[:] = 0
    slot.actor[0], slot.env_steps[0] = 0, int(own.sum())
    slot.rollout_seconds[0] = slot.wait_seconds[0] = 0.0


CASES = [("CartPole-v1", "none"), ("CartPole-v1", "vtrace"), ("Pendulum-v1", "vtrace")]


@pytest.mark.parametrize(("env", "correction"), CASES)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_what_a_policy_does_not_own_never_reaches_its_update(env, correction, bad):
    """A slot whose unowned cells hold ``bad`` trains exactly as one whose unowned cells hold
    a finite value: the rollout is not skipped, no step is, the owned advantages and the new
    weights and observation statistics are equal; the slot is as written afterwards."""
    cfg = _config(env, correction)
    spec = check_env(cfg.env)
    store = SlotStore(rollout_layout(cfg, spec, algorithm(cfg.algo)), 2, shared=False)
    poisoned, finite = store.slots
    _fill(poisoned, spec, bad)
    _fill(finite, spec, 7.0)
    written = {name: getattr(poisoned, name).copy() for name in poisoned.names}
    own = torch.from_numpy(poisoned.own)

    learners = [PPOLearner(cfg, spec) for _ in range(2)]
    for learner in learners:
        learner.marks_own = True  # as the population tells it under the random mapping
    start = learners[0].flat.tensors[0].clone()
    advantages = []
    for learner, slot in zip(learners, (poisoned, finite), strict=True):
        adv = learner.algo.targets(learner.rollout([slot]))["adv"].view(T, K)
        advantages.append(adv[own])
    bad_adv = int((~torch.isfinite(advantages[0])).sum())
    assert bad_adv == 0, f"{bad_adv} of {advantages[0].numel()} owned advantages not finite"
    assert torch.equal(advantages[0], advantages[1])

    stats = [
        learner.train([slot]) for learner, slot in zip(learners, (poisoned, finite), strict=True)
    ]
    assert stats[0]["nonfinite_skipped_rollouts"] == 0
    assert stats[0]["nonfinite_skipped_steps"] == 0
    for key in ("loss/policy", "loss/value", "loss/entropy"):
        assert np.isfinite(stats[0][key]), (key, stats[0][key])
        assert stats[0][key] == stats[1][key], key
    weights = [learner.flat.tensors for learner in learners]
    assert not torch.equal(weights[0][0], start)  # the update was applied
    for a, b in zip(*weights, strict=True):
        assert torch.equal(a, b)  # the weights and the observation statistics
    for name, before in written.items():
        assert np.array_equal(getattr(poisoned, name), before, equal_nan=True), name
    store.close()


@pytest.mark.parametrize(
    ("t", "k", "found"),
    [
        (3, 0, True),  # an owned step
        (T, 0, True),  # the observation after the rollout of an episode this policy goes on in
        (T, 2, True),  # the same, of an episode it began inside the rollout
        (7, 1, False),  # another policy's step
        (T, 1, False),  # the row-T observation of an env another policy acts on
        (T, 3, False),  # that of an env whose episode (this policy's) ended at the last step
    ],
)
def test_the_guard_looks_at_the_cells_a_policy_reads_and_only_at_those(t, k, found):
    """A NaN observation is found in a cell this policy's returns read, and in no other (the
    actor writes the row-T observation of an env that drew a policy again as row 0 of the next
    rollout, where the policy that acts on it checks it)."""
    from asyncrl.learning.guard import nonfinite_in_rollout

    cfg = _config("CartPole-v1", "none")
    spec = check_env(cfg.env)
    store = SlotStore(rollout_layout(cfg, spec, algorithm(cfg.algo)), 1, shared=False)
    slot = store.slots[0]
    _fill(slot, spec, 0.0)
    slot.obs[t, k, 1] = np.nan
    where = nonfinite_in_rollout(slot, ("obs", "rewards"))
    if found:
        assert (
            where
            == f"actor 0 env {k} wrote a non-finite observation (nan) at step {t} of a rollout"
        )
    else:
        assert where is None
    store.close()


@pytest.mark.parametrize("seats", [False, True])
def test_the_guard_finds_a_nan_reward_a_waiting_seat_receives(seats):
    """A multi-agent env's seat receives rewards while it waits (the loser's -1 arrives at the
    winner's move) and its update reads them: a NaN there is found. Under the random mapping
    the same cell is another policy's, stale, and not read: it is not."""
    from types import SimpleNamespace

    from asyncrl.learning.guard import nonfinite_in_rollout

    own = np.zeros((T, K), bool)
    own[::2, 0] = True  # seat 0 acts at even steps, waits at odd ones
    slot = SimpleNamespace(
        actor=np.zeros(1, np.int64),
        own=own,
        terminated=np.zeros((T, K), bool),
        truncated=np.zeros((T, K), bool),
        obs=np.zeros((T + 1, K, 3), np.float32),
        rewards=np.zeros((T, K), np.float32),
    )
    slot.rewards[5, 0] = np.nan  # a step seat 0 waited
    where = nonfinite_in_rollout(
        slot, ("obs", "rewards"), seats_whole=("rewards",) if seats else None
    )
    if seats:
        assert where == "actor 0 env 0 wrote a non-finite reward (nan) at step 5 of a rollout"
    else:
        assert where is None
