"""PBT's values as the learners run on them (#52): a resume with --no-pbt keeps the values PBT
gave each policy, a checkpoint pairs a policy's weights with the values they were trained with
(an exploit of that policy in another thread meanwhile), and an exploit moves no replay."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from asyncrl.api import make_config
from asyncrl.runtime import learners, population
from asyncrl.runtime.pbt import PBT, perturb
from asyncrl.runtime.shell import RunShell
from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig
from conftest import population_cfg

WAIT = 300  # seconds: a failure's bound only, never the sync (events are)


def _cfg(tmp_path, **kw) -> TrainConfig:
    """The population tests' settings, with PBT checking every 256 steps of a policy."""
    base = dict(env="CartPole-v1", total_steps=2048, pbt=True, pbt_period=256, seed=5)
    return population_cfg(tmp_path, **{**base, **kw})


def _policy_1_copies_policy_0(monkeypatch) -> None:
    """PBT's decision forced: policy 1 copies policy 0 at every check (whose returns are
    higher would decide otherwise)."""

    def decide(self, policy, env_steps):
        self.next_check[policy] = (env_steps // self.period + 1) * self.period
        if policy != 1:
            return None
        return 0, perturb(self.values[0], self.mutable, self.rng, self.resample)

    monkeypatch.setattr(PBT, "decide", decide)


def _load(path):
    return torch.load(path, weights_only=False)


def test_a_resume_with_pbt_off_trains_each_policy_on_the_values_it_reports(
    tmp_path, monkeypatch, capsys
):
    """A PBT run resumed with --no-pbt: policy 1's learner trains on the values PBT gave it,
    frozen (not its config's), and the summary, the population table, the policy's checkpoint
    and the run's PBT state say those values; policy 0, never exploited, on its config's."""
    _policy_1_copies_policy_0(monkeypatch)
    first = train(_cfg(tmp_path, backend="inline", mode="sync", total_steps=1024, lr=[5e-4, 1e-7]))
    run = tmp_path / "run"
    exploits = [json.loads(line) for line in (run / "pbt.jsonl").open()]
    assert exploits and {e["policy"] for e in exploits} == {1}
    evolved = {r["policy"]: r["hyperparameters"] for r in first["population"]}
    assert evolved[1] == exploits[-1]["new"] and evolved[1]["lr"] != 1e-7

    actual: dict[int, dict[str, float]] = {}  # what each learner's update reads, per policy
    original = learners.LocalLearner.train

    def train_(self, batch):
        hp = self.learner.hp  # PPO's update reads its values from here
        actual[self.learner.cfg.seed - 5] = {n: getattr(hp, n) for n in evolved[1]}
        return original(self, batch)

    monkeypatch.setattr(learners.LocalLearner, "train", train_)
    resumed = make_config({"total_steps": 2048, "pbt": False}, resume=run)
    capsys.readouterr()
    second = train(resumed, resume=True)
    out = capsys.readouterr().out
    assert second["resumed"] is True and second["pbt"] is False
    assert len((run / "pbt.jsonl").read_text().splitlines()) == len(exploits)  # none since
    reported = {r["policy"]: r["hyperparameters"] for r in second["population"]}
    saved = _load(run / "checkpoint.pt")["population"]["pbt"]["values"]
    assert actual[1] == evolved[1], (actual, evolved)  # frozen, not reset to the config's
    assert actual[0] == evolved[0]
    for p in (0, 1):
        assert reported[p] == actual[p], (p, reported, actual)
        assert _load(run / f"policy_{p}" / "checkpoint.pt")["hyperparameters"] == actual[p]
        assert saved[p] == actual[p]
    table = population.population_table(second)
    assert f"{actual[1]['lr']:>10.4g}" in table.splitlines()[3]
    assert "asyncrl: pbt off: the values PBT gave policy 1 stay, frozen" in out


@pytest.mark.slow  # learners in processes
def test_a_checkpoint_pairs_a_policys_weights_with_their_values_across_an_exploit(
    tmp_path, monkeypatch
):
    """Learners in processes: the driver's checkpoint reads policy 1's state, and before it
    goes on, policy 1's loop thread exploits policy 0 (new weights, new values). The policy's
    checkpoint holds the weights read and the values they were trained with -- the exploit's
    old ones -- and so does the run's PBT state a resume gives the learners."""
    checkpoint_read, exploited = threading.Event(), threading.Event()
    done: dict[str, object] = {}

    def decide(self, policy, env_steps):
        self.next_check[policy] = (env_steps // self.period + 1) * self.period
        if policy != 1 or "decided" in done:
            return None
        assert checkpoint_read.wait(WAIT)  # the checkpoint's read of policy 1 comes first
        done["decided"] = True
        return 0, perturb(self.values[0], self.mutable, self.rng, self.resample)

    def after_exploit(self, policy, *args):
        row = original_exploited(self, policy, *args)
        done["row"] = row
        exploited.set()
        return row

    def state(self, *args, **kwargs):
        out = original_state(self, *args, **kwargs)
        if (
            self.policy == 1
            and threading.current_thread() is threading.main_thread()
            and not checkpoint_read.is_set()
        ):
            checkpoint_read.set()  # policy 1's exploit runs now, in its loop's thread
            assert exploited.wait(WAIT)
            done["read"] = True
        return out

    def save_checkpoint(where, policy_state, keep):
        if where.name == "policy_1" and "read" in done and "policy_1" not in done:
            done["policy_1"] = dict(policy_state["hyperparameters"])
        return original_save(where, policy_state, keep)

    def run_checkpoint(self, state):
        if "policy_1" in done and "run" not in done:
            done["run"] = dict(state["population"]["pbt"]["values"][1])
        return original_run_checkpoint(self, state)

    original_exploited, original_state = PBT.exploited, learners.RemoteLearner.state
    original_save, original_run_checkpoint = population.save_checkpoint, RunShell.checkpoint
    monkeypatch.setattr(PBT, "decide", decide)
    monkeypatch.setattr(PBT, "exploited", after_exploit)
    monkeypatch.setattr(learners.RemoteLearner, "state", state)
    monkeypatch.setattr(population, "save_checkpoint", save_checkpoint)
    monkeypatch.setattr(RunShell, "checkpoint", run_checkpoint)
    cfg = _cfg(
        tmp_path,
        backend="process",
        mode="async",
        checkpoint_every=1e-9,  # one after every row: the first comes while the loops run
        lr=[5e-4, 1e-7],
    )
    summary = train(cfg)
    assert summary["ended"] == "budget", summary
    row = done["row"]
    assert row["policy"] == 1 and row["old"] != row["new"]
    assert done["policy_1"] == row["old"], (done["policy_1"], row)  # not the exploit's new
    assert done["run"] == row["old"], (done["run"], row)


@pytest.mark.parametrize("backend", ["inline", pytest.param("process", marks=pytest.mark.slow)])
def test_an_exploit_with_save_replay_moves_no_replay(tmp_path, monkeypatch, backend):
    """--save-replay: a checkpoint's state holds the replay; the state an exploit takes of
    its source holds none (learners in processes: what came through the pipe, unpickled)."""
    _policy_1_copies_policy_0(monkeypatch)
    exploiting = threading.local()
    seen: list[tuple[bool, bool]] = []  # (an exploit's, holds a replay) per state taken

    def decide(self, policy, env_steps):
        decision = forced(self, policy, env_steps)
        exploiting.on = decision is not None
        return decision

    def after_exploit(self, *args):
        exploiting.on = False
        return original_exploited(self, *args)

    def spy(original):
        def state(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            seen.append((getattr(exploiting, "on", False), "replay" in out["learner"]))
            return out

        return state

    forced, original_exploited = PBT.decide, PBT.exploited
    monkeypatch.setattr(PBT, "decide", decide)
    monkeypatch.setattr(PBT, "exploited", after_exploit)
    for cls in (learners.LocalLearner, learners.RemoteLearner):
        monkeypatch.setattr(cls, "state", spy(cls.state))
    summary = train(
        _cfg(
            tmp_path,
            algo="dqn",
            backend=backend,
            mode="async",
            learning_starts=256,
            buffer_size=4096,
            batch_size=32,
            save_replay=True,
            lr=[1e-3, 1e-7],
        )
    )
    assert summary["ended"] == "budget", summary
    exploit_states = [replay for on, replay in seen if on]
    assert exploit_states, seen
    assert not any(exploit_states), seen  # on b12beae: the source's whole replay
    assert all(replay for on, replay in seen if not on), seen  # the checkpoints': all of it
