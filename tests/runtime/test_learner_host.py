"""The learner host: an algorithm implements its update; the runtime's host does the
iteration's bookkeeping for any of them; Hogwild! and PBT ask for their roles by capability."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from asyncrl.algos import algorithm
from asyncrl.core import Adoptable, SharesParameters
from asyncrl.envs import check_env
from asyncrl.learning.base import LearnerBase
from asyncrl.runtime.hogwild import sharing
from asyncrl.runtime.learners import adoptable
from asyncrl.settings import TrainConfig, resolve, validate


class CountingUpdate(LearnerBase):
    """An algorithm with nothing but an update (no Hogwild! sharing, no adoption): two new
    versions per batch, a figure of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.cfg = SimpleNamespace(algo="counting", on_nonfinite="raise", total_steps=100)
        self.batches: list[int] = []

    def update(self, slots, steps):
        self.batches.append(steps)
        self.version += 2
        return {"loss/made_up": 0.5}

    def iteration_fields(self, steps, seconds):
        return {"own/steps": float(steps)}


def _slot(versions: list[int], steps: int, ended: list[float]) -> SimpleNamespace:
    """What the host reads of a slot: versions [T, K], counts, timings and episode books."""
    returns = np.full(2, np.nan)
    returns[: len(ended)] = ended
    return SimpleNamespace(
        versions=np.array(versions).reshape(-1, 2),
        env_steps=np.array([steps]),
        rollout_seconds=np.array([0.25]),
        wait_seconds=np.array([0.5]),
        ep_returns=returns,
        ep_lengths=np.where(np.isnan(returns), 0, 10),
        actor=np.array([0]),
        terminated=np.zeros((2, 2), bool),
        truncated=np.zeros((2, 2), bool),
    )


def test_the_host_keeps_the_books_of_an_iteration_for_any_update():
    learner = CountingUpdate()
    learner.version = 3
    row = learner.train([_slot([3, 3, 2, 1], 4, [7.0]), _slot([3, 3, 3, 3], 4, [])])
    assert learner.batches == [8]  # the update saw the batch once, with its env steps
    assert (learner.version, learner.env_steps, learner.iterations) == (5, 8, 1)
    assert learner.episode_stats.episodes == 1 and learner.episode_stats.final_return == 7.0
    assert row["loss/made_up"] == 0.5 and row["own/steps"] == 8.0
    assert row["samples"] == 8.0
    assert row["policy_lag_max"] == 2.0  # version 3 at the update's start, acted with 1
    assert row["policy_lag_mean"] == 3 / 8  # lags 0, 0, 1, 2 and four 0
    assert row["rollout_seconds"] == 0.5 and row["actor_wait_seconds"] == 1.0
    assert row["nonfinite_skipped_rollouts"] == row["nonfinite_skipped_steps"] == 0
    assert row["learn_seconds"] == learner.learn_seconds > 0


def test_hogwild_and_pbt_refuse_a_learner_without_the_capability():
    learner = CountingUpdate()
    assert not isinstance(learner, SharesParameters)
    assert not isinstance(learner, Adoptable)
    with pytest.raises(TypeError, match="counting: its learner offers no Hogwild! sharing"):
        sharing(learner)
    with pytest.raises(TypeError, match="counting: its learner offers no adoption"):
        adoptable(learner)


@pytest.mark.parametrize(("algo", "env"), [("ppo", "CartPole-v1"), ("sac", "Pendulum-v1"),
                                           ("dqn", "CartPole-v1")])  # fmt: skip
def test_every_registered_algorithm_offers_hogwild_sharing_and_adoption(algo, env):
    cfg = TrainConfig(env=env, algo=algo, buffer_size=1_000, learning_starts=100)
    validate(cfg, "classic")
    cfg = resolve(cfg, "classic")
    learner = algorithm(algo).learner(cfg, check_env(env))
    try:
        assert sharing(learner) is learner and adoptable(learner) is learner
        assert learner.marks_own is False  # until a population says its slots mark own steps
    finally:
        learner.close()
