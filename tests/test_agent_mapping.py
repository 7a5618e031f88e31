"""Agents mapped to policies (issue #55) end to end: per agent (``--policies P`` with the fixed
mapping: seat i to policy i mod P), a user's function of (agent id, episode) from Python, and
``policies_to_train`` (the others act but never update); each learner receives only its
agents' samples, and bad settings are refused in one line before anything starts."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

import asyncrl
from asyncrl.config import ConfigError
from asyncrl.rundir import load_checkpoint, policy_dir
from asyncrl.runtime import learners
from asyncrl.runtime.learners import policy_learner
from asyncrl.runtime.trainer import prepare
from asyncrl.settings import TrainConfig
from test_resume import _differences

pytest.importorskip("pettingzoo")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GAME = "pettingzoo:tagged_game"  # tests/tagged_game.py: "left" observes tag 1, "right" tag 2
C4 = "pettingzoo:pettingzoo.classic.connect_four_v3"
RUN = dict(
    policies=2, total_steps=1536, actors=2, envs_per_actor=4, rollout=16, minibatch_size=32,
    epochs=1, progress=False, tensorboard=False, checkpoint_every=0, seed=3,
)  # fmt: skip


def right_first(agent: str, episode: int) -> int:
    """A user's mapping: "right" plays policy 0 and "left" policy 1 (the fixed mapping's
    reverse), in every game."""
    return 0 if agent == "right" else 1


def swap_every_game(agent: str, episode: int) -> int:
    return (episode + (agent == "right")) % 2


def _tags(slot) -> set:
    """The tags of a slot's samples: the observations of the steps it marks as its own."""
    return {float(t) for t in np.unique(slot.obs[:-1][slot.own][:, 0])}


def _record_tags(monkeypatch, what=_tags) -> dict[int, set]:
    """Per policy, ``what`` (a slot to a set) of each slot its learner trains on, by default
    the tags of its samples (taken where the training loop hands a batch over, in this process
    or to a learner process)."""
    seen: dict[int, set] = {0: set(), 1: set()}
    for cls in (learners.LocalLearner, learners.RemoteLearner):
        original = cls.train

        def train_(self, batch, original=original):
            policy = self.policy if self.remote else self.learner.cfg.seed - RUN["seed"]
            for s in batch:
                seen[policy] |= what(s)
            return original(self, batch)

        monkeypatch.setattr(cls, "train", train_)
    return seen


@pytest.mark.parametrize(
    ("backend", "mode"),
    [("inline", "sync"), ("inline", "async"), ("process", "sync")],
    ids=["inline-sync", "inline-async", "process-sync"],
)
def test_per_agent_each_learner_trains_only_on_its_own_agents_samples(
    tmp_path, monkeypatch, backend, mode
):
    """--policies 2 on a two-agent game, the fixed mapping: "left" (seat 0) is policy 0's,
    "right" (seat 1) policy 1's, in every game; each learner's samples carry its agent's tag
    only, and both train to the end of the budget in every mode."""
    seen = _record_tags(monkeypatch)
    result = asyncrl.train(GAME, backend=backend, mode=mode, run_dir=str(tmp_path / "run"), **RUN)
    assert seen == {0: {1.0}, 1: {2.0}}
    steps = [p["env_steps"] for p in result.summary["population"]]
    # both agents move at every step of a game: the policies' shares are equal
    assert steps[0] == steps[1] and sum(steps) == result.summary["env_steps"] >= RUN["total_steps"]
    assert result.summary["policy_mapping"] == "fixed"


def test_per_agent_on_connect_four_gives_each_policy_its_seats_moves(tmp_path, monkeypatch):
    """Connect four, turn-based: policy 0 plays the first player in every game, policy 1 the
    second; each learner's own steps are its seat's columns only (seat = column mod 2)."""
    columns: dict[int, set[int]] = {0: set(), 1: set()}
    original = learners.LocalLearner.train

    def train_(self, batch):
        policy = self.learner.cfg.seed - RUN["seed"]
        for s in batch:
            columns[policy] |= {int(c) % 2 for c in np.flatnonzero(s.own.any(axis=0))}
        return original(self, batch)

    monkeypatch.setattr(learners.LocalLearner, "train", train_)
    result = asyncrl.train(C4, backend="inline", mode="sync", run_dir=str(tmp_path / "r"), **RUN)
    assert columns == {0: {0}, 1: {1}}
    steps = [p["env_steps"] for p in result.summary["population"]]
    assert all(n > 500 for n in steps) and sum(steps) == result.summary["env_steps"]


def test_a_per_agent_run_resumed_ends_bit_for_bit_where_the_unbroken_one_ends(tmp_path):
    """Inline, sync, connect four with --policies 2: S steps, then --resume to 2S, against 2S at
    once; the run's checkpoint (actors: games in progress, the mapping) and every policy's
    (learner) are identical."""
    a = _resumed_as_unbroken(tmp_path, C4, lr_schedule="constant")
    assert "agent_policy" in a["actors"]["actors"][0]  # the mapping's state


