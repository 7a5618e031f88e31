"""DQN on CartPole-v1 at 100k env steps: named settings, each one run, final returns in a table.

    python benchmarks/dqn_cartpole.py                     # the settings of the test, sync, seed 1
    python benchmarks/dqn_cartpole.py --runs S15 --modes async --seeds 1,2,3

The settings are those of the sweep on docs/benchmarks/dqn.md (the test's: S13 in sync, S15 in
async).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RL_ZOO = "--lr 2.3e-3 --batch-size 64 --buffer-size 100000 --learning-starts 1000 "
RL_ZOO += "--replay-ratio 0.5 --epsilon-end 0.04 --exploration-fraction 0.16 --hidden 256,256"
RUNS = {
    "cleanrl-mse": "--td-loss mse",
    "S7": f"{RL_ZOO} --td-loss mse --lr-schedule linear --target-every 256",
    "S10": f"{RL_ZOO} --td-loss huber --lr-schedule linear --target-every 256",
    # S12 and S13 were written with --n-step 3, which rollout 1 left 1-step (refused now)
    "S12": f"{RL_ZOO} --td-loss mse --lr-schedule linear --target-every 256 --epsilon-end 0.02",
    "S13": f"{RL_ZOO} --td-loss mse --lr-schedule linear --target-every 256 --epsilon-end 0.01 "
    "--actors 2 --envs-per-actor 4",
    # async only: 3-step returns need rollouts of 3 steps or more
    "S15": f"{RL_ZOO} --td-loss mse --lr-schedule linear --target-every 256 --epsilon-end 0.01 "
    "--actors 2 --envs-per-actor 4 --rollout 4 --n-step 3",
}
RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", default="S13")
    p.add_argument("--modes", default="sync")
    p.add_argument("--seeds", default="1")
    p.add_argument("--steps", type=int, default=100_000)
    args = p.parse_args()
    rows = []
    for name in args.runs.split(","):
        for mode in args.modes.split(","):
            for seed in args.seeds.split(","):
                with tempfile.TemporaryDirectory() as tmp:
                    backend = "inline" if mode == "sync" else "process"
                    cmd = [sys.executable, "-m", "asyncrl.cli", "train", "--algo", "dqn",
                           "--backend", backend, "--mode", mode, "--seed", seed,
                           "--total-steps", str(args.steps), "--no-progress", "--no-tensorboard",
                           "--run-dir", f"{tmp}/run", *shlex.split(RUNS[name])]  # fmt: skip
                    t0 = time.perf_counter()
                    subprocess.run(cmd, check=True, capture_output=True)
                    s = json.loads(Path(f"{tmp}/run/summary.json").read_text())
                rows.append((name, mode, seed, s["final_return"], time.perf_counter() - t0))
                print(f"{name:12s} {mode:5s} seed {seed}: final return {rows[-1][3]:7.1f} "
                      f"({rows[-1][4]:.0f} s)", flush=True)  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"dqn_cartpole-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"argv": sys.argv[1:], "rows": rows}, indent=2))
    print(f"written {out}")


if __name__ == "__main__":
    main()
