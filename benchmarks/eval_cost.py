"""What evaluation during training costs the learner: the same run with and without
``--eval-every``, alternating, on this machine.

    python benchmarks/eval_cost.py [--env HalfCheetah-v5] [--steps 60000] [--rounds 2]

Prints, per setting, the median over rounds of the learner's samples/s (its own update speed,
median of the metrics rows after the first five) and of the run's env steps/s, and what the
evaluations took. The evaluator is a separate process at a lower priority; on a machine whose
cores the actors already fill, what it costs shows up here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import asyncrl


def one_run(env: str, backend: str, steps: int, every: int, episodes: int, run_dir: Path) -> dict:
    result = asyncrl.train(
        env,
        mode="async",  # as recorded (the mujoco preset's is sync)
        backend=backend,
        total_steps=steps,
        actors=2,
        envs_per_actor=8,
        rollout=64,
        epochs=4,
        minibatch_size=256,
        norm_obs=True,
        eval_every=every,
        eval_episodes=episodes,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        run_dir=str(run_dir),
    )
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    train_rows = [r for r in rows if "learner_samples_per_second" in r][5:]
    eval_rows = [r for r in rows if "eval/seconds" in r]
    return {
        "learner_sps": statistics.median(r["learner_samples_per_second"] for r in train_rows),
        "env_sps": result.summary["env_steps_per_second"],
        "evaluations": len(eval_rows),
        "eval_seconds": sum(r["eval/seconds"] for r in eval_rows),
        "wall": result.summary["wall_seconds"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="HalfCheetah-v5")
    ap.add_argument("--backend", default="process")
    ap.add_argument("--steps", type=int, default=60_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--every", type=int, default=10_000)
    ap.add_argument("--episodes", type=int, default=5)
    args = ap.parse_args()
    settings = {
        "off": (0, 1),
        f"every {args.every:,}, {args.episodes} episodes": (args.every, args.episodes),
    }
    results: dict[str, list[dict]] = {name: [] for name in settings}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, (every, episodes) in settings.items():
                out = one_run(
                    args.env, args.backend, args.steps, every, episodes, Path(tmp) / f"{r}-{every}"
                )
                results[name].append(out)
                print(f"round {r + 1} {name}: {out}", flush=True)
    base = statistics.median(o["learner_sps"] for o in results["off"])
    base_env = statistics.median(o["env_sps"] for o in results["off"])
    print(
        f"\n{args.env}, {args.backend} backend, 2 actors x 8 envs x 64 steps, 4 epochs, "
        f"{args.steps:,} steps"
    )
    print("| eval | learner samples/s | vs off | env steps/s | vs off | evaluations (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, outs in results.items():
        sps = statistics.median(o["learner_sps"] for o in outs)
        env = statistics.median(o["env_sps"] for o in outs)
        evals = statistics.median(o["evaluations"] for o in outs)
        secs = statistics.median(o["eval_seconds"] for o in outs)
        print(
            f"| {name} | {sps:,.0f} | {sps / base:.3f} | {env:,.0f} | {env / base_env:.3f} "
            f"| {evals:g} ({secs:.1f}) |"
        )


if __name__ == "__main__":
    main()
