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
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.nets import FlatParams
from asyncrl.runtime.transport import PoolStore

if TYPE_CHECKING:
    from asyncrl.settings import TrainConfig

ELO_K = 32.0  # the rating change of a game the winner was expected to lose even odds: K / 2
ELO_START = 1000.0  # the initial policy's rating and the learner's at the start
LEARNER = -1  # who plays a seat (slot field ``seat_player``): the learner, else a snapshot id
OPPONENT_SEED = 7727  # an actor's opponents sample with generator seed: first env seed + this


def elo_expected(rating: float, other: float) -> float:
    """The score (1 win, 0.5 draw, 0 loss) Elo expects of ``rating`` against ``other``."""
    return 1.0 / (1.0 + 10.0 ** ((other - rating) / 400.0))


def elo_update(learner: float, opponent: float, score: float) -> tuple[float, float]:
    """Both ratings after one game the learner scored ``score`` in (zero sum: what one gains,
    the other loses)."""
    change = ELO_K * (score - elo_expected(learner, opponent))
    return learner + change, opponent - change


def game_outcomes(slot: Any, agents: int) -> list[tuple[int, float]]:
    """(snapshot id, learner's score) of every game that ended in ``slot``, in step then seat
    order: a learner seat's episode return (``ep_returns``: only the learner's seats report one)
    and the snapshot that played the other seats of its game at that step. Score: the sign of
    the return (a zero-sum game's win, draw or loss) as 1, 0.5, 0."""
    ret = slot.ep_returns
    out = []
    for t, row in np.argwhere(~np.isnan(ret)):
        game = row - row % agents
        snapshot = int(slot.seat_player[t, game : game + agents].max())
        value = float(ret[t, row])
        out.append((snapshot, 1.0 if value > 0 else 0.5 if value == 0 else 0.0))
    return out


class OpponentPool:
    """The driver's side of the pool: which snapshot each buffer of the store holds, the
    ratings, when the next snapshot joins, and the figures of the games reported so far."""

    def __init__(self, cfg: TrainConfig, agents: int, store: PoolStore):
        self.store, self.agents = store, agents
        self.every, self.threshold = cfg.snapshot_every, cfg.snapshot_win_rate
        capacity = cfg.pool_size
        self.ids = [LEARNER] * capacity  # snapshot id per buffer (-1: empty)
        self.ratings = [math.nan] * capacity
        self.learner_rating = ELO_START
        self.next_id = 0
        self.updates = 0  # learner updates since the last snapshot
        self.wins = self.games = 0  # since the last snapshot (the threshold's)
        self.total = {"games": 0, "wins": 0, "draws": 0}
        self.window: list[float] = []  # scores since the last metrics row

    def snapshot(self, params: np.ndarray) -> int:
        """``params`` join the pool as a new snapshot rated as the learner is now, in an empty
        buffer or the oldest snapshot's; returns its id."""
        empty = [b for b, i in enumerate(self.ids) if i == LEARNER]
        index = empty[0] if empty else int(np.argmin(self.ids))
        sid, self.next_id = self.next_id, self.next_id + 1
        self.store.write(index, sid, params)
        self.ids[index], self.ratings[index] = sid, self.learner_rating
        self.updates = self.wins = self.games = 0
        return sid

    def record(self, slots: list[Any]) -> None:
        """The games that ended in a batch's slots: ratings, win counts."""
        where = {sid: b for b, sid in enumerate(self.ids) if sid != LEARNER}
        for slot in slots:
            for sid, score in game_outcomes(slot, self.agents):
                b = where.get(sid)
                if b is not None:  # a snapshot that left the pool meanwhile keeps no rating
                    self.learner_rating, self.ratings[b] = elo_update(
                        self.learner_rating, self.ratings[b], score
                    )
                self.games += 1
                self.wins += score == 1.0
                self.total["games"] += 1
                self.total["wins"] += score == 1.0
                self.total["draws"] += score == 0.5
                self.window.append(score)

    def updated(self, params: Any) -> bool:
        """After a learner update: a new snapshot (``params()``: the learner's parameters) if
        one is due. True if one joined."""
        self.updates += 1
        if self.updates < self.every:
            return False
        if self.threshold > 0 and (not self.games or self.wins / self.games < self.threshold):
            return False
        self.snapshot(params())
        return True

    def figures(self) -> dict[str, float]:
        """A metrics row's pool figures: win rate over the games since the last row, the
        ratings, the pool's size."""
        scores, self.window = self.window, []
        held = [r for i, r in zip(self.ids, self.ratings, strict=True) if i != LEARNER]
        return {
            "pool/win_rate": sum(s == 1.0 for s in scores) / len(scores) if scores else math.nan,
            "pool/games": len(scores),
            "pool/learner_elo": self.learner_rating,
            "pool/mean_elo": float(np.mean(held)) if held else math.nan,
            "pool/size": len(held),
        }

    def summary(self) -> dict[str, Any]:
        games = self.total["games"]
        held = [(i, r) for i, r in zip(self.ids, self.ratings, strict=True) if i != LEARNER]
        return {
            "opponents": "pool",
            "pool_games": games,
            "win_rate_vs_pool": self.total["wins"] / games if games else math.nan,
            "draw_rate_vs_pool": self.total["draws"] / games if games else math.nan,
            "learner_elo": self.learner_rating,
            "pool_size": len(held),
            "pool_snapshots": self.next_id,
            "pool_elo": {str(i): r for i, r in sorted(held)},
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything the pool is, for an exact resume: its snapshots' parameters too."""
        return {
            "ids": list(self.ids),
            "ratings": list(self.ratings),
            "params": [torch.from_numpy(self.store.params(b)) for b in range(len(self.ids))],
            "learner_rating": self.learner_rating,
            "next_id": self.next_id,
            "updates": self.updates,
            "wins": self.wins,
            "games": self.games,
            "total": dict(self.total),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ids = [int(i) for i in state["ids"]]
        self.ratings = [float(r) for r in state["ratings"]]
        for b, (sid, params) in enumerate(zip(self.ids, state["params"], strict=True)):
            if sid != LEARNER:
                self.store.write(b, sid, torch.as_tensor(params).numpy())
        self.learner_rating = float(state["learner_rating"])
        self.next_id, self.updates = int(state["next_id"]), int(state["updates"])
        self.wins, self.games = int(state["wins"]), int(state["games"])
        self.total = {k: int(v) for k, v in state["total"].items()}


class Opponents:
    """An actor's frozen snapshots: a network per snapshot its games play, copied from the
    pool's store when a game draws it (and dropped once no game plays it), that acts for the
    snapshot's seats with a generator of its own."""

    def __init__(self, make: Any, store: PoolStore, seed: int):
        """``make()``: a frozen acting network and its flat view (runtime.actor.frozen_net)."""
        self.make, self.store = make, store
        self.nets: dict[int, tuple[Any, FlatParams]] = {}
        self.generator = torch.Generator().manual_seed(seed)

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
            "opponent_ids": ids,
            "opponent_params": params,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["opponent_generator"])
        self.nets = {}
        for sid, params in zip(state["opponent_ids"], state["opponent_params"], strict=True):
            net = self.make()
            net[1].read_from(torch.as_tensor(params).numpy())
            self.nets[int(sid)] = net
