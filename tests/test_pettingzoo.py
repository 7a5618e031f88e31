"""PettingZoo envs as an actor's rows (envs.pettingzoo): seats, who acts, what a waiting seat
receives, refusals before anything starts, a run that never takes an illegal move, and
play against a uniform random player."""

from __future__ import annotations

import numpy as np
import pytest

import asyncrl
from asyncrl.config import ConfigError
from asyncrl.envs import check_env, make_vector_env
from asyncrl.envs.pettingzoo import SeatVectorEnv, legal, play_vs_random
from asyncrl.evaluate import evaluate

pytest.importorskip("pettingzoo")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

C4 = "pettingzoo:pettingzoo.classic.connect_four_v3"


def test_connect_four_is_two_seats_of_a_masked_discrete_policy():
    spec = check_env(C4)
    assert (spec.agents, spec.action_mask, spec.discrete, spec.n_actions) == (2, True, True, 7)
    assert spec.obs_shape == (6 * 7 * 2 + 7,)


def test_one_seat_acts_per_game_and_the_loser_hears_of_the_loss_at_the_winners_move():
    envs = make_vector_env(C4, 4)
    assert isinstance(envs, SeatVectorEnv)
    obs, _ = envs.reset(seed=[10, 11, 12, 13])
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(300):
        active = envs.active.copy()
        assert active.reshape(2, 2).sum(1).tolist() == [1, 1]  # one mover per game
        assert (obs[~active, -7:] == 0).all()  # a waiting seat has no legal move
        actions = np.zeros(4, np.int64)
        for r in np.flatnonzero(active):
            actions[r] = rng.choice(legal(obs[r], 7))
        obs, reward, terminated, truncated, info = envs.step(actions)
        assert not truncated.any()
        for g in range(2):
            seats = slice(2 * g, 2 * g + 2)
            if terminated[seats].any():  # both seats of a game end together
                ends += 1
                assert terminated[seats].all()
                if reward[seats].any():  # a win: the mover +1, the waiting seat -1 at once
                    mover = 2 * g + int(np.flatnonzero(active[seats])[0])
                    other = 2 * g + 1 - (mover - 2 * g)
                    assert (reward[mover], reward[other]) == (1.0, -1.0)
                # the next game starts with an empty board, the first player to move
                assert (obs[seats, :-7] == 0).all() and envs.active[2 * g]
                assert info["final_obs"][seats, :-7].sum() > 0
            else:
                assert (reward[seats] == 0).all()
    assert ends >= 5
    envs.close()


@pytest.mark.parametrize(
    "settings, names",
    [
        ({"env": "pettingzoo:pettingzoo.classic.no_such_game_v0"}, "env: cannot import"),
        ({"env": C4, "envs_per_actor": 3}, "envs_per_actor:"),
        ({"env": C4, "policies": 2, "envs_per_actor": 4}, "policies:"),
        ({"env": C4, "recurrent": "gru"}, "recurrent:"),
        ({"env": C4, "correction": "vtrace"}, "correction:"),
        ({"env": C4, "algo": "dqn"}, "algo:"),
    ],
)
def test_what_a_multi_agent_run_cannot_use_is_refused_in_one_line_before_it_starts(
    settings, names, tmp_path
):
    run_dir = tmp_path / "r"
    with pytest.raises(ConfigError) as e:
        asyncrl.train(total_steps=64, run_dir=str(run_dir), progress=False, **settings)
    assert str(e.value).startswith(names) and "\n" not in str(e.value)
    assert not run_dir.exists()


def test_the_random_player_wins_as_often_as_it_loses_against_itself():
    rng = np.random.default_rng(5)
    rates = play_vs_random(C4, lambda row: int(rng.choice(legal(row, 7))), games=200, seed=1)
    assert sum(rates.values()) == pytest.approx(1.0)
    assert abs(rates["win"] - rates["loss"]) < 0.2  # 200 games: ~2.8 standard errors


def test_a_training_run_never_takes_an_illegal_move(tmp_path, monkeypatch):
    """Every action of every active seat, at every step of a run, checked against the mask
    its observation carried (the inline backend: the actor steps in this process)."""
    seen = {"moves": 0, "illegal": 0}
    step = SeatVectorEnv.step

    def checked(self, actions):
        for r in np.flatnonzero(self.active):
            seen["moves"] += 1
            seen["illegal"] += actions[r] not in legal(self.obs[r], self.n_actions)
        return step(self, actions)

    monkeypatch.setattr(SeatVectorEnv, "step", checked)
    result = asyncrl.train(
        C4,
        total_steps=4096,
        mode="sync",
        backend="inline",
        actors=1,
        envs_per_actor=8,
        rollout=64,
        minibatch_size=64,
        epochs=2,
        run_dir=str(tmp_path / "run"),
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        seed=3,
    )
    assert seen["illegal"] == 0
    # samples are the moves seats made: one per game and step (half the rows)
    assert seen["moves"] == result.summary["env_steps"] >= 4096
    # the final policy against a random player: in the summary, and as asyncrl eval plays it
    rates = [result.summary[f"{k}_rate_vs_random"] for k in ("win", "draw", "loss")]
    assert sum(rates) == pytest.approx(1.0)
    played = evaluate(result.run_dir, episodes=20, seed=7)
    assert played["games"] == 20 and played["env_steps"] == result.summary["env_steps"]
    assert played == evaluate(result.run_dir, episodes=20, seed=7)  # seeded: it repeats


def test_a_parallel_envs_agents_act_together_and_a_done_one_waits_for_the_next_game():
    envs = make_vector_env("pettingzoo:parallel_game", 4)  # tests/parallel_game.py, 2 games
    assert not envs.masked and check_env("pettingzoo:parallel_game").obs_shape == (2,)
    envs.reset(seed=[0, 1, 2, 3])
    for t in range(1, 11):
        step_of_game = (t - 1) % 5 + 1
        assert envs.active.tolist() == [True, step_of_game <= 2] * 2
        obs, reward, terminated, _, info = envs.step(np.array([1, 2, 1, 2]))
        # a seat is rewarded only while its agent plays; b's episode ends at its step 2
        assert reward.tolist() == [1.0, 2.0 * (step_of_game <= 2)] * 2
        assert terminated.tolist() == [step_of_game == 5, step_of_game == 2] * 2
        if step_of_game == 5:  # a's end: the game starts anew for both seats
            assert info["final_obs"][0].tolist() == [5.0, 1.0] and (obs == 0).all()
    envs.close()


@pytest.mark.slow
def test_self_play_on_connect_four_beats_a_random_player_most_of_the_time(tmp_path):
    """What this slice reaches, not issue #55's goal (>= 95% of 200 games within 200k steps,
    not reached: its guide's table). No flag but the env, a budget and the seed: seed 1
    measured 0.865 at 51,200 steps and stayed near it up to 200k (docs: Guides, multi-agent);
    0.8 is 2.7 standard errors of 200 games below it. Half the games as the second player."""
    result = asyncrl.train(
        C4,
        total_steps=50_000,
        mode="sync",
        seed=1,
        run_dir=str(tmp_path / "run"),
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
    )
    assert result.summary["win_rate_vs_random"] >= 0.8