def _resumed_as_unbroken(tmp_path, env: str, S: int = 768, **settings) -> dict:
    """``env`` with --policies 2, inline, sync: S steps, then --resume to 2S, against 2S at
    once; asserts the run's checkpoints (actors) and every policy's (learner) identical, and
    returns the unbroken run's."""
    run = dict(RUN, backend="inline", mode="sync", **settings)
    asyncrl.train(env, **dict(run, total_steps=2 * S), run_dir=str(tmp_path / "whole"))
    asyncrl.train(env, **dict(run, total_steps=S), run_dir=str(tmp_path / "halves"))
    asyncrl.train(resume=tmp_path / "halves", total_steps=2 * S)
    a, b = load_checkpoint(tmp_path / "whole"), load_checkpoint(tmp_path / "halves")
    assert _differences(a["actors"], b["actors"]) == []
    for p in range(2):
        x = load_checkpoint(policy_dir(tmp_path / "whole", p))["learner"]
        y = load_checkpoint(policy_dir(tmp_path / "halves", p))["learner"]
        x.pop("schedule", None), y.pop("schedule", None)
        assert x["counters"]["env_steps"] > S // 2
        assert _differences(x, y) == [], p
    return a


@pytest.mark.parametrize(
    ("backend", "mapping", "expected"),
    [
        ("inline", right_first, {0: {2.0}, 1: {1.0}}),
        ("process", right_first, {0: {2.0}, 1: {1.0}}),
        ("inline", swap_every_game, {0: {1.0, 2.0}, 1: {1.0, 2.0}}),
    ],
    ids=["inline-right-first", "process-right-first", "inline-swap"],
)
def test_a_users_function_maps_agents_to_policies(
    tmp_path, monkeypatch, backend, mapping, expected
):
    """policy_mapping=fn from Python (async mode): the function's choice, not the seat's,
    decides whose samples a learner receives; one that changes with the episode gives each
    policy both agents' games. The saved config says "function"."""
    seen = _record_tags(monkeypatch)
    result = asyncrl.train(
        GAME, policy_mapping=mapping, backend=backend, mode="async",
        run_dir=str(tmp_path / "run"), **RUN,
    )  # fmt: skip
    assert seen == expected
    assert result.summary["policy_mapping"] == "function"
    saved = yaml.safe_load((result.run_dir / "config.yaml").read_text())
    assert saved["policy_mapping"] == "function"
    # resuming needs the function again, and says so in one line
    with pytest.raises(ConfigError) as e:
        asyncrl.train(resume=result.run_dir, total_steps=4096)
    assert str(e.value).startswith("policy_mapping: ") and "\n" not in str(e.value)
    if backend == "inline":
        resumed = asyncrl.train(resume=result.run_dir, total_steps=3072, policy_mapping=mapping)
        assert resumed.summary["env_steps"] >= 3072


def _refused(tmp_path, **settings) -> str:
    run_dir = tmp_path / "r"
    with pytest.raises(ConfigError) as e:
        asyncrl.train(**{**RUN, "mode": "async", **settings}, run_dir=str(run_dir))
    assert "\n" not in str(e.value)
    assert not run_dir.exists()  # refused before anything started
    return str(e.value)


