"""A simultaneous-move (Parallel API) env beside a published figure: MPE's simple_spread_v3
(mpe2, its defaults: 3 agents, 3 landmarks, 25 cycles, local_ratio 0.5, discrete actions),
PPO with the generic preset and parameter sharing (one policy for the three agents, the default
mapping), no flag but the env, the budget and the seed (the preset's 8 seats per actor round
up to 9, 3 games; the runs in the guide gave --envs-per-actor 9; docs: Guides, multi-agent).

    python benchmarks/mpe.py                               # seeds 1 2 3, sync, 1.5M agent steps
    python benchmarks/mpe.py --modes sync async
    python benchmarks/mpe.py --throughput --steps 30000 --rounds 3   # agent steps/s

The reference is XuanCe's MAPPO benchmark on PettingZoo's simple_spread_v3 (the same env, at
its defaults but with continuous actions; 5 seeds, 10M env steps): REFERENCE below holds its
learning curves' values at the marks, read from
agi-brain/xuance-benchmarks MPE/simple_spread_v3/mappo/results/seed_<k>/learning_curve.csv
(commit b4282f12b277736edc49867a52bb462e85711414). Its figure: every 100,000 env steps (each
step of the 16 parallel envs counts 1 per env, so an env step is 3 agent steps), 5 test
episodes, each episode's score the mean over the agents of each agent's return, and
``avg_return`` the mean over the 5 episodes. asyncrl's figure here is the same score, the mean
over 100 episodes (seeded 10,000 + i) of the run's checkpoint first at or past each mark
(asyncrl counts agent steps: a mark of E env steps is 3E), greedy and stochastic. For scale,
the same 100 episodes' score of agents that stand still and of uniformly random ones.

``--throughput`` measures agent steps per second instead: runs of simple spread (PPO, the
generic preset: 2 actors x 9 seats, 3 games each) beside runs of a single-agent env of the same
cost per agent step (one_seat.py's SpreadOneSeat: one agent acting for the three in turn), with
9 envs per actor (as many rows) and with 3 (as many games), selfplay.py's procedure: each run a
subprocess of `asyncrl train`, the cases alternating in each round, medians over the rounds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

import asyncrl

ENV = "pettingzoo:mpe2.simple_spread_v3"
AGENTS = 3
ENVS_PER_ACTOR = 9  # what the preset's 8 seats round up to (3 games); the throughput cases' K

# XuanCe MAPPO, simple_spread_v3 (continuous actions), avg_return at env steps, seeds 1 to 5
REFERENCE = {
    100_000: (-18.45627350342722, -23.13759084653184, -26.252931029046692, -18.697678379244092,
              -35.13040252432515),
    200_000: (-20.29954808442897, -20.948256017490756, -22.536033686082767, -22.95239893538083,
              -24.307703254688043),
    300_000: (-23.311967041146687, -18.78306860634509, -17.439524092546627, -21.11501724143296,
              -17.847842938610864),
    500_000: (-17.23165280304849, -22.193710133446867, -23.80159243108317, -20.649042111271548,
              -23.898440446731588),
    1_000_000: (-22.818527830196587, -15.296955465029379, -21.015242151779155,
                -21.261095290421217, -18.714766981260986),
    10_000_000: (-12.078885271856695, -10.717180879568438, -10.665228991534923,
                 -14.10550389599544, -9.762434637891474),
}  # fmt: skip


def score(act: Callable[[np.ndarray], np.ndarray], episodes: int) -> float:
    """The mean over episodes of the agents' mean episode return (the reference's score), the
    agents acting by ``act`` (their observations stacked -> their actions)."""
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env()
    scores = []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + i)
        names = list(env.agents)
        total = dict.fromkeys(names, 0.0)
        while env.agents:
            acts = act(np.stack([obs[a] for a in env.agents]))
            obs, rewards, _, _, _ = env.step(dict(zip(env.agents, acts.tolist(), strict=True)))
            for a, r in rewards.items():
                total[a] += r
        scores.append(float(np.mean(list(total.values()))))
    env.close()
    return float(np.mean(scores))


def at_marks(run_dir: Path, marks: list[int], episodes: int) -> list[tuple[int, float, float]]:
    """(agent steps, greedy score, stochastic score) of the run's first checkpoint at or past
    each mark (agent steps), or None where the run ended before it."""
    policies = [
        asyncrl.load(run_dir, checkpoint=path.name, seed=1)
        for path in sorted(run_dir.glob("checkpoint-*.pt"))
    ]
    out = []
    for mark in marks:
        policy = next((p for p in policies if p.env_steps >= mark), None)
        if policy is None:
            out.append(None)
            continue
        greedy = score(lambda x, p=policy: p.act(x, deterministic=True), episodes)
        sampled = score(lambda x, p=policy: p.act(x, deterministic=False), episodes)
        out.append((policy.env_steps, greedy, sampled))
    return out


def baselines(episodes: int) -> dict[str, float]:
    """The score of agents that stand still (action 0) and of uniformly random ones."""
    rng = np.random.default_rng(0)
    return {
        "no-op (all agents stand still)": score(lambda x: np.zeros(len(x), np.int64), episodes),
        "uniform random actions": score(lambda x: rng.integers(0, 5, len(x)), episodes),
    }


def reference_rows(marks: list[int]) -> list[str]:
    rows = []
    for mark in marks:
        if mark not in REFERENCE:
            continue
        runs = REFERENCE[mark]
        rows.append(
            f"| XuanCe MAPPO (continuous) | {mark:,} | 5 | {statistics.mean(runs):.2f} | "
            f"{min(runs):.2f} to {max(runs):.2f} |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_500_000, help="agent steps per run")
    ap.add_argument("--marks", type=int, nargs="+", default=[100_000, 200_000, 300_000, 500_000],
                    help="env steps (an env step is 3 agent steps)")  # fmt: skip
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--modes", nargs="+", default=["sync"])
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--checkpoint-seconds", type=float, default=10.0)
    ap.add_argument("--out", default=None, help="run directories here (default: a temp dir)")
    ap.add_argument("--reuse", action="store_true", help="evaluate runs kept in --out again")
    ap.add_argument("--throughput", action="store_true", help="agent steps/s (see above)")
    ap.add_argument("--rounds", type=int, default=3, help="--throughput: runs of each case")
    args = ap.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="mpe-"))
    if args.throughput:
        import selfplay  # the same procedure as connect four's (this script's folder)

        selfplay.throughput(
            args,
            root,
            {
                "simple spread, 9 seats (3 games) per actor": (ENV, ENVS_PER_ACTOR),
                "single-agent, 9 envs (9 games) per actor": ("one_seat:SpreadOneSeat-v0", 9),
                "single-agent, 3 envs (3 games) per actor": ("one_seat:SpreadOneSeat-v0", 3),
            },
        )
        return
    head = " | ".join(f"at {m:,} env steps" for m in args.marks)
    print(f"| mode | seed | {head} | wall s | agent steps/s |")
    print("|---" * (len(args.marks) + 4) + "|")
    finals: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for mode, seed in itertools.product(args.modes, args.seeds):
        run_dir = root / f"{mode}-{seed}"
        if args.reuse and (run_dir / "summary.json").exists():
            s = json.loads((run_dir / "summary.json").read_text())
        else:
            s = asyncrl.train(
                ENV,
                total_steps=args.steps,
                mode=mode,
                seed=seed,
                run_dir=str(run_dir),
                checkpoint_every=args.checkpoint_seconds,
                keep_checkpoints=1000,
                progress=False,
            ).summary
        points = at_marks(run_dir, [AGENTS * m for m in args.marks], args.episodes)
        cells = []
        for mark, at in zip(args.marks, points, strict=True):
            if at is None:
                cells.append("-")
                continue
            finals.setdefault((mode, mark), []).append((at[1], at[2]))
            cells.append(f"{at[1]:.2f} / {at[2]:.2f} ({at[0] // AGENTS:,})")
        print(
            f"| {mode} | {seed} | " + " | ".join(cells) + f" | {s['wall_seconds']:.0f} | "
            f"{s['env_steps_per_second_overall']:.0f} |",
            flush=True,
        )
    print("\nCells: greedy / stochastic score (the env steps of the checkpoint, agent steps / 3).")
    print("\n| run | env steps | seeds | mean score | range |")
    print("|---|---:|---:|---:|---|")
    for (mode, mark), got in finals.items():
        for i, kind in enumerate(("greedy", "stochastic")):
            vals = [g[i] for g in got]
            print(
                f"| asyncrl PPO, {mode} ({kind}) | {mark:,} | {len(vals)} | "
                f"{statistics.mean(vals):.2f} | {min(vals):.2f} to {max(vals):.2f} |"
            )
    for row in reference_rows(sorted(set(args.marks) | {1_000_000, 10_000_000})):
        print(row)
    for name, value in baselines(args.episodes).items():
        print(f"| {name} | - | - | {value:.2f} | - |")


if __name__ == "__main__":
    main()
