"""Connect four by self-play, as a user runs it (PPO, no flag but the env, the mode and the seed:
the game preset's pool of past selves and random player, 100k of the learner's moves): the
greedy policy's win rate against the uniform random player and against connect four's
look-ahead player (win if it can, block if it must) as a function of env steps and of
wall-clock, sync and async, 3 seeds; with ``--baseline``, beside SB3-contrib's MaskablePPO at
the settings of PettingZoo's own SB3 connect-four tutorial, run on the same machine for as many
moves (benchmarks/baselines/sb3_maskable_c4.py, the SB3 venv: benchmarks/baselines/setup.sh
sb3), its checkpoints judged by the same games (docs: Guides, multi-agent).

    python benchmarks/selfplay.py --baseline               # seeds 1-3, sync and async, + SB3
    python benchmarks/selfplay.py --seeds 1 --modes sync   # one run
    python benchmarks/selfplay.py --preset generic --opponents self --steps 200000
    python benchmarks/selfplay.py --throughput --steps 50000 --rounds 3   # agent steps/s

Env steps are moves, both players' (a turn-based game steps once per move). With the pool the
learner makes one move of each two of its games (the other seat is an opponent's), and its
budget and checkpoints count its own moves: the tables give twice those, moves in all, so that
100k of the learner's moves stand beside MaskablePPO's 200k steps (its one model makes every
move, both seats'). Shared self-play (``--opponents self``) counts every move already.

Each run keeps a checkpoint every --checkpoint-seconds (its training wall time stored with it);
afterwards each checkpoint's greedy policy plays --games games against each player (half as
first player, half as second, game i seeded 10,000 + i). Printed: each run's curve, then the
means over seeds at each mark of moves (the first checkpoint at or past it) and of wall seconds
(the last checkpoint at or before it), with the mean of where those checkpoints lie. Wall
times are training only (the games come after) and depend on what else the machine runs: say
so with the figures. ``--out DIR`` keeps the run
directories and writes ``curves.json`` there.

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
from asyncrl.rundir import load_checkpoint_at

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppo_throughput import VENVS, baseline_lines  # noqa: E402

ENV = "pettingzoo:pettingzoo.classic.connect_four_v3"


OPPONENTS = ("random", "lookahead")


def curve(run_dir: Path, games: int, per_move: int) -> list[dict]:
    """Every checkpoint of the run, in order: its moves in all (``per_move`` times the steps it
    counts: 2 where the budget counts the learner's moves), its training wall seconds and its
    greedy policy's rates against each of OPPONENTS."""
    out = []
    for path in sorted(run_dir.glob("checkpoint-*.pt")):
        policy = asyncrl.load(run_dir, checkpoint=path.name)
        wall = load_checkpoint_at(path)["wall_seconds"]
        point = {"moves": policy.env_steps * per_move, "wall_s": round(wall, 1)}
        for opponent in OPPONENTS:
            point[opponent] = policy.play_vs(opponent, games, seed=10_000)
        out.append(point)
    return out


def baseline(seed: int, moves: int, games: int, out: Path) -> list[dict]:
    """MaskablePPO's checkpoints (every 12.5k steps and the last) in the SB3 venv, each its
    moves, training wall seconds and rates, judged by asyncrl's play_vs (asyncrl's source on
    the venv's path)."""
    args = ["--seed", str(seed), "--steps", str(moves), "--every", "12500"]
    args += ["--games", str(games), "--out", str(out)]
    src = str(Path(asyncrl.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": src}
    lines = baseline_lines("sb3", "sb3_maskable_c4.py", args, timeout=None, env=env) or []
    return [
        {"moves": x["steps"], "wall_s": x["wall_s"], **{o: x[o] for o in OPPONENTS}} for x in lines
    ]


def at_moves(points: list[dict], mark: int) -> dict | None:
    """The first checkpoint at or past ``mark`` moves."""
    return next((p for p in points if p["moves"] >= mark), None)


def at_seconds(points: list[dict], mark: float) -> dict | None:
    """The last checkpoint at or before ``mark`` training seconds."""
    before = [p for p in points if p["wall_s"] <= mark]
    return before[-1] if before else None


def cell(points: list[dict | None], where: str) -> str:
    """Mean win rates against random / look-ahead over the seeds' checkpoints, and the mean of
    where they lie (``where``: moves, in thousands, or wall_s)."""
    if any(p is None for p in points):
        return "-"
    rnd = statistics.mean(p["random"]["win"] for p in points)
    look = statistics.mean(p["lookahead"]["win"] for p in points)
    at = statistics.mean(p[where] for p in points)
    lies = f"{at / 1000:.0f}k" if where == "moves" else f"{at:.0f} s"
    return f"{rnd:.3f} / {look:.3f} ({lies})"


def tables(runs: dict[tuple[str, str, int], list[dict]], moves: list[int], seconds: list[float]):
    """Each run's curve, then the means over seeds at each mark of moves and of seconds."""
    for (impl, mode, seed), points in runs.items():
        print(f"\n{impl}, {mode}, seed {seed}: moves, training s, win vs random, vs look-ahead")
        for p in points:
            print(f"  {p['moves']:>8,} {p['wall_s']:>7.1f} s  {p['random']['win']:.3f}"
                  f"  {p['lookahead']['win']:.3f}")  # fmt: skip
    groups: dict[tuple[str, str], list[list[dict]]] = {}
    for (impl, mode, _), points in runs.items():
        groups.setdefault((impl, mode), []).append(points)
    for name, marks, pick, unit, where in (
        ("moves", moves, at_moves, lambda m: f"{m:,} moves", "moves"),
        ("seconds", seconds, at_seconds, lambda m: f"{m:g} s", "wall_s"),
    ):
        print(f"\nMean over seeds, win rate vs random / vs look-ahead, at equal {name} "
              f"({'first checkpoint at or past' if name == 'moves' else 'last checkpoint by'} "
              "each mark):")  # fmt: skip
        print("| impl | mode | seeds | " + " | ".join(unit(m) for m in marks) + " |")
        print("|---|---|---:|" + "---|" * len(marks))
        for (impl, mode), curves in groups.items():
            cells = [cell([pick(c, m) for c in curves], where) for m in marks]
            print(f"| {impl} | {mode} | {len(curves)} | " + " | ".join(cells) + " |")


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
    ap.add_argument("--steps", type=int, default=None,
                    help="the budget as the run counts it (default: the preset's)")  # fmt: skip
    ap.add_argument("--marks", type=int, nargs="+", default=[25_000, 50_000, 100_000, 200_000],
                    help="moves (both players')")  # fmt: skip
    ap.add_argument("--seconds", type=float, nargs="+", default=[10, 20, 40, 60, 150],
                    help="training wall seconds")  # fmt: skip
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--modes", nargs="+", default=["sync", "async"])
    ap.add_argument("--games", type=int, default=200)
    ap.add_argument("--opponents", default=None, choices=["self", "pool"],
                    help="default: the preset's (the game preset: pool)")  # fmt: skip
    ap.add_argument("--preset", default=None, choices=["generic", "game"],
                    help="default: none given, as a user runs it (auto: game)")  # fmt: skip
    ap.add_argument("--baseline", action="store_true",
                    help="also MaskablePPO (SB3 venv), as many moves, same seeds")  # fmt: skip
    ap.add_argument("--checkpoint-seconds", type=float, default=2.5)
    ap.add_argument("--out", default=None, help="run directories here (default: a temp dir)")
    ap.add_argument("--throughput", action="store_true", help="agent steps/s (see above)")
    ap.add_argument("--rounds", type=int, default=3, help="--throughput: runs of each case")
    args = ap.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="selfplay-"))
    if args.throughput:
        throughput(args, root)
        return
    sb3 = VENVS / "sb3" / "bin" / "python"
    if args.baseline and not sb3.exists():  # before any run
        sys.exit(f"--baseline: {sb3} missing; run: bash benchmarks/baselines/setup.sh sb3")
    given = {k: v for k, v in (("preset", args.preset), ("opponents", args.opponents)) if v}
    if args.steps:
        given["total_steps"] = args.steps
    runs: dict[tuple[str, str, int], list[dict]] = {}
    budget_moves = 0
    for mode, seed in itertools.product(args.modes, args.seeds):
        run_dir = root / f"asyncrl-{mode}-{seed}"
        result = asyncrl.train(
            ENV,
            mode=mode,
            seed=seed,
            run_dir=str(run_dir),
            checkpoint_every=args.checkpoint_seconds,
            keep_checkpoints=1000,
            progress=False,
            overwrite=True,
            **given,
        )
        s = result.summary
        per_move = 2 if s.get("opponents") == "pool" else 1
        budget_moves = max(budget_moves, s["env_steps"] * per_move)
        runs[("asyncrl", mode, seed)] = curve(run_dir, args.games, per_move)
        print(f"asyncrl {mode} seed {seed}: {s['env_steps']:,} steps as counted, "
              f"{s['wall_seconds']:.0f} s, vs random {s['win_rate_vs_random']:.3f}, "
              f"vs look-ahead {s['win_rate_vs_lookahead']:.3f}", flush=True)  # fmt: skip
    if args.baseline:
        moves = max(args.marks[-1], budget_moves)
        for seed in args.seeds:
            points = baseline(seed, moves, args.games, root / f"maskableppo-{seed}")
            if not points:  # the script failed (said why above): the tables go without it
                continue
            runs[("MaskablePPO", "-", seed)] = points
            print(f"MaskablePPO seed {seed}: {points[-1]['moves']:,} moves, "
                  f"{points[-1]['wall_s']:.0f} s", flush=True)  # fmt: skip
    (root / "curves.json").write_text(
        json.dumps([dict(impl=i, mode=m, seed=s, points=p) for (i, m, s), p in runs.items()])
    )
    tables(runs, args.marks, args.seconds)
    print(f"\nrun directories and curves.json: {root}")


if __name__ == "__main__":
    main()
