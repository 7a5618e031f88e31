"""Populations and Population-Based Training (issue 32, "done when" 2); not part of CI.

    python benchmarks/population.py                          # both parts
    python benchmarks/population.py --parts a --steps-per-policy 1000000
    python benchmarks/population.py --parts b --repeats 3

Parts:
  a  HalfCheetah-v5, PPO (the mujoco preset): PBT with 4 policies against 4 independent runs
     that start with the same hyperparameters -- policy 0 the preset's, policies 1-3 drawn
     around them (--population-init perturb) -- with equal env steps per policy and the same
     envs per policy (PBT: 2 actors x 16 envs, 4 per policy; each independent run: 2 actors x
     4 envs). Reports the best policy's return and the wall clock of each.
  b  The fleet's env steps/s with P = 4 policies against P = 1 on the same actors (part d of
     ppo_throughput.py: HalfCheetah, 2 actors x 8 envs, rollout 64, 2 epochs, async), the arms
     alternating run by run. Target: P = 4 at least 0.9 of P = 1. P = 4 runs twice: with
     --rollouts-per-batch 4, so that each policy's batch is as large as P = 1's (4 rollouts of
     its 2 envs x 64 steps = 512 samples, one actor's rollout for P = 1), and with one rollout
     per batch (128 samples: 4x the iterations). All arms take minibatches of 128, so the
     learners do the same arithmetic per env step; --p1-minibatch 512 is the setting of the
     first measurement (P = 1 then took a quarter of the gradient steps).

Timed runs belong under ``flock /tmp/asyncrl-bench.lock``. Figures go to
benchmarks/results/population-<time>.json (the line ``written <path>`` names it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig, policy_config, resolve

RESULTS = Path(__file__).resolve().parent / "results"


def _run(cfg: TrainConfig) -> dict:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        summary = train(dataclasses.replace(cfg, run_dir=d))
        summary["wall_clock"] = time.perf_counter() - t0
        exploits = Path(d) / "pbt.jsonl"
        summary["exploit_log"] = (
            [json.loads(line) for line in exploits.open()] if exploits.exists() else []
        )
    return summary


def part_a(steps: int, seed: int) -> dict:
    print(f"\n[a] HalfCheetah-v5: PBT x 4 against 4 independent runs, {steps:,} steps per policy")
    pbt = TrainConfig(
        env="HalfCheetah-v5",
        mode="async",  # as recorded (the mujoco preset's is sync; PBT is async's case)
        policies=4,
        pbt=True,
        pbt_period=max(steps // 10, 1),
        population_init="perturb",
        actors=2,
        envs_per_actor=16,
        total_steps=4 * steps,
        seed=seed,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
    )
    resolved = resolve(pbt, "mujoco")
    starts = []
    independent = []
    for p in range(4):
        own = policy_config(resolved, p)
        starts.append({n: getattr(own, n) for n in resolved.population})
        single = dataclasses.replace(
            own, policies=1, pbt=False, population={}, population_init="given", total_steps=steps
        )
        s = _run(single)
        independent.append(s)
        print(
            f"  independent {p}: return {s['final_return']:8.1f} (last 100 "
            f"{s['last100_return']:8.1f}), {s['wall_clock']:6.0f} s  {starts[p]}"
        )
    s = _run(pbt)
    best = max(independent, key=lambda r: r["final_return"])
    print(
        f"  PBT x 4: best policy {s['best_policy']} return {s['final_return']:8.1f} (last 100 "
        f"{s['last100_return']:8.1f}), {s['wall_clock']:6.0f} s, {s['pbt_exploits']} exploits"
    )
    for row in s["population"]:
        values = row["hyperparameters"]
        print(f"    policy {row['policy']}: return {row['final_return']:8.1f} {values}")
    print(
        f"  best independent return {best['final_return']:.1f}; independent runs one after "
        f"another {sum(r['wall_clock'] for r in independent):.0f} s"
    )
    return {
        "steps_per_policy": steps,
        "starting_values": starts,
        "independent": [
            {k: r[k] for k in ("final_return", "last100_return", "wall_clock", "env_steps")}
            for r in independent
        ],
        "pbt": {
            "best_policy": s["best_policy"],
            "final_return": s["final_return"],
            "last100_return": s["last100_return"],
            "wall_clock": s["wall_clock"],
            "exploits": s["exploit_log"],
            "population": s["population"],
        },
    }


def part_b(steps: int, repeats: int, p1_minibatch: int) -> dict:
    print("\n[b] HalfCheetah, 2 actors x 8 envs, async: the fleet's env steps/s, P = 4 vs P = 1")
    one = TrainConfig(
        env="HalfCheetah-v5",
        mode="async",
        actors=2,
        envs_per_actor=8,
        rollout=64,
        epochs=2,
        minibatch_size=p1_minibatch,
        norm_obs=True,
        total_steps=steps,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
    )
    # each of 4 policies gets 2 envs of each actor: 2 x 64 samples per rollout, 2 epochs each;
    # 4 of its rollouts make a batch of P = 1's size
    four = dataclasses.replace(one, policies=4, minibatch_size=128, rollouts_per_batch=4)
    four_small = dataclasses.replace(four, rollouts_per_batch=1)
    arms = (("P=1", one), ("P=4", four), ("P=4, 1 rollout per batch", four_small))
    rates: dict[str, list[float]] = {name: [] for name, _ in arms}
    for _ in range(repeats):
        for name, cfg in arms:
            s = _run(cfg)
            rates[name].append(s["env_steps_per_second"])
            rate, lag = s["env_steps_per_second"], s["policy_lag_mean"]
            print(f"  {name}: {rate:8.0f} env steps/s (lag {lag:.2f})")
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratios = {k: med[k] / med["P=1"] for k in med if k != "P=1"}
    for k, r in ratios.items():
        print(f"  {k} / P=1 = {r:.2f}" + (" (target >= 0.9)" if k == "P=4" else ""))
    return {
        "runs": rates,
        "median": med,
        "ratio": ratios["P=4"],
        "ratios": ratios,
        "p1_minibatch": p1_minibatch,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="a,b")
    ap.add_argument("--steps-per-policy", type=int, default=1_000_000, help="part a")
    ap.add_argument("--throughput-steps", type=int, default=102_400, help="part b, per run")
    ap.add_argument("--repeats", type=int, default=3, help="part b")
    ap.add_argument("--p1-minibatch", type=int, default=128, help="part b: P = 1's minibatch")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    out: dict = {}
    for part in args.parts.split(","):
        if part == "a":
            out["a"] = part_a(args.steps_per_policy, args.seed)
        elif part == "b":
            out["b"] = part_b(args.throughput_steps, args.repeats, args.p1_minibatch)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"population-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2, default=str))
    print(f"written {path.relative_to(Path(__file__).resolve().parent.parent)}")
