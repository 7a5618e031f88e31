"""What PPO learns on MuJoCo out of the box, against CleanRL's published 1M-step figures (issue 15).
Not a CI test: the full run is 3 envs x 3 seeds x 2 modes x 1M env steps, ~2-3 hours on 2 cores.

    python benchmarks/mujoco_returns.py                                  # the full table
    python benchmarks/mujoco_returns.py --envs Hopper-v5 --seeds 1 --steps 20000 --modes async

Every asyncrl run is `asyncrl train --env ENV --mode MODE --seed S` (with --steps, also
`--total-steps STEPS`) and nothing else that changes learning: the mujoco preset chooses every
setting, the budget of 1M env steps included (progress bar,
TensorBoard off; process backend, 2 actors x 8 envs). The runs go one after another, so no two
compete for the cores. Metric, as CleanRL's: the mean return of a run's last 100 training
episodes (summary.json's last100_return; fewer if the run had fewer), then mean and std over
seeds. CleanRL's figures are on the v4 envs (gymnasium 0.29), asyncrl's on v5 (same models).

SB3's PPO time for the same budget at its defaults (1 env, n_steps 2048, 10 epochs, minibatch
64) is measured here, in the same run, on --sb3-steps steps per env and extrapolated to --steps:
its rate does not change over a run (fixed-size updates). It runs in its own venv, made by
`bash benchmarks/baselines/setup.sh`; without it the column is left empty and the rest runs.

--reference-seeds N (or a list) also trains the reference here, on the same v5 envs and the same
metric: SB3's PPO with CleanRL's ppo_continuous_action settings
(baselines/sb3_ppo_mujoco.py), --steps env steps per seed, one run at a time after asyncrl's
(~20 min per 1M-step run on one core). Off by default.

Results: benchmarks/results/mujoco_returns-<time>.json and .md, and each run's directory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppo_throughput import RESULTS, baseline, run_baseline  # noqa: E402

from asyncrl.runtime.trainer import train  # noqa: E402
from asyncrl.settings import PRESETS, TrainConfig  # noqa: E402

# CleanRL ppo_continuous_action, v4 envs, 1M steps, 3 seeds: mean of each run's last 100
# training episodes (docs.cleanrl.dev, rl-algorithms/ppo; see /work/shared/REFERENCES.md)
CLEANRL_1M = {"HalfCheetah": 1442.6, "Hopper": 2382.9, "Walker2d": 2288.0}


def cleanrl_figure(env: str) -> float | None:
    return CLEANRL_1M.get(env.split("-")[0])


def run_ours(env: str, mode: str, seed: int, steps: int | None, out: Path) -> dict:
    """One run with the presets; ``steps``: its budget, or None for the preset's."""
    cfg = TrainConfig(
        env=env,
        mode=mode,
        seed=seed,
        total_steps=steps,
        progress=False,
        tensorboard=False,
        run_dir=str(out / f"{env}-{mode}-seed{seed}"),
    )
    s = train(cfg)
    return {
        "env": env,
        "mode": mode,
        "seed": seed,
        "last100_return": s["last100_return"],
        "final_return_last20": s["final_return"],
        "episodes": s["episodes"],
        "env_steps": s["env_steps"],
        "wall_seconds": s["wall_seconds"],
        "env_steps_per_second": s["env_steps_per_second"],
        "run_dir": s["run_dir"],
    }


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def table(
    runs: list[dict],
    sb3: dict,
    steps: int,
    envs: list[str],
    modes: list[str],
    reference: list[dict] | None = None,
) -> str:
    lines = [
        f"| env | mode | asyncrl last-100 return, {steps:,} steps (mean ± std over seeds) "
        "| CleanRL v4, 1M | ratio | SB3 PPO, CleanRL's settings, here | asyncrl wall-clock (mean) "
        f"| SB3 PPO wall-clock for {steps:,} (extrapolated) | time ratio asyncrl/SB3 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for env in envs:
        ref = cleanrl_figure(env)
        rate = (sb3.get(env) or {}).get("env_steps_per_second")
        sb3_seconds = steps / rate if rate else None
        refs = [r["last100_return"] for r in reference or [] if r["env"] == env]
        here = "-"
        if refs:
            ref_mean, ref_std = _mean_std(refs)
            here = f"{ref_mean:,.0f} ± {ref_std:,.0f} ({len(refs)} seeds)"
        for mode in modes:
            mine = [r for r in runs if r["env"] == env and r["mode"] == mode]
            if not mine:
                continue
            mean, std = _mean_std([r["last100_return"] for r in mine])
            wall = statistics.fmean(r["wall_seconds"] for r in mine)
            ratio = f"{mean / ref:.2f}" if ref else "-"
            lines.append(
                f"| {env} | {mode} | {mean:,.0f} ± {std:,.0f} ({len(mine)} seeds) "
                f"| {f'{ref:,.0f}' if ref else '-'} | {ratio} | {here} | {wall:,.0f} s "
                f"| {f'{sb3_seconds:,.0f} s' if sb3_seconds else '-'} "
                f"| {f'{wall / sb3_seconds:.2f}' if sb3_seconds else '-'} |"
            )
    return "\n".join(lines)


def _seeds(text: str) -> list[int]:
    """``3`` is seeds 1, 2, 3; ``2,3`` is those two (to add seeds to runs made before)."""
    if "," in text:
        return [int(x) for x in text.split(",") if x.strip()]
    return list(range(1, int(text) + 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--envs", default="HalfCheetah-v5,Hopper-v5,Walker2d-v5")
    p.add_argument(
        "--seeds",
        type=_seeds,
        default=[1, 2, 3],
        help="N (seeds 1..N) or a list such as 2,3, per env and mode",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="env steps per run (default: the mujoco preset's budget, 1M, which asyncrl's runs "
        "then take from the preset, not from a flag)",
    )
    p.add_argument("--modes", default="async,sync")
    p.add_argument(
        "--sb3-steps",
        type=int,
        default=20_480,
        help="env steps of the SB3 timing run per env (0: skip SB3)",
    )
    p.add_argument(
        "--reference-seeds",
        type=_seeds,
        default=[],
        help="also train SB3 PPO with CleanRL's settings here: N (seeds 1..N) or a list",
    )
    args = p.parse_args()
    budget = args.steps or PRESETS["mujoco"]["ppo"]["total_steps"]  # what each run takes
    envs = [e for e in args.envs.split(",") if e]
    modes = [m for m in args.modes.split(",") if m]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"mujoco_returns-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "torch": torch.__version__,
        "argv": sys.argv[1:],
        "runs": [],
        "sb3": {},
        "reference": [],
    }

    def save() -> None:  # after every run: a long benchmark stopped half-way keeps what it did
        (RESULTS / f"mujoco_returns-{stamp}.json").write_text(
            json.dumps(results, indent=2, default=float)
        )

    sb3: dict = {}
    if args.sb3_steps:
        for env in envs:
            print(f"SB3 PPO (its defaults) on {env}: {args.sb3_steps:,} steps to time it")
            res = baseline(
                "sb3", "sb3_ppo.py", ["--env", env, "--steps", str(args.sb3_steps)], repeats=1
            )
            if res is None:
                break  # the venv is missing or SB3 failed: said above, go on without it
            sb3[env] = res
            print(
                f"  {res['env_steps_per_second']:,.0f} env steps/s -> "
                f"{budget / res['env_steps_per_second']:,.0f} s for {budget:,} steps "
                "(extrapolated)",
                flush=True,
            )
    results["sb3"] = sb3

    for env in envs:
        for mode in modes:
            for seed in args.seeds:
                r = run_ours(env, mode, seed, args.steps, out)
                results["runs"].append(r)
                print(
                    f"{env} {mode} seed {seed}: last-100 return {r['last100_return']:,.1f} "
                    f"({r['episodes']} episodes), {r['wall_seconds']:,.0f} s, "
                    f"{r['env_steps_per_second']:,.0f} env steps/s",
                    flush=True,
                )
                save()

    for env in envs:
        for seed in args.reference_seeds:
            print(f"reference: SB3 PPO with CleanRL's settings on {env}, seed {seed}", flush=True)
            # no time limit: a 1M-step run takes ~20 min on one core
            args_ = ["--env", env, "--seed", str(seed), "--steps", str(budget)]
            r = run_baseline("sb3", "sb3_ppo_mujoco.py", args_, timeout=None)
            if r is None:
                break
            results["reference"].append(r)
            print(
                f"  last-100 return {r['last100_return']:,.1f}, {r['seconds']:,.0f} s",
                flush=True,
            )
            save()

    text = table(results["runs"], sb3, budget, envs, modes, results["reference"])
    if sb3:
        sb3_note = (
            f"SB3: PPO at its defaults, timed here on {args.sb3_steps:,} steps per env and "
            f"extrapolated to {budget:,}."
        )
    else:
        sb3_note = "SB3: not measured (its venv: bash benchmarks/baselines/setup.sh)."
    notes = (
        f"\nasyncrl: PPO, mujoco preset, no other learning setting; {budget:,} env steps "
        "per run. CleanRL: ppo_continuous_action on v4 envs, 3 seeds, 1M steps (published). "
        "SB3 PPO, CleanRL's settings, here: baselines/sb3_ppo_mujoco.py on the same envs, "
        f"--reference-seeds. {sb3_note}\n"
    )
    print("\n" + text + notes)
    (RESULTS / f"mujoco_returns-{stamp}.md").write_text(text + "\n" + notes)
    print(f"written {RESULTS / f'mujoco_returns-{stamp}.json'} and .md")


if __name__ == "__main__":
    main()
