"""What SAC reaches on HalfCheetah-v5 in 100k env steps, sync against async at the same replay
ratio, with the wall-clock time each took (issue 3, "done when" 3). Not a CI test: ~50 minutes.

    python benchmarks/sac_return.py                      # both modes, 100k steps each
    python benchmarks/sac_return.py --steps 20000        # a shorter look

Settings: 256x256 networks, batch 256, replay ratio 1, 1 actor x 1 env, 5,000 random warm-up
transitions (CleanRL's SAC default), seed 1, process backend. Runs go one after another. For each
run it prints the mean return of the last 20 training episodes, the deterministic policy's mean
over 10 evaluation episodes (asyncrl eval), wall-clock seconds, env steps/s and gradient steps.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppo_throughput import RESULTS  # noqa: E402
from sac_throughput import halfcheetah_sac  # noqa: E402

from asyncrl.evaluate import evaluate  # noqa: E402
from asyncrl.runtime.trainer import train  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--modes", default="sync,async")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results: dict = {"torch": torch.__version__, "argv": sys.argv[1:], "runs": {}}
    for mode in args.modes.split(","):
        run_dir = RESULTS / f"sac_return-{stamp}" / mode
        cfg = halfcheetah_sac(
            mode=mode,
            learning_starts=5_000,
            total_steps=args.steps,
            seed=args.seed,
            checkpoint_every=60.0,  # the project default: a long run keeps its checkpoints
            gamma=0.98,  # the project default, with which the README's figures were measured
            run_dir=str(run_dir),
        )
        s = train(cfg)
        ev = evaluate(str(run_dir), episodes=10)
        row = {
            "final_return_last20": s["final_return"],
            "eval_return_mean": ev["mean_return"],
            "eval_return_std": ev["std_return"],
            "wall_seconds": s["wall_seconds"],
            "env_steps": s["env_steps"],
            "env_steps_per_second_learning": s["env_steps_per_second_learning"],
            "gradient_steps": s["gradient_steps"],
            "replay_ratio_achieved": s["replay_ratio_achieved"],
        }
        results["runs"][mode] = row
        print(
            f"{mode:5s}: last-20 return {row['final_return_last20']:8.1f} | eval "
            f"{row['eval_return_mean']:8.1f} +/- {row['eval_return_std']:.1f} | "
            f"{row['wall_seconds']:7.0f} s | {row['env_steps_per_second_learning']:6.1f} env "
            f"steps/s learning | {row['gradient_steps']} gradient steps",
            flush=True,
        )
    out = RESULTS / f"sac_return-{stamp}.json"
    out.write_text(json.dumps(results, indent=2, default=float))
    print(f"written {out}")


if __name__ == "__main__":
    main()
