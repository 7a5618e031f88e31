"""Self-play against an opponent pool (``--opponents pool``; docs: Guides, multi-agent).

The learner's parameters are copied into a bounded pool of frozen **snapshots** (the first is
the initial policy; then one every ``--snapshot-every`` updates, once the learner's win rate
against the pool since the last passes ``--snapshot-win-rate``; the oldest leaves a full pool).
In every game one seat is the learner and the others one snapshot, both drawn at the game's
start (:class:`asyncrl.runtime.mapping.PoolSeats`); an actor keeps its own copy of each snapshot
its games play (:class:`Opponents`), read from the pool's store (transport.PoolStore), so a
snapshot replaced meanwhile never changes a game in progress. Each game's outcome comes back in
the learner's slot (its return, and who played each seat) and moves Elo ratings: one per
snapshot and one for the learner (:class:`OpponentPool`, the driver's side).

A population (``--policies P``) shares one pool: each policy adds snapshots of itself (every
``--snapshot-every`` of its own updates, gated by its own win rate against the pool), each
snapshot remembers the policy it came from, and each policy has its own rating. In its games a
learning seat meets another live policy or a snapshot (runtime.mapping.PoolSeats); a
seat's player (``seat_player``) is then ``-1 - p`` for live policy
``p`` (so ``-1``, policy 0, is the one learner of a run of one policy), else a snapshot id.

With ``--pool-random S`` a share S of the games draws, instead of a snapshot, a uniform random
player over the legal moves (``RANDOM_PLAYER``): a fixed member that never leaves, rated as the
snapshots are, whose games count apart from the snapshots' (the snapshot gate reads those only).
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.envs.pettingzoo import legal
from asyncrl.nets import FlatParams
from asyncrl.runtime.transport import PoolStore

if TYPE_CHECKING:
    from asyncrl.settings import TrainConfig

ELO_K = 32.0  # the rating change of a game the winner was expected to lose even odds: K / 2
ELO_START = 1000.0  # the initial policy's rating and the learner's at the start
LEARNER = -1  # who plays a seat (slot field ``seat_player``): the learner, else a snapshot id
# (a population's: -1 - p is live policy p)
RANDOM_PLAYER = 1 << 62  # who plays a seat: the uniform random player (--pool-random)
OPPONENT_SEED = 7727  # an actor's opponents sample with generator seed: first env seed + this


def _win_rate(scores: list[float]) -> float:
    """The share of ``scores`` that are wins (NaN for none)."""
    return sum(s == 1.0 for s in scores) / len(scores) if scores else math.nan


def elo_expected(rating: float, other: float) -> float:
    """The score (1 win, 0.5 draw, 0 loss) Elo expects of ``rating`` against ``other``."""
    return 1.0 / (1.0 + 10.0 ** ((other - rating) / 400.0))


def elo_update(learner: float, opponent: float, score: float) -> tuple[float, float]:
    """Both ratings after one game the learner scored ``score`` in (zero sum: what one gains,
    the other loses)."""
    change = ELO_K * (score - elo_expected(learner, opponent))
    return learner + change, opponent - change


def population_outcomes(slot: Any, agents: int) -> list[tuple[int, int, float]]:
    """(policy, opponent, the policy's score) of every game that ended in ``slot``, in step
    then seat order: the policy of a live seat that reported a return, and who played the
    game's other seats (a snapshot id, or -1 - q for live policy q). A game of two
    live seats reports in both their slots: only its first live seat's report counts, so each
    game counts once. Score: the sign of the return (a zero-sum game's win, draw or loss) as
    1, 0.5, 0."""
    ret = slot.ep_returns
    out = []
    for t, row in np.argwhere(~np.isnan(ret)):
        game = row - row % agents
        players = slot.seat_player[t, game : game + agents]
        if (players[: row - game] < 0).any():  # an earlier live seat reports this game
            continue
        # the other seats' player (one snapshot, or one live policy, in all of them)
        opponent = int(np.delete(players, row - game).max())
        value = float(ret[t, row])
        score = 1.0 if value > 0 else 0.5 if value == 0 else 0.0
        out.append((-1 - int(players[row - game]), opponent, score))
    return out


class OpponentPool:
    """The driver's side of the pool: which snapshot each buffer of the store holds (and which
    policy it came from), the ratings, when each policy's next snapshot joins, and the figures
    of the games reported so far. A population's loops may report from threads of their own
    (learners in processes): a lock keeps each change whole."""

    def __init__(self, cfg: TrainConfig, agents: int, store: PoolStore):
        self.store, self.agents = store, agents
        self.every, self.threshold = cfg.snapshot_every, cfg.snapshot_win_rate
        P = cfg.policies
        capacity = cfg.pool_size
        self.ids = [LEARNER] * capacity  # snapshot id per buffer (-1: empty)
        self.origins = [LEARNER] * capacity  # the policy each buffer's snapshot came from
        self.ratings = [math.nan] * capacity
        self.learner_ratings = [ELO_START] * P  # each live policy's
        self.next_id = 0
        # per policy, since its last snapshot: its updates, and its wins and games against the
        # pool (the threshold's)
        self.updates_of, self.wins_of, self.games_of = [0] * P, [0] * P, [0] * P
        self.totals = [{"games": 0, "wins": 0, "draws": 0} for _ in range(P)]  # vs snapshots
        self.live_games = [0] * P  # games a policy played against another live one
        self.windows: list[list[float]] = [[] for _ in range(P)]  # scores since a metrics row
        # --pool-random: the random player's rating, and each policy's games and wins against it
        self.random_share = cfg.pool_random
        self.random_rating = ELO_START
        self.random_games, self.random_wins = [0] * P, [0] * P
        self.random_windows: list[list[float]] = [[] for _ in range(P)]
        self.lock = threading.Lock()

    # a run of one policy: its learner's figures, under the names they always had
    @property
    def learner_rating(self) -> float:
        return self.learner_ratings[0]

    @learner_rating.setter
    def learner_rating(self, value: float) -> None:
        self.learner_ratings[0] = value

    @property
    def updates(self) -> int:
        return self.updates_of[0]

    @property
    def games(self) -> int:
        return self.games_of[0]

    @property
    def total(self) -> dict[str, int]:
        return {k: sum(t[k] for t in self.totals) for k in ("games", "wins", "draws")}

    def snapshot(self, params: np.ndarray, policy: int = 0) -> int:
        """``params`` (policy ``policy``'s) join the pool as a new snapshot rated as that
        policy is now, in an empty buffer or the oldest snapshot's; returns its id."""
        with self.lock:
            return self._snapshot(params, policy)

    def _snapshot(self, params: np.ndarray, policy: int) -> int:
        empty = [b for b, i in enumerate(self.ids) if i == LEARNER]
        index = empty[0] if empty else int(np.argmin(self.ids))
        sid, self.next_id = self.next_id, self.next_id + 1
        self.store.write(index, sid, params)
        self.ids[index], self.ratings[index] = sid, self.learner_ratings[policy]
        self.origins[index] = policy
        self.updates_of[policy] = self.wins_of[policy] = self.games_of[policy] = 0
        return sid

    def record(self, slots: list[Any]) -> None:
        """The games that ended in a batch's slots: ratings, win counts."""
        with self.lock:
            where = {sid: b for b, sid in enumerate(self.ids) if sid != LEARNER}
            for slot in slots:
                for p, opponent, score in population_outcomes(slot, self.agents):
                    if opponent < 0:  # another live policy: both rated
                        q = -1 - opponent
                        self.live_games[p] += 1
                        self.live_games[q] += 1
                        r = self.learner_ratings
                        r[p], r[q] = elo_update(r[p], r[q], score)
                        continue
                    if opponent == RANDOM_PLAYER:  # rated, counted apart from the snapshots
                        self.learner_ratings[p], self.random_rating = elo_update(
                            self.learner_ratings[p], self.random_rating, score
                        )
                        self.random_games[p] += 1
                        self.random_wins[p] += score == 1.0
                        self.random_windows[p].append(score)
                        continue
                    b = where.get(opponent)
                    if b is not None:  # a snapshot that left the pool meanwhile keeps no rating
                        self.learner_ratings[p], self.ratings[b] = elo_update(
                            self.learner_ratings[p], self.ratings[b], score
                        )
                    self.games_of[p] += 1
                    self.wins_of[p] += score == 1.0
                    self.totals[p]["games"] += 1
                    self.totals[p]["wins"] += score == 1.0
                    self.totals[p]["draws"] += score == 0.5
                    self.windows[p].append(score)

    def updated(self, params: Any, policy: int = 0) -> bool:
        """After an update of policy ``policy``: a new snapshot of it (``params()``: its
        parameters) if one is due. True if one joined."""
        with self.lock:
            self.updates_of[policy] += 1
            if self.updates_of[policy] < self.every:
                return False
            games, wins = self.games_of[policy], self.wins_of[policy]
            if self.threshold > 0 and (not games or wins / games < self.threshold):
                return False
            self._snapshot(params(), policy)
            return True

    def adopted(self, policy: int, source: int) -> None:
        """PBT copied policy ``source``'s weights into ``policy``: it takes the rating too."""
        with self.lock:
            self.learner_ratings[policy] = self.learner_ratings[source]

    def figures(self, policy: int = 0) -> dict[str, float]:
        """A metrics row's pool figures (policy ``policy``'s row): its win rate against the
        pool over its games since its last row, the ratings, the pool's size."""
        with self.lock:
            scores, self.windows[policy] = self.windows[policy], []
            held = [r for i, r in zip(self.ids, self.ratings, strict=True) if i != LEARNER]
            extra = {}
            if self.random_share > 0:
                vs_random, self.random_windows[policy] = self.random_windows[policy], []
                extra = {
                    "pool/random_win_rate": _win_rate(vs_random),
                    "pool/random_elo": self.random_rating,
                }
            return {
                "pool/win_rate": _win_rate(scores),
                "pool/games": len(scores),
                "pool/learner_elo": self.learner_ratings[policy],
                "pool/mean_elo": float(np.mean(held)) if held else math.nan,
                "pool/size": len(held),
                **extra,
            }

    def summary(self) -> dict[str, Any]:
        total = self.total
        games = total["games"]
        held = [(i, r) for i, r in zip(self.ids, self.ratings, strict=True) if i != LEARNER]
        out = {
            "opponents": "pool",
            "pool_games": games,
            "win_rate_vs_pool": total["wins"] / games if games else math.nan,
            "draw_rate_vs_pool": total["draws"] / games if games else math.nan,
            "learner_elo": self.learner_rating,
            "pool_size": len(held),
            "pool_snapshots": self.next_id,
            "pool_elo": {str(i): r for i, r in sorted(held)},
        }
        if self.random_share > 0:  # the training games against the random player
            n = sum(self.random_games)
            out["pool_random_games"] = n
            out["pool_random_win_rate"] = sum(self.random_wins) / n if n else math.nan
            out["pool_random_elo"] = self.random_rating
        return out

    def origins_by_id(self) -> dict[str, int]:
        """The policy each snapshot held came from, by snapshot id."""
        return {str(i): o for i, o in sorted(zip(self.ids, self.origins, strict=True)) if i >= 0}

    def policy_summary(self, policy: int) -> dict[str, Any]:
        """Policy ``policy``'s figures of a population's summary row."""
        t = self.totals[policy]
        return {
            "elo": self.learner_ratings[policy],
            "pool_games": t["games"],
            "win_rate_vs_pool": t["wins"] / t["games"] if t["games"] else math.nan,
            "live_games": self.live_games[policy],
            "snapshots_held": sum(
                o == policy for i, o in zip(self.ids, self.origins, strict=True) if i >= 0
            ),
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything the pool is, for an exact resume: its snapshots' parameters too, and
        each policy's figures (one policy's: a population of one)."""
        with self.lock:
            return {
                "ids": list(self.ids),
                "ratings": list(self.ratings),
                "params": [torch.from_numpy(self.store.params(b)) for b in range(len(self.ids))],
                "next_id": self.next_id,
                "origins": list(self.origins),
                "learner_ratings": list(self.learner_ratings),
                "updates": list(self.updates_of),
                "wins": list(self.wins_of),
                "games": list(self.games_of),
                "totals": [dict(t) for t in self.totals],
                "live_games": list(self.live_games),
                "random_rating": self.random_rating,
                "random_games": list(self.random_games),
                "random_wins": list(self.random_wins),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A pool as :meth:`state_dict` gives it, or as one-policy runs saved it before
        populations had pools (one learner's figures, under names of their own)."""
        if "learner_rating" in state:  # the earlier one-policy layout
            state = {
                **state,
                "origins": [0 if int(i) >= 0 else LEARNER for i in state["ids"]],
                "learner_ratings": [state["learner_rating"]],
                "updates": [state["updates"]],
                "wins": [state["wins"]],
                "games": [state["games"]],
                "totals": [state["total"]],
                "live_games": [0],
            }
        self.ids = [int(i) for i in state["ids"]]
        self.ratings = [float(r) for r in state["ratings"]]
        for b, (sid, params) in enumerate(zip(self.ids, state["params"], strict=True)):
            if sid != LEARNER:
                self.store.write(b, sid, torch.as_tensor(params).numpy())
        self.next_id = int(state["next_id"])
        self.origins = [int(o) for o in state["origins"]]
        self.learner_ratings = [float(r) for r in state["learner_ratings"]]
        self.updates_of = [int(u) for u in state["updates"]]
        self.wins_of = [int(w) for w in state["wins"]]
        self.games_of = [int(g) for g in state["games"]]
        self.totals = [{k: int(v) for k, v in t.items()} for t in state["totals"]]
        self.live_games = [int(n) for n in state["live_games"]]
        if "random_rating" in state:  # saved before --pool-random: no games against it
            self.random_rating = float(state["random_rating"])
            self.random_games = [int(n) for n in state["random_games"]]
            self.random_wins = [int(n) for n in state["random_wins"]]


class Opponents:
    """An actor's frozen snapshots: a network per snapshot its games play, copied from the
    pool's store when a game draws it (and dropped once no game plays it), that acts for the
    snapshot's seats with a generator of its own; and the random player (``RANDOM_PLAYER``),
    uniform over each row's legal moves (the observation's last ``actions`` entries), with a
    numpy generator of its own."""

    def __init__(self, make: Any, store: PoolStore, seed: int, actions: int):
        """``make()``: a frozen acting network and its flat view (runtime.actor.frozen_net);
        ``actions``: the game's actions, whose mask ends each observation (the random
        player's)."""
        self.make, self.store, self.actions = make, store, actions
        self.nets: dict[int, tuple[Any, FlatParams]] = {}
        self.generator = torch.Generator().manual_seed(seed)
        self.rng = np.random.default_rng(seed)

    def ids(self) -> np.ndarray:
        """The snapshots in the pool now."""
        ids = self.store.ids()
        return ids[ids != LEARNER]

    def load(self, sid: int) -> bool:
        """Hold snapshot ``sid``; False if the pool no longer has it (draw again)."""
        if sid in self.nets:
            return True
        net = self.make()
        if not self.store.read(sid, net[1].read_from):
            return False
        self.nets[sid] = net
        return True

    def keep(self, playing: np.ndarray) -> None:
        """Drop the snapshots no game plays any more."""
        for sid in set(self.nets) - {int(s) for s in playing}:
            del self.nets[sid]

    @torch.no_grad()
    def act(self, obs: torch.Tensor, rows: np.ndarray, player: np.ndarray, actions: Any) -> None:
        """The actions of the snapshots' ``rows`` into ``actions``, one forward per snapshot."""
        for sid in np.unique(player[rows]):
            mine = rows[player[rows] == sid]
            if sid == RANDOM_PLAYER:
                for r in mine:
                    actions[r] = int(self.rng.choice(legal(obs[r].numpy(), self.actions)))
                continue
            action, _ = self.nets[int(sid)][0].act(obs[mine], generator=self.generator)
            actions[mine] = action.numpy()

    def state_dict(self) -> dict[str, Any]:
        ids = sorted(self.nets)
        params = []
        for sid in ids:
            vector = np.empty(self.nets[sid][1].numel, np.float32)
            self.nets[sid][1].write_to(vector)
            params.append(torch.from_numpy(vector))
        return {
            "opponent_generator": self.generator.get_state(),
            "opponent_rng": self.rng.bit_generator.state,
            "opponent_ids": ids,
            "opponent_params": params,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["opponent_generator"])
        if "opponent_rng" in state:  # saved before the random player
            self.rng.bit_generator.state = state["opponent_rng"]
        self.nets = {}
        for sid, params in zip(state["opponent_ids"], state["opponent_params"], strict=True):
            net = self.make()
            net[1].read_from(torch.as_tensor(params).numpy())
            self.nets[int(sid)] = net
