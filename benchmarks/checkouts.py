"""One benchmark script run on two checkouts of asyncrl, alternating, in one session: the
figures of each side by side, with their medians and the ratio new / old.

    python benchmarks/checkouts.py --old ../asyncrl-before --rounds 2 -- \
        ppo_throughput.py --parts a,b,c,d --no-baselines --repeats 1

Each round runs the old checkout's copy of the script, then the new one's (the next round the
other way round, so that a drift of the machine's speed falls on both alike), each in its own
process with ``PYTHONPATH`` at that checkout's ``src``. A script writes its figures as JSON and
names the file on a line ``written <path>``; every number in it is a figure here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def run(checkout: Path, script: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout / "src"))
    cmd = [sys.executable, str(checkout / "benchmarks" / script[0]), *script[1:]]
    print(f"$ PYTHONPATH={checkout / 'src'} {' '.join(cmd[1:])}", flush=True)
    out = subprocess.run(cmd, env=env, cwd=checkout, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{checkout}: exit {out.returncode}\n{out.stderr[-3000:]}")
    path = [
        line.split(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("written ")
    ]
    if not path:
        sys.exit(f"{checkout}: the script named no results file\n{out.stdout[-2000:]}")
    return json.loads((checkout / path[-1]).read_text())


def figures(tree: dict, prefix: str = "") -> dict[str, float]:
    """Every number in a results tree, by its path."""
    out: dict[str, float] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(figures(value, name + "."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--old", type=Path, required=True, help="the checkout before the change")
    p.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS...]")
    args = p.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for side in order:
            checkout = (args.old if side == "old" else args.new).resolve()
            runs[side].append(figures(run(checkout, script)))
    names = sorted(set(runs["old"][0]) & set(runs["new"][0]))
    print(f"\n{'figure':60s} {'old runs':>24s} {'new runs':>24s} {'new/old':>8s}")
    for name in names:
        old = [f[name] for f in runs["old"] if name in f]
        new = [f[name] for f in runs["new"] if name in f]
        mo, mn = statistics.median(old), statistics.median(new)
        ratio = f"{mn / mo:8.3f}" if mo else "       -"
        show = lambda xs: ", ".join(f"{x:,.4g}" for x in xs)  # noqa: E731
        print(f"{name:60s} {show(old):>24s} {show(new):>24s} {ratio}")


if __name__ == "__main__":
    main()
