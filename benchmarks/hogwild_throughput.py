"""Spending idle cores: Hogwild! SAC workers, and the thread backend against inline, from one run.

    python benchmarks/hogwild_throughput.py              # both parts, 2 repeats each
    python benchmarks/hogwild_throughput.py --parts sac --seconds 40 --repeats 1

Parts (issue 4, "done when" 2):
  sac  HalfCheetah-v5, SAC with 256x256 networks, batch 256, replay ratio 1, one env per worker:
       env steps/s and gradient steps/s of 1 worker against --hogwild 2 (shared and synced),
       each run cut off after --seconds. Target: 2 workers >= 1.7x the total gradient steps/s
       of 1. Rates count from the first gradient step (warm-up and process start-up left out).
  ppo  PPO env steps/s of the thread backend against inline, sync and async (the settings of
       ppo_throughput.py part e, whose function this calls).

Runs go one after another so that nothing else competes for the 2 cores; every figure is the
median of --repeats runs, and every run's own figures are printed too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def sac_run(workers: int, sync_mode: str, sync_every: int, seconds: float) -> dict:
    cfg = TrainConfig(
        algo="sac",
        env="HalfCheetah-v5",
        hogwild=workers,
        sync_mode=sync_mode,
        sync_every=sync_every,
        envs_per_actor=1,
        hidden=[256, 256],
        batch_size=256,
        replay_ratio=1.0,
        learning_starts=1_000,
        total_steps=10**8,
        max_seconds=seconds,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
    )
    with tempfile.TemporaryDirectory() as d:
        cfg.run_dir = d
        s = train(cfg)
    span = s["gradient_steps"] / s["gradient_steps_per_second_steady"]
    return {
        "gradient_steps_per_second": s["gradient_steps_per_second_steady"],
        # env steps taken while learning, over the same span (ratio 1: ~ one per gradient step)
        "env_steps_per_second": (s["env_steps"] - workers * cfg.learning_starts) / span,
        "worker_gradient_steps": s["worker_gradient_steps"],
    }


def part_sac(seconds: float, repeats: int) -> dict:
    print(f"\n[sac] HalfCheetah-v5 SAC 256x256, batch 256, ratio 1, 1 env/worker, {seconds:g} s")
    settings = {
        "1 worker": (1, "shared", 0),
        "hogwild 2 shared": (2, "shared", 0),
        "hogwild 2 synced/8": (2, "synced", 8),
    }
    res = {}
    for name, (m, mode, every) in settings.items():
        runs = [sac_run(m, mode, every, seconds) for _ in range(repeats)]
        med = {
            k: statistics.median(r[k] for r in runs)
            for k in ("gradient_steps_per_second", "env_steps_per_second")
        }
        med["runs"] = runs
        res[name] = med
        each = ", ".join(f"{r['gradient_steps_per_second']:.1f}" for r in runs)
        print(
            f"  {name:18s}: {med['gradient_steps_per_second']:6.1f} gradient steps/s "
            f"({each}), {med['env_steps_per_second']:6.1f} env steps/s"
        )
    one = res["1 worker"]["gradient_steps_per_second"]
    for name in ("hogwild 2 shared", "hogwild 2 synced/8"):
        r = res[name]["gradient_steps_per_second"] / one
        res[name]["vs_1_worker"] = r
        print(f"  {name} / 1 worker = {r:.2f}x total gradient steps/s (target >= 1.7)")
    return res


def part_ppo(repeats: int) -> dict:
    sys.path.insert(0, str(HERE))
    from ppo_throughput import part_e  # the backends side by side, same settings

    return part_e(40_960, repeats)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--parts", default="sac,ppo")
    p.add_argument("--seconds", type=float, default=60.0, help="length of each SAC run")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    results: dict = {"torch": torch.__version__, "argv": sys.argv[1:]}
    for part in args.parts.split(","):
        results[part] = (
            part_sac(args.seconds, args.repeats) if part == "sac" else part_ppo(args.repeats)
        )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"hogwild_throughput-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2, default=float))
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
