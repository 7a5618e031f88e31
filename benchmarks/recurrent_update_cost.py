"""What a recurrent PPO update costs beside a feed-forward one of the same sizes.

    python benchmarks/recurrent_update_cost.py
    python benchmarks/recurrent_update_cost.py --rounds 10 --width 128 --recurrence 32
    python benchmarks/recurrent_update_cost.py --compile    # the compiled steps too
    python benchmarks/recurrent_update_cost.py --pixels     # the Atari pair, 84x84 frames

One batch of T x B steps (CartPole's shapes, episode ends inside chunks), the same epochs and
minibatch size: targets and update of a feed-forward policy with hidden layers [W, W] (its
fused step, as runs take it, and the autograd step), and of LSTM and GRU policies with one
hidden layer of W and a core of W units (each with its fused step, as runs take it, and the
autograd step; with --compile each compiled step as well, whose first round compiles).
Rounds alternate between the variants; the table gives median milliseconds per update and the
ratios to the feed-forward updates. The process uses one torch thread unless --threads says
otherwise.

--pixels: the pair of CleanRL's ppo_atari and ppo_atari_lstm on the same frames (one 84x84
uint8 frame by default): the Nature CNN with its linear layer of 512 and linear heads, against
the same CNN with an LSTM (GRU) of --width units (default 128) between it and the heads; the
batch, minibatch and epochs of the atari preset (128 x 8, 256, 4) unless given.
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


def pixel_spec(frames: int) -> EnvSpec:
    return EnvSpec("ALE/Pong-v5", (frames, 84, 84), True, (), 6, None, None, "uint8", frames)


def batch(spec: EnvSpec, T: int, B: int, S: int, width: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    done = torch.rand(T, B, generator=g) < 1 / 40  # episodes of ~40 steps
    if spec.obs_dtype == "uint8":
        obs = torch.randint(0, 256, (T + 1, B, *spec.obs_shape), generator=g, dtype=torch.uint8)
    else:
        obs = torch.randn(T + 1, B, *spec.obs_shape, generator=g)
    return {
        "obs": obs,
        "actions": torch.randint(0, 2, (T, B), generator=g),
        "logp": torch.full((T, B), -0.69),
        "rewards": torch.ones(T, B),
        "terminated": done,
        "truncated": torch.zeros(T, B, dtype=torch.bool),
        "trunc_values": torch.zeros(T, B),
        "rnn_states": torch.zeros(T // S, B, 2, width),
    }


def variants(args: argparse.Namespace, spec: EnvSpec) -> dict:
    hp = PPOConfig(epochs=args.epochs, minibatch_size=args.minibatch_size)
    W = args.width
    # MLP: hidden [W, W] against [W] and a core of W; pixels: the CNN's 512 with or without a core
    ff_hidden, rnn_hidden, act = ([512], [512], "relu") if args.pixels else ([W, W], [W], "tanh")
    out = {}
    torch.manual_seed(0)
    if not args.pixels:  # a CNN policy has no fused step
        ff = build_policy(spec, ff_hidden, act, False)
        out["feed-forward (fused step)"] = PPO(ff, hp, 1e-3)
    autograd = build_policy(spec, ff_hidden, act, False)
    out["feed-forward (autograd step)"] = PPO(autograd, hp, 1e-3, fused=False)
    if args.compile:
        compiled = build_policy(spec, ff_hidden, act, False)
        out["feed-forward (compiled step)"] = PPO(compiled, hp, 1e-3, compile=True)
    for kind in ("lstm", "gru"):
        steps = (["autograd"] if args.pixels else ["fused", "autograd"]) + (
            ["compiled"] if args.compile else []
        )
        for step in steps:
            policy = build_policy(spec, rnn_hidden, act, False, "auto", kind, W)
            out[f"{kind} ({step} step)"] = RecurrentPPO(
                policy, hp, 1e-3, args.recurrence, fused=step != "autograd",
                compile=step == "compiled",
            )  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rollout", type=int, default=None, help="64 (pixels: 128)")
    p.add_argument("--envs", type=int, default=None, help="16 (pixels: 8)")
    p.add_argument("--recurrence", type=int, default=16)
    p.add_argument("--minibatch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--width", type=int, default=None, help="64 (pixels: the core's 128)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="the compiled steps too")
    p.add_argument("--pixels", action="store_true", help="the Nature CNN pair (see above)")
    p.add_argument("--frames", type=int, default=1, help="with --pixels: frames per observation")
    args = p.parse_args()
    for name, mlp_value, pixel_value in (("rollout", 64, 128), ("envs", 16, 8), ("width", 64, 128)):
        if getattr(args, name) is None:
            setattr(args, name, pixel_value if args.pixels else mlp_value)
    torch.set_num_threads(args.threads)
    spec = pixel_spec(args.frames) if args.pixels else SPEC
    algos = variants(args, spec)
    r = batch(spec, args.rollout, args.envs, args.recurrence, args.width)
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
    fused = statistics.median(times.get("feed-forward (fused step)", [0, 0])[1:])
    steps = args.epochs * (args.rollout * args.envs // args.minibatch_size)
    print(
        (f"Nature CNN, {args.frames} frame(s), " if args.pixels else "")
        + f"batch {args.rollout} x {args.envs}, minibatch {args.minibatch_size}, {args.epochs} "
        f"epochs ({steps} steps), width {args.width}, recurrence {args.recurrence}, "
        f"{args.threads} thread(s), {args.rounds} rounds"
    )
    compiled = statistics.median(times.get("feed-forward (compiled step)", [0, 0])[1:])
    bases = [("autograd", base), ("fused", fused), ("compiled", compiled)]
    bases = [(name, t) for name, t in bases if t]
    print("| update | ms (median) |" + "".join(f" x {name} feed-forward |" for name, _ in bases))
    print("|---" * (2 + len(bases)) + "|")
    for name, ts in times.items():
        ms = statistics.median(ts[1:])
        print(f"| {name} | {ms * 1e3:.1f} |" + "".join(f" {ms / t:.2f} |" for _, t in bases))


if __name__ == "__main__":
    main()
