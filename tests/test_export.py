"""``asyncrl export``: the ONNX file acts as ``asyncrl eval`` acts (discrete actions identical,
continuous ones within 1e-5) on 1,000 observations of the run's env -- an MLP policy (discrete
and continuous, normaliser folded in, actions clipped or squashed), an LSTM one over a sequence
with its state carried, a CNN one on uint8 frames --; the command's output, exit status and
error lines; and the guide's numpy + onnxruntime lines, run without asyncrl or torch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytest.importorskip("onnx")

import asyncrl  # noqa: E402
from asyncrl.cli import main  # noqa: E402
from asyncrl.export import collect_observations, export, write_onnx  # noqa: E402

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "export.md"
N = 1000  # observations each check acts on
TINY = dict(
    backend="inline",
    mode="sync",
    actors=1,
    envs_per_actor=2,
    rollout=8,
    minibatch_size=16,
    epochs=1,
    hidden=[8],
    total_steps=16,
    progress=False,
    tensorboard=False,
    seed=1,
)
RUNS = {
    "cartpole": dict(env="CartPole-v1", norm_obs=True),
    "pendulum": dict(env="Pendulum-v1", norm_obs=True),
    "sac": dict(
        env="Pendulum-v1",
        algo="sac",
        rollout=1,
        hidden=[8, 8],
        learning_starts=8,
        batch_size=8,
        buffer_size=64,
    ),
    "lstm": dict(env="CartPole-v1", recurrent="lstm", rnn_size=8),
    "cnn": dict(env="fake_envs:DotSide-v0"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The tiniest run of each kind that leaves a checkpoint (16 env steps, inline)."""
    root = tmp_path_factory.mktemp("runs")
    return {
        name: asyncrl.train(**{**TINY, **kw, "run_dir": str(root / name)}).run_dir
        for name, kw in RUNS.items()
    }


@pytest.fixture(scope="module")
def exported(runs, tmp_path_factory):
    """``exported(kind)``: ``export`` of that run (each written once: exports take seconds)."""
    root, done = tmp_path_factory.mktemp("onnx"), {}

    def get(kind: str) -> dict:
        if kind not in done:
            done[kind] = export(runs[kind], root / f"{kind}.onnx")
        return done[kind]

    return get


def _session(path: Path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _agree(ours: np.ndarray, theirs: np.ndarray, discrete: bool) -> None:
    assert ours.shape == theirs.shape
    if discrete:
        assert theirs.dtype == np.int64
        np.testing.assert_array_equal(theirs, ours)
    else:
        np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-5)


def _feed_forward_agrees(policy, path: Path) -> np.ndarray:
    """ONNX and ``policy.act`` on 1,000 observations as one batch and on one as a batch of
    one; returns the actions."""
    obs, _ = collect_observations(policy, N, seed=7)
    run = _session(path)
    ours = policy.act(obs)
    _agree(ours, run.run(["action"], {"obs": obs})[0], policy.spec.discrete)
    _agree(ours[:1], run.run(["action"], {"obs": obs[:1]})[0], policy.spec.discrete)
    return ours


