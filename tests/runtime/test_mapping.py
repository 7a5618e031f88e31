"""The policy mapping an actor's rollout loop asks at every step: which rows (envs) each policy
acts for, where they lie in its slot, and when it draws again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asyncrl.runtime.mapping import (
    MAPPING_SEED,
    AgentSeats,
    FixedMapping,
    PopulationSeats,
    RandomMapping,
    policy_mapping,
)
from asyncrl.settings import TrainConfig, acting_mapping


def _rows(index, n: int) -> list[int]:
    return np.arange(n)[index].tolist()


def test_the_fixed_mapping_gives_row_k_to_policy_k_mod_p_in_slot_column_k_div_p():
    mapping = policy_mapping("fixed", 7, 3, seed=5)
    assert isinstance(mapping, FixedMapping) and not mapping.marks_own
    groups = mapping.groups()
    assert [g.policy for g in groups] == [0, 1, 2]
    assert [_rows(g.rows, 7) for g in groups] == [[0, 3, 6], [1, 4], [2, 5]]
    assert [g.ids.tolist() for g in groups] == [[0, 3, 6], [1, 4], [2, 5]]
    assert not any(g.whole for g in groups)
    # each policy's slot holds exactly its rows, in their order
    assert [_rows(g.columns, len(g.ids)) for g in groups] == [[0, 1, 2], [0, 1], [0, 1]]
    assert [_rows(mapping.slot_rows(p), 7) for p in range(3)] == [[0, 3, 6], [1, 4], [2, 5]]
    # rows that ended an episode, by policy, with their columns in its slot
    by_policy = [
        (g.policy, g.rows.tolist(), g.columns.tolist()) for g in mapping.of(np.array([1, 5, 6, 3]))
    ]
    assert by_policy == [(0, [6, 3], [2, 1]), (1, [1], [0]), (2, [5], [1])]
    assert mapping.of(np.array([], dtype=np.int64)) == []


def test_the_fixed_mapping_never_draws():
    mapping = FixedMapping(6, 2)
    before = [(g.policy, _rows(g.rows, 6)) for g in mapping.groups()]
    mapping.episodes_ended(np.arange(6))
    assert [(g.policy, _rows(g.rows, 6)) for g in mapping.groups()] == before
    assert mapping.state_dict() == {}


def test_one_policy_is_the_fixed_mapping_of_one_policy_with_every_row_in_order():
    mapping = policy_mapping("fixed", 4, 1, seed=0)
    (group,) = mapping.groups()
    assert group.policy == 0 and group.ids.tolist() == [0, 1, 2, 3] and group.whole
    x = np.arange(4.0)
    # slices, not copies: a one-policy rollout writes its slot without gathering
    assert np.shares_memory(x[group.rows], x) and np.shares_memory(x[group.columns], x)
    assert [(g.rows.tolist(), g.columns.tolist()) for g in mapping.of(np.array([3, 1]))] == [
        ([3, 1], [3, 1])
    ]
    # a one-policy run's actors follow the fixed mapping, whatever --policy-mapping says
    assert acting_mapping(TrainConfig(policy_mapping="random")) == "fixed"
    assert acting_mapping(TrainConfig(policy_mapping="random", policies=2)) == "random"
    assert acting_mapping(TrainConfig(policies=2)) == "fixed"


def test_the_random_mapping_draws_from_its_own_seeded_generator_at_episode_ends_only():
    K, P, seed = 12, 3, 40
    mapping = policy_mapping("random", K, P, seed)
    assert isinstance(mapping, RandomMapping) and mapping.marks_own
    rng = np.random.default_rng(seed + MAPPING_SEED)  # the draws the actor has always made
    owner = rng.integers(P, size=K)
    np.testing.assert_array_equal(mapping.policy, owner)
    episodes = np.random.default_rng(0)  # which rows end an episode at each step
    for step in range(20):
        groups = mapping.groups()
        assert [g.policy for g in groups] == list(range(P))  # empty ones too
        for g in groups:  # every row in its own policy's group; a slot holds every row
            assert g.ids.tolist() == np.flatnonzero(owner == g.policy).tolist()
            assert g.rows.tolist() == g.columns.tolist() == g.ids.tolist()
            assert g.whole == (g.ids.size == K)  # every row drew this policy
            assert mapping.slot_rows(g.policy) == slice(None)
        assert mapping.groups() == groups  # asked again without an episode end: the same
        ended = np.flatnonzero(episodes.random(K) < 0.3) if step % 2 else np.array([], np.int64)
        mapping.episodes_ended(ended)
        owner[ended] = rng.integers(P, size=ended.size)
        np.testing.assert_array_equal(mapping.policy, owner)  # the others kept theirs
    assert len(np.unique(owner)) == P


def test_the_random_mapping_state_round_trips_also_as_a_checkpoint_holds_it():
    a = RandomMapping(8, 2, seed=1)
    a.episodes_ended(np.array([0, 3, 5]))
    saved = a.state_dict()
    assert set(saved) == {"owner", "mapping_rng"}  # the keys actors' checkpoints always had
    saved["owner"] = torch.as_tensor(saved["owner"])  # a checkpoint holds arrays as tensors
    b = RandomMapping(8, 2, seed=99)
    b.groups()  # a cache from before the load must not survive it
    b.load_state_dict(saved)
    assert b.policy.dtype == np.int64
    for _ in range(5):
        assert [g.ids.tolist() for g in b.groups()] == [g.ids.tolist() for g in a.groups()]
        for m in (a, b):
            m.episodes_ended(np.array([1, 2, 6]))
        np.testing.assert_array_equal(a.policy, b.policy)
    b.load_state_dict({})  # a checkpoint of a run without the random mapping: kept as is
    np.testing.assert_array_equal(a.policy, b.policy)


def test_a_populations_seats_are_drawn_per_game_and_held_until_every_seat_of_it_ended():
    """Four two-seat games, three policies: each game's seats drawn at its start; a policy
    acts for its seats whose agent acts, and its slot receives every seat it holds (a waiting
    seat's loss); a game's seats are drawn again only once both have ended."""
    active = np.array([1, 0, 0, 1, 1, 0, 0, 1], bool)
    m = policy_mapping("random", 8, 3, seed=5, seats=lambda: active, agents=2)
    assert isinstance(m, PopulationSeats) and m.marks_own
    first = m.policy.copy()
    for groups in (m.groups(), m.outcomes(m.groups())):
        assert [g.policy for g in groups] == [0, 1, 2]
        for g in groups:
            assert (m.policy[g.ids] == g.policy).all()  # each policy's rows only
    acted = np.concatenate([g.ids for g in m.groups()])
    assert sorted(acted.tolist()) == np.flatnonzero(active).tolist()
    held = np.concatenate([g.ids for g in m.outcomes(m.groups())])
    assert sorted(held.tolist()) == list(range(8))
    m.episodes_ended(np.array([0, 2, 3]))  # game 1 ended (both seats), game 0 only in part
    np.testing.assert_array_equal(m.policy[[0, 1, 4, 5, 6, 7]], first[[0, 1, 4, 5, 6, 7]])
    m.episodes_ended(np.array([1]))  # now game 0 too
    np.testing.assert_array_equal(m.policy[4:], first[4:])
    # many games: every policy meets every other, itself included
    pairs = set()
    for _ in range(200):
        m.episodes_ended(np.arange(8))
        pairs |= {tuple(sorted(m.policy[g : g + 2])) for g in range(0, 8, 2)}
    assert pairs == {(a, b) for a in range(3) for b in range(a, 3)}
    saved = {k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v
             for k, v in m.state_dict().items()}  # fmt: skip
    again = PopulationSeats(8, 2, 3, lambda: active, seed=99)
    again.load_state_dict(saved)
    for _ in range(5):
        for x in (m, again):
            x.episodes_ended(np.arange(8))
        np.testing.assert_array_equal(m.policy, again.policy)


def test_per_agent_seat_i_of_every_game_acts_for_policy_i_mod_p_and_holds_its_waiting_seats():
    """Three two-seat games, --policies 2 with the fixed mapping: seat 0 of every game is policy
    0's, seat 1 policy 1's; a policy acts for its seats whose agent acts, and its slot receives
    every seat it holds; the games' ends draw the same again. One policy: the same mapping,
    every seat its own (parameter sharing), acting for the seats whose agent acts."""
    active = np.array([1, 0, 0, 1, 1, 1], bool)
    m = policy_mapping("fixed", 6, 2, seed=0, seats=lambda: active, names=["a", "b"])
    assert isinstance(m, AgentSeats) and m.marks_own and m.slot_rows(1) == slice(None)
    assert m.policy.tolist() == [0, 1, 0, 1, 0, 1]
    assert [(g.policy, g.ids.tolist()) for g in m.groups()] == [(0, [0, 4]), (1, [3, 5])]
    held = [(g.policy, g.ids.tolist()) for g in m.outcomes(m.groups())]
    assert held == [(0, [0, 2, 4]), (1, [1, 3, 5])]
    m.episodes_ended(np.arange(6))
    assert m.policy.tolist() == [0, 1, 0, 1, 0, 1] and m.episode == 6
    shared = policy_mapping("fixed", 6, 1, seed=0, seats=lambda: active, agents=2)
    assert isinstance(shared, AgentSeats) and shared.policy.tolist() == [0] * 6
    assert [(g.policy, g.ids.tolist()) for g in shared.groups()] == [(0, [0, 3, 4, 5])]
    assert [g.ids.tolist() for g in shared.outcomes(shared.groups())] == [list(range(6))]


def test_a_users_function_chooses_per_game_from_agent_id_and_episode_and_resumes():
    """The function is asked at each game's start for each agent, with the count of games the
    actor has started; a game's choice holds until both its seats ended; the state resumes."""
    calls = []

    def swap(agent: str, episode: int) -> int:
        calls.append((agent, episode))
        return (episode + (agent == "b")) % 2

    active = np.ones(4, bool)
    m = policy_mapping(swap, 4, 2, seed=0, seats=lambda: active, names=["a", "b"])
    assert calls == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert m.policy.tolist() == [0, 1, 1, 0]
    m.episodes_ended(np.array([0, 2, 3]))  # game 1 over, game 0 half
    assert m.policy.tolist() == [0, 1, 0, 1] and calls[-1] == ("b", 2)
    saved = {k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v
             for k, v in m.state_dict().items()}  # fmt: skip
    again = AgentSeats(4, ["a", "b"], 2, lambda: active, swap)
    again.load_state_dict(saved)
    for x in (m, again):
        x.episodes_ended(np.arange(4))
    np.testing.assert_array_equal(m.policy, again.policy)
    assert m.episode == again.episode == 5


def test_a_function_that_answers_no_policy_index_mid_run_raises_naming_the_setting():
    active = np.ones(2, bool)
    m = policy_mapping(lambda agent, episode: episode, 2, 2, seed=0, seats=lambda: active,
                       names=["a", "b"])  # fmt: skip
    m.episodes_ended(np.arange(2))  # episode 1: fine
    with pytest.raises(ValueError, match=r"policy_mapping: the function returned 2 for agent 'a'"):
        m.episodes_ended(np.arange(2))