def test_a_bad_mapping_function_is_refused_in_one_line_before_anything_starts(tmp_path):
    msg = _refused(tmp_path, env=GAME, policy_mapping=lambda agent, episode: 2)
    assert msg.startswith("policy_mapping: the function returned 2 for agent 'left'")
    assert "0..1" in msg
    msg = _refused(tmp_path, env=GAME, policy_mapping=lambda agent, episode: "0")
    assert msg.startswith("policy_mapping: the function returned '0'")
    msg = _refused(tmp_path, env=GAME, policy_mapping=lambda agent, episode: 1 // 0)
    assert msg.startswith("policy_mapping: the function raised ZeroDivisionError")
    # a lambda cannot reach the process backend's actors
    msg = _refused(tmp_path, env=GAME, backend="process", policy_mapping=lambda a, e: 0)
    assert msg.startswith("policy_mapping: the process backend sends the function")
    # a single-agent env has no agents to map; sync mode takes the fixed mapping only
    msg = _refused(tmp_path, env="CartPole-v1", policy_mapping=right_first, backend="inline")
    assert msg.startswith("policy_mapping: a function maps the agents of a multi-agent env")
    msg = _refused(tmp_path, env=GAME, mode="sync", policy_mapping=right_first, backend="inline")
    assert msg.startswith("policy_mapping: sync mode")
    # the saved mark of a function is no mapping on its own (a YAML file or a resume)
    msg = _refused(tmp_path, env=GAME, policy_mapping="function", backend="inline")
    assert msg.startswith("policy_mapping: this run's agents were mapped by a Python function")
    # per agent: a policy per seat at most
    msg = _refused(tmp_path, env=GAME, policies=3, envs_per_actor=4, backend="inline")
    assert msg.startswith("policies: pettingzoo:tagged_game is a multi-agent env")
    assert "at most 2 under the fixed mapping" in msg


@pytest.mark.parametrize("chosen", [[], [2], [0, 0], [-1], ["0"]])
def test_policies_to_train_out_of_range_or_empty_is_refused_in_one_line(tmp_path, chosen):
    msg = _refused(tmp_path, env=GAME, policies_to_train=chosen, backend="inline")
    assert msg.startswith(f"policies_to_train: {chosen!r}; allowed: distinct policy indices 0..1")


@pytest.mark.parametrize(
    ("backend", "mode"),
    [("inline", "sync"), ("process", "async")],
    ids=["inline-sync", "process-async"],
)
def test_a_policy_not_trained_acts_but_ends_bit_identical(tmp_path, backend, mode):
    """policies_to_train [0] on connect four, per agent: policy 1 plays the second seat in
    every game and its learner receives its moves, but never updates: its parameters (and its
    optimizer's state) at the end are those it started with, bit for bit; policy 0's moved."""
    # async: a batch is one actor's rollout, of which a policy's moves must fill a minibatch
    settings = dict(RUN, policies_to_train=[0], backend=backend, mode=mode, minibatch_size=16)
    result = asyncrl.train(C4, run_dir=str(tmp_path / "run"), **settings)
    steps = [p["env_steps"] for p in result.summary["population"]]
    assert all(n > 500 for n in steps)  # both acted
    assert result.config.policies_to_train == [0]
    prepared = prepare(TrainConfig(env=C4, **settings))
    for p in range(2):
        start = policy_learner(
            prepared.algo, prepared.policies[p], prepared.spec, p, prepared.marks_own
        ).state_dict()
        end = load_checkpoint(policy_dir(result.run_dir, p))["learner"]
        assert end["counters"]["version"] == (0 if p else end["counters"]["iterations"])
        same = _differences(start["policy"], end["policy"]) == []
        assert same == (p == 1), p
        if p == 1:
            assert _differences(start["optimizer"], end["optimizer"]) == []


def test_policies_to_train_from_the_command_line_and_yaml(tmp_path):
    from asyncrl.api import make_config
    from asyncrl.cli import build_parser

    args = build_parser().parse_args(["train", "--policies", "3", "--policies-to-train", "0,2"])
    assert args.policies_to_train == [0, 2]
    path = tmp_path / "c.yaml"
    path.write_text("policies: 3\npolicies_to_train: [1]\n")
    assert make_config({}, config=path).policies_to_train == [1]
    assert TrainConfig().policies_to_train is None  # every policy


def test_a_run_resumed_with_fewer_policies_to_train_keeps_the_others_as_trained(tmp_path):
    """Both policies trained for S steps, then resumed to 2S with policies_to_train [1]: policy
    0 goes on acting with the weights it had at S, bit for bit; policy 1 moves on."""
    run = dict(RUN, backend="inline", mode="sync")
    asyncrl.train(C4, **run, run_dir=str(tmp_path / "run"))
    before = [load_checkpoint(policy_dir(tmp_path / "run", p))["learner"] for p in range(2)]
    resumed = asyncrl.train(
        resume=tmp_path / "run", total_steps=2 * RUN["total_steps"], policies_to_train=[1]
    )
    after = [load_checkpoint(policy_dir(tmp_path / "run", p))["learner"] for p in range(2)]
    assert after[0]["counters"]["env_steps"] > before[0]["counters"]["env_steps"]  # it acted
    assert _differences(before[0]["policy"], after[0]["policy"]) == []
    assert _differences(before[1]["policy"], after[1]["policy"]) != []
    assert resumed.summary["env_steps"] >= 2 * RUN["total_steps"]


def test_reward_normalisation_is_refused_for_a_population_on_a_game(tmp_path):
    msg = _refused(tmp_path, env=GAME, norm_reward=True, backend="inline", mode="sync")
    assert msg.startswith("norm_reward: policy 0: a population's policies on a multi-agent env")


def test_a_dqn_policy_not_trained_takes_no_gradient_step(tmp_path):
    """policies_to_train on a single-agent DQN population (sync, whose learner also updates
    ahead of its batch): policy 0 fills no replay and takes no gradient step, its parameters
    are its initial ones; policy 1 trains."""
    settings = dict(
        algo="dqn", policies=2, policies_to_train=[1], mode="sync", backend="inline",
        total_steps=3000, learning_starts=256, buffer_size=4096, batch_size=32, actors=2,
        envs_per_actor=4, rollout=1, progress=False, tensorboard=False, checkpoint_every=0,
        seed=3,
    )  # fmt: skip
    result = asyncrl.train("CartPole-v1", run_dir=str(tmp_path / "run"), **settings)
    steps = [row["gradient_steps"] for row in result.summary["population"]]
    assert steps[0] == 0 and steps[1] > 100
    prepared = prepare(TrainConfig(env="CartPole-v1", **settings))
    for p in range(2):
        start = policy_learner(
            prepared.algo, prepared.policies[p], prepared.spec, p, prepared.marks_own
        )
        end = load_checkpoint(policy_dir(result.run_dir, p))["learner"]
        same = _differences(start.state_dict()["dqn"], end["dqn"]) == []  # nets, optimizer
        assert same == (p == 0), p
