"""Self-play against an opponent pool (``--opponents pool``, runtime/pool.py): Elo against
hand-computed values, the pool's capacity and replacement, a snapshot read whole or not at
all, opponents that change only at game starts and are never trained on (from the actor's own
records), an exact resume with the pool and its ratings, and refusals before anything starts."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import asyncrl
from asyncrl.algos import algorithm
from asyncrl.config import ConfigError
from asyncrl.envs import check_env
from asyncrl.nets import FlatParams
from asyncrl.rundir import load_checkpoint
from asyncrl.runtime.actor import Actor
from asyncrl.runtime.pool import (
    ELO_START,
    LEARNER,
    RANDOM_PLAYER,
    OpponentPool,
    Opponents,
    elo_expected,
    elo_update,
    population_outcomes,
)
from asyncrl.runtime.transport import PolicyStore, PoolStore, SlotStore, rollout_layout
from asyncrl.settings import TrainConfig, resolve

pytest.importorskip("pettingzoo")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

C4 = "pettingzoo:pettingzoo.classic.connect_four_v3"
GAME = "pettingzoo:tagged_game"  # tests/tagged_game.py: a parallel env of two agents
sys.path.insert(0, str(Path(__file__).parent))  # test_resume's comparison of checkpoints
from test_resume import _differences  # noqa: E402


def _pool_cfg(**kw) -> SimpleNamespace:
    values = (
        dict(policies=1, pool_size=3, snapshot_every=2, snapshot_win_rate=0.0, pool_random=0.0) | kw
    )
    return SimpleNamespace(**values)


def test_elo_moves_ratings_as_computed_by_hand():
    # equal ratings: a win moves each by K / 2 = 16, a draw by nothing
    assert elo_update(1000.0, 1000.0, 1.0) == (1016.0, 984.0)
    assert elo_update(1000.0, 1000.0, 0.5) == (1000.0, 1000.0)
    # 200 points above: expected 1 / (1 + 10 ** -0.5) = 0.7597469266479578; a loss costs 32 x it
    assert elo_expected(1200.0, 1000.0) == pytest.approx(0.7597469266479578, abs=1e-15)
    learner, snapshot = elo_update(1200.0, 1000.0, 0.0)
    assert learner == pytest.approx(1175.6880983472653, abs=1e-9)
    assert snapshot == pytest.approx(1024.3119016527347, abs=1e-9)


def test_a_full_pool_replaces_its_oldest_snapshot_and_rates_newcomers_as_the_learner():
    store = PoolStore(4, 3, shared=False)
    pool = OpponentPool(_pool_cfg(), agents=2, store=store)
    for k in range(5):
        pool.learner_rating = ELO_START + k
        assert pool.snapshot(np.full(4, k, np.float32)) == k
    assert sorted(pool.ids) == [2, 3, 4] and pool.ids == [3, 4, 2]  # 0 then 1 replaced, in place
    assert pool.ratings == [ELO_START + 3, ELO_START + 4, ELO_START + 2]
    out = np.zeros(4, np.float32)
    assert not store.read(0, lambda a: np.copyto(out, a))  # it left the pool: draw again
    assert store.read(4, lambda a: np.copyto(out, a)) and (out == 4).all()
    assert sorted(int(i) for i in store.ids()) == [2, 3, 4]


def test_a_pool_saved_in_the_one_policy_layout_of_before_loads_as_it_was():
    """A one-policy run's pool as checkpoints held it before populations had pools (one
    learner's figures under names of their own) resumes to the same pool."""
    pool = OpponentPool(_pool_cfg(), agents=2, store=PoolStore(4, 3, shared=False))
    for k in range(4):
        pool.snapshot(np.full(4, k, np.float32))
    pool.learner_rating, pool.updates_of[0], pool.wins_of[0], pool.games_of[0] = 1210.5, 1, 2, 3
    pool.totals[0] = {"games": 9, "wins": 5, "draws": 1}
    now = pool.state_dict()
    before = {k: now[k] for k in ("ids", "ratings", "params", "next_id")}
    before |= {"learner_rating": 1210.5, "updates": 1, "wins": 2, "games": 3}
    before["total"] = {"games": 9, "wins": 5, "draws": 1}
    again = OpponentPool(_pool_cfg(), agents=2, store=PoolStore(4, 3, shared=False))
    again.load_state_dict(before)
    assert _differences(again.state_dict(), now) == []


