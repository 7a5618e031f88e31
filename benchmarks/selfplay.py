"""Connect four by parameter-shared self-play (PPO, the generic preset, no flag but the env, the
budget and the seed): the policy's win rate against a uniform random player as a function of
env steps, in sync and async mode (docs: Guides, multi-agent). ``--preset game`` takes the
game preset's values instead (with ``--opponents pool``, its own opponents; the budget then
counts the learner's moves).

    python benchmarks/selfplay.py                       # seed 1, sync and async, 200k steps
    python benchmarks/selfplay.py --seeds 1 2 3 --modes sync
    python benchmarks/selfplay.py --opponents self pool  # beside the opponent pool
    python benchmarks/selfplay.py --throughput --steps 50000 --rounds 3   # agent steps/s

With ``--opponents pool`` (snapshots of past selves, the pool's defaults) the budget and the
marks count the learner's moves only, about half of all moves (shared self-play counts both
seats').

Each run keeps a checkpoint every --checkpoint-seconds; afterwards each checkpoint's greedy
policy plays 200 games against the random player (half as first player, half as second, game i
seeded 10,000 + i), and the table gives the first checkpoint at or past each budget mark. Wall
time and agent steps per second are the run's summary's (every move is one agent step; in a
turn-based game, one env step). Throughput depends on what else the machine runs: say so with
the figures.

The baseline beside it, SB3-contrib's MaskablePPO at the settings of PettingZoo's SB3 connect-four
tutorial, judged by the same games: benchmarks/baselines/sb3_maskable_c4.py (its own venv).

``--throughput`` measures agent steps per second instead: the game's runs (PPO, the generic
preset: 2 actors x 8 seats, 4 games each) beside runs of a single-agent env of the same cost per
move (one_seat.py: the same AEC game, one agent playing both sides), with 8 envs per actor (as
many rows) and with 4 (as many games), each run a subprocess of `asyncrl train`, the cases
alternating in each round; CPU seconds are the run's and its actors' (its children's rusage).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncrl

ENV = "pettingzoo:pettingzoo.classic.connect_four_v3"


def curve(run_dir: Path, games: int) -> list[tuple[int, float, float, float]]:
    """(env steps, win, draw, loss) of every checkpoint of the run, in order."""
    out = []
    for path in sorted(run_dir.glob("checkpoint-*.pt")):
        policy = asyncrl.load(run_dir, checkpoint=path.name)
        r = policy.play_vs_random(games)
        out.append((policy.env_steps, r["win"], r["draw"], r["loss"]))
    return out


HERE = Path(__file__).resolve().parent
ONE_SEAT = "one_seat:ConnectFourOneSeat-v0"
THROUGHPUT_CASES = {  # name: (env, envs per actor)
    "connect four, 8 seats (4 games) per actor": (ENV, 8),
    "single-agent, 8 envs (8 games) per actor": (ONE_SEAT, 8),
    "single-agent, 4 envs (4 games) per actor": (ONE_SEAT, 4),
}


def timed_run(env: str, envs: int, mode: str, steps: int, run_dir: Path) -> tuple[float, float]:
    """One `asyncrl train` subprocess: its agent steps per second (the summary's) and its CPU
    microseconds (its own and its actors') per agent step."""
    cmd = [sys.executable, "-m", "asyncrl", "train", "--env", env, "--mode", mode]
    cmd += ["--envs-per-actor", str(envs), "--total-steps", str(steps), "--seed", "1"]
    cmd += ["--preset", "generic"]  # the game's and the single-agent env's runs alike
    cmd += ["--no-progress", "--no-tensorboard", "--checkpoint-every", "0"]
    cmd += ["--run-dir", str(run_dir), "--overwrite"]
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": path})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary["env_steps_per_second_overall"], cpu / summary["env_steps"] * 1e6


def throughput(args: argparse.Namespace, root: Path, cases: dict = THROUGHPUT_CASES) -> None:
    """The cases' medians over args.rounds rounds, the first case the one the others' ratios
    divide (mpe.py passes its own)."""
    print("| mode | case | agent steps/s (median) | CPU µs per agent step (median) | "
          "x the game's steps/s |")  # fmt: skip
    print("|---|---|---:|---:|---:|")
    for mode in args.modes:
        got: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        names = list(cases)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order
                env, envs = cases[name]
                got[name].append(timed_run(env, envs, mode, args.steps, root / "throughput"))
        game = statistics.median(rate for rate, _ in got[names[0]])
        for name, runs in got.items():
            rate = statistics.median(x for x, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(f"| {mode} | {name} | {rate:,.0f} | {cpu:,.0f} | {rate / game:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--marks", type=int, nargs="+", default=[50_000, 100_000, 200_000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--modes", nargs="+", default=["sync", "async"])
    ap.add_argument("--games", type=int, default=200)
    ap.add_argument("--opponents", nargs="+", default=["self"], choices=["self", "pool"])
    ap.add_argument("--preset", default="generic", choices=["generic", "game"])
    ap.add_argument("--checkpoint-seconds", type=float, default=10.0)
    ap.add_argument("--out", default=None, help="run directories here (default: a temp dir)")
    ap.add_argument("--throughput", action="store_true", help="agent steps/s (see above)")
    ap.add_argument("--rounds", type=int, default=3, help="--throughput: runs of each case")
    args = ap.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="selfplay-"))
    if args.throughput:
        throughput(args, root)
        return
    print("| opponents | mode | seed | " + " | ".join(f"win at {m:,}" for m in args.marks)
          + " | wall s | agent steps/s |")  # fmt: skip
    print("|---" * (len(args.marks) + 5) + "|")
    for opponents, mode, seed in itertools.product(args.opponents, args.modes, args.seeds):
        run_dir = root / f"{opponents}-{mode}-{seed}"
        result = asyncrl.train(
            ENV,
            total_steps=args.steps,
            mode=mode,
            seed=seed,
            preset=args.preset,
            opponents=opponents,
            run_dir=str(run_dir),
            checkpoint_every=args.checkpoint_seconds,
            keep_checkpoints=1000,
            progress=False,
        )
        points = curve(run_dir, args.games)
        wins = []
        for mark in args.marks:
            at = next((p for p in points if p[0] >= mark), None)
            wins.append("-" if at is None else f"{at[1]:.3f} ({at[0]:,})")
        s = result.summary
        print(
            f"| {opponents} | {mode} | {seed} | "
            + " | ".join(wins)
            + f" | {s['wall_seconds']:.0f} | "
            f"{s['env_steps_per_second_overall']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
