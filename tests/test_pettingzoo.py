"""PettingZoo envs as an actor's rows (envs.pettingzoo): seats, who acts, what a waiting seat
receives, refusals before anything starts, a run that never takes an illegal move, and
play against a uniform random player and the look-ahead player; DQN on seats."""

from __future__ import annotations

import functools
import json
import sys

import numpy as np
import pytest

import asyncrl
from asyncrl.cli import main
from asyncrl.config import ConfigError
from asyncrl.envs import check_env, env_family, make_vector_env
from asyncrl.envs.pettingzoo import (
    SeatVectorEnv,
    check_opponent,
    legal,
    lookahead_move,
    play_vs,
    play_vs_random,
)
from asyncrl.evaluate import evaluate
from asyncrl.runtime.trainer import prepare
from asyncrl.settings import FIELDS, PRESET_FIELDS, TrainConfig

pytest.importorskip("pettingzoo")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

C4 = "pettingzoo:pettingzoo.classic.connect_four_v3"


def test_connect_four_is_two_seats_of_a_masked_discrete_policy():
    spec = check_env(C4)
    assert (spec.agents, spec.action_mask, spec.discrete, spec.n_actions) == (2, True, True, 7)
    assert spec.obs_shape == (6 * 7 * 2 + 7,)
    assert spec.games  # a two-player game: a run's summary plays its policy against opponents


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
        ({"env": C4, "policies": 3, "envs_per_actor": 4}, "policies:"),
        # a population's pool starts with a snapshot of each policy
        ({"env": C4, "policies": 3, "opponents": "pool", "pool_size": 2}, "pool_size:"),
        ({"env": C4, "algo": "dqn", "policies": 2}, "policies:"),
        ({"env": C4, "recurrent": "gru"}, "recurrent:"),
        ({"env": C4, "correction": "vtrace"}, "correction:"),
        ({"env": C4, "algo": "dqn", "n_step": 3, "rollout": 4, "mode": "async"}, "n_step:"),
        ({"env": C4, "algo": "dqn", "replay_layout": "frames"}, "replay_layout:"),
        ({"env": C4, "algo": "sac"}, "algo:"),
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


def _board(mine=(), theirs=()) -> np.ndarray:
    """A flat, masked connect-four observation: the mover's pieces and the opponent's as
    (row, column), row 5 the bottom; legal moves the columns not full."""
    board = np.zeros((6, 7, 2), np.float32)
    for plane, cells in ((0, mine), (1, theirs)):
        for r, c in cells:
            board[r, c, plane] = 1
    mask = (board[0].sum(-1) == 0).astype(np.float32)
    return np.concatenate([board.reshape(-1), mask])


def test_the_look_ahead_player_wins_where_it_can_and_blocks_where_it_must():
    rng = np.random.default_rng(0)
    # three of its own in the bottom row, and the opponent three in column 6: it wins
    row = _board(mine=[(5, 0), (5, 1), (5, 2)], theirs=[(5, 6), (4, 6), (3, 6)])
    assert all(lookahead_move(row, rng) == 3 for _ in range(20))
    # a diagonal: (5, 0), (4, 1), (3, 2) and (2, 3) once column 3 holds three pieces
    row = _board(
        mine=[(5, 0), (4, 1), (3, 2), (5, 3)],
        theirs=[(5, 1), (5, 2), (4, 2), (4, 3), (3, 3), (5, 5)],
    )
    assert lookahead_move(row, rng) == 3
    # no win of its own; the opponent threatens four in column 5: it blocks
    row = _board(mine=[(5, 0), (5, 1)], theirs=[(5, 5), (4, 5), (3, 5)])
    assert all(lookahead_move(row, rng) == 5 for _ in range(20))
    # neither: uniform among the legal moves (a full column is never chosen)
    row = _board(mine=[(r, 2) for r in range(0, 6, 2)], theirs=[(r, 2) for r in range(1, 6, 2)])
    moves = {lookahead_move(row, rng) for _ in range(200)}
    assert moves == {0, 1, 3, 4, 5, 6}


