"""Agents of different spaces mapped to policies of their own spaces (issue #55): on
tests/spaces_game.py ("small": width 2, 2 actions; "big": width 3 + a mask of its 3 actions),
each policy's network, slots and learner have its agents' widths and actions, each learner
receives only its agents' samples (tagged), a mapping that gives one policy agents of different
spaces is refused in one line, and a resumed run ends bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import asyncrl
from asyncrl.config import ConfigError
from asyncrl.envs import check_env, make_vector_env
from asyncrl.envs.pettingzoo import play_vs
from asyncrl.rundir import load_checkpoint, policy_dir
from asyncrl.runtime.faults import ActorError
from test_agent_mapping import RUN, _record_tags, _refused, _resumed_as_unbroken

pytest.importorskip("pettingzoo")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GAME = "pettingzoo:spaces_game"


def big_first(agent: str, episode: int) -> int:
    """A user's mapping: "big" plays policy 0 and "small" policy 1 (the fixed mapping's
    reverse)."""
    return 0 if agent == "big" else 1


def swap_at_game_2(agent: str, episode: int) -> int:
    """Per agent until the actor's third game, then reversed: spaces that stop fitting."""
    return int(episode >= 2) ^ int(agent == "big")


def test_each_seats_row_holds_its_own_agents_observation_padded_to_the_widest():
    spec = check_env(GAME)
    assert (spec.obs_shape, spec.n_actions, spec.agents) == ((6,), 3, 2)
    assert [tuple(s) for s in spec.seats] == [(2, 2, False), (6, 3, True)]
    obs, _ = make_vector_env(GAME, 2).reset(seed=[0, 1])
    assert obs.tolist() == [[1, 0, 0, 0, 0, 0], [2, 0, 0.5, 1, 1, 1]]


def _width_tags_actions(slot) -> set[tuple]:
    """A slot's observation width, and its own steps' tags and largest action."""
    tags = tuple(np.unique(slot.obs[:-1][slot.own][:, 0]).tolist())
    return {(slot.obs.shape[-1], tags, int(slot.actions[slot.own].max()))}


SMALL, BIG = (2, (1.0,), 1), (6, (2.0,), 2)  # (width, tags, largest action) of each agent's


@pytest.mark.parametrize(
    ("backend", "mode", "mapping", "expected"),
    [
        ("inline", "sync", "fixed", {0: {SMALL}, 1: {BIG}}),
        ("inline", "async", "fixed", {0: {SMALL}, 1: {BIG}}),
        ("process", "sync", "fixed", {0: {SMALL}, 1: {BIG}}),
        ("thread", "async", "fixed", {0: {SMALL}, 1: {BIG}}),
        ("inline", "async", big_first, {0: {BIG}, 1: {SMALL}}),
    ],
    ids=["inline-sync", "inline-async", "process-sync", "thread-async", "inline-function"],
)
def test_two_policies_of_different_spaces_train_each_on_its_own_agents_samples(
    tmp_path, monkeypatch, backend, mode, mapping, expected
):
    """Each learner's samples are its agents' only, as wide as theirs, with their actions;
    big's mask is honoured (the env raises at an illegal action: no actor restarts); each
    saved policy acts on its own agent's observations."""
    seen = _record_tags(monkeypatch, _width_tags_actions)
    run_dir = tmp_path / "run"
    result = asyncrl.train(
        GAME, backend=backend, mode=mode, policy_mapping=mapping, run_dir=str(run_dir), **RUN
    )
    assert seen == expected
    steps = [p["env_steps"] for p in result.summary["population"]]
    assert steps[0] == steps[1] and sum(steps) == result.summary["env_steps"] >= 1536
    assert result.summary["actor_restarts"] == 0
    if mapping != "fixed":  # a function's answers are not saved: its policies' spaces neither
        with pytest.raises(ConfigError, match="^policy_mapping: the agents of .* by a function"):
            asyncrl.load(run_dir, policy=0)
        return
    small, big = asyncrl.load(run_dir, policy=0), asyncrl.load(run_dir, policy=1)
    assert small.act(np.array([1.0, 0.0])) in (0, 1)
    assert big.act(np.array([2.0, 1.0, 0.5, 1, 1, 0])) in (0, 1)  # action 2 masked


