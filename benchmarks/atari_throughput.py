"""Atari Breakout frames per second (frames = agent steps x 4, the frame skip), one run:
asyncrl async PPO (2 actors x 8 envs, the atari preset, process backend) with the Gymnasium and
the EnvPool vectoriser, and Sample Factory 2.1.1's Atari example with the same workers and envs
(its own venv, benchmarks/.venvs/sf; see --sf-python). Each system trains for --seconds of
wall-clock; every figure is training throughput, learner included (on 2 CPU cores the Nature-CNN
learner bounds all of them), start-up excluded where the system reports it apart.

    python benchmarks/atari_throughput.py --seconds 45

Prints one JSON line per system and the ratios. Sample Factory counts frames itself (its
``Fps is (10 sec: ...)`` reports, frameskip included); its steady figure is the median of those
after the first.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FRAME_SKIP = 4
HERE = Path(__file__).resolve().parent


def asyncrl_run(vectorizer: str, seconds: float, actors: int, envs: int) -> dict:
    import asyncrl

    with tempfile.TemporaryDirectory() as run_dir:
        t0 = time.perf_counter()
        result = asyncrl.train(
            "ALE/Breakout-v5",
            vectorizer=vectorizer,
            mode="async",
            backend="process",
            actors=actors,
            envs_per_actor=envs,
            total_steps=10**9,
            max_seconds=seconds,
            run_dir=run_dir + "/r",
            progress=False,
            tensorboard=False,
        )
        wall = time.perf_counter() - t0
    s = result.summary
    return {
        "system": f"asyncrl async, {vectorizer}",
        "workers": actors,
        "envs_per_worker": envs,
        "agent_steps": s["env_steps"],
        "frames_per_second": FRAME_SKIP * s["env_steps_per_second"],
        "frames_per_second_overall": FRAME_SKIP * s["env_steps"] / wall,
        "learner_samples_per_second": s["env_steps"] / max(s["learn_seconds"], 1e-9),
        "wall_seconds": wall,
    }


def sample_factory_run(python: str, seconds: float, workers: int, envs: int) -> dict:
    with tempfile.TemporaryDirectory() as train_dir:
        cmd = [
            python,
            "-m",
            "sf_examples.atari.train_atari",
            "--env=atari_breakout",
            "--experiment=bench",
            f"--train_dir={train_dir}",
            f"--num_workers={workers}",
            f"--num_envs_per_worker={envs}",
            "--async_rl=True",
            "--device=cpu",
            "--save_every_sec=100000",
            f"--train_for_seconds={int(seconds)}",
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 300)
        wall = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    windows = [float(x) for x in re.findall(r"Fps is \(10 sec: ([0-9.]+)", log)]
    windows = [w for w in windows if w == w]  # its first report is nan
    if proc.returncode != 0 or not windows:
        return {"system": "sample-factory 2.1.1", "error": log[-2000:]}
    frames = [int(x) for x in re.findall(r"Total num frames: (\d+)", log)]
    return {
        "system": "sample-factory 2.1.1 APPO",
        "workers": workers,
        "envs_per_worker": envs,
        "frames": frames[-1] if frames else None,
        "frames_per_second": statistics.median(windows[1:] or windows),
        "frames_per_second_overall": (frames[-1] / wall) if frames else None,
        "wall_seconds": wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=45.0, help="training time per system")
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--sf-python", default=str(HERE / ".venvs/sf/bin/python"))
    p.add_argument("--systems", default="gymnasium,envpool,sf")
    args = p.parse_args()
    rows = {}
    for system in args.systems.split(","):
        if system == "sf":
            if not Path(args.sf_python).exists():
                row = {"system": "sample-factory 2.1.1", "error": f"no {args.sf_python}"}
            else:
                row = sample_factory_run(args.sf_python, args.seconds, args.actors, args.envs)
        else:
            row = asyncrl_run(system, args.seconds, args.actors, args.envs)
        rows[system] = row
        print(json.dumps(row), flush=True)
    if "sf" in rows and "frames_per_second" in rows["sf"]:
        for system in ("gymnasium", "envpool"):
            if system in rows:
                ratio = rows[system]["frames_per_second"] / rows["sf"]["frames_per_second"]
                print(f"asyncrl ({system}) / sample factory: {ratio:.2f}x", flush=True)


if __name__ == "__main__":
    sys.exit(main())
