"""Off-policy asyncrl beside Stable-Baselines3 at the same settings, from one run (issue 57,
"done when" 2).

    python benchmarks/offpolicy_sb3.py                 # both parts, 3 rounds
    python benchmarks/offpolicy_sb3.py --parts dqn     # DQN only
    python benchmarks/offpolicy_sb3.py --quick         # a small smoke: 1 round, short budgets

Parts:
  dqn  CartPole-v1 at CleanRL's dqn.py settings (1 env, 120-84 MLP, lr 2.5e-4, buffer 10k,
       batch 128, a gradient step per 10 env steps, target copy every 500, epsilon 1 -> 0.05
       over half the budget, learning from 10k, plain (not double) DQN, gradient norm clipped
       at 10 as SB3 does): SB3's DQN (its own venv, benchmarks/baselines/setup.sh sb3; its loss
       is Huber, asyncrl's CleanRL's squared error) and asyncrl in DQN's default mode and
       backend (async, process), with --mode sync (process, the default backend) and sync on
       the inline backend, their rollout derived (10, the env steps between gradient steps:
       in sync what rollouts of 1 compute, bit for bit; in async one hand-over per gradient
       step), and each mode on the process backend with --rollout 1 given (the rollout before
       it derived).
       Then asyncrl's own layout at the same settings (network, lr, batch, ratio, budget): the
       actors, envs per actor and rollout its CartPole preset gives (2 x 4 envs; async
       rollouts of 4, sync 1). Target: asyncrl >= 5x SB3 in the default mode and in sync.
  sac  HalfCheetah-v5 at SB3's SAC settings: benchmarks/sac_throughput.py's part 1-2 (the sync
       backends, async and SB3 side by side). Target: sync >= 2x SB3.

Each round runs every configuration once, one after the other, so that the drift of the shared
machine hits all alike; ratios to SB3 are taken within a round, then the medians over
--rounds are printed. Env steps/s count from the end of the warm-up (learning_starts
transitions) for both libraries; CPU time per env step is the whole run's (warm-up, start-up
and every child process included; SB3's: its learn call).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppo_throughput import RESULTS, run_baseline  # noqa: E402
from sac_throughput import ours, part_halfcheetah  # noqa: E402

from asyncrl.envs import env_family  # noqa: E402
from asyncrl.settings import TrainConfig, resolve  # noqa: E402

DQN_WARMUP = 10_000
# name -> changes to CleanRL's settings (None: unset, as the preset and derivations give it):
# the default command's mode first, then --mode sync's (process, the default backend), sync in
# one process, each mode with rollouts of 1 given; then asyncrl's own layout in both modes
UNSET = dict(actors=None, envs_per_actor=None, rollout=None)
DQN_MODES: dict[str, dict] = {
    "async/process": dict(mode="async", backend="process", rollout=None),
    "sync/process": dict(mode="sync", backend="process", rollout=None),
    "sync/inline": dict(mode="sync", backend="inline", rollout=None),
    "async/process r1": dict(mode="async", backend="process"),
    "sync/process r1": dict(mode="sync", backend="process"),
    "layout async/process": dict(mode="async", backend="process", **UNSET),
    "layout sync/process": dict(mode="sync", backend="process", **UNSET),
}
TARGETS = ("async/process", "sync/process", "layout async/process", "layout sync/process")


def cleanrl_dqn(**kw) -> TrainConfig:
    """CleanRL's dqn.py on CartPole-v1 (every value given: auto would pick CartPole's tuned
    ones); double off and a gradient norm of 10 as SB3's DQN; no TensorBoard, progress or
    periodic checkpoint."""
    base = dict(
        algo="dqn",
        env="CartPole-v1",
        actors=1,
        envs_per_actor=1,
        rollout=1,
        n_step=1,
        hidden=[120, 84],
        lr=2.5e-4,
        lr_schedule="constant",
        gamma=0.99,
        buffer_size=10_000,
        batch_size=128,
        learning_starts=DQN_WARMUP,
        replay_ratio=0.1,
        target_every=500,
        tau=1.0,
        epsilon_start=1.0,
        epsilon_end=0.05,
        exploration_fraction=0.5,
        td_loss="mse",
        double=False,
        max_grad_norm=10.0,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
    )
    return TrainConfig(**{**base, **kw})


def part_dqn(steps: int, rounds: int) -> dict:
    print(
        f"[dqn] CartPole-v1, CleanRL's dqn.py settings, 1 env: {rounds} rounds of "
        f"{DQN_WARMUP} warm-up + {steps} learning env steps"
    )
    cfg = cleanrl_dqn(total_steps=DQN_WARMUP + steps)
    for name, changes in DQN_MODES.items():
        r = resolve(dataclasses.replace(cfg, **changes), env_family(cfg.env))
        print(f"  {name}: {r.actors} actor(s) x {r.envs_per_actor} env(s), rollout {r.rollout}")
    per_round: list[dict] = []
    for r in range(rounds):
        res: dict = {}
        sb3 = run_baseline(
            "sb3", "sb3_dqn.py", ["--steps", str(steps), "--learning-starts", str(DQN_WARMUP)]
        )
        res["sb3"] = sb3
        line = [f"SB3 {sb3['env_steps_per_second']:.0f}" if sb3 else "SB3 -"]
        for name, changes in DQN_MODES.items():
            x = ours(dataclasses.replace(cfg, **changes))
            if sb3:
                x["ratio_sb3"] = x["env_steps_per_second_learning"] / sb3["env_steps_per_second"]
            res[name] = x
            line.append(f"{name} {x['env_steps_per_second_learning']:.0f}")
        print(f"  round {r + 1}: " + ", ".join(line) + " env steps/s", flush=True)
        per_round.append(res)

    def med(f) -> float:
        xs = [v for v in (f(r) for r in per_round) if v is not None]
        return statistics.median(xs) if xs else float("nan")

    out: dict = {"rounds": per_round, "steps": steps, "warmup": DQN_WARMUP}
    sb_rate = med(lambda r: r["sb3"] and r["sb3"]["env_steps_per_second"])
    sb_cpu = med(lambda r: r["sb3"] and r["sb3"]["cpu_us_per_step"])
    out["sb3"] = {"env_steps_per_second": sb_rate, "cpu_us_per_step": sb_cpu}
    print(f"  medians over {rounds} rounds:")
    print(f"  {'':30s} {'env steps/s':>11s} {'x SB3':>6s} {'CPU us/step':>11s} {'learn s':>8s}")
    print(f"  {'SB3 DQN (Huber)':30s} {sb_rate:11.0f} {'1.00':>6s} {sb_cpu:11.0f} {'':>8s}")
    for k in DQN_MODES:
        row = {
            name: med(lambda r, k=k, name=name: r[k].get(name))
            for name in (
                "env_steps_per_second_learning",
                "ratio_sb3",
                "cpu_us_per_step",
                "learn_seconds",
                "update_seconds_mean",
                "wall_seconds",
            )
        }
        out[k] = row
        print(
            f"  {'asyncrl ' + k:30s} {row['env_steps_per_second_learning']:11.0f} "
            f"{row['ratio_sb3']:6.2f} {row['cpu_us_per_step']:11.0f} {row['learn_seconds']:8.1f}"
        )
    print(
        "  target >= 5x SB3 in the default mode and in sync -> "
        + ", ".join(f"{k} {out[k]['ratio_sb3']:.2f}x" for k in TARGETS)
    )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 round, short budgets (a smoke)")
    p.add_argument("--parts", default="dqn,sac")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    p.add_argument("--dqn-steps", type=int, default=50_000, help="DQN learning env steps")
    p.add_argument("--sac-steps", type=int, default=2_000, help="SAC learning env steps")
    args = p.parse_args()
    rounds = 1 if args.quick else args.rounds
    out: dict = {"torch": torch.__version__, "argv": sys.argv[1:]}
    if "dqn" in args.parts:
        out["dqn"] = part_dqn(5_000 if args.quick else args.dqn_steps, rounds)
    if "sac" in args.parts:
        out["sac"] = part_halfcheetah(600 if args.quick else args.sac_steps, rounds)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"offpolicy_sb3-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2, default=float))
    print(f"written {path}")


if __name__ == "__main__":
    main()
