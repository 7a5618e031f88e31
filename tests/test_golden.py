"""Golden results: what the code computes at fixed seeds, recorded before a redesign and held bit
for bit after it ("One run, one path" changes the code's shape, not its results).

Each run below is inline (or one Hogwild! worker), sync (two also async), at a fixed seed and
one learner thread. Its golden file (tests/data/golden/<name>.json) holds every value of the final
checkpoint, each tensor as its shape, dtype and SHA-256 of its bytes, and the summary's figures
but timings and paths. Record them again only when a change is *meant* to change results, and
say so in its commit::

    PYTHONPATH=src python tests/test_golden.py            # all
    PYTHONPATH=src python tests/test_golden.py ppo sac    # some

The bits of some runs depend on the CPU: its vector instructions (the LSTM's and the CNN's
kernels take other paths with AVX-512 than with AVX2) and its maker (MKL's matrix products take
AVX-512 paths on Intel's CPUs that it does not take on AMD's, so even the MLP runs' last bits
differ there). The files in GOLDEN were recorded on an AVX2 machine, and GOLDEN/<kind>/ holds,
for another kind of CPU (``torch.backends.cpu.get_cpu_capability()``, and its maker where it
matters: ``avx512`` was recorded on AMD EPYC, ``intel-avx512`` on Intel Xeon), the runs whose
files differ there -- recorded from the same commit, never to absorb a change of results::

    PYTHONPATH=src python tests/test_golden.py --this-cpu          # all, where they differ
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

import asyncrl
from asyncrl.settings import ADDED_SINCE, TrainConfig

GOLDEN = Path(__file__).parent / "data" / "golden"


def _cpu_kind() -> str:
    """The capability (avx2, avx512, ...), prefixed with ``intel-`` on Intel's CPUs (whose
    MKL paths differ from AMD's, on which the unprefixed files were recorded)."""
    capability = torch.backends.cpu.get_cpu_capability().lower()
    try:
        with open("/proc/cpuinfo") as info:
            intel = any(line.split(":")[-1].strip() == "GenuineIntel" for line in info)
    except OSError:
        intel = False
    return f"intel-{capability}" if intel and capability != "avx2" else capability


CPU = _cpu_kind()


def golden_file(name: str) -> Path:
    """The run's golden file for this kind of CPU, else the one recorded on AVX2."""
    own = GOLDEN / CPU / f"{name}.json"
    return own if own.exists() else GOLDEN / f"{name}.json"


# figures that depend on the machine's speed or on where the run was written (and every
# figure named for seconds, a rate per second or memory)
VARIES = {"T", "eps", "run_dir", "checkpoint"}


def _varies(key: str) -> bool:
    last = key.split(".")[-1]
    return last in VARIES or "second" in last or last.startswith("memory/")


COMMON = dict(
    backend="inline",
    mode="sync",
    seed=7,
    threads_learner=1,
    progress=False,
    tensorboard=False,
)
CARTPOLE = dict(
    COMMON,
    env="CartPole-v1",
    actors=2,
    envs_per_actor=2,
    rollout=16,
    minibatch_size=32,
    epochs=2,
    hidden=[16],
    norm_obs=True,
    norm_reward=True,
)
RUNS: dict[str, dict[str, Any]] = {
    "ppo": dict(CARTPOLE, total_steps=1_024),
    "ppo-lstm": dict(
        CARTPOLE,
        total_steps=1_024,
        recurrent="lstm",
        rnn_size=8,
        recurrence=8,
        minibatch_size=16,
        # the rate tuned on CartPole-v1, which --recurrent kept when this was recorded (its own
        # 1e-3 takes that place now: issue 54)
        lr=5e-4,
    ),  # fmt: skip
    "ppo-atari": dict(
        COMMON,
        env="ALE/Breakout-v5",
        actors=1,
        envs_per_actor=2,
        rollout=16,
        minibatch_size=16,
        epochs=1,
        total_steps=96,
    ),
    "sac": dict(
        COMMON,
        env="Pendulum-v1",
        algo="sac",
        actors=1,
        envs_per_actor=2,
        rollout=1,
        hidden=[16, 16],
        learning_starts=64,
        batch_size=32,
        buffer_size=512,
        total_steps=400,
    ),
    "dqn": dict(
        COMMON,
        env="CartPole-v1",
        algo="dqn",
        actors=1,
        envs_per_actor=2,
        rollout=1,
        hidden=[16],
        learning_starts=64,
        batch_size=32,
        buffer_size=512,
        total_steps=600,
        # the classic preset's values, recorded before CartPole-v1 had tuned ones of its own
        lr=2.5e-4,
        lr_schedule="constant",
        replay_ratio=0.1,
        target_every=500,
        epsilon_end=0.05,
        exploration_fraction=0.5,
        n_step=1,
    ),
    "population-2": dict(CARTPOLE, policies=2, total_steps=2_048),
    "population-3-pbt": dict(
        CARTPOLE, envs_per_actor=3, policies=3, pbt=True, pbt_period=128, total_steps=3_072
    ),
    # beyond the sync runs: the emulated async schedule (lag 1) and the random mapping's loop
    "ppo-async": dict(CARTPOLE, mode="async", total_steps=1_024),
    "population-2-random": dict(
        CARTPOLE,
        mode="async",
        policies=2,
        policy_mapping="random",
        norm_reward=False,
        rollouts_per_batch=1,  # the default when it was recorded (now P in async: 2)
        total_steps=2_048,
    ),
    # one worker: a Hogwild! run that does not depend on how its workers interleave
    "hogwild": dict(
        CARTPOLE, backend="process", actors=1, hogwild=1, sync_mode="shared", total_steps=1_024
    ),
}


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """Every leaf of a checkpoint: tensors and arrays by digest, the rest by value."""
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _flatten(item, f"{prefix}.{i}", out)
    elif isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        t = torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t).reshape(-1)
        digest = hashlib.sha256(t.view(torch.uint8).numpy().tobytes())
        out[prefix] = [list(t.shape), str(t.dtype), digest.hexdigest()]
    elif hasattr(value, "dtype") and hasattr(value, "tobytes"):  # numpy
        digest = hashlib.sha256(value.tobytes())
        out[prefix] = [list(value.shape), str(value.dtype), digest.hexdigest()]
    elif isinstance(value, float) and value != value:
        out[prefix] = "nan"
    elif value is None or isinstance(value, (bool, int, float, str)):
        out[prefix] = value
    else:
        out[prefix] = repr(value)