def test_an_mlp_policy_exported_from_the_command_line_acts_as_eval_does(runs, tmp_path, capsys):
    """CartPole, observation normaliser on: the file takes raw observations."""
    out = tmp_path / "cartpole.onnx"
    assert main(["export", str(runs["cartpole"]), "--onnx", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    head = f"exported ppo on CartPole-v1 (latest checkpoint, 16 env steps) to {out} ("
    assert printed[0].startswith(head) and printed[0].endswith(" bytes)")
    assert printed[1] == "  input  obs [batch, 4] float32: raw observations, normalised inside"
    assert printed[2] == "  output action [batch] int64: the env's action"
    checked = f"{N} observations of CartPole-v1 (random actions, seed 0): {N} of {N} actions"
    assert printed[3].endswith(f"{checked} identical") and len(printed) == 4
    policy = asyncrl.load(runs["cartpole"])
    assert policy.module.obs_norm.enabled and float(policy.module.obs_norm.count) > 1
    _feed_forward_agrees(policy, out)
    meta = _session(out).get_modelmeta().custom_metadata_map
    assert meta["env"] == "CartPole-v1" and meta["obs_dtype"] == "float32"


def test_continuous_actions_are_clipped_to_the_action_space_as_the_env_receives_them(
    runs, tmp_path
):
    """PPO on Pendulum, its means pushed past the bounds [-2, 2] for part of the observations:
    the file clips them as Policy.act does."""
    policy = asyncrl.load(runs["pendulum"])
    with torch.no_grad():
        policy.module.pi[-1].weight.mul_(2000.0)
    path = tmp_path / "pendulum.onnx"
    write_onnx(policy, path)
    actions = _feed_forward_agrees(policy, path)
    clipped = np.isin(actions, [-2.0, 2.0]).mean()
    assert 0.05 < clipped < 0.95, clipped  # both paths taken


def test_sac_actions_are_squashed_into_the_bounds(runs, exported):
    out = exported("sac")
    assert out["agreement"].agrees and out["agreement"].max_difference <= 1e-5
    actions = _feed_forward_agrees(asyncrl.load(runs["sac"]), Path(out["onnx"]))
    assert actions.dtype == np.float32 and np.abs(actions).max() <= 2.0


def test_a_cnn_policy_takes_uint8_frames_as_the_env_gives_them(runs, exported):
    out = exported("cnn")
    assert out["inputs"]["obs"][:2] == (["batch", 1, 12, 12], "uint8")
    assert _session(out["onnx"]).get_inputs()[0].type == "tensor(uint8)"
    actions = _feed_forward_agrees(asyncrl.load(runs["cnn"]), Path(out["onnx"]))
    assert set(np.unique(actions)) == {0, 1}  # not one constant answer


@pytest.mark.slow  # 24 s on the shared 2-core machine: the LSTM's export
def test_an_lstm_policy_acts_over_a_sequence_with_its_state_carried(runs, exported):
    out = exported("lstm")
    path = out["onnx"]
    assert out["inputs"]["state"][0] == out["outputs"]["next_state"][0] == ["batch", 2, 8]
    policy = asyncrl.load(runs["lstm"])
    obs, first = collect_observations(policy, N, seed=7)
    assert first.sum() > 10  # episodes start inside the sequence: states are reset there
    run = _session(path)
    # four envs side by side, each a quarter of the sequence, every state carried by its own
    # side: PyTorch's by Policy.act, onnxruntime's by the file's next_state
    streams, first = obs.reshape(4, N // 4, 4).swapaxes(0, 1), first.reshape(4, N // 4).T
    h = s = policy.initial_state(4)
    for t in range(N // 4):
        h[first[t]] = s[first[t]] = 0.0
        a, h = policy.act(streams[t], h)
        b, s = run.run(["action", "next_state"], {"obs": streams[t], "state": s})
        _agree(a, b, discrete=True)
        np.testing.assert_allclose(s, h, rtol=0, atol=1e-5)
    assert np.abs(h).max() > 0.01  # the state carries something


def test_export_refuses_a_file_that_disagrees_with_pytorch(exported, tmp_path, monkeypatch, capsys):
    """The graph written is another policy's (as a broken exporter would write): exit 1, one
    line saying how they disagree, and no file."""
    other = exported("cartpole")["onnx"]
    monkeypatch.setattr(
        "asyncrl.export.write_onnx", lambda policy, path, metadata: shutil.copy(other, path)
    )
    out = tmp_path / "p.onnx"
    dqn = Path(__file__).parent / "data" / "checkpoints" / "dqn"  # CartPole, other weights
    assert main(["export", str(dqn), "--onnx", str(out)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(
        rf"asyncrl: error: export: onnxruntime and PyTorch disagree on CartPole-v1: \d+ of {N} "
        rf"actions identical; {re.escape(str(out))} was not written",
        err[0],
    )
    assert not any(tmp_path.iterdir())  # no temporary file left


def test_bad_settings_and_a_missing_extra_are_one_line_before_anything_is_read(
    runs, tmp_path, monkeypatch, capsys
):
    run, out = str(runs["cartpole"]), str(tmp_path / "p.onnx")
    cases = [
        (["--checkpoint", "nope"], "checkpoint: 'nope' is neither latest nor best nor a "),
        (["--policy", "3"], "policy: "),
        (["--onnx", str(tmp_path / "no" / "p.onnx")], "onnx: the directory "),
        (["--checkpoint", "best"], "checkpoint: "),  # a run without --eval-every has none
        (["--observations", "0"], "observations: must be >= 1, got 0"),
    ]
    for flags, says in cases:
        assert main(["export", run, "--onnx", out, *flags]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(f"asyncrl: error: {says}"), err
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if not installed
    assert main(["export", run, "--onnx", out]) == 2
    assert capsys.readouterr().err == (
        "asyncrl: error: onnx: export needs onnxscript, not installed: "
        "pip install 'asyncrl[onnx]'\n"
    )
    assert not any(tmp_path.iterdir())


def test_a_checkpoint_is_named_by_its_file_in_the_run_or_by_path(runs):
    run = runs["cartpole"]
    (newest,) = run.glob("checkpoint-0*.pt")
    latest = asyncrl.load(run).module.state_dict()
    for name in (newest.name, str(newest)):
        named = asyncrl.load(run, name).module.state_dict()
        assert all(torch.equal(named[k], latest[k]) for k in latest)
    pbt = Path(__file__).parent / "data" / "checkpoints" / "pbt"  # a population of 2
    assert asyncrl.load(pbt, "policy_1/checkpoint-000001.pt").index == 1


def _guide_snippet() -> str:
    """The guide's code block marked ``<!-- tested: numpy + onnxruntime -->``."""
    text = GUIDE.read_text()
    block = text.split("<!-- tested: numpy + onnxruntime -->", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("kind", ["cartpole", "lstm"])
def test_the_guides_lines_act_with_the_file_and_no_asyncrl_or_torch(runs, exported, tmp_path, kind):
    """The guide's lines run an episode of CartPole with the file; blocked from importing
    asyncrl and torch they give the return asyncrl eval gives for the same seed."""
    shutil.copy(exported(kind)["onnx"], tmp_path / "policy.onnx")
    blocked = "import sys\nsys.modules['asyncrl'] = sys.modules['torch'] = None\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", blocked + _guide_snippet()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    expected = asyncrl.load(runs[kind]).evaluate(episodes=1, seed=10_000).returns[0]
    assert done.stdout == f"return {expected}\n"