def test_a_reader_keeps_no_snapshot_being_written():
    store = PoolStore(4, 1, shared=False)
    store.write(0, 7, np.ones(4, np.float32))
    store._head[0][0] += 1  # the writer is midway through buffer 0
    assert not store.read(7, lambda a: None)
    store._head[0][0] += 1
    torn = []

    def read_while_replaced(array):  # the writer replaces the buffer during the copy
        torn.append(array.copy())
        store.write(0, 8, np.zeros(4, np.float32))

    assert not store.read(7, read_while_replaced) and torn


def _slot(returns, players):
    return SimpleNamespace(ep_returns=np.array(returns, np.float32), seat_player=np.array(players))


def test_outcomes_and_snapshots_follow_the_games_reported():
    pool = OpponentPool(_pool_cfg(snapshot_win_rate=0.6), agents=2, store=PoolStore(2, 3, False))
    pool.snapshot(np.zeros(2, np.float32))  # id 0
    nan = math.nan
    # two games of two seats, two steps: the learner (-1) wins game 0 at step 0 against 0, and
    # draws game 1 at step 1; the opponent's seats report no return
    slot = _slot([[1.0, nan, nan, nan], [nan, nan, nan, 0.0]], [[-1, 0, 0, -1], [-1, 0, 0, -1]])
    assert population_outcomes(slot, 2) == [(0, 0, 1.0), (0, 0, 0.5)]  # (policy, opponent, score)
    pool.record([slot])
    learner, snap = elo_update(ELO_START, ELO_START, 1.0)
    learner, snap = elo_update(learner, snap, 0.5)
    assert (pool.learner_rating, pool.ratings[0]) == (learner, snap)
    assert pool.total == {"games": 2, "wins": 1, "draws": 1}
    # every 2 updates, and only once the win rate since the last passes 0.6 (1 of 2: not yet)
    assert not pool.updated(lambda: np.ones(2, np.float32))
    assert not pool.updated(lambda: np.ones(2, np.float32))
    pool.record([_slot([[1.0, nan]], [[-1, 0]])])  # 2 of 3
    assert pool.updated(lambda: np.ones(2, np.float32))
    assert pool.ids[1] == 1 and pool.ratings[1] == pool.learner_rating
    assert (pool.updates, pool.games) == (0, 0)
    figures = pool.figures()
    assert figures["pool/size"] == 2 and figures["pool/win_rate"] == pytest.approx(2 / 3)


def test_a_populations_games_are_counted_once_and_rated_by_who_played():
    """Two policies (seat players -1 and -2) and snapshot 0, one step, three games: policy 1
    wins against snapshot 0 (seat 1); policy 0 loses to policy 1 live -- both seats report,
    in their own slots, and only the first seat's report counts; policy 1 draws against
    snapshot 0 (seat 4)."""
    pool = OpponentPool(_pool_cfg(policies=2), agents=2, store=PoolStore(2, 3, False))
    pool.snapshot(np.zeros(2, np.float32), 0)  # id 0, policy 0's
    nan = math.nan
    players = [[0, -2, -1, -2, -2, 0]]
    mine = _slot([[nan, nan, -1.0, nan, nan, nan]], players)  # policy 0's slot: its seats
    theirs = _slot([[nan, 1.0, nan, 1.0, 0.0, nan]], players)  # policy 1's
    assert population_outcomes(mine, 2) == [(0, -2, 0.0)]
    assert population_outcomes(theirs, 2) == [(1, 0, 1.0), (1, 0, 0.5)]  # game 1: seat 0's
    pool.record([theirs])
    pool.record([mine])
    one, snap = elo_update(ELO_START, ELO_START, 1.0)  # policy 1 beat snapshot 0
    one, snap = elo_update(one, snap, 0.5)  # and drew with it
    zero, one = elo_update(ELO_START, one, 0.0)  # then policy 0 lost to policy 1
    assert pool.learner_ratings == [zero, one] and pool.ratings[0] == snap
    assert pool.live_games == [1, 1] and [t["games"] for t in pool.totals] == [0, 2]
    assert (pool.games_of, pool.wins_of) == ([0, 2], [0, 1])
    # a snapshot of policy 1 joins rated as policy 1 is, and remembers where it came from
    pool.updated(lambda: np.ones(2, np.float32), 1)
    assert not pool.updated(lambda: np.ones(2, np.float32), 0)  # policy 0: 1 update of 2
    assert pool.updated(lambda: np.ones(2, np.float32), 1)
    assert pool.origins[:2] == [0, 1] and pool.ratings[1] == one
    assert pool.origins_by_id() == {"0": 0, "1": 1}


