"""SAC throughput, asyncrl against SB3 and against its own ideal, from one run.

    python benchmarks/sac_throughput.py [--quick] [--precision fp32,bf16]

Issue 3, "done when" 2. HalfCheetah-v5, 256x256 networks, batch 256, replay ratio 1, 1 env:
  1. the time of one bare SAC gradient update on stored data (median of 200, one core),
     measured right before and after every configuration: the machine is shared and its speed
     drifts within minutes, so each configuration's overhead is taken against the mean of the
     two bare measurements around it;
  2. asyncrl sync (inline, thread, process backends) and async SAC env steps/s, and
     Stable-Baselines3 SAC's with the same settings (its own venv, see
     benchmarks/baselines/setup.sh), in --rounds interleaved rounds; medians. Targets: sync >=
     1.2x SB3; the sync loop's time per step above the bare update <= 10% (also printed: above
     bare update + bare env step, the floor of a loop that does not overlap them: inline);
  3. Humanoid-v5, async at replay ratio 0.25 (16 envs): env steps/s against the ideal overlap
     rate 1 / max(env step time, update time x ratio) -- with the ratio in gradient steps per env
     step, one env step costs the learner ratio x one update -- both measured in this run.
     Target >= 90%.
All figures count from the end of the warm-up (learning_starts transitions of random actions;
10,000 on HalfCheetah for both libraries, RL Zoo's setting for SAC on MuJoCo: measured on a buffer
of a few hundred transitions, a sync update would often draw one of the step's new ones and have
to wait for it, which a run of 10^5..10^6 steps almost never does).
``--precision fp32,bf16``: part 2's asyncrl rows also with ``--precision bf16`` (rows
``<mode>/<backend>+bf16``, each against bf16 bare updates), in the same rounds as SB3's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from cpu_cost import cpu_seconds, cpu_us_per_step

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppo_throughput import RESULTS, baseline  # noqa: E402

from asyncrl.algos.sac.config import SACConfig  # noqa: E402
from asyncrl.algos.sac.learner import as_update_batch  # noqa: E402
from asyncrl.algos.sac.update import SAC  # noqa: E402
from asyncrl.envs import check_env, make_vector_env  # noqa: E402
from asyncrl.replay.buffer import ReplayBuffer  # noqa: E402
from asyncrl.runtime.trainer import train  # noqa: E402
from asyncrl.settings import TrainConfig  # noqa: E402


def bare_update_seconds(env_id: str, updates: int = 200, precision: str = "fp32") -> float:
    torch.set_num_threads(1)
    spec = check_env(env_id, "sac")
    low, high = spec.action_low, spec.action_high
    sac = SAC(spec.obs_dim, spec.n_actions, low, high, SACConfig(), precision=precision)
    rb = ReplayBuffer(10_000, spec.obs_shape, np.float32, (spec.n_actions,), seed=0)
    rng = np.random.default_rng(0)
    n = 10_000
    rb.add_batch(
        rng.normal(size=(n, *spec.obs_shape)).astype(np.float32),
        rng.uniform(-1, 1, (n, spec.n_actions)).astype(np.float32),
        rng.normal(size=n).astype(np.float32),
        rng.normal(size=(n, *spec.obs_shape)).astype(np.float32),
        np.zeros(n, bool),
        np.zeros(n, bool),
    )
    times = []
    for i in range(updates + 20):
        batch = as_update_batch(rb.sample(256))
        t0 = time.perf_counter()
        sac.update(batch)
        if i >= 20:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.no_grad()
def bare_env_step_seconds(env_id: str, envs: int, steps: int) -> float:
    """Seconds per transition of one core stepping ``envs`` envs with SAC's actor."""
    torch.set_num_threads(1)
    spec = check_env(env_id, "sac")
    sac = SAC(spec.obs_dim, spec.n_actions, spec.action_low, spec.action_high, SACConfig())
    vec = make_vector_env(env_id, envs)
    obs, _ = vec.reset(seed=0)
    n = max(steps // envs, 1)
    t0 = time.perf_counter()
    for _ in range(n):
        a, _ = sac.actor.act(torch.as_tensor(np.asarray(obs, np.float32)))
        obs, *_ = vec.step(a.numpy())
    vec.close()
    return (time.perf_counter() - t0) / (n * envs)


def ours(cfg: TrainConfig) -> dict:
    with tempfile.TemporaryDirectory() as d:
        before = cpu_seconds()
        s = train(dataclasses.replace(cfg, run_dir=d))
        s["cpu_us_per_step"] = cpu_us_per_step(before, s["env_steps"])
    keys = (
        "env_steps_per_second_learning",
        "gradient_steps",
        "gradient_steps_per_second",
        "update_seconds_mean",
        "replay_ratio_achieved",
        "insert_blocked_seconds",
        "sample_blocked_seconds",
        "policy_lag_mean",
        "env_steps",
        "cpu_us_per_step",
        "rollout_seconds",
        "learn_seconds",
        "actor_wait_seconds",
        "learner_wait_seconds",
        "wall_seconds",
    )
    return {k: s[k] for k in keys}


MODES = (("sync", "inline"), ("sync", "thread"), ("sync", "process"), ("async", "process"))


def row(mode: str, backend: str, precision: str) -> str:
    return f"{mode}/{backend}" + ("" if precision == "fp32" else f"+{precision}")


def halfcheetah_sac(**kw) -> TrainConfig:
    """The issue's HalfCheetah setting (SB3's SAC defaults): 256x256, batch 256, replay ratio 1,
    one actor with one env; no TensorBoard, progress bar or periodic checkpoint."""
    base = dict(
        algo="sac",
        env="HalfCheetah-v5",
        actors=1,
        envs_per_actor=1,
        hidden=[256, 256],
        batch_size=256,
        replay_ratio=1.0,
        gamma=0.99,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
    )
    return TrainConfig(**{**base, **kw})


def part_halfcheetah(steps: int, rounds: int, precisions: tuple[str, ...] = ("fp32",)) -> dict:
    """``rounds`` rounds, each running every configuration once, one after the other, so that
    the machine's drift (it is shared) hits all of them alike; medians over rounds, and each
    ratio to SB3 is taken within a round before its median."""
    print(
        "[1-2] HalfCheetah-v5: SAC 256x256, batch 256, replay ratio 1, 1 actor x 1 env "
        f"({rounds} rounds of {steps} learning steps)"
    )
    warm = 10_000
    cfg = halfcheetah_sac(learning_starts=warm, total_steps=warm + steps)
    rows = [(m, b, p) for p in precisions for m, b in MODES]
    per_round: list[dict] = []
    for r in range(rounds):
        res: dict = {"bare_env_step_seconds": bare_env_step_seconds("HalfCheetah-v5", 1, 2_000)}
        bares: dict[str, list[float]] = {}
        for mode, backend, precision in rows:
            own = bares.setdefault(precision, [])
            if not own:
                own.append(bare_update_seconds("HalfCheetah-v5", precision=precision))
            x = ours(dataclasses.replace(cfg, mode=mode, backend=backend, precision=precision))
            own.append(bare_update_seconds("HalfCheetah-v5", precision=precision))
            x["bare_update_seconds_around"] = (own[-2] + own[-1]) / 2
            res[row(mode, backend, precision)] = x
        res["bare_update_seconds"] = statistics.median(bares[precisions[0]])
        for precision in precisions[1:]:
            res[f"bare_update_seconds+{precision}"] = statistics.median(bares[precision])
        sb3 = baseline(
            "sb3", "sb3_sac.py", ["--steps", str(steps), "--learning-starts", str(warm)], 1
        )
        res["sb3"] = sb3["env_steps_per_second"] if sb3 else None
        line = [
            f"bare update ({p}) {min(b) * 1e3:.2f}..{max(b) * 1e3:.2f} ms "
            f"(median {statistics.median(b) * 1e3:.2f})"
            for p, b in bares.items()
        ]
        for mode, backend, precision in rows:
            x = res[row(mode, backend, precision)]
            step = 1 / x["env_steps_per_second_learning"]
            upd = x["bare_update_seconds_around"]
            x["loop_overhead_vs_update"] = step / upd - 1
            x["loop_overhead_vs_bare"] = step / (upd + res["bare_env_step_seconds"]) - 1
            if res["sb3"]:
                x["ratio_sb3"] = x["env_steps_per_second_learning"] / res["sb3"]
            line.append(f"{row(mode, backend, precision)} {x['env_steps_per_second_learning']:.1f}")
        line.append(f"SB3 {res['sb3']:.1f}" if res["sb3"] else "SB3 -")
        print(f"  round {r + 1}: " + ", ".join(line) + " env steps/s")
        per_round.append(res)

    def med(f) -> float:
        xs = [f(r) for r in per_round]
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else float("nan")

    upd = med(lambda r: r["bare_update_seconds"])
    env_t = med(lambda r: r["bare_env_step_seconds"])
    sb = med(lambda r: r["sb3"])
    print(f"  medians over {rounds} rounds:")
    print(f"  bare update {upd * 1e3:.2f} ms; bare env step with the actor {env_t * 1e3:.2f} ms")
    out: dict = {"rounds": per_round, "bare_update_seconds": upd, "bare_env_step_seconds": env_t}
    for mode, backend, precision in rows:
        k = row(mode, backend, precision)
        rate = med(lambda r, k=k: r[k]["env_steps_per_second_learning"])
        over = med(lambda r, k=k: r[k]["loop_overhead_vs_update"])
        over_both = med(lambda r, k=k: r[k]["loop_overhead_vs_bare"])
        ratio = med(lambda r, k=k: r[k].get("ratio_sb3"))
        achieved = med(lambda r, k=k: r[k]["replay_ratio_achieved"])
        in_loop = med(lambda r, k=k: r[k]["update_seconds_mean"])
        out[k] = {
            "env_steps_per_second": rate,
            "loop_overhead": over,
            "loop_overhead_vs_update_and_env_step": over_both,
            "ratio_sb3": ratio,
            "update_seconds_in_loop": in_loop,
        }
        print(
            f"  asyncrl {k:20s}: {rate:6.1f} env steps/s = {ratio:.2f}x SB3, "
            f"{1e3 / rate:.2f} ms/step = bare update around it {over:+.1%} "
            f"(bare update + env step {over_both:+.1%}); the update itself took "
            f"{in_loop * 1e3:.2f} ms in the loop; achieved ratio {achieved:.3f}"
        )
    out["sb3"] = sb
    print(f"  SB3 SAC            : {sb:6.1f} env steps/s")
    for p in precisions:
        syncs = [row("sync", b, p) for _, b in MODES[:3]]
        print(
            f"  targets ({p}): sync >= 1.2x SB3 -> "
            + ", ".join(f"{k} {out[k]['ratio_sb3']:.2f}x" for k in syncs)
            + "; loop overhead <= 10% -> "
            + ", ".join(f"{k} {out[k]['loop_overhead']:+.1%}" for k in syncs)
        )
    return out


def part_humanoid(steps: int) -> dict:
    print("[3] Humanoid-v5: async SAC at replay ratio 0.25, 1 actor x 16 envs")
    K, ratio = 16, 0.25
    cfg = TrainConfig(
        algo="sac",
        env="Humanoid-v5",
        mode="async",
        actors=1,
        envs_per_actor=K,
        rollout=4,
        hidden=[256, 256],
        batch_size=256,
        replay_ratio=ratio,
        learning_starts=2_000,
        total_steps=2_000 + steps,
        gamma=0.99,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
    )
    r = ours(cfg)
    env_t = bare_env_step_seconds("Humanoid-v5", K, 4_000)
    upd = r["update_seconds_mean"]  # measured inside this run, under the same load
    ideal = 1 / max(env_t, upd * ratio)
    got = r["env_steps_per_second_learning"]
    print(
        f"  env step {env_t * 1e3:.3f} ms/transition (bare, 16 envs), update {upd * 1e3:.2f} ms "
        f"-> ideal {ideal:.0f} env steps/s; async {got:.0f} env steps/s = {got / ideal:.2f} "
        f"of ideal (target >= 0.90); achieved ratio {r['replay_ratio_achieved']:.3f}"
    )
    r.update(bare_env_step_seconds=env_t, ideal=ideal, fraction_of_ideal=got / ideal)
    return r


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller budgets, noisier")
    p.add_argument("--parts", default="halfcheetah,humanoid")
    p.add_argument("--rounds", type=int, default=3, help="HalfCheetah rounds (medians)")
    p.add_argument(
        "--precision",
        default="fp32",
        help="fp32, bf16 or fp32,bf16: the --precision of part 2's asyncrl rows",
    )
    args = p.parse_args()
    precisions = tuple(args.precision.split(","))
    out: dict = {"torch": torch.__version__, "argv": sys.argv[1:]}
    if "halfcheetah" in args.parts:
        rounds = 1 if args.quick else args.rounds
        out["halfcheetah"] = part_halfcheetah(600 if args.quick else 2_000, rounds, precisions)
    if "humanoid" in args.parts:
        out["humanoid"] = part_humanoid(2_000 if args.quick else 8_000)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"sac_throughput-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(out, indent=2, default=float))
    print(f"written {path}")


if __name__ == "__main__":
    main()