def test_a_mapping_that_gives_one_policy_agents_of_different_spaces_is_refused(tmp_path):
    msg = _refused(tmp_path, env=GAME, backend="inline", policies=1)
    assert msg.startswith("policies: the agents of pettingzoo:spaces_game have different spaces")
    assert "'small': observation width 2, 2 actions" in msg
    assert "allowed: --policies 2 (one per agent)" in msg
    msg = _refused(tmp_path, env=GAME, backend="inline", policy_mapping=lambda a, e: 1)
    assert msg.startswith("policy_mapping: policy 0 plays no agent of pettingzoo:spaces_game")
    msg = _refused(tmp_path, env=GAME, backend="inline", policy_mapping=lambda a, e: 0)
    assert msg.startswith("policy_mapping: policy 0 would play agents 'small'")
    assert "and 'big' (observation width 6, 3 masked actions)" in msg
    msg = _refused(tmp_path, env=GAME, backend="inline", policy_mapping="random")
    assert msg.startswith("policy_mapping: random draws any policy for any agent")
    msg = _refused(tmp_path, env=GAME, backend="inline", policies=1, opponents="pool")
    assert msg.startswith("opponents: the agents of pettingzoo:spaces_game have different")
    assert _refused(tmp_path, env=GAME, backend="inline", pbt=True).startswith("pbt: the agents")
    msg = _refused(tmp_path, env=GAME, backend="inline", algo="dqn", policies=1)
    assert msg.startswith("algo: dqn trains one policy") and msg.endswith("(use --algo ppo)")


def test_a_game_whose_players_differ_in_spaces_is_not_played_against_an_opponent():
    """A policy plays either seat of a game against an opponent: not where their spaces
    differ (the run's summary plays no games; play_vs refuses in one line)."""
    assert not check_env(GAME).games
    with pytest.raises(ConfigError, match="^env: the players of pettingzoo:spaces_game have"):
        play_vs(GAME, lambda row: 0, "random", games=2)


def test_a_function_that_later_gives_a_policy_an_agent_of_other_spaces_ends_the_run(tmp_path):
    """At episode 0 the function fits; at the actor's third game it gives "small" the policy
    of "big"'s spaces: the actor fails with the mapping's one-line reason (as at an index out
    of range), and with no restarts the run ends with it."""
    with pytest.raises(ActorError, match="policy_mapping: the function gave agent 'small'"):
        asyncrl.train(
            **{**RUN, "env": GAME, "backend": "inline", "mode": "async", "actor_restarts": 0},
            policy_mapping=swap_at_game_2, run_dir=str(tmp_path / "r"),
        )  # fmt: skip


def test_a_resumed_run_of_different_spaces_ends_bit_for_bit_where_the_unbroken_one_ends(
    tmp_path,
):
    """Inline, sync: S steps, then --resume to 2S, against 2S at once; the run's checkpoint
    (the actors' games in progress) and each policy's (learner) are identical."""
    _resumed_as_unbroken(tmp_path, GAME)


def test_policies_of_different_spaces_train_on_processes_exactly_as_inline(tmp_path):
    """Sync mode: the process backend's actors (each policy's slots at its own width, in
    shared memory, its learner in a process of its own) leave every policy with the inline
    run's parameters, bit for bit."""
    for backend in ("inline", "process"):
        result = asyncrl.train(
            GAME, backend=backend, mode="sync", run_dir=str(tmp_path / backend), **RUN
        )
        assert result.summary["actor_restarts"] == 0
    for p in range(2):
        inline, process = (
            load_checkpoint(policy_dir(tmp_path / b, p))["policy"] for b in ("inline", "process")
        )
        # each policy's own observation width and action count
        assert (inline["obs_norm.mean"].numel(), len(inline["pi.4.bias"])) == ((2, 2), (6, 3))[p]
        assert inline.keys() == process.keys()
        for key, ref in inline.items():
            assert torch.equal(process[key], ref), (p, key)