def test_the_look_ahead_player_beats_the_random_player_most_of_the_time():
    """100 games, half as the first player (seed 0: measured 0.95 wins, 0.05 losses; seeds 1
    and 2: 0.93, 0.96); 0.85 is 4.5 standard errors below."""
    rng = np.random.default_rng(100)
    rates = play_vs(C4, lambda row: lookahead_move(row, rng), "random", games=100, seed=0)
    assert rates["win"] >= 0.85 and rates["loss"] <= 0.1
    # and the random player against it, as asyncrl eval --opponent lookahead plays it
    rng = np.random.default_rng(8)
    rates = play_vs(C4, lambda row: int(rng.choice(legal(row, 7))), "lookahead", 100, seed=0)
    assert rates["loss"] >= 0.85


@pytest.mark.parametrize(
    "env, opponent, says",
    [
        ("pettingzoo:parallel_game", "lookahead", "opponent: lookahead plays connect four only"),
        (C4, "minimax", "opponent: 'minimax'; allowed: random, lookahead"),
    ],
)
def test_an_opponent_that_cannot_play_the_game_is_refused_in_one_line(env, opponent, says):
    with pytest.raises(ConfigError) as e:
        check_opponent(env, opponent)
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_a_single_agent_run_is_evaluated_without_an_opponent(tmp_path, capsys):
    run = tmp_path / "run"
    asyncrl.train(
        "CartPole-v1",
        total_steps=256,
        backend="inline",
        actors=1,
        envs_per_actor=4,
        rollout=32,
        run_dir=str(run),
        progress=False,
        tensorboard=False,
    )
    capsys.readouterr()
    assert main(["eval", str(run), "--opponent", "random"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asyncrl: error: opponent: CartPole-v1 is a single-agent env")
    assert err.count("\n") == 1


def _count_illegal_moves(monkeypatch) -> dict[str, int]:
    """Counts of every active seat's moves and of those its observation's mask forbade, over
    every step the actors' seat envs take from now on (in this process)."""
    seen = {"moves": 0, "illegal": 0}
    step = SeatVectorEnv.step

    def checked(self, actions):
        for r in np.flatnonzero(self.active):
            seen["moves"] += 1
            seen["illegal"] += actions[r] not in legal(self.obs[r], self.n_actions)
        return step(self, actions)

    monkeypatch.setattr(SeatVectorEnv, "step", checked)
    return seen


def test_a_training_run_never_takes_an_illegal_move(tmp_path, monkeypatch):
    """Every action of every active seat, at every step of a run, checked against the mask
    its observation carried (the inline backend: the actor steps in this process)."""
    seen = _count_illegal_moves(monkeypatch)
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
        opponents="self",  # every seat the learner's: the budget counts every move
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


def test_eval_video_records_the_games_it_counts(tmp_path, capsys):
    """asyncrl eval --video on a game: the same games as without it, as a GIF of a frame after
    each game's start and each move (connect four renders 2 frames a second)."""
    from PIL import Image, ImageSequence

    run = tmp_path / "run"
    asyncrl.train(
        C4, total_steps=512, mode="sync", backend="inline", actors=1, envs_per_actor=4,
        rollout=32, epochs=1, run_dir=str(run), progress=False, tensorboard=False, seed=3,
    )  # fmt: skip
    video = tmp_path / "games.gif"
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2", "--seed", "7", "--video", str(video)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert json.loads(out[-1]) == evaluate(run, episodes=2, seed=7)  # the same games
    with Image.open(video) as gif:
        assert gif.format == "GIF" and gif.info["duration"] == 500
        frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(gif)]
    assert out[-2] == f"video: {video} ({len(frames)} frames)"
    # two games of 7 to 42 moves; the second starts on the first's empty board
    assert 2 * (7 + 1) <= len(frames) <= 2 * (42 + 1)
    starts = [k for k, f in enumerate(frames) if np.array_equal(f, frames[0])]
    assert len(starts) == 2 and starts[1] >= 8
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file


def test_a_population_plays_itself_each_policy_learning_from_its_own_seats(tmp_path, monkeypatch):
    """--policies 2 on connect four: each game's seats drawn among the two policies (async: a
    population's random mapping), no illegal move, and each policy's learner trained on the
    moves of its own seats (the summary's per-policy steps add up to the run's)."""
    seen = _count_illegal_moves(monkeypatch)
    result = asyncrl.train(
        C4,
        policies=2,
        policy_mapping="random",
        total_steps=4096,
        mode="async",
        backend="inline",
        actors=2,
        envs_per_actor=4,
        rollout=32,
        minibatch_size=32,
        epochs=2,
        run_dir=str(tmp_path / "run"),
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        seed=1,
    )
    assert seen["illegal"] == 0 and seen["moves"] >= 4096
    s = result.summary
    steps = [p["env_steps"] for p in s["population"]]
    assert all(n > 1000 for n in steps) and sum(steps) == s["env_steps"]
    assert 0 <= s["win_rate_vs_random"] <= 1  # the population's best plays the random player


def test_a_two_player_game_takes_the_game_preset_and_what_is_given_wins():
    """Connect four is told a game once its env is made (spec.games): PPO's preset plays it
    against a pool of its snapshots, in async with the least lag; a parallel env is not a
    game. A setting given wins; a population plays itself by its mapping (a pool of a
    population is one asked for: --opponents pool)."""
    assert env_family(C4) == "generic"  # from the registration alone
    assert env_family(C4, check_env(C4)) == "game"
    assert env_family("pettingzoo:parallel_game", check_env("pettingzoo:parallel_game")) != "game"
    run = prepare(TrainConfig(env=C4, progress=False))
    names = ("opponents", "pool_size", "snapshot_every", "pool_random")
    values = {n: getattr(run.cfg, n) for n in names}
    assert run.cfg.preset == "game" and values == {
        "opponents": "pool",
        "pool_size": 64,
        "snapshot_every": 5,
        "pool_random": 0.25,
    }
    assert (run.cfg.mode, run.cfg.max_batches_waiting, run.cfg.total_steps) == ("async", 0, 100_000)
    assert (run.cfg.gamma, run.cfg.ent_coef, run.cfg.rollouts_per_batch) == (0.8, 0.01, 1)
    assert run.lines[0].startswith("asyncrl: preset game (auto: " + C4)
    assert "opponents pool" in run.lines[0] and "max_batches_waiting 0" in run.lines[0]
    # a sync run does not read max_batches_waiting: its line does not show it
    sync = prepare(TrainConfig(env=C4, mode="sync", progress=False))
    assert sync.cfg.max_batches_waiting == 0 and "opponents pool" in sync.lines[0]
    assert "max_batches_waiting" not in sync.lines[0]
    given = TrainConfig(env=C4, opponents="self", max_batches_waiting=1, gamma=0.99, progress=False)
    cfg = prepare(given).cfg
    assert (cfg.opponents, cfg.max_batches_waiting, cfg.gamma) == ("self", 1, 0.99)
    population = prepare(TrainConfig(env=C4, policies=2, progress=False)).cfg
    assert population.opponents == "self" and population.rollouts_per_batch == 2
    asked = TrainConfig(env=C4, policies=2, opponents="pool", progress=False)
    assert prepare(asked).cfg.opponents == "pool"
    dqn = prepare(TrainConfig(env=C4, algo="dqn", progress=False)).cfg
    generic = prepare(TrainConfig(env=C4, algo="dqn", preset="generic", progress=False)).cfg
    assert dqn.preset == "game"
    read = [n for n in PRESET_FIELDS if {"dqn", "run"} & set(FIELDS[n].metadata["owners"])]
    assert {n: getattr(dqn, n) for n in read} == {n: getattr(generic, n) for n in read}


def test_seats_filled_by_a_preset_make_whole_games_and_seats_given_must():
    """A preset's 8 envs per actor on an env of three agents: 9 seats (3 games), said on the
    start-up line; 8 given is refused in one line before anything starts."""
    trio = "pettingzoo:trio_game"  # tests/trio_game.py
    run = prepare(TrainConfig(env=trio, progress=False))
    assert run.cfg.envs_per_actor == 9
    assert "envs_per_actor 9 (whole games of 3 agents)" in run.lines[0]
    assert prepare(TrainConfig(env=trio, envs_per_actor=6, progress=False)).cfg.envs_per_actor == 6
    with pytest.raises(ConfigError) as e:
        prepare(TrainConfig(env=trio, envs_per_actor=8, progress=False))
    assert str(e.value).startswith("envs_per_actor: ") and "multiples of 3" in str(e.value)
    assert prepare(TrainConfig(env=C4, progress=False)).cfg.envs_per_actor == 8  # whole already


def test_a_value_a_named_preset_filled_is_refused_as_the_presets_and_a_given_one_as_given():
    with pytest.raises(ConfigError) as e:
        prepare(TrainConfig(env="CartPole-v1", preset="game", progress=False))
    said = str(e.value)
    assert said.startswith("preset: game sets opponents pool, and pool plays the learner")
    assert said.endswith("; give --opponents or another preset") and "\n" not in said
    with pytest.raises(ConfigError) as e:
        prepare(TrainConfig(env="CartPole-v1", opponents="pool", progress=False))
    assert str(e.value).startswith("opponents: pool plays the learner")


def test_dqn_resolves_on_connect_four_with_its_generic_preset():
    prepared = prepare(TrainConfig(env=C4, algo="dqn", total_steps=1000, progress=False))
    assert prepared.spec.action_mask and prepared.spec.agents == 2
    assert prepared.cfg.n_step == 1 and prepared.cfg.rollout == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_dqn_run_never_takes_an_illegal_move(tmp_path, monkeypatch, capsys, mode):
    """As the PPO run above, with DQN: epsilon-greedy with epsilon near 1 early on, so most
    moves are random ones, drawn among the legal moves only; greedy ones are legal too (the
    final policy's games against the random and the look-ahead players, in the summary)."""
    seen = _count_illegal_moves(monkeypatch)
    result = asyncrl.train(
        C4,
        algo="dqn",
        total_steps=3000,
        mode=mode,
        backend="inline",
        actors=1,
        envs_per_actor=8,
        learning_starts=500,
        run_dir=str(tmp_path / "run"),
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        seed=3,
        **({"rollout": 4} if mode == "async" else {}),
    )
    assert seen["illegal"] == 0 and seen["moves"] >= 3000
    summary = result.summary
    assert summary["seat_transitions_broken"] == 0  # each slot goes on from its actor's last
    assert summary["gradient_steps"] > 200  # replay ratio 0.1 of ~2,500 moves past 500
    assert sum(summary[f"{k}_rate_vs_random"] for k in ("win", "draw", "loss")) == pytest.approx(1)
    # connect four: the summary plays the look-ahead player too
    vs = [summary[f"{k}_rate_vs_lookahead"] for k in ("win", "draw", "loss")]
    assert sum(vs) == pytest.approx(1.0)
    if mode == "sync":  # asyncrl eval plays the one it is told to, and says which
        assert (
            main(["eval", str(result.run_dir), "--opponent", "lookahead", "--episodes", "10"]) == 0
        )
        line = capsys.readouterr().out.splitlines()[-2]
        assert line.startswith("win ") and line.endswith(
            "over 10 games against the look-ahead player"
        )
        assert main(["eval", str(result.run_dir), "--episodes", "10"]) == 0
        assert capsys.readouterr().out.splitlines()[-2].endswith("against a uniform random player")


def test_a_parallel_envs_agents_act_together_and_a_done_one_waits_for_the_next_game():
    envs = make_vector_env("pettingzoo:parallel_game", 4)  # tests/parallel_game.py, 2 games
    spec = check_env("pettingzoo:parallel_game")
    assert not envs.masked and spec.obs_shape == (2,) and not spec.games
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


def test_mpe_simple_spread_is_three_seats_acting_together_until_its_25_cycles_end():
    """MPE (mpe2, in the multiagent extra), the parallel env benchmarks/mpe.py measures: its
    three agents act at every step and their episodes end together at max_cycles."""
    pytest.importorskip("mpe2")
    env = "pettingzoo:mpe2.simple_spread_v3"
    spec = check_env(env)
    assert (spec.agents, spec.action_mask, spec.n_actions, spec.obs_shape) == (3, False, 5, (18,))
    assert not spec.games  # cooperative: no opponent to play against
    envs = make_vector_env(env, 6)  # 2 games
    envs.reset(seed=list(range(6)))
    for t in range(1, 26):
        assert envs.active.all()
        _, reward, terminated, truncated, _ = envs.step(np.zeros(6, dtype=np.int64))
        assert (reward < 0).all()  # the landmarks' distances to their nearest agents
        assert (terminated | truncated).tolist() == [t == 25] * 6
    envs.close()


def test_a_parallel_env_trains_to_the_end_with_no_games_against_a_player(tmp_path):
    """A parallel env has no turns to play against a random or look-ahead player: its run ends
    as any run does (it raised at the end, after its checkpoint, when the games were played)."""
    result = asyncrl.train(
        env="pettingzoo:parallel_game",
        total_steps=512,
        backend="inline",
        mode="sync",
        seed=1,
        progress=False,
        tensorboard=False,
        run_dir=str(tmp_path / "run"),
    )
    assert result.summary["env_steps"] >= 512 and result.summary["episodes"] > 0
    assert not any(k.startswith("win_rate_vs") for k in result.summary)


# the lowest win rate against the random player to hold, per mode (below)
GAME_PRESET_FLOOR = {"sync": 0.90, "async": 0.90}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_game_preset_beats_a_random_player_most_of_the_time(tmp_path, mode):
    """No flag but the env, the mode and the seed: the game preset's self-play against its
    pool (and the random player in a quarter of the games), 100k of the learner's moves
    (about 200k moves in all, the issue's budget). What it reaches, not issue #55's goal
    (>= 95% of 200 games on every seed), which it misses on some seeds (its guide's table):
    sync seeds 1-5 won 0.93, 0.95, 0.94, 0.95, 0.965 on the Intel Xeon, seed 1 (this test's)
    0.92 on the AMD EPYC. The async case runs inline, on the emulated schedule (a lag of one
    version with the preset's 2 actors), which repeats on one kind of CPU (seed 1: 0.92 on
    the EPYC); on the process backend the schedule decides the run and one CI run ended at
    0.87 (the tests page). A repeating run leaves chance out; the floor leaves room for another
    CPU's rounding (seed 1, sync: 0.93 on the Xeon, 0.92 on the EPYC). Half the games as the
    second player."""
    result = asyncrl.train(
        C4,
        mode=mode,
        seed=1,
        run_dir=str(tmp_path / "run"),
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        **({"backend": "inline"} if mode == "async" else {}),
    )
    assert result.config.preset == "game" and result.config.opponents == "pool"
    if mode == "async":
        assert result.summary["policy_lag_mean"] > 0.5  # emulated async, not sync's run
    assert result.summary["win_rate_vs_random"] >= GAME_PRESET_FLOOR[mode]


# env factories: tests/factory_games.py, named as pettingzoo:factory_games:<function>
TRIO = "pettingzoo:factory_games:trio"
C4_FACTORY = "pettingzoo:factory_games:connect_four"
SHORT = dict(
    total_steps=256, mode="sync", actors=1, envs_per_actor=6, rollout=32, epochs=1, seed=1,
    progress=False, tensorboard=False, checkpoint_every=0,
)  # fmt: skip


def test_a_factory_named_by_its_module_and_function_trains_its_env_made_with_its_arguments(
    tmp_path,
):
    """The trio factory makes tests/parallel_game.py's env with three agents, an argument no
    module's parallel_env() could be given: three seats per game."""
    assert check_env(TRIO).agents == 3 and not check_env(TRIO).games
    result = asyncrl.train(env=TRIO, backend="inline", run_dir=str(tmp_path / "run"), **SHORT)
    assert result.config.env == TRIO
    assert result.summary["env_steps"] >= 256 and result.summary["episodes"] > 0


def test_a_function_given_from_python_is_kept_by_its_name_and_loads_again(tmp_path):
    import factory_games

    result = asyncrl.train(
        env=factory_games.trio, backend="inline", run_dir=str(tmp_path / "run"), **SHORT
    )
    assert result.config.env == TRIO  # config.yaml, checkpoints and load hold the string
    assert "env: pettingzoo:factory_games:trio" in (result.run_dir / "config.yaml").read_text()
    policy = asyncrl.load(result.run_dir)
    assert policy.config.env == TRIO and policy.spec.agents == 3


def test_the_process_backends_actors_import_a_factory_of_connect_four_by_its_name(tmp_path):
    """Spawned actors make the game by importing the factory; the run's summary plays the final
    policy against the random player (a factory of connect four gets no look-ahead player)."""
    import factory_games

    result = asyncrl.train(
        env=factory_games.connect_four,
        backend="process",
        run_dir=str(tmp_path / "run"),
        **{**SHORT, "total_steps": 384, "envs_per_actor": 4},
    )
    s = result.summary
    assert result.config.env == C4_FACTORY and s["env_steps"] >= 384
    assert sum(s[f"{k}_rate_vs_random"] for k in ("win", "draw", "loss")) == pytest.approx(1.0)
    assert not any(k.endswith("_vs_lookahead") for k in s)


def test_pettingzoos_own_parallel_env_function_is_kept_by_the_name_its_module_binds(tmp_path):
    """``simple_spread_v3.parallel_env`` is a function PettingZoo's conversions make inside
    another (it was refused as a nested function): kept by the name its module binds it to,
    it trains on the process backend, whose actors import it by that name."""
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    result = asyncrl.train(
        env=simple_spread_v3.parallel_env,
        backend="process",
        run_dir=str(tmp_path / "run"),
        **{**SHORT, "envs_per_actor": 3},
    )
    assert result.config.env == "pettingzoo:mpe2.simple_spread_v3:parallel_env"
    assert result.summary["env_steps"] >= 256 and result.summary["episodes"] > 0


def test_a_factory_of_connect_four_is_played_against_the_random_player_not_the_look_ahead():
    assert check_env(C4_FACTORY).games  # a two-player AEC game: the game preset, play_vs
    rng = np.random.default_rng(3)
    rates = play_vs_random(C4_FACTORY, lambda row: int(rng.choice(legal(row, 7))), 20, seed=1)
    assert sum(rates.values()) == pytest.approx(1.0)
    with pytest.raises(ConfigError) as e:
        check_opponent(C4_FACTORY, "lookahead")
    assert str(e.value).startswith("opponent: lookahead plays connect four only")
    assert str(e.value).endswith("allowed here: random")


def test_a_factory_that_takes_render_mode_is_drawn_and_one_that_does_not_is_refused():
    frames = []
    rng = np.random.default_rng(0)
    choose = lambda row: int(rng.choice(legal(row, 7)))  # noqa: E731
    draw = lambda env: frames.append(env.render())  # noqa: E731
    play_vs("pettingzoo:factory_games:drawn_connect_four", choose, games=1, record=draw)
    assert len(frames) >= 8 and frames[0].ndim == 3  # rgb frames: the start and 7+ moves
    with pytest.raises(ConfigError) as e:
        play_vs(C4_FACTORY, choose, games=1, record=draw)
    assert str(e.value).startswith(f"video: {C4_FACTORY} is called without arguments and takes")


def _nested():
    def make():
        return None

    return make


def _in_a_session(monkeypatch):
    """A function of an interactive session: its module ``__main__`` has no file."""
    import types

    session = types.ModuleType("__main__")
    exec("def make():\n    return None\n", session.__dict__)
    monkeypatch.setitem(sys.modules, "__main__", session)
    return session.make


@pytest.mark.parametrize(
    "env, says",
    [
        (lambda: None, "env: a lambda cannot be imported by name in another process"),
        (_nested(), "env: <function _nested.<locals>.make at"),
        (functools.partial(print), "env: functools.partial(<built-in function print>) cannot"),
        (_in_a_session, "env: <function make at"),
        (3, "env: 3 is neither an env id nor a function; allowed:"),
        ("factory_games.cartpole", "env: pettingzoo:factory_games:cartpole returned a Gymnasium"),
        ("factory_games.a_number", "env: pettingzoo:factory_games:a_number returned int;"),
        (
            "pettingzoo:factory_games:nope",
            "env: pettingzoo:factory_games:nope: module 'factory_games' has no attribute 'nope'",
        ),
        (
            "pettingzoo:factory_games:NOT_A_FUNCTION",
            "env: pettingzoo:factory_games:NOT_A_FUNCTION: module 'factory_games' has a "
            "non-callable",
        ),
        (
            "pettingzoo:factory_games:broken",
            "env: pettingzoo:factory_games:broken raised RuntimeError('no such board') when",
        ),
        ("pettingzoo:factory_games:trio:x", "env: 'pettingzoo:factory_games:trio:x' is not a"),
    ],
    ids=[
        "lambda", "nested", "partial", "session", "number", "gymnasium", "returns-int",
        "no-attribute", "not-callable", "raises", "two-colons",
    ],
)  # fmt: skip
def test_an_env_factory_that_cannot_work_is_refused_in_one_line_before_anything_starts(
    env, says, tmp_path, monkeypatch
):
    import factory_games

    if env is _in_a_session:
        env = _in_a_session(monkeypatch)
    elif isinstance(env, str) and not env.startswith("pettingzoo:"):  # a function of the module
        env = getattr(factory_games, env.split(".")[1])
    run_dir = tmp_path / "r"
    with pytest.raises(ConfigError) as e:
        asyncrl.train(env=env, backend="process", run_dir=str(run_dir), **SHORT)
    message = str(e.value)
    assert message.startswith(says) and "\n" not in message
    assert "allowed:" in message
    if "Gymnasium" in says:
        assert "named by its registered id (--env CartPole-v1" in message
    assert not run_dir.exists()
