"""What policy lag costs a recurrent policy: sync vs async for an LSTM on a task with its
velocities hidden, beside the same comparison for a feed-forward policy on the fully observed
task. Two tasks: CartPole (asyncrl/CartPoleNoVel-v1 against CartPole-v1) and, harder,
LunarLander (asyncrl/LunarLanderNoVel-v3 against LunarLander-v3; needs asyncrl[box2d]).

    python benchmarks/recurrent_lag.py                     # CartPole: 2 cases x 2 modes x 3 seeds
    python benchmarks/recurrent_lag.py --task lunar        # LunarLander, 1M steps per run
    python benchmarks/recurrent_lag.py --cases lstm-masked,ff-masked --seeds 1 --steps 60000
    python benchmarks/recurrent_lag.py --cases lstm-masked-vtrace --modes async

Every run of a task has the same settings (CartPole's: those of tests/test_recurrent.py's
learning tests) and budget, on the process backend; the table gives, over the seeds, the
return (mean of the last 20 episodes) at equal env steps and at equal wall-clock, the mean
policy lag, and the env steps and seconds to the task's level (CartPole 400, LunarLander 100).
Docs: Benchmarks, recurrent policies and lag.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TASKS = {
    "cartpole": {
        "masked": "asyncrl/CartPoleNoVel-v1",
        "full": "CartPole-v1",
        "settings": (
            "--actors 2 --envs-per-actor 8 --rollout 64 --minibatch-size 256 --epochs 4 "
            "--lr 1e-3 --lr-schedule linear --gamma 0.99 --gae-lambda 0.95 --hidden 64 "
            "--norm-obs --norm-reward"
        ).split(),
        "core": ["--rnn-size", "64", "--recurrence", "16"],
        "steps": 120_000,
        "step_marks": "30000,60000,90000,120000",
        "time_marks": "10,20,40,60",
        "level": 400.0,
    },
    # the field's PPO settings (gamma 0.99, lambda 0.95, lr 3e-4, entropy 0.01); minibatches
    # of 8 sequences of 32 steps, 8 epochs (a first run at 512 x 4 epochs left the feed-forward
    # policy near -30 on the full task: docs)
    "lunar": {
        "masked": "asyncrl/LunarLanderNoVel-v3",
        "full": "LunarLander-v3",
        "settings": (
            "--actors 2 --envs-per-actor 8 --rollout 128 --minibatch-size 256 --epochs 8 "
            "--lr 3e-4 --lr-schedule linear --gamma 0.99 --gae-lambda 0.95 --ent-coef 0.01 "
            "--hidden 64 --norm-obs --norm-reward"
        ).split(),
        "core": ["--rnn-size", "128", "--recurrence", "32"],
        "steps": 1_000_000,
        "step_marks": "250000,500000,750000,1000000",
        "time_marks": "30,60,90,120",
        "level": 100.0,
    },
}
# a case: which of the task's envs, and the policy's own flags
CASES = {
    "lstm-masked": ("masked", ["--recurrent", "lstm"]),
    "gru-masked": ("masked", ["--recurrent", "gru"]),
    "ff-masked": ("masked", []),
    "lstm-masked-vtrace": ("masked", ["--recurrent", "lstm", "--correction", "vtrace"]),
    "lstm-masked-decoupled": ("masked", ["--recurrent", "lstm", "--correction", "decoupled"]),
    "ff-full": ("full", []),
}
RESULTS = Path(__file__).resolve().parent / "results"


def _at(rows: list[dict], key: str, mark: float) -> float:
    """The return of the last row at or before ``mark`` of ``key`` (NaN before the first)."""
    seen = [r["episodic_return"] for r in rows if r[key] <= mark and "episodic_return" in r]
    return seen[-1] if seen else float("nan")


def _first(rows: list[dict], key: str, level: float) -> float:
    hit = [r[key] for r in rows if r.get("episodic_return", 0) >= level]
    return hit[0] if hit else float("nan")


def case_flags(task: dict, case: str) -> list[str]:
    env, flags = CASES[case]
    core = task["core"] if "--recurrent" in flags else []
    return ["--env", task[env], *flags, *core, *task["settings"]]


def run(task: dict, case: str, mode: str, seed: int, steps: int, backend: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "asyncrl.cli", "train", *case_flags(task, case),
               "--mode", mode, "--backend", backend, "--seed", str(seed),
               "--total-steps", str(steps), "--no-progress", "--no-tensorboard",
               "--run-dir", f"{tmp}/run"]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True)
        summary = json.loads(Path(f"{tmp}/run/summary.json").read_text())
        rows = [json.loads(line) for line in open(f"{tmp}/run/metrics.jsonl")]
    return {"case": case, "mode": mode, "seed": seed, "summary": summary, "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", default="cartpole", choices=sorted(TASKS))
    p.add_argument("--cases", default="lstm-masked,ff-full")
    p.add_argument("--modes", default="sync,async")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--steps", type=int, help="per run (default: the task's)")
    p.add_argument("--backend", default="process")
    p.add_argument("--step-marks", help="env steps to read returns at (default: the task's)")
    p.add_argument("--time-marks", help="seconds to read returns at (default: the task's)")
    args = p.parse_args()
    task = TASKS[args.task]
    steps = args.steps or task["steps"]
    step_marks = [int(x) for x in (args.step_marks or task["step_marks"]).split(",")]
    time_marks = [float(x) for x in (args.time_marks or task["time_marks"]).split(",")]
    level = task["level"]
    runs = []
    for case in args.cases.split(","):
        for seed in map(int, args.seeds.split(",")):
            for mode in args.modes.split(","):  # modes alternate: the machine's load is shared
                r = run(task, case, mode, seed, steps, args.backend)
                s = r["summary"]
                print(
                    f"{case:12s} {mode:5s} seed {seed}: final {s['final_return']:6.1f}, "
                    f"lag {s['policy_lag_mean']:.2f}, {s['wall_seconds']:.0f} s",
                    flush=True,
                )
                runs.append(r)
    header = (
        ["case", "mode"]
        + [f"return @{m // 1000}k steps" for m in step_marks]
        + [f"return @{m:g} s" for m in time_marks]
        + ["mean lag", f"steps to {level:g}", f"s to {level:g}", "s total"]
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for case in args.cases.split(","):
        for mode in args.modes.split(","):
            mine = [r for r in runs if r["case"] == case and r["mode"] == mode]

            def cell(values: list[float], fmt: str = ".0f") -> str:
                v = np.asarray(values, dtype=float)
                reached = v[~np.isnan(v)]
                if not reached.size:
                    return "-"
                text = f"{reached.mean():{fmt}} ± {reached.std():{fmt}}"
                return text + (f" ({reached.size}/{v.size})" if reached.size < v.size else "")

            cells = [cell([_at(r["rows"], "env_steps", m) for r in mine]) for m in step_marks]
            cells += [cell([_at(r["rows"], "wall_seconds", m) for r in mine]) for m in time_marks]
            cells.append(cell([r["summary"]["policy_lag_mean"] for r in mine], ".2f"))
            cells.append(cell([_first(r["rows"], "env_steps", level) for r in mine]))
            cells.append(cell([_first(r["rows"], "wall_seconds", level) for r in mine]))
            cells.append(cell([r["summary"]["wall_seconds"] for r in mine]))
            print("| " + " | ".join([case, mode, *cells]) + " |")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"recurrent_lag-{args.task}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    slim = [{k: v for k, v in r.items() if k != "rows"} for r in runs]
    out.write_text(json.dumps({"argv": sys.argv[1:], "runs": slim}, indent=2))
    print(f"written {out}")


if __name__ == "__main__":
    main()
