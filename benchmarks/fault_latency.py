"""How soon a run with no restarts left ends after its actor is SIGKILLed: the 2-s promise that
tests/runtime/test_fleet.py checks only loosely (a timed unit test breaks under load).

    python benchmarks/fault_latency.py [--rounds 5]

Each round trains PPO on CartPole (process backend, 2 actors x 4 envs) with
``--actor-restarts 0``, SIGKILLs actor 0 while it steps its envs, and times from the kill to
``train`` raising (the final checkpoint written, actors and segments gone). Prints, per mode,
the median and the worst, and the worst against the 2 s promised.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

from asyncrl.runtime.actor import ActorStatus
from asyncrl.runtime.faults import ActorError
from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig

PROMISE = 2.0  # seconds from an actor's death to the run's end, with no restarts left


def one_round(mode: str, run_dir: Path) -> float:
    killed_at: list[float] = []

    def kill_actor_0(backend) -> None:
        def run() -> None:
            time.sleep(1.0)  # training under way
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                pid = backend.actor_pids().get(0)
                if pid is not None and backend.actor_phase(0) == ActorStatus.STEPPING:
                    os.kill(pid, signal.SIGKILL)
                    killed_at.append(time.monotonic())
                    return
                time.sleep(0.0002)

        threading.Thread(target=run, daemon=True).start()

    cfg = TrainConfig(
        env="CartPole-v1",
        mode=mode,
        backend="process",
        actors=2,
        envs_per_actor=4,
        rollout=32,
        minibatch_size=64,
        epochs=2,
        total_steps=10**7,
        actor_restarts=0,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        run_dir=str(run_dir),
    )
    try:
        train(cfg, on_start=kill_actor_0)
    except ActorError:
        ended = time.monotonic()
    else:
        raise SystemExit("the run reached its budget: actor 0 was never killed")
    if not killed_at:
        raise SystemExit("actor 0 was never seen stepping")
    return ended - killed_at[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    results: dict[str, list[float]] = {"sync": [], "async": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode, seconds in results.items():
                seconds.append(one_round(mode, Path(tmp) / f"{mode}-{r}"))
                print(f"round {r + 1} {mode}: {seconds[-1]:.3f} s", flush=True)
    print(f"\nSIGKILL of actor 0 to the run's end, --actor-restarts 0, {args.rounds} rounds")
    print("| mode | median (s) | worst (s) | worst / 2 s promised |")
    print("| --- | --- | --- | --- |")
    for mode, seconds in results.items():
        worst = max(seconds)
        print(
            f"| {mode} | {statistics.median(seconds):.3f} | {worst:.3f} | {worst / PROMISE:.2f} |"
        )


if __name__ == "__main__":
    main()