def _players_hold_between_game_starts(player: np.ndarray, ended: np.ndarray) -> tuple[int, int]:
    """Asserts that who plays each seat of a two-player game (``player``, [steps, seats])
    changes only where both seats had ended (a game's start); returns the game starts seen
    and at how many of them the players changed."""
    finished, starts, changes = np.zeros(player.shape[1], bool), 0, 0
    for t in range(1, len(player)):
        finished |= ended[t - 1]
        for g in range(player.shape[1] // 2):
            seats = slice(2 * g, 2 * g + 2)
            if finished[seats].all():  # the game started anew at step t
                finished[seats] = False
                starts += 1
                changes += (player[t, seats] != player[t - 1, seats]).any()
            else:
                assert (player[t, seats] == player[t - 1, seats]).all(), (t, g)
    return starts, changes


@pytest.mark.parametrize("pool_random", [0.0, 0.5])
def test_opponents_change_only_at_game_starts_and_the_learner_owns_only_its_seats_moves(
    pool_random,
):
    """An actor on connect four against a pool of three snapshots, three rollouts: from its
    records (who played each seat at each step), every game has one learner seat and one
    snapshot, both changing only where every seat of the game has ended; the learner's slot
    marks its own seats' moves and no other; only the learner's seats report episodes. With
    ``--pool-random 0.5`` the random player is one more opponent, held the same way, drawn
    in about half the games (its moves' legality: the test below)."""
    K, T = 8, 48
    cfg = resolve(
        TrainConfig(
            env=C4, envs_per_actor=K, rollout=T, opponents="pool", pool_size=3,
            pool_random=pool_random,
        ),
        "generic",
    )  # fmt: skip
    spec, algo = check_env(C4), algorithm("ppo")
    module = algo.acting_module(cfg, spec)
    flat = FlatParams(module)
    store = PolicyStore(flat.numel, shared=False)
    store.publish(0, flat.write_to)
    pool = PoolStore(flat.numel, 3, shared=False)
    for sid in range(3):
        torch.manual_seed(sid)
        FlatParams(algo.acting_module(cfg, spec)).write_to(vector := np.empty(flat.numel, "f4"))
        pool.write(sid, sid, vector)
    slots = SlotStore(rollout_layout(cfg, spec, algo), 3, shared=False)
    actor = Actor(0, cfg, spec, algo, store, pool=pool)
    active = []
    record = actor._act

    def act(slots_, t, groups, actions):  # which seats were to move at each step
        active.append(actor.envs.active.copy())
        record(slots_, t, groups, actions)

    actor._act = act
    for slot in slots.slots:
        actor.collect(slot)
    actor.close()
    join = lambda name: np.concatenate([getattr(s, name) for s in slots.slots])  # noqa: E731
    player, own = join("seat_player"), join("own")
    ended = join("terminated") | join("truncated")
    returns, active = join("ep_returns"), np.array(active)
    games = player.reshape(3 * T, K // 2, 2)
    assert ((games == -1).sum(axis=2) == 1).all()  # one learner seat per game, always
    assert ((games >= 0).sum(axis=2) == 1).all()
    starts, changes = _players_hold_between_game_starts(player, ended)
    assert starts >= 10 and changes >= 3  # draws happened and varied
    played = set(np.unique(player[player >= 0]).tolist())
    assert played == ({0, 1, 2} | ({RANDOM_PLAYER} if pool_random else set()))
    if pool_random:  # the opponent drawn at each game's start: the random one in about half
        over = ended.reshape(-1, K // 2, 2).all(axis=2)  # [step, game]: every seat ended
        begins = np.vstack([np.ones((1, K // 2), bool), over[:-1]])
        opponent = games.max(axis=2)[begins]
        share = float((opponent == RANDOM_PLAYER).mean())
        assert opponent.size >= 20 and 0.3 <= share <= 0.7, (opponent.size, share)
    # the learner's samples: exactly its seats' moves
    assert (own == (active & (player == -1))).all()
    assert own.any() and (active & (player >= 0)).any()
    # episodes reported: the learner's seats' only, one per game end
    assert (player[~np.isnan(returns)] == -1).all()
    assert (~np.isnan(returns)).sum() == starts + ended[-1].reshape(-1, 2).all(axis=1).sum()


def test_the_random_player_draws_among_the_legal_moves_only_and_resumes_its_draws():
    """``Opponents.act`` for the random player's rows: each move one of its row's legal moves
    (the observation's last 7 entries), every legal move drawn; the other rows untouched; its
    generator saved and loaded with the actor's state."""
    rng = np.random.default_rng(0)
    rows = 64
    obs = np.zeros((rows, 84 + 7), np.float32)
    obs[:, 84:] = rng.random((rows, 7)) < 0.4
    obs[np.arange(rows), 84 + np.arange(rows) % 7] = 1  # at least one legal move a row
    player = np.where(np.arange(rows) % 2 == 0, RANDOM_PLAYER, LEARNER)
    mine = np.flatnonzero(player == RANDOM_PLAYER)
    opponents = Opponents(None, PoolStore(2, 1, False), seed=5, actions=7)
    seen = []
    for _ in range(50):
        actions = np.full(rows, -1)
        opponents.act(torch.from_numpy(obs), mine, player, actions)
        assert (actions[player != RANDOM_PLAYER] == -1).all()
        assert obs[mine, 84 + actions[mine]].all()  # every move legal
        seen.append(actions[mine])
    legal = obs[mine, 84:] > 0
    drawn = np.zeros_like(legal)
    for a in seen:
        drawn[np.arange(mine.size), a] = True
    assert (drawn == legal).all()  # and every legal move drawn at some point
    saved = opponents.state_dict()
    first, again = np.full(rows, -1), np.full(rows, -1)
    opponents.act(torch.from_numpy(obs), mine, player, first)
    other = Opponents(None, PoolStore(2, 1, False), seed=6, actions=7)
    other.load_state_dict(saved)
    other.act(torch.from_numpy(obs), mine, player, again)
    assert (first == again).all()


RUN = dict(
    mode="sync", backend="inline", actors=2, envs_per_actor=4, rollout=16, minibatch_size=32,
    epochs=1, progress=False, tensorboard=False, checkpoint_every=0, seed=3, opponents="pool",
    snapshot_every=2, pool_size=2, lr_schedule="constant", clip_schedule="constant",
)  # fmt: skip
# shared self-play: the pool's settings given to it are refused (test_pool_settings_...)
SELF = {k: v for k, v in RUN.items() if k not in ("snapshot_every", "pool_size")} | dict(
    opponents="self"
)


@pytest.mark.parametrize("opponents", ["pool", "self", "pool-random"])
def test_a_self_play_run_resumed_ends_bit_for_bit_where_the_unbroken_one_ends(opponents, tmp_path):
    """Inline, sync: S steps, then --resume to 2S, against 2S at once. The checkpoints' learner,
    actors (games in progress, opponents' copies and draws) and pool (snapshots' parameters,
    ratings) are identical, and so are the summaries' figures. Pool of 2, a snapshot every 2
    updates: snapshots leave the pool during both halves. Shared self-play (no pool) too: its
    games in progress are in the checkpoint as well; and a pool with the random player in half
    the games (its draws and rating too)."""
    S = 256
    mixed = opponents == "pool-random"
    run = SELF if opponents == "self" else dict(RUN, pool_random=0.5 if mixed else 0.0)
    whole = asyncrl.train(C4, total_steps=2 * S, run_dir=str(tmp_path / "whole"), **run)
    asyncrl.train(C4, total_steps=S, run_dir=str(tmp_path / "halves"), **run)
    resumed = asyncrl.train(resume=tmp_path / "halves", total_steps=2 * S)
    a, b = load_checkpoint(tmp_path / "whole"), load_checkpoint(tmp_path / "halves")
    pool = opponents != "self"
    assert not pool or a["pool"]["next_id"] > 2  # the pool was full and replaced snapshots
    for part in ("learner", "actors", "pool") if pool else ("learner", "actors"):
        x, y = dict(a[part]), dict(b[part])
        if part == "learner":  # a linear schedule's legs: not used by constant schedules
            x.pop("schedule", None), y.pop("schedule", None)
        assert _differences(x, y) == [], part
    keys = ("env_steps", "final_return", "last100_return", "win_rate_vs_random")
    if pool:
        keys += ("pool_games", "win_rate_vs_pool", "learner_elo", "pool_elo")
    if mixed:
        keys += ("pool_random_games", "pool_random_win_rate", "pool_random_elo")
        assert whole.summary["pool_random_games"] > 5
        assert whole.summary["pool_random_elo"] != ELO_START
    assert {k: whole.summary[k] for k in keys} == {k: resumed.summary[k] for k in keys}


@pytest.mark.parametrize(
    "settings, names",
    [
        ({"env": "CartPole-v1", "opponents": "pool"}, "opponents: pool"),
        # a population's pool: two-player games only (pettingzoo:tagged_game is a parallel env)
        ({"env": GAME, "opponents": "pool", "policies": 2, "envs_per_actor": 4}, "policies:"),
        ({"env": C4, "opponents": "pool", "policies": 3, "pool_size": 2}, "pool_size:"),
        ({"env": C4, "opponents": "pool", "pool_size": 0}, "pool_size:"),
        ({"env": C4, "opponents": "pool", "snapshot_every": 0}, "snapshot_every:"),
        ({"env": C4, "opponents": "pool", "snapshot_win_rate": 1.5}, "snapshot_win_rate:"),
        ({"env": C4, "opponents": "league"}, "opponents:"),
        # the pool's settings given to a run without one: refused, not ignored
        ({"env": C4, "opponents": "self", "pool_random": 0.5}, "pool_random:"),
        ({"env": C4, "opponents": "self", "pool_size": 4}, "pool_size:"),
        ({"env": C4, "opponents": "self", "snapshot_win_rate": 0.6}, "snapshot_win_rate:"),
        ({"env": "CartPole-v1", "snapshot_every": 3}, "snapshot_every:"),
        ({"env": C4, "opponents": "pool", "pool_random": 1.0}, "pool_random:"),
        ({"env": C4, "opponents": "pool", "pool_random": -0.1}, "pool_random:"),
        # the random player draws among the legal moves: an env without an action mask
        (
            {"env": GAME, "opponents": "pool", "pool_random": 0.5, "envs_per_actor": 4},
            "pool_random:",
        ),
    ],
)
def test_bad_pool_settings_are_refused_in_one_line_before_anything_starts(
    settings, names, tmp_path
):
    run_dir = tmp_path / "r"
    with pytest.raises(ConfigError) as e:
        asyncrl.train(total_steps=64, run_dir=str(run_dir), progress=False, **settings)
    assert str(e.value).startswith(names) and "\n" not in str(e.value)
    assert not run_dir.exists()


def test_a_saved_self_play_runs_config_starts_a_run_and_its_pool_values_are_not_refused(
    tmp_path,
):
    """A game's preset fills the pool's settings whatever the opponents, so a shared self-play
    run's config.yaml holds them (pool_size 64, pool_random 0.25): used as a template, those
    are not values given against the run (the refusal above is for values that would differ),
    and the run starts and ends."""
    first = tmp_path / "first"
    asyncrl.train(C4, total_steps=128, run_dir=str(first), **SELF)
    saved = (first / "config.yaml").read_text()
    assert "pool_size: 64" in saved and "pool_random: 0.25" in saved
    again = asyncrl.train(config=first / "config.yaml", run_dir=str(tmp_path / "again"))
    assert again.summary["env_steps"] >= 128 and "pool_games" not in again.summary
    assert "opponents: self" in (tmp_path / "again" / "config.yaml").read_text()


@pytest.mark.parametrize("backend, mode", [("process", "async"), ("thread", "async")])
def test_a_pool_run_trains_on_actors_beside_the_learner(backend, mode, tmp_path):
    """Actors that read snapshots while the learner adds them (async): the run ends, its
    games were rated, snapshots joined and left a pool of 2, and the summary says so."""
    settings = dict(RUN, backend=backend, mode=mode)
    result = asyncrl.train(C4, total_steps=512, run_dir=str(tmp_path / "r"), **settings)
    s = result.summary
    assert s["opponents"] == "pool" and s["pool_size"] == 2 and s["pool_snapshots"] > 2
    assert s["pool_games"] > 20 and 0 <= s["win_rate_vs_pool"] <= 1
    held = sorted(int(k) for k in s["pool_elo"])  # the newest two
    assert held == [s["pool_snapshots"] - 2, s["pool_snapshots"] - 1]
    assert math.isfinite(s["learner_elo"]) and s["learner_elo"] != ELO_START
    state = load_checkpoint(tmp_path / "r")["pool"]
    assert sorted(state["ids"]) == held


def test_games_in_progress_go_through_a_weights_only_checkpoint_and_play_on_the_same(tmp_path):
    """SeatVectorEnv.game_states: plain data a weights-only load reads back; a fresh env given
    them plays on exactly as the original does (same observations, rewards, turns, ends)."""
    from asyncrl.envs.pettingzoo import SeatVectorEnv, legal
    from asyncrl.rundir import _weights_only_safe

    envs, again = SeatVectorEnv(C4, 4), SeatVectorEnv(C4, 4)
    envs.reset(seed=[1, 2, 3, 4])
    again.reset(seed=[9, 9, 9, 9])
    rng = np.random.default_rng(0)

    def moves(obs, active):
        return np.array(
            [rng.choice(legal(o, 7)) if a else 0 for o, a in zip(obs, active, strict=True)]
        )

    for _ in range(9):  # games in progress
        envs.step(moves(envs.obs, envs.active))
    torch.save(_weights_only_safe(envs.game_states()), tmp_path / "g.pt")
    again.set_game_states(torch.load(tmp_path / "g.pt", weights_only=True))
    for _ in range(60):  # on through game ends and new games
        actions = moves(envs.obs, envs.active)
        assert (again.active == envs.active).all() and (again.obs == envs.obs).all()
        for a, b in zip(envs.step(actions)[:4], again.step(actions)[:4], strict=True):
            np.testing.assert_array_equal(a, b)
    envs.close(), again.close()


def test_a_pool_runs_policy_is_evaluated_against_its_pools_snapshots(tmp_path, capsys):
    """asyncrl eval --opponent pool: the run's policy plays the snapshots its checkpoint's pool
    holds, in turn (two games each, one as either player), and the line names them; a run
    trained against itself has no pool to play, which is refused in one line."""
    from asyncrl.cli import main
    from asyncrl.evaluate import evaluate

    run = tmp_path / "pool"
    asyncrl.train(C4, total_steps=256, run_dir=str(run), **RUN)
    result = evaluate(run, episodes=8, opponent="pool")
    rates = [result[f"{k}_rate_vs_pool"] for k in ("win", "draw", "loss")]
    assert sum(rates) == pytest.approx(1.0) and result["games"] == 8
    assert main(["eval", str(run), "--opponent", "pool", "--episodes", "4"]) == 0
    line = capsys.readouterr().out.splitlines()[-2]
    assert line.endswith("over 4 games against the run's pool of past snapshots")
    policy = asyncrl.load(run)
    state = load_checkpoint(run)["pool"]
    players = policy._snapshots(seed=0)  # the pool's two snapshots, with their parameters
    assert len(players) == len([i for i in state["ids"] if int(i) >= 0]) == 2
    row = np.zeros(check_env(C4).obs_shape, np.float32)
    row[-7:] = 1  # an empty board: every column legal
    assert all(0 <= p(row) < 7 for p in players)

    selfplay = tmp_path / "self"
    asyncrl.train(C4, total_steps=256, run_dir=str(selfplay), **SELF)
    with pytest.raises(ConfigError) as e:
        evaluate(selfplay, episodes=4, opponent="pool")
    assert str(e.value).startswith("opponent: pool plays a run's past snapshots;")
    assert "\n" not in str(e.value)


# a population of two sharing one pool of three (a snapshot of each policy at the start)
POPULATION = dict(RUN, policies=2, pool_size=3)


def test_a_population_plays_itself_and_its_pool_and_each_learner_gets_its_seats_only(
    tmp_path, monkeypatch
):
    """--policies 2 --opponents pool, inline, sync, from the actors' own records (who played
    each seat at each step, which seats were to move): every game has a live policy's seat,
    and its opponent -- the other live policy (never itself: that is --opponents self) or a
    snapshot of either policy -- changes only where every seat of the game has ended; each
    policy's slot marks exactly its seats' moves, and reports only its seats' episodes; each
    learner trains on steps of its own seats only (the tag: who played the seat); both
    policies are rated. The game preset's random player (a quarter of the games) is met too."""
    from asyncrl.runtime import learners, pool

    records: dict[int, list] = {}  # per actor: its rollouts' records, in order
    active: dict[int, list] = {}  # per actor: the seats to move, at each step
    ends: dict[int, list] = {}  # per actor: the seats whose episode ended, at each step
    act, step, collect = Actor._act, Actor._step, Actor.collect

    def act_(self, slots_, t, groups, actions):
        active.setdefault(self.actor_id, []).append(self.envs.active.copy())
        act(self, slots_, t, groups, actions)

    def step_(self, actions):
        out = step(self, actions)
        ends.setdefault(self.actor_id, []).append(out[2] | out[3])
        return out

    def collect_(self, slot, waited=0.0):
        collect(self, slot, waited)
        fields = ("seat_player", "own", "ep_returns")
        records.setdefault(self.actor_id, []).append(
            [{f: getattr(s, f).copy() for f in fields} for s in slot]
        )

    origins: dict[int, int] = {}  # snapshot id: the policy it came from
    snapshot = pool.OpponentPool._snapshot

    def snapshot_(self, params, policy):
        sid = snapshot(self, params, policy)
        origins[sid] = policy
        return sid

    trained: dict[int, int] = {0: 0, 1: 0}  # per policy: the own steps its learner trained on
    train = learners.LocalLearner.train

    def train_(self, batch):
        p = self.learner.cfg.seed - RUN["seed"]  # policy p's seed: the run's + p
        for s in batch:
            assert (s.seat_player[s.own] == -1 - p).all(), p  # its own seats' moves only
            trained[p] += int(s.own.sum())
        return train(self, batch)

    monkeypatch.setattr(Actor, "_act", act_)
    monkeypatch.setattr(Actor, "_step", step_)
    monkeypatch.setattr(Actor, "collect", collect_)
    monkeypatch.setattr(pool.OpponentPool, "_snapshot", snapshot_)
    monkeypatch.setattr(learners.LocalLearner, "train", train_)
    result = asyncrl.train(C4, total_steps=1024, run_dir=str(tmp_path / "r"), **POPULATION)
    K = POPULATION["envs_per_actor"]
    met, starts = set(), 0
    for a, rollouts in records.items():

        def join(p, f, rollouts=rollouts):  # policy p's slots' field f, rollouts in order
            return np.concatenate([r[p][f] for r in rollouts])

        player = join(0, "seat_player")
        assert (join(1, "seat_player") == player).all()  # every slot records the same
        ended, seats = np.array(ends[a]), np.array(active[a])
        games = player.reshape(-1, K // 2, 2)
        assert ((games < 0).sum(axis=2) >= 1).all()  # a live policy plays every game
        starts += _players_hold_between_game_starts(player, ended)[0]
        for p in range(2):
            mine = player == -1 - p
            assert (join(p, "own") == (seats & mine)).all(), p
            assert (mine[~np.isnan(join(p, "ep_returns"))]).all(), p
        for g in games.reshape(-1, 2):
            met.add(("live", *sorted(g.tolist())) if (g < 0).all() else ("pool", int(g.max())))
        live = games[(games < 0).all(axis=2)]
        assert (live[:, 0] != live[:, 1]).all()  # no policy met itself live
    assert starts >= 20
    played = {
        origins[sid] for kind, *who in met if kind == "pool" for sid in who if sid != RANDOM_PLAYER
    }
    assert played == {0, 1}  # snapshots of both policies
    assert ("pool", RANDOM_PLAYER) in met  # and the random player
    assert ("live", -2, -1) in met  # policy 0 against policy 1, live
    assert trained[0] > 0 and trained[1] > 0
    s = result.summary
    assert len(origins) == s["pool_snapshots"] > 3 and s["pool_size"] == 3
    assert set(s["pool_origin"].values()) <= {0, 1}
    for row in s["population"]:
        assert row["pool_games"] > 0 and row["live_games"] > 0 and row["elo"] != ELO_START
    assert s["learner_elo"] == s["population"][s["best_policy"]]["elo"]
    # asyncrl eval --opponent pool: a population's policy against the run's (shared) pool
    from asyncrl.evaluate import evaluate

    rates = evaluate(tmp_path / "r", episodes=4, opponent="pool", policy=1)
    assert (
        rates["games"] == 4
        and sum(rates[f"{k}_rate_vs_pool"] for k in ("win", "draw", "loss")) == 1
    )


def test_a_population_pool_run_resumed_ends_bit_for_bit_where_the_unbroken_one_ends(tmp_path):
    """--policies 2 --opponents pool, inline, sync: S steps, then --resume to 2S, against 2S at
    once: the run's checkpoint (actors: games in progress, their players and opponents'
    copies, draws; the pool: snapshots, origins, every rating and count) and each policy's
    learner are identical, and so are the summaries' figures."""
    from asyncrl.rundir import policy_dir

    S = 512
    whole = asyncrl.train(C4, total_steps=2 * S, run_dir=str(tmp_path / "whole"), **POPULATION)
    asyncrl.train(C4, total_steps=S, run_dir=str(tmp_path / "halves"), **POPULATION)
    resumed = asyncrl.train(resume=tmp_path / "halves", total_steps=2 * S)
    a, b = load_checkpoint(tmp_path / "whole"), load_checkpoint(tmp_path / "halves")
    assert a["pool"]["next_id"] > 3 and set(a["pool"]["origins"]) == {0, 1}
    for part in ("actors", "pool", "population"):
        assert _differences(dict(a[part]), dict(b[part])) == [], part
    for p in range(2):
        x = load_checkpoint(policy_dir(tmp_path / "whole", p))["learner"]
        y = load_checkpoint(policy_dir(tmp_path / "halves", p))["learner"]
        x.pop("schedule", None), y.pop("schedule", None)
        assert _differences(x, y) == [], p
    keys = ("env_steps", "pool_games", "win_rate_vs_pool", "learner_elo", "pool_elo", "pool_origin")
    assert {k: whole.summary[k] for k in keys} == {k: resumed.summary[k] for k in keys}

    def rows(result):  # each policy's rating, games and steps
        return [
            (r["elo"], r["pool_games"], r["live_games"], r["env_steps"])
            for r in result.summary["population"]
        ]

    assert rows(whole) == rows(resumed)


def test_a_population_pool_run_on_processes_in_async_mode_rates_its_games(tmp_path):
    """Learners in processes, actors in processes, async: each policy's loop reports its games
    from a thread of its own into the one pool; the run ends, both policies played the pool and
    each other, and were rated."""
    settings = dict(POPULATION, backend="process", mode="async")
    result = asyncrl.train(C4, total_steps=1024, run_dir=str(tmp_path / "r"), **settings)
    s = result.summary
    assert s["opponents"] == "pool" and s["pool_size"] == 3 and s["pool_snapshots"] > 3
    assert s["pool_games"] > 10 and 0 <= s["win_rate_vs_pool"] <= 1
    for row in s["population"]:
        assert row["pool_games"] > 0 and row["live_games"] > 0
        assert math.isfinite(row["elo"]) and row["elo"] != ELO_START
    state = load_checkpoint(tmp_path / "r")["pool"]
    assert sorted(int(i) for i in state["ids"]) == sorted(int(k) for k in s["pool_elo"])


def test_a_policy_not_trained_plays_its_first_snapshot_only(tmp_path):
    """--policies-to-train 0: policy 1 acts (live, and in the pool as its initial snapshot)
    but never changes, so it adds no snapshot after that first one; policy 0 adds its own."""
    settings = dict(POPULATION, policies_to_train=[0])
    asyncrl.train(C4, total_steps=768, run_dir=str(tmp_path / "r"), **settings)
    state = load_checkpoint(tmp_path / "r")["pool"]
    held = dict(zip(state["ids"], state["origins"], strict=True))
    assert state["next_id"] > 3 and state["updates"][1] == 0
    # the snapshots made after the first two (one per policy) are all policy 0's
    assert {o for sid, o in held.items() if sid >= 2} == {0}


def test_a_population_pool_run_on_processes_in_sync_mode_ends_as_the_inline_one(tmp_path):
    """Learners in processes report from a thread each; in sync mode each round's changes to
    the pool are made in policy order (PoolTurns), so the run ends with the inline run's pool
    (snapshot ids, places, origins, ratings) and learners, bit for bit. Without that order
    they differ (3 runs of 3 before it was kept)."""
    from asyncrl.rundir import policy_dir

    for backend in ("inline", "process"):
        settings = dict(POPULATION, backend=backend)
        asyncrl.train(C4, total_steps=1024, run_dir=str(tmp_path / backend), **settings)
    a, b = load_checkpoint(tmp_path / "inline"), load_checkpoint(tmp_path / "process")
    assert a["pool"]["next_id"] > 3
    assert _differences(dict(a["pool"]), dict(b["pool"])) == []
    for p in range(2):
        x = load_checkpoint(policy_dir(tmp_path / "inline", p))["learner"]
        y = load_checkpoint(policy_dir(tmp_path / "process", p))["learner"]
        assert _differences(x, y) == [], p