def _checkpoints(run: Path) -> dict[str, Path]:
    """The run's final checkpoint, or each policy's for a population."""
    policies = sorted(run.glob("policy_*"))
    if policies:
        return {p.name: p / "checkpoint.pt" for p in policies}
    return {"run": run / "checkpoint.pt"}


def results(name: str, tmp: Path) -> dict[str, Any]:
    run = tmp / name
    summary = asyncrl.train(run_dir=str(run), **RUNS[name]).summary
    out: dict[str, Any] = {"checkpoints": {}}
    _flatten(summary, "", leaves := {})
    out["summary"] = {k: v for k, v in leaves.items() if not _varies(k)}
    for key, path in _checkpoints(run).items():
        leaves: dict[str, Any] = {}
        _flatten(torch.load(path, weights_only=False), "", leaves)
        out["checkpoints"][key] = {k: v for k, v in leaves.items() if not _varies(k)}
    return out


def _setting_defaults() -> dict[str, Any]:
    """Each setting's default as a checkpoint's config holds it (``config.<name>`` leaves); a
    preset setting's, the value runs saved before it existed ran with (ADDED_SINCE)."""
    out: dict[str, Any] = {}
    for name, value in ADDED_SINCE.items():
        _flatten(value, f"config.{name}", out)
    for field in dataclasses.fields(TrainConfig):
        if field.name in ADDED_SINCE:
            continue
        if field.default is not dataclasses.MISSING:
            _flatten(field.default, f"config.{field.name}", out)
        elif field.default_factory is not dataclasses.MISSING:
            _flatten(field.default_factory(), f"config.{field.name}", out)
    return out


def _differences(want: dict[str, Any], got: dict[str, Any], prefix: str = "") -> list[str]:
    lines = []
    defaults = _setting_defaults()
    for key in sorted(set(want) | set(got)):
        a, b = want.get(key, "<absent>"), got.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            lines += _differences(a, b, f"{prefix}{key}/")
        elif a == "<absent>" and key in defaults and json.loads(json.dumps(defaults[key])) == b:
            continue  # a setting added after the recording, at its default: no result changed
        elif a != b:
            lines.append(f"{prefix}{key}: golden {a!r}, now {b!r}")
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_results_match_the_golden_files_bit_for_bit(name, tmp_path):
    want = json.loads(golden_file(name).read_text())
    got = json.loads(json.dumps(results(name, tmp_path)))  # as the file holds it
    differences = _differences(want, got)
    assert not differences, "\n".join(differences[:40])


def record(names: list[str], this_cpu: bool = False) -> None:
    """Record ``names`` into GOLDEN, or with ``this_cpu`` into GOLDEN/<kind>/ (only the runs
    whose results differ from GOLDEN's)."""
    folder = GOLDEN / CPU if this_cpu else GOLDEN
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            out = results(name, Path(tmp))
        if this_cpu:
            base = json.loads((GOLDEN / f"{name}.json").read_text())
            if not _differences(base, json.loads(json.dumps(out))):
                print(name, "as recorded on AVX2: nothing written")
                continue
            assert not _differences(base["summary"], out["summary"]), f"{name}: summary differs"
        (folder / f"{name}.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
        print(name, len(out["summary"]), {k: len(v) for k, v in out["checkpoints"].items()})


if __name__ == "__main__":
    this_cpu = "--this-cpu" in sys.argv
    record([a for a in sys.argv[1:] if a != "--this-cpu"] or list(RUNS), this_cpu)
