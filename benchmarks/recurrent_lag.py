"""What policy lag costs a recurrent policy: sync vs async for an LSTM on the masked-velocity
CartPole, beside the same comparison for a feed-forward policy on the fully observed CartPole.

    python benchmarks/recurrent_lag.py                          # 2 cases x 2 modes x 3 seeds
    python benchmarks/recurrent_lag.py --cases lstm-masked,ff-masked --seeds 1 --steps 60000
    python benchmarks/recurrent_lag.py --cases lstm-masked-vtrace --modes async

Every run has the same settings (those of tests/test_recurrent.py's learning tests) and budget,
on the process backend; the table gives, over the seeds, the return (mean of the last 20
episodes) at equal env steps and at equal wall-clock, the mean policy lag, and the env steps and
seconds to a return of 400. Docs: Benchmarks, recurrent policies and lag.
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

SETTINGS = (
    "--actors 2 --envs-per-actor 8 --rollout 64 --minibatch-size 256 --epochs 4 --lr 1e-3 "
    "--gamma 0.99 --gae-lambda 0.95 --hidden 64 --norm-obs --norm-reward"
).split()
CASES = {
    "lstm-masked": ["--env", "asyncrl/CartPoleNoVel-v1", "--recurrent", "lstm", "--rnn-size",
                    "64", "--recurrence", "16"],
    "gru-masked": ["--env", "asyncrl/CartPoleNoVel-v1", "--recurrent", "gru", "--rnn-size",
                   "64", "--recurrence", "16"],
    "ff-masked": ["--env", "asyncrl/CartPoleNoVel-v1"],
    "lstm-masked-vtrace": ["--env", "asyncrl/CartPoleNoVel-v1", "--recurrent", "lstm",
                           "--rnn-size", "64", "--recurrence", "16", "--correction", "vtrace"],
    "lstm-masked-decoupled": ["--env", "asyncrl/CartPoleNoVel-v1", "--recurrent", "lstm",
                              "--rnn-size", "64", "--recurrence", "16",
                              "--correction", "decoupled"],
    "ff-full": ["--env", "CartPole-v1"],
}  # fmt: skip
RESULTS = Path(__file__).resolve().parent / "results"


def _at(rows: list[dict], key: str, mark: float) -> float:
    """The return of the last row at or before ``mark`` of ``key`` (NaN before the first)."""
    seen = [r["episodic_return"] for r in rows if r[key] <= mark and "episodic_return" in r]
    return seen[-1] if seen else float("nan")


def _first(rows: list[dict], key: str, level: float) -> float:
    hit = [r[key] for r in rows if r.get("episodic_return", 0) >= level]
    return hit[0] if hit else float("nan")


def run(case: str, mode: str, seed: int, steps: int, backend: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "asyncrl.cli", "train", *CASES[case], *SETTINGS,
               "--mode", mode, "--backend", backend, "--seed", str(seed),
               "--total-steps", str(steps), "--no-progress", "--no-tensorboard",
               "--run-dir", f"{tmp}/run"]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True)
        summary = json.loads(Path(f"{tmp}/run/summary.json").read_text())
        rows = [json.loads(line) for line in open(f"{tmp}/run/metrics.jsonl")]
    return {"case": case, "mode": mode, "seed": seed, "summary": summary, "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cases", default="lstm-masked,ff-full")
    p.add_argument("--modes", default="sync,async")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--steps", type=int, default=120_000)
    p.add_argument("--backend", default="process")
    p.add_argument("--step-marks", default="30000,60000,90000,120000")
    p.add_argument("--time-marks", default="10,20,40,60")
    args = p.parse_args()
    step_marks = [int(x) for x in args.step_marks.split(",")]
    time_marks = [float(x) for x in args.time_marks.split(",")]
    runs = []
    for case in args.cases.split(","):
        for seed in map(int, args.seeds.split(",")):
            for mode in args.modes.split(","):  # modes alternate: the machine's load is shared
                r = run(case, mode, seed, args.steps, args.backend)
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
        + ["mean lag", "steps to 400", "s to 400", "s total"]
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
            cells.append(cell([_first(r["rows"], "env_steps", 400) for r in mine]))
            cells.append(cell([_first(r["rows"], "wall_seconds", 400) for r in mine]))
            cells.append(cell([r["summary"]["wall_seconds"] for r in mine]))
            print("| " + " | ".join([case, mode, *cells]) + " |")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"recurrent_lag-{time.strftime('%Y%m%d-%H%M%S')}.json"
    slim = [{k: v for k, v in r.items() if k != "rows"} for r in runs]
    out.write_text(json.dumps({"argv": sys.argv[1:], "runs": slim}, indent=2))
    print(f"written {out}")


if __name__ == "__main__":
    main()
