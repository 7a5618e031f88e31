"""The actor's rollout loop alone: env steps per second and CPU time per env step of one inline
actor collecting rollouts (no learner, no transport), for one policy and for populations of two
under the fixed and the random mapping, PPO on CartPole with K = 8 envs.

    flock /tmp/asyncrl-bench.lock python benchmarks/checkouts.py --old ../asyncrl-before \
        --rounds 5 -- rollout_loop.py

runs it on two checkouts alternately (copy this file into the old one's benchmarks/ if it has
none: it uses only ``Actor(...)`` and ``collect``). One process, one torch thread; medians over
``--repeats`` timings of ``--rollouts`` rollouts each. Figures go to
benchmarks/results/rollout_loop-<time>.json (the line ``written <path>`` names it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from asyncrl.algos import algorithm
from asyncrl.envs import check_env
from asyncrl.nets import FlatParams
from asyncrl.runtime.actor import Actor
from asyncrl.runtime.transport import PolicyStore, SlotStore, rollout_layout
from asyncrl.settings import TrainConfig, policy_config, resolve

RESULTS = Path(__file__).resolve().parent / "results"
CASES = {
    "one_policy": dict(policies=1),
    "fixed_2": dict(policies=2),
    "random_2": dict(policies=2, policy_mapping="random", mode="async", norm_reward=False),
}


def measure(case: dict, env: str, K: int, T: int, rollouts: int, repeats: int) -> dict:
    cfg = resolve(
        TrainConfig(env=env, envs_per_actor=K, rollout=T, actors=1, backend="inline", **case),
        "classic",
    )
    spec = check_env(cfg.env)
    stores = []
    for p in range(cfg.policies):
        torch.manual_seed(p)
        flat = FlatParams(algorithm(cfg.algo).acting_module(cfg, spec))
        store = PolicyStore(flat.numel, shared=False)
        store.publish(1, flat.write_to)
        stores.append(store)
    slot_stores = [
        SlotStore(
            rollout_layout(policy_config(cfg, p), spec.for_policy(p), algorithm(cfg.algo)), 1, False
        )
        for p in range(cfg.policies)
    ]
    slots = [s.slots[0] for s in slot_stores]
    actor = Actor(0, cfg, spec, algorithm(cfg.algo), stores)
    rates, cpu = [], []
    try:
        for _ in range(2):  # warm-up
            actor.collect(slots)
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(rollouts):
                actor.collect(slots)
            wall, spent = time.perf_counter() - t0, time.process_time() - c0
            steps = rollouts * K * T
            rates.append(steps / wall)
            cpu.append(spent / steps * 1e6)
    finally:
        actor.close()
        for s in slot_stores:
            s.close()
    return {"env_steps_per_s": statistics.median(rates), "cpu_us_per_step": statistics.median(cpu)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--envs", type=int, default=8, help="K, envs of the actor")
    p.add_argument("--rollout", type=int, default=64, help="T, steps of a rollout")
    p.add_argument("--rollouts", type=int, default=10, help="rollouts per timing")
    p.add_argument("--repeats", type=int, default=3, help="timings per case (their median)")
    args = p.parse_args()
    torch.set_num_threads(1)
    out = {}
    for name, case in CASES.items():
        out[name] = measure(case, args.env, args.envs, args.rollout, args.rollouts, args.repeats)
        print(
            f"{name:12s} {out[name]['env_steps_per_s']:10,.0f} env steps/s "
            f"{out[name]['cpu_us_per_step']:8.2f} us CPU per step",
            flush=True,
        )
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"rollout_loop-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"written {path.relative_to(Path(__file__).resolve().parent.parent)}")


if __name__ == "__main__":
    main()
