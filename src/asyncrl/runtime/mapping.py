"""Which policy acts for which of an actor's rows, asked by its rollout loop at every step.

A row is one acting seat of the actor's batch: today one env (with many agents in an env, one
agent of it). Every policy has a rollout slot, whose columns are rows; the mapping says which
rows each policy acts for now (:meth:`PolicyMapping.groups`), where they lie in its slot, and
draws again where episodes end. A one-policy run is the fixed mapping of one policy: its slot
holds every row, in order, and nothing is ever drawn (docs: Concepts, actors, learner, slots).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from asyncrl.envs.pettingzoo import check_plays, per_agent, policy_index
from asyncrl.learning.population import policy_envs
from asyncrl.runtime.pool import RANDOM_PLAYER

MAPPING_SEED = 31337  # the random mapping's draws: an actor's first env seed + this


class Group(NamedTuple):
    """The rows one policy acts for."""

    policy: int
    rows: slice | np.ndarray  # the actor's rows (a slice where it can be: views, no copies)
    columns: slice | np.ndarray  # where those rows lie in the policy's slot
    ids: np.ndarray  # ``rows`` as indices (what a joint forward gathers by)
    # every row, in order, into every column: arrays may go whole (no indexing); False is safe
    whole: bool


class PolicyMapping:
    """Which policy acts for each of ``rows`` rows, among ``policies``. ``policy[r]`` is row
    ``r``'s policy now and ``column[r]`` its column in that policy's slot.

    ``marks_own``: a policy's slot holds every row, also at steps another policy acted for it;
    the steps it acted are marked in its slot's ``own`` (its learner drops the rest). Else a
    policy's slot holds exactly the rows it acts for, at every step."""

    marks_own = False

    def __init__(self, rows: int, policies: int, policy: np.ndarray, column: np.ndarray):
        self.rows, self.policies = rows, policies
        self.policy, self.column = policy, column

    def groups(self) -> list[Group]:
        """Each policy's rows at this step, every policy in order (a group may be empty)."""
        raise NotImplementedError

    def slot_rows(self, policy: int) -> slice:
        """The rows ``policy``'s slot holds, in the order of its columns."""
        raise NotImplementedError

    def of(self, rows: np.ndarray) -> list[Group]:
        """``rows`` (indices) by the policy acting for them now, policies in order (none
        empty)."""
        if not rows.size:
            return []
        policy = self.policy[rows]
        out = []
        for p in range(self.policies):
            mine = rows[policy == p]
            if mine.size:
                out.append(Group(p, mine, self.column[mine], mine, False))
        return out

    def outcomes(self, groups: list[Group]) -> list[Group]:
        """The rows whose step outcomes (rewards, episode ends) each policy's slot receives at a
        step where ``groups`` acted: those it acted for."""
        return groups

    def episodes_ended(self, rows: np.ndarray) -> None:
        """The episodes of ``rows`` (indices) ended at this step: their next ones may start
        with other policies."""

    def state_dict(self) -> dict[str, Any]:
        """What a resumed actor needs to map as this one would go on (its part of the actor's
        checkpoint state)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class FixedMapping(PolicyMapping):
    """Row k to policy k mod P, for good (``--policy-mapping fixed``): policy p's slot holds
    rows p, p + P, p + 2P, ...; one policy's holds them all."""

    def __init__(self, rows: int, policies: int):
        index = np.arange(rows)
        super().__init__(rows, policies, index % policies, index // policies)
        parts = [policy_envs(rows, policies, p) for p in range(policies)]
        self._groups = [
            Group(p, part, slice(None), index[part], index[part].size == rows)
            for p, part in enumerate(parts)
        ]

    def groups(self) -> list[Group]:
        return self._groups

    def slot_rows(self, policy: int) -> slice:
        return self._groups[policy].rows  # type: ignore[return-value]


class HeldRows(PolicyMapping):
    """Rows each held by the policy ``policy[r]`` names until it is drawn again: every
    policy's slot holds every row, the steps it acted marked ``own``. The policies' groups are
    kept until the next draw (which sets ``_groups`` to None)."""

    marks_own = True
    _groups: list[Group] | None = None

    def groups(self) -> list[Group]:
        if self._groups is None:
            every = [np.flatnonzero(self.policy == p) for p in range(self.policies)]
            K = self.rows
            self._groups = [Group(p, r, r, r, r.size == K) for p, r in enumerate(every)]
        return self._groups

    def slot_rows(self, policy: int) -> slice:
        return slice(None)


class RandomMapping(HeldRows):
    """A policy drawn for each row at the start of each of its episodes (``--policy-mapping
    random``), uniformly, from the mapping's own generator (seeded with ``seed``)."""

    def __init__(self, rows: int, policies: int, seed: int):
        self.rng = np.random.default_rng(seed)
        super().__init__(rows, policies, self.rng.integers(policies, size=rows), np.arange(rows))

    def episodes_ended(self, rows: np.ndarray) -> None:
        self.policy[rows] = self.rng.integers(self.policies, size=rows.size)
        self._groups = None

    def state_dict(self) -> dict[str, Any]:
        return {"owner": self.policy.copy(), "mapping_rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "owner" in state:  # a checkpoint of a run with this mapping
            # a copy, as int64 (a checkpoint holds numpy arrays as tensors)
            self.policy = torch.as_tensor(state["owner"]).numpy().astype(np.int64)
            self.rng.bit_generator.state = state["mapping_rng"]
            self._groups = None


class SharedSeats(PolicyMapping):
    """Rows that are (env, agent) seats of a multi-agent env, all acted for by one policy
    (parameter sharing; on a two-player game, self-play against the current self). At each step
    it acts for the seats whose agent acts (``active()``, the env's); its slot holds every seat,
    the steps it acted marked ``own``, and every seat's rewards and episode ends, also at steps
    its agent waited (a loss comes at the opponent's move)."""

    marks_own = True

    def __init__(self, rows: int, active: Callable[[], np.ndarray]):
        super().__init__(rows, 1, np.zeros(rows, np.int64), np.arange(rows))
        self.active = active
        self._every = [Group(0, slice(None), slice(None), np.arange(rows), True)]

    def groups(self) -> list[Group]:
        ids = np.flatnonzero(self.active())
        return [Group(0, ids, ids, ids, False)]

    def slot_rows(self, policy: int) -> slice:
        return slice(None)

    def outcomes(self, groups: list[Group]) -> list[Group]:
        return self._every


class PerGame:
    """Seats drawn per game and held until every seat of the game has ended (the env then
    starts it anew): ``finished`` marks the seats whose episode ended in the current game;
    ``_draw(games)`` draws the games given anew."""

    agents: int
    finished: np.ndarray

    def _draw(self, games: np.ndarray) -> None:
        raise NotImplementedError

    def episodes_ended(self, rows: np.ndarray) -> None:
        self.finished[rows] = True
        over = self.finished.reshape(-1, self.agents).all(axis=1)
        if over.any():
            self._draw(np.flatnonzero(over))


class HeldSeats(PerGame):
    """Seats of multi-agent games held per game by the policies of a :class:`HeldRows`
    mapping: each policy acts for its seats whose agent acts (``active()``); its slot holds
    every seat, and its seats' rewards and episode ends also at steps they waited (a loss
    comes at the opponent's move)."""

    active: Callable[[], np.ndarray]

    def groups(self) -> list[Group]:
        active = self.active()
        out = []
        for g in super().groups():  # type: ignore[misc]
            ids = g.ids[active[g.ids]]
            out.append(Group(g.policy, ids, ids, ids, False))
        return out

    def outcomes(self, groups: list[Group]) -> list[Group]:
        return super().groups()  # type: ignore[misc]  # every seat a policy holds


class PoolSeats(PerGame, SharedSeats):
    """Seats of two-player (or N-player) games of ``policies`` learning policies against each
    other and a pool of frozen snapshots (``--opponents pool``; one policy: against its
    snapshots only). At each game's start, one seat is drawn for a learning policy, drawn
    uniformly among the P, and the other seats for its opponent, drawn uniformly among the
    other P - 1 live policies and the pool's snapshots (a policy never meets itself live: that
    is ``--opponents self``), or in a share ``random_share`` of the games the random player
    (``RANDOM_PLAYER``, ``--pool-random``), all from the mapping's own generator; held until
    every seat of the game has ended (the env then starts it anew). ``player[r]``: who plays
    row ``r`` (-1 - p: policy p, live; else a snapshot id or the random player);
    ``opponents``: the actor's :class:`asyncrl.runtime.pool.Opponents`. A live policy acts for
    its seats whose agent acts; every policy's slot marks its steps ``own`` and holds every
    seat's rewards and ends (``seat_player`` says whose they were), so a live opponent's moves
    are its own learner's samples; a snapshot's are nobody's. Only live seats' episodes are
    reported (:meth:`of`)."""

    def __init__(
        self,
        rows: int,
        agents: int,
        policies: int,
        active: Callable[[], np.ndarray],
        opponents: Any,
        seed: int,
        random_share: float = 0.0,
    ):
        super().__init__(rows, active)
        self.policies, self.agents, self.opponents = policies, agents, opponents
        self.random_share = random_share
        self.rng = np.random.default_rng(seed)
        self.player = np.full(rows, -1, np.int64)
        self.finished = np.zeros(rows, bool)  # seats whose episode ended in the current game
        every = np.arange(rows)
        self._every = [Group(p, slice(None), slice(None), every, True) for p in range(policies)]
        self._draw(np.arange(rows // agents))

    def _draw(self, games: np.ndarray) -> None:
        for g in games:
            seat = int(self.rng.integers(self.agents))
            learner = int(self.rng.integers(self.policies))  # one policy: no draw is made
            # --pool-random: the random player in a share of the games (no draw without it)
            if self.random_share > 0 and self.rng.random() < self.random_share:
                opponent = RANDOM_PLAYER
            else:
                opponent = self._opponent(learner)
            first = int(g) * self.agents
            self.player[first : first + self.agents] = opponent
            self.player[first + seat] = -1 - learner
            self.finished[first : first + self.agents] = False
        self._seated()
        self.opponents.keep(self.player[self.player >= 0])

    def _opponent(self, learner: int) -> int:
        """Live policy ``learner``'s opponent, uniform among the other live policies and the
        pool's snapshots (a snapshot is copied as it is drawn)."""
        others = self.policies - 1  # the live opponents a learning seat may meet
        while True:  # a snapshot replaced between the look and the copy: draw again
            ids = self.opponents.ids()
            k = int(self.rng.integers(others + ids.size))
            if k < others:  # the k-th live policy but the learner
                return -1 - (k + (k >= learner))
            if self.opponents.load(int(ids[k - others])):
                return int(ids[k - others])

    def _seated(self) -> None:
        """What follows from ``player`` until the next draw: the policy of each live seat (a
        snapshot's: unused, the seat is no policy's) and each policy's seats, so that a step
        does not search ``player`` again."""
        self.policy = np.maximum(-1 - self.player, 0)
        self.held = [np.flatnonzero(self.player == -1 - p) for p in range(self.policies)]

    def groups(self) -> list[Group]:
        active = self.active()
        out = []
        for p, rows in enumerate(self.held):
            ids = rows[active[rows]]
            out.append(Group(p, ids, ids, ids, False))
        return out

    def opponent_rows(self) -> np.ndarray:
        """The snapshots' seats that act at this step."""
        return np.flatnonzero(self.active() & (self.player >= 0))

    def of(self, rows: np.ndarray) -> list[Group]:
        return super().of(rows[self.player[rows] < 0])

    def state_dict(self) -> dict[str, Any]:
        return {
            "pool_player": self.player.copy(),
            "pool_finished": self.finished.copy(),
            "mapping_rng": self.rng.bit_generator.state,
            **self.opponents.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "pool_player" in state:
            self.player = torch.as_tensor(state["pool_player"]).numpy().astype(np.int64)
            self.finished = torch.as_tensor(state["pool_finished"]).numpy().astype(bool)
            self.rng.bit_generator.state = state["mapping_rng"]
            self.opponents.load_state_dict(state)
            self._seated()


class PopulationSeats(HeldSeats, RandomMapping):
    """Seats of multi-agent games shared by a population (``--policies P``, ``--policy-mapping
    random``): the random mapping, drawn per game -- at each game's start a policy for every
    seat of it, uniformly among the P (so a policy meets each other one and itself), held until
    every seat of the game has ended (the env then starts it anew). Its learner learns from
    its seats' moves only."""

    def __init__(
        self, rows: int, agents: int, policies: int, active: Callable[[], np.ndarray], seed: int
    ):
        super().__init__(rows, policies, seed)  # every seat's first policy, drawn
        self.agents, self.active = agents, active
        self.finished = np.zeros(rows, bool)  # seats whose episode ended in the current game

    def _draw(self, games: np.ndarray) -> None:
        for g in games:
            seats = slice(int(g) * self.agents, (int(g) + 1) * self.agents)
            self.policy[seats] = self.rng.integers(self.policies, size=self.agents)
            self.finished[seats] = False
        self._groups = None

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "seat_finished": self.finished.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if "seat_finished" in state:
            self.finished = torch.as_tensor(state["seat_finished"]).numpy().astype(bool)


class AgentSeats(HeldSeats, HeldRows):
    """Seats of multi-agent games whose policy ``choose(agent id, episode)`` gives at each
    game's start, for every agent of it: per agent (``--policies P`` with the fixed mapping:
    seat i of every game to policy i mod P) or a user's function (``asyncrl.train(...,
    policy_mapping=fn)``). ``episode`` counts the games this actor has started, from 0 (its
    first K / N in seat order). The choice holds until every seat of the game has ended."""

    def __init__(
        self,
        rows: int,
        names: list[str],
        policies: int,
        active: Callable[[], np.ndarray],
        choose: Callable[[str, int], int],
        spec: Any = None,
    ):
        super().__init__(rows, policies, np.zeros(rows, np.int64), np.arange(rows))
        self.names, self.agents, self.active, self.choose = list(names), len(names), active, choose
        self.spec = spec  # the run's EnvSpec: each choice must fit the agent's spaces
        self.episode = 0  # games this actor has started
        self.finished = np.zeros(rows, bool)  # seats whose episode ended in the current game
        self._draw(np.arange(rows // self.agents))

    def _draw(self, games: np.ndarray) -> None:
        for g in games:
            first = int(g) * self.agents
            for i, name in enumerate(self.names):
                p = policy_index(self.choose(name, self.episode), name, self.episode, self.policies)
                if self.spec is not None:
                    check_plays(self.spec, i, name, p, self.episode)
                self.policy[first + i] = p
            self.finished[first : first + self.agents] = False
            self.episode += 1
        self._groups = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "agent_policy": self.policy.copy(),
            "agent_finished": self.finished.copy(),
            "agent_episode": self.episode,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "agent_policy" in state:  # a checkpoint of a run with this mapping
            self.policy = torch.as_tensor(state["agent_policy"]).numpy().astype(np.int64)
            self.finished = torch.as_tensor(state["agent_finished"]).numpy().astype(bool)
            self.episode = int(state["agent_episode"])
            self._groups = None


def policy_mapping(
    kind: str | Callable[[str, int], int],
    rows: int,
    policies: int,
    seed: int,
    seats: Callable[[], np.ndarray] | None = None,
    agents: int = 1,
    names: list[str] | None = None,
    spec: Any = None,
) -> PolicyMapping:
    """The mapping ``kind`` names (fixed, random or a user's function of (agent id, episode):
    ``settings.acting_mapping``) of an actor's ``rows`` to ``policies``; ``seed``: the actor's
    first env seed. Rows that are a multi-agent env's seats (``seats()``: those whose agent
    acts next; ``agents`` a game, named ``names``): a population's :class:`PopulationSeats`
    under the random mapping, else :class:`AgentSeats` (per agent under the fixed mapping --
    one policy: every seat, parameter sharing -- or the function's choice, which must fit the
    agent's spaces in ``spec``, the run's EnvSpec)."""
    if seats is not None:
        if kind == "random":
            return PopulationSeats(rows, agents, policies, seats, seed + MAPPING_SEED)
        names = names if names is not None else [str(i) for i in range(agents)]
        choose = per_agent(names, policies) if kind == "fixed" else kind
        return AgentSeats(rows, names, policies, seats, choose, spec)  # type: ignore[arg-type]
    if kind == "random":
        return RandomMapping(rows, policies, seed + MAPPING_SEED)
    return FixedMapping(rows, policies)
