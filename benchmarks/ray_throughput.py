"""--backend ray against --backend process and RLlib's APPO, and a scaling model, from one run.

    python benchmarks/ray_throughput.py               # everything (issue 14, "done when" 2, 3)
    python benchmarks/ray_throughput.py --quick       # smaller budgets, 1 repeat

1. Sample Factory's MuJoCo settings as in ppo_throughput.py part d (HalfCheetah-v5, async,
   2 actors x 8 envs, rollout 64, 2 epochs, minibatch 512, 64x64 tanh, normalised inputs) on
   ``process`` and on ``ray`` (one local node started by the run), alternating, --repeats each:
   target ray >= 0.8 x process env steps/s.
2. RLlib's APPO in its own venv (benchmarks/baselines/setup.sh), same env, 2 env runners x 8
   envs, fragment 64, 2 epochs, 64x64 tanh, CPU: target asyncrl on ray >= 2 x RLlib.
3. The parts of a scaling model, measured on this machine, one local Ray node: one actor's env
   steps/s when it never waits (a Ray actor collecting back to back, a new policy version put
   into the object store before every call); the object-store and call cost per rollout and per
   policy broadcast at these sizes; the driver's cost of taking one rollout in (fetch and copy);
   the learner's samples/s (env steps per second of learner time, from run 1). From them, the
   projected env steps/s on M nodes of this machine's kind (2 cores: 2 actors of 1 CPU each, the
   learner on a node of its own), and which part becomes the ceiling. Projected figures assume
   the network moves a rollout as fast as loopback did here; they are labelled as projections.

4. Async SAC at replay ratio 1 with the SAC tests' settings (Pendulum-v1, 1 actor x 4 envs,
   rollout 1, 64x64, 20,000 env steps): ``process`` against ``ray`` (one local node),
   alternating, --repeats each; gradient steps/s. Every call to a Ray actor carries 4 env steps
   and the newest policy version (the learner publishes one after every gradient step), the
   backend's worst case: no target, a figure to watch.

asyncrl's figures are taken from the end of the first training iteration on (start-up
excluded), each the median of --repeats runs, as in ppo_throughput.py.

    python benchmarks/ray_throughput.py --parts sac   # part 4 only
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppo_throughput import RESULTS, base_cfg, baseline, ours  # noqa: E402

from asyncrl.algos.ppo.networks import build_policy  # noqa: E402
from asyncrl.envs import check_env, env_family  # noqa: E402
from asyncrl.nets import FlatParams  # noqa: E402
from asyncrl.runtime.trainer import train  # noqa: E402
from asyncrl.runtime.transport import SlotLayout  # noqa: E402
from asyncrl.settings import TrainConfig, resolve  # noqa: E402

NODES = (1, 4, 16, 64)
ACTORS_PER_NODE = 2  # this machine's kind: 2 cores, one actor of 1 CPU on each


def part_d_cfg(steps: int, backend: str) -> TrainConfig:
    return base_cfg(
        env="HalfCheetah-v5",
        mode="async",
        backend=backend,
        actors=2,
        envs_per_actor=8,
        rollout=64,
        epochs=2,
        minibatch_size=512,
        total_steps=steps,
        norm_obs=True,
    )


def backends_side_by_side(steps: int, repeats: int) -> dict:
    print("\n[1] HalfCheetah-v5, part d settings, async: process vs ray (one local node)")
    runs: dict[str, list[dict]] = {"process": [], "ray": []}
    for _ in range(repeats):  # alternating, so a slow phase of the machine hits both
        for backend in runs:
            runs[backend].append(ours(part_d_cfg(steps, backend), 1))
    res = {}
    for backend, rs in runs.items():
        res[backend] = {
            k: statistics.median(r[k] for r in rs)
            for k in ("env_steps_per_second", "cpu_us_per_step", "learn_seconds", "eps")
        }
        res[backend]["all"] = [round(r["env_steps_per_second"]) for r in rs]
        # Ray's workers are the raylet's children, not this process's: getrusage misses them
        cpu = (
            f", {res[backend]['cpu_us_per_step']:.0f} us CPU/step"
            if backend == "process"
            else ", CPU/step not measurable here (Ray's workers are not children of the driver)"
        )
        print(
            f"  {backend:8s}: {res[backend]['env_steps_per_second']:8.0f} env steps/s "
            f"(runs {res[backend]['all']}){cpu}"
        )
    del res["ray"]["cpu_us_per_step"]
    res["ratio"] = res["ray"]["env_steps_per_second"] / res["process"]["env_steps_per_second"]
    res["round_ratios"] = [
        r["env_steps_per_second"] / p["env_steps_per_second"]
        for r, p in zip(runs["ray"], runs["process"], strict=True)
    ]
    print(
        f"  ray / process = {res['ratio']:.2f} (target >= 0.8); round by round "
        + " · ".join(f"{x:.2f}" for x in res["round_ratios"])
    )
    res["learner_samples_per_second"] = steps / res["process"]["learn_seconds"]
    return res


def rllib(steps: int, repeats: int, ray_rate: float) -> dict | None:
    print("\n[2] RLlib APPO, same env and settings, its own venv")
    res = baseline("rllib", "rllib_appo.py", ["--steps", str(steps)], repeats)
    if res:
        res["ratio"] = ray_rate / res["env_steps_per_second"]
        print(f"  RLlib APPO: {res['env_steps_per_second']:8.0f} env steps/s (runs {res['all']})")
        print(f"  asyncrl ray / RLlib APPO = {res['ratio']:.2f} (target >= 2)")
    return res


def parts(calls: int) -> dict:
    """One Ray actor collecting back to back on a local node, a new version before each call."""
    import ray

    from asyncrl.algos import algorithm
    from asyncrl.runtime.backends.ray import _remote_class, connect

    print("\n[3] parts of the scaling model, one local Ray node")
    cfg = dataclasses.replace(part_d_cfg(1, "ray"), actors=1)
    cfg = resolve(cfg, env_family(cfg.env))
    spec = check_env(cfg.env, cfg.algo)
    flat = FlatParams(build_policy(spec, cfg.hidden, cfg.activation, cfg.norm_obs))
    numel = flat.numel
    layout = SlotLayout.for_rollout(spec, cfg.rollout, cfg.envs_per_actor)
    _, slot_bytes = layout.offsets()
    owned = connect("", 1)
    try:
        w = _remote_class().options(num_cpus=1).remote(0, 0, cfg, spec, algorithm(cfg.algo), numel)
        params = np.zeros(numel, dtype=np.float32)
        flat.write_to(params)
        ray.get(w.collect.remote(0, ray.put(params), 0.0))  # start-up, first rollout
        put_s, call_s, rollout_s, take_s = [], [], [], []
        slot = np.zeros(slot_bytes, dtype=np.uint8)
        for version in range(1, calls + 1):
            t0 = time.perf_counter()
            ref = ray.put(params)  # a policy broadcast: one object per version
            t1 = time.perf_counter()
            out_ref = w.collect.remote(version, ref, 0.0)
            ray.wait([out_ref], fetch_local=True)
            t2 = time.perf_counter()
            data = ray.get(out_ref)  # what the driver does with a rollout: take it in, copy
            np.copyto(slot, data)
            t3 = time.perf_counter()
            del data
            put_s.append(t1 - t0)
            call_s.append(t3 - t1)
            take_s.append(t3 - t2)
            rollout_s.append(_rollout_seconds(layout, slot))
        ray.kill(w)
    finally:
        if owned:
            ray.shutdown()
    med = statistics.median
    samples = cfg.rollout * cfg.envs_per_actor
    out = {
        "policy_bytes": numel * 4,
        "rollout_bytes": slot_bytes,
        "policy_put_ms": med(put_s) * 1e3,
        "call_ms": med(call_s) * 1e3,
        "rollout_ms": med(rollout_s) * 1e3,
        "driver_take_ms": med(take_s) * 1e3,
    }
    out["overhead_ms"] = out["call_ms"] - out["rollout_ms"]
    out["actor_env_steps_per_second"] = samples / med(call_s)
    out["actor_env_steps_per_second_no_overhead"] = samples / med(rollout_s)
    out["samples_per_rollout"] = samples
    print(
        f"  policy {out['policy_bytes'] / 1e3:.0f} kB: put {out['policy_put_ms']:.2f} ms; "
        f"rollout {out['rollout_bytes'] / 1e3:.0f} kB ({samples} samples): call "
        f"{out['call_ms']:.1f} ms of which stepping and acting {out['rollout_ms']:.1f} ms, "
        f"object store and call {out['overhead_ms']:.2f} ms; driver takes it in "
        f"{out['driver_take_ms']:.3f} ms"
    )
    print(f"  one actor, never waiting: {out['actor_env_steps_per_second']:.0f} env steps/s")
    return out


def sac_side_by_side(steps: int, repeats: int) -> dict:
    print("\n[4] Pendulum-v1, async SAC, ratio 1, 1 actor x 4 envs: process vs ray (local node)")
    cfg = TrainConfig(
        algo="sac",
        env="Pendulum-v1",
        mode="async",
        actors=1,
        envs_per_actor=4,
        hidden=[64, 64],
        total_steps=steps,
        seed=1,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
    )
    runs: dict[str, list[dict]] = {"process": [], "ray": []}
    for _ in range(repeats):  # alternating, so a slow phase of the machine hits both
        for backend in runs:
            with tempfile.TemporaryDirectory() as d:
                runs[backend].append(
                    train(dataclasses.replace(cfg, backend=backend, run_dir=d + "/run"))
                )
    res: dict = {}
    for backend, rs in runs.items():
        rates = [r["gradient_steps_per_second"] for r in rs]
        res[backend] = {
            "gradient_steps_per_second": statistics.median(rates),
            "all": [round(x, 1) for x in rates],
            "learner_wait_seconds": statistics.median(r["learner_wait_seconds"] for r in rs),
        }
        print(
            f"  {backend:8s}: {res[backend]['gradient_steps_per_second']:6.1f} gradient steps/s "
            f"(runs {res[backend]['all']}), learner waited "
            f"{res[backend]['learner_wait_seconds']:.1f} s"
        )
    res["round_ratios"] = [
        r["gradient_steps_per_second"] / p["gradient_steps_per_second"]
        for r, p in zip(runs["ray"], runs["process"], strict=True)
    ]
    res["ratio"] = statistics.median(res["round_ratios"])
    print(
        f"  ray / process = {res['ratio']:.2f} (median of rounds "
        + " · ".join(f"{x:.2f}" for x in res["round_ratios"])
        + ")"
    )
    return res


def _rollout_seconds(layout: SlotLayout, raw: np.ndarray) -> float:
    from asyncrl.runtime.transport import Slot

    return float(Slot(layout, raw).rollout_seconds[0])


def model(p: dict, learner_rate: float) -> dict:
    """Projected env steps/s on M nodes: the smallest of what the actors produce, what the
    learner consumes and what the driver can take in."""
    print("\n  scaling model (measured parts above; every row below is a PROJECTION)")
    driver_rate = p["samples_per_rollout"] / (p["driver_take_ms"] / 1e3)
    rows = {}
    for m in NODES:
        actors = m * ACTORS_PER_NODE * p["actor_env_steps_per_second"]
        bound = min(
            ("actors", actors),
            ("learner", learner_rate),
            ("driver", driver_rate),
            key=lambda x: x[1],
        )
        rows[m] = {"actors": actors, "projected": bound[1], "ceiling": bound[0]}
        print(
            f"  {m:3d} nodes x {ACTORS_PER_NODE} actors: actors could make {actors:9.0f}, "
            f"learner takes {learner_rate:7.0f}, driver takes {driver_rate:9.0f} -> "
            f"{bound[1]:8.0f} env steps/s (bound: {bound[0]})"
        )
    first = next((m for m in NODES if rows[m]["ceiling"] != "actors"), None)
    nodes_at_ceiling = learner_rate / (ACTORS_PER_NODE * p["actor_env_steps_per_second"])
    print(
        f"  the learner becomes the ceiling at ~{nodes_at_ceiling:.1f} nodes"
        + (f" (first listed: {first})" if first else "")
    )
    return {"rows": rows, "driver_rate": driver_rate, "learner_ceiling_nodes": nodes_at_ceiling}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller budgets, 1 repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=102_400)
    p.add_argument("--calls", type=int, default=200, help="rollouts timed in part 3")
    p.add_argument("--sac-steps", type=int, default=20_000, help="env steps of each part 4 run")
    p.add_argument(
        "--parts", default="ppo,sac", help="ppo: parts 1-3 (they build on each other); sac: 4"
    )
    args = p.parse_args()
    chosen = set(args.parts.split(","))
    if not chosen or not chosen <= {"ppo", "sac"}:
        p.error(f"--parts: a comma-separated list of ppo, sac; got {args.parts!r}")
    repeats = 1 if args.quick else args.repeats
    steps = args.steps // 3 if args.quick else args.steps
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    results: dict = {"argv": sys.argv[1:]}
    if "ppo" in chosen:
        results["backends"] = backends_side_by_side(steps, repeats)
        rate = results["backends"]["ray"]["env_steps_per_second"]
        results["rllib"] = rllib(steps, repeats, rate)
        results["parts"] = parts(args.calls // (4 if args.quick else 1))
        learner_rate = results["backends"]["learner_samples_per_second"]
        results["model"] = model(results["parts"], learner_rate)
    if "sac" in chosen:
        sac_steps = args.sac_steps // 4 if args.quick else args.sac_steps
        results["sac"] = sac_side_by_side(sac_steps, repeats)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"ray_throughput-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2, default=float))
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
