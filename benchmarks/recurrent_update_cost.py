"""What a recurrent PPO update costs beside a feed-forward one of the same sizes.

    python benchmarks/recurrent_update_cost.py
    python benchmarks/recurrent_update_cost.py --rounds 10 --width 128 --recurrence 32
    python benchmarks/recurrent_update_cost.py --compile    # the compiled steps too

One batch of T x B steps (CartPole's shapes, episode ends inside chunks), the same epochs and
minibatch size: targets and update of a feed-forward policy with hidden layers [W, W] (its
fused step, as runs take it, and the autograd step), and of LSTM and GRU policies with one
hidden layer of W and a core of W units (each with its fused step, as runs take it, and the
autograd step; with --compile each compiled step as well, whose first round compiles).
Rounds alternate between the variants; the table gives median milliseconds per update and the
ratios to the feed-forward updates. The process uses one torch thread unless --threads says
otherwise.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from asyncrl.algos.ppo.config import PPOConfig
from asyncrl.algos.ppo.networks import build_policy
from asyncrl.algos.ppo.recurrent import RecurrentPPO
from asyncrl.algos.ppo.update import PPO
from asyncrl.envs import EnvSpec

SPEC = EnvSpec("CartPole-v1", (4,), True, (), 2, None, None)


def batch(T: int, B: int, S: int, width: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    done = torch.rand(T, B, generator=g) < 1 / 40  # episodes of ~40 steps
    return {
        "obs": torch.randn(T + 1, B, 4, generator=g),
        "actions": torch.randint(0, 2, (T, B), generator=g),
        "logp": torch.full((T, B), -0.69),
        "rewards": torch.ones(T, B),
        "terminated": done,
        "truncated": torch.zeros(T, B, dtype=torch.bool),
        "trunc_values": torch.zeros(T, B),
        "rnn_states": torch.zeros(T // S, B, 2, width),
    }


def variants(args: argparse.Namespace) -> dict:
    hp = PPOConfig(epochs=args.epochs, minibatch_size=args.minibatch_size)
    W = args.width
    out = {}
    torch.manual_seed(0)
    ff = build_policy(SPEC, [W, W], "tanh", False)
    out["feed-forward (fused step)"] = PPO(ff, hp, 1e-3)
    autograd = build_policy(SPEC, [W, W], "tanh", False)
    out["feed-forward (autograd step)"] = PPO(autograd, hp, 1e-3, fused=False)
    if args.compile:
        compiled = build_policy(SPEC, [W, W], "tanh", False)
        out["feed-forward (compiled step)"] = PPO(compiled, hp, 1e-3, compile=True)
    for kind in ("lstm", "gru"):
        steps = ["fused", "autograd"] + (["compiled"] if args.compile else [])
        for step in steps:
            policy = build_policy(SPEC, [W], "tanh", False, "auto", kind, W)
            out[f"{kind} ({step} step)"] = RecurrentPPO(
                policy, hp, 1e-3, args.recurrence, fused=step != "autograd",
                compile=step == "compiled",
            )  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rollout", type=int, default=64)
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--recurrence", type=int, default=16)
    p.add_argument("--minibatch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="the compiled steps too")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    algos = variants(args)
    r = batch(args.rollout, args.envs, args.recurrence, args.width)
    times: dict[str, list[float]] = {name: [] for name in algos}
    for _ in range(args.rounds + 1):  # the first round warms up
        for name, algo in algos.items():
            rollout = {k: v for k, v in r.items() if k != "rnn_states"}
            if name.startswith(("lstm", "gru")):  # S = 2 (h, c) or 1
                rows = 2 if name.startswith("lstm") else 1
                rollout["rnn_states"] = r["rnn_states"][:, :, :rows]
            t0 = time.perf_counter()
            b = algo.targets(rollout)
            algo.update(b, 1e-3, torch.Generator().manual_seed(0))
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["feed-forward (autograd step)"][1:])
    fused = statistics.median(times["feed-forward (fused step)"][1:])
    steps = args.epochs * (args.rollout * args.envs // args.minibatch_size)
    print(
        f"batch {args.rollout} x {args.envs}, minibatch {args.minibatch_size}, {args.epochs} "
        f"epochs ({steps} steps), width {args.width}, recurrence {args.recurrence}, "
        f"{args.threads} thread(s), {args.rounds} rounds"
    )
    head = "| update | ms (median) | x autograd feed-forward | x fused feed-forward |"
    compiled = statistics.median(times.get("feed-forward (compiled step)", [0, 0])[1:])
    print(head + (" x compiled feed-forward |" if compiled else ""))
    print("|---" * (5 if compiled else 4) + "|")
    for name, ts in times.items():
        ms = statistics.median(ts[1:])
        row = f"| {name} | {ms * 1e3:.1f} | {ms / base:.2f} | {ms / fused:.2f} |"
        print(row + (f" {ms / compiled:.2f} |" if compiled else ""))


if __name__ == "__main__":
    main()
