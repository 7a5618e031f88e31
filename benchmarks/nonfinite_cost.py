"""What looking for NaN and inf costs (--on-nonfinite): per rollout, the actor's check of each
step's observations and the learner's check of the slot, against the rollout's own time; per
update, the check of every gradient step, against the update's own time.

    flock /tmp/asyncrl-bench.lock python benchmarks/nonfinite_cost.py [--env HalfCheetah-v5]

Real actors and learners in this process (one torch thread), with the mujoco preset's shapes:
PPO (K envs x T steps a rollout, its epochs x minibatches an update) and SAC (256x256, one
gradient step an update). Prints medians over ``--rounds`` rollouts and updates, and the load
average: the machine's other work moves the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from asyncrl.algos import algorithm
from asyncrl.algos.ppo.learner import CHECKED as PPO_CHECKED
from asyncrl.envs import check_env
from asyncrl.learning import base
from asyncrl.learning.replay_learner import CHECKED as REPLAY_CHECKED
from asyncrl.runtime import actor as actor_module
from asyncrl.runtime.actor import Actor
from asyncrl.runtime.transport import PolicyStore, SlotStore, rollout_layout
from asyncrl.settings import TrainConfig, resolve


class Timer:
    """Wraps a function, adding each call's seconds to ``spent``."""

    def __init__(self, fn):
        self.fn, self.spent, self.calls = fn, 0.0, 0

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.spent += time.perf_counter() - t0
            self.calls += 1

    def take(self) -> tuple[float, int]:
        out = (self.spent, self.calls)
        self.spent, self.calls = 0.0, 0
        return out


def ms(x: float) -> str:
    return f"{x * 1e3:8.3f} ms"


def measure(algo: str, env: str, rounds: int) -> None:
    extra = {"rollout": 1, "mode": "sync"} if algo == "sac" else {}
    cfg = resolve(
        TrainConfig(env=env, algo=algo, actors=1, envs_per_actor=8, backend="inline", **extra),
        "mujoco",
    )
    if algo == "sac":
        cfg.learning_starts = cfg.batch_size
    spec = check_env(cfg.env)
    # every gradient step's check, timed where the optimizers call it
    step_check = Timer(base.LearnerBase._check_step)
    base.LearnerBase._check_step = lambda self, *args: step_check(self, *args)
    act_check = Timer(actor_module._actable)
    actor_module._actable = act_check
    learner = algorithm(algo).learner(cfg, spec)
    guard, base.LearnerBase.guard_steps = base.LearnerBase.guard_steps, lambda self, opts: None
    unguarded = algorithm(algo).learner(cfg, spec)  # the same learner without the step checks
    base.LearnerBase.guard_steps = guard
    store = PolicyStore(learner.numel, shared=False, buffers=1)
    learner.publish(store)
    actor = Actor(0, cfg, spec, algorithm(cfg.algo), store)
    slots = SlotStore(rollout_layout(cfg, spec, algorithm(cfg.algo)), 1, shared=False)
    slot = slots.slots[0]
    checked = PPO_CHECKED if algo == "ppo" else REPLAY_CHECKED
    at_ends = () if algo == "ppo" else ("final_obs",)
    rollout, actor_check, slot_check, update, update_check, bare = [], [], [], [], [], []
    calls = 0
    try:
        while len(update) < rounds:
            t0 = time.perf_counter()
            actor.collect(slot)
            rollout.append(time.perf_counter() - t0)
            actor_check.append(act_check.take()[0])
            t0 = time.perf_counter()
            learner.finite_rollouts([slot], checked, at_ends)
            slot_check.append(time.perf_counter() - t0)
            step_check.take()
            before, bare_before = learner.learn_seconds, unguarded.learn_seconds
            order = (unguarded, learner) if len(rollout) % 2 else (learner, unguarded)
            for one in order:  # alternating: neither always runs on a cache the other warmed
                one.train([slot])
            spent, calls = step_check.take()
            learner.publish(store)
            if calls:  # an update happened (SAC: after its warm-up)
                update.append(learner.learn_seconds - before)
                update_check.append(spent)
                bare.append(unguarded.learn_seconds - bare_before)
    finally:
        actor.close()
        slots.close()
        learner.close()
        unguarded.close()
    med = statistics.median
    T, K = cfg.rollout, cfg.envs_per_actor
    print(f"{algo} on {env}: rollouts of {T} steps x {K} envs; medians of {rounds} updates")
    print(f"  rollout {ms(med(rollout))}   actor's per-step check {ms(med(actor_check))} "
          f"({med(actor_check) / med(rollout):.2%})   learner's slot check {ms(med(slot_check))} "
          f"({med(slot_check) / med(rollout):.2%})")  # fmt: skip
    print(f"  update  {ms(med(update))}   gradient-step checks {ms(med(update_check))} "
          f"({med(update_check) / med(update):.2%}; {calls} steps)   the same update without "
          f"them {ms(med(bare))} ({med(update) / med(bare) - 1:+.2%})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="HalfCheetah-v5")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)
    np.seterr(all="ignore")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for algo in ("ppo", "sac"):
        measure(algo, args.env, args.rounds)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
