"""PPO throughput on MuJoCo, asyncrl against itself and the field, from one run.

    python benchmarks/ppo_throughput.py                 # all parts
    python benchmarks/ppo_throughput.py --parts a,b     # some of them
    python benchmarks/ppo_throughput.py --quick         # smaller budgets, noisier
    python benchmarks/ppo_throughput.py --parts c,d --vectorizers gymnasium,envpool

Parts (issue 2, "done when" 3):
  a  HalfCheetah-v5 with SB3's PPO defaults (2048 samples/iteration, 10 epochs, minibatch 64,
     64x64): asyncrl sync and async env steps/s vs Stable-Baselines3 PPO. Target async >= 3x SB3.
  b  Sync vs async where rollout and learning take similar time (epochs calibrated so that they
     are within 20% in sync mode): async/sync >= 0.9 x ideal overlap (Tr + Tl) / max(Tr, Tl),
     both measured in the sync run.
  c  Humanoid-v5, 1 epoch (env-bound): async >= 85% of the rate at which one core steps the same
     envs with the same policy in a bare loop.
  e  The backends side by side (inline, thread, process) in both modes, same settings as b.
  d  Sample Factory 2.1.1's MuJoCo settings (rollout 64, 2 workers x 8 envs, each sample in 2
     epochs, 64x64 tanh, normalised inputs): asyncrl async >= 1.5x Sample Factory.

--vectorizers gymnasium,envpool runs parts c and d with each of asyncrl's vectorisers (issue 16,
"done when" 4), alternating run by run (repeat 1 with each, then repeat 2 with each, ...), and
prints envpool/gymnasium ratios; part c's bare loop is measured with each vectoriser too. The
other parts always use Gymnasium's. --no-baselines leaves out SB3 and Sample Factory.

Baselines run in their own virtual environments (benchmarks/baselines/setup.sh makes them) as
subprocesses, one run at a time, so nothing competes for the 2 cores. asyncrl's env steps/s are
taken from the end of its first training iteration on (process start-up excluded, as it is for
the baselines' own timing); each figure is the median of --repeats runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from cpu_cost import cpu_seconds, cpu_us_per_step

from asyncrl.algos.ppo.networks import build_policy
from asyncrl.config import ConfigError
from asyncrl.envs import check_env, make_vector_env
from asyncrl.runtime.trainer import train
from asyncrl.settings import TrainConfig

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"
RESULTS = HERE / "results"


def ours(cfg: TrainConfig, repeats: int) -> dict:
    """Median figures of ``repeats`` asyncrl runs of ``cfg``."""
    return _medians([_run(cfg) for _ in range(repeats)])


def ours_by_vectorizer(cfg: TrainConfig, vectorizers: list[str], repeats: int) -> dict:
    """Median figures of ``repeats`` asyncrl runs of ``cfg`` with each vectoriser, alternating
    (one with each, then the next with each), so a change in the machine's load falls on all."""
    runs: dict[str, list[dict]] = {v: [] for v in vectorizers}
    for _ in range(repeats):
        for v in vectorizers:
            runs[v].append(_run(dataclasses.replace(cfg, vectorizer=v)))
    return {v: _medians(r) for v, r in runs.items()}


def _run(cfg: TrainConfig) -> dict:
    with tempfile.TemporaryDirectory() as d:
        before = cpu_seconds()
        s = train(dataclasses.replace(cfg, run_dir=d))
        s["cpu_us_per_step"] = cpu_us_per_step(before, s["env_steps"])
    return s


def _medians(runs: list[dict]) -> dict:
    keys = (
        "env_steps_per_second",
        "rollout_seconds",
        "learn_seconds",
        "eps",
        "policy_lag_mean",
        "learner_wait_seconds",
        "actor_wait_seconds",
        "final_return",
        "cpu_us_per_step",
    )
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    out["all_env_steps_per_second"] = [round(r["env_steps_per_second"]) for r in runs]
    return out


def run_baseline(
    venv: str, script: str, args: list[str], timeout: float | None = 1800
) -> dict | None:
    """One run of ``baselines/<script>`` in its venv: the JSON line it printed last, or None
    (said why) if the venv is missing or the script failed."""
    lines = baseline_lines(venv, script, args, timeout)
    return lines[-1] if lines else None


def baseline_lines(
    venv: str,
    script: str,
    args: list[str],
    timeout: float | None = 1800,
    env: dict[str, str] | None = None,
) -> list[dict] | None:
    """:func:`run_baseline`'s run (``env``: its environment, default this one's), every JSON
    line it printed."""
    python = VENVS / venv / "bin" / "python"
    if not python.exists():
        print(f"  (skipped: {python} missing; run benchmarks/baselines/setup.sh)")
        return None
    proc = subprocess.run(
        [str(python), str(HERE / "baselines" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0:
        print(f"  ({script} failed:\n{proc.stderr[-2000:]})")
        return None
    return [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]


def baseline(venv: str, script: str, args: list[str], repeats: int) -> dict | None:
    """The median env steps/s of ``repeats`` runs of a baseline script."""
    rates = []
    for _ in range(repeats):
        res = run_baseline(venv, script, args)
        if res is None:
            return None
        rates.append(res["env_steps_per_second"])
    return {"env_steps_per_second": statistics.median(rates), "all": [round(r) for r in rates]}


def base_cfg(**kw) -> TrainConfig:
    common = dict(
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        lr=3e-4,
        lr_schedule="constant",
        gamma=0.99,
        gae_lambda=0.95,
        # the settings the README's figures were measured with (before --norm-reward; the
        # mujoco preset would now turn it on for these envs)
        norm_reward=False,
        hidden=[64, 64],
        ent_coef=0.0,
        max_grad_norm=0.5,
        threads_learner=1,
        threads_actor=1,
    )
    common.update(kw)
    return TrainConfig(**common)


def part_a(steps: int, repeats: int, compile: bool, baselines: bool = True) -> dict:
    print("\n[a] HalfCheetah-v5, SB3 PPO defaults: 2048 samples/iteration, 10 epochs, mb 64")
    env = "HalfCheetah-v5"
    s = base_cfg(
        env=env,
        mode="sync",
        actors=2,
        envs_per_actor=8,
        rollout=128,
        epochs=10,
        minibatch_size=64,
        total_steps=steps,
        norm_obs=False,
        compile=compile,
    )
    a = dataclasses.replace(s, mode="async", actors=2, rollout=256)  # one actor's batch: 2048
    res = {"sync": ours(s, repeats), "async": ours(a, repeats)}
    res["sb3"] = None
    if baselines:
        sb3_args = ["--steps", str(min(steps, 40_960))]
        res["sb3"] = baseline("sb3", "sb3_ppo.py", sb3_args, repeats)
    sb3 = res["sb3"]["env_steps_per_second"] if res["sb3"] else float("nan")
    for k in ("sync", "async"):
        r = res[k]
        print(
            f"  asyncrl {k:5s}: {r['env_steps_per_second']:8.0f} env steps/s "
            f"({r['all_env_steps_per_second']}), x{r['env_steps_per_second'] / sb3:.2f} SB3"
        )
    print(f"  SB3 PPO      : {sb3:8.0f} env steps/s")
    res["ratio_async_sb3"] = res["async"]["env_steps_per_second"] / sb3
    res["target"] = ">= 3.0"
    print(f"  async / SB3 = {res['ratio_async_sb3']:.2f}  (target >= 3.0)")
    return res


def part_b(steps: int, repeats: int) -> dict:
    print("\n[b] HalfCheetah-v5, 1 actor x 8 envs x 256 steps: sync vs async, rollout ~ learn")
    cfg = base_cfg(
        env="HalfCheetah-v5",
        actors=1,
        envs_per_actor=8,
        rollout=256,
        minibatch_size=64,
        total_steps=steps,
        norm_obs=True,
    )
    epochs = 4
    for _ in range(4):  # calibrate epochs until rollout and learn time are within 20%
        probe = ours(
            dataclasses.replace(cfg, mode="sync", epochs=epochs, total_steps=max(steps // 3, 8192)),
            1,
        )
        ratio = probe["learn_seconds"] / probe["rollout_seconds"]
        print(f"  calibrate: epochs {epochs}: learn/rollout = {ratio:.2f}")
        if 1 / 1.2 <= ratio <= 1.2:
            break
        epochs = max(1, round(epochs / ratio))
    s = ours(dataclasses.replace(cfg, mode="sync", epochs=epochs), repeats)
    a = ours(dataclasses.replace(cfg, mode="async", epochs=epochs), repeats)
    tr, tl = s["rollout_seconds"], s["learn_seconds"]
    ideal = (tr + tl) / max(tr, tl)
    got = a["env_steps_per_second"] / s["env_steps_per_second"]
    print(
        f"  epochs {epochs}: sync rollout {tr:.2f} s, learn {tl:.2f} s -> ideal overlap {ideal:.2f}"
    )
    print(
        f"  sync {s['env_steps_per_second']:.0f} steps/s, async {a['env_steps_per_second']:.0f} "
        f"steps/s (lag {a['policy_lag_mean']:.2f}) -> async/sync {got:.2f} = "
        f"{got / ideal:.2f} x ideal (target >= 0.90)"
    )
    return {
        "epochs": epochs,
        "sync": s,
        "async": a,
        "ideal": ideal,
        "ratio": got,
        "fraction_of_ideal": got / ideal,
        "target": ">= 0.90",
    }


@torch.no_grad()
def bare_loop_rate(
    env_id: str, envs: int, steps: int, hidden: list[int], vectorizer: str = "gymnasium"
) -> float:
    """One core stepping ``envs`` envs with the policy: inference + env.step, nothing else."""
    torch.set_num_threads(1)
    spec = check_env(env_id)
    policy = build_policy(spec, hidden, "tanh", True)
    vec = make_vector_env(env_id, envs, vectorizer=vectorizer)
    obs, _ = vec.reset(seed=0)
    n = steps // envs
    t0 = time.perf_counter()
    for _ in range(n):
        action, _ = policy.act(torch.as_tensor(np.asarray(obs, dtype=np.float32)))
        obs, *_ = vec.step(np.clip(action.numpy(), spec.action_low, spec.action_high))
    rate = n * envs / (time.perf_counter() - t0)
    vec.close()
    return rate


def part_c(steps: int, repeats: int, vectorizers: list[str]) -> dict:
    print("\n[c] Humanoid-v5, 1 epoch (env-bound): async vs one core's bare loop")
    K = 16
    bares: dict[str, list[float]] = {v: [] for v in vectorizers}
    for _ in range(repeats):
        for v in vectorizers:
            bares[v].append(bare_loop_rate("Humanoid-v5", K, steps // 3, [64, 64], v))
    cfg = base_cfg(
        env="Humanoid-v5",
        mode="async",
        actors=1,
        envs_per_actor=K,
        rollout=128,
        epochs=1,
        minibatch_size=512,
        total_steps=steps,
    )
    runs = ours_by_vectorizer(cfg, vectorizers, repeats)
    res: dict = {"target": ">= 0.85"}
    for v in vectorizers:
        bare, a = statistics.median(bares[v]), runs[v]
        frac = a["env_steps_per_second"] / bare
        print(
            f"  {v:9s}: bare loop {bare:.0f} steps/s; async {a['env_steps_per_second']:.0f} "
            f"steps/s -> {frac:.2f} of bare (target >= 0.85)"
        )
        key = "" if v == "gymnasium" else f"_{v}"
        res.update({f"bare{key}": bare, f"async{key}": a, f"fraction{key}": frac})
    _vectorizer_ratio(res, "bare", "async")
    return res


def _rate(r: float | dict) -> float:
    return r if isinstance(r, float) else r["env_steps_per_second"]


def _vectorizer_ratio(res: dict, *keys: str) -> None:
    """Prints and records envpool / gymnasium for each of ``keys`` (env steps/s) if both ran."""
    for k in keys:
        if k in res and f"{k}_envpool" in res:
            ratio = _rate(res[f"{k}_envpool"]) / _rate(res[k])
            res[f"{k}_envpool_over_gymnasium"] = ratio
            print(f"  {k}: envpool / gymnasium = {ratio:.2f}")


def part_d(steps: int, repeats: int, vectorizers: list[str], baselines: bool = True) -> dict:
    print("\n[d] HalfCheetah, Sample Factory 2.1.1 MuJoCo settings, 2 workers x 8 envs")
    cfg = base_cfg(
        env="HalfCheetah-v5",
        mode="async",
        actors=2,
        envs_per_actor=8,
        rollout=64,
        epochs=2,
        minibatch_size=512,
        total_steps=steps,
        norm_obs=True,
    )
    res: dict = {}
    for mode, c in (
        ("async", cfg),
        ("sync", dataclasses.replace(cfg, mode="sync", minibatch_size=1024)),
    ):
        for v, r in ours_by_vectorizer(c, vectorizers, repeats).items():
            res[mode if v == "gymnasium" else f"{mode}_{v}"] = r
    for mode in ("async", "sync"):
        res[f"sf_{mode}"] = None
        if baselines:
            args = ["--async-rl", str(mode == "async"), "--steps", str(steps)]
            res[f"sf_{mode}"] = baseline("sf", "sf_appo.py", args, repeats)
    sf = max(
        (res[f"sf_{m}"] or {}).get("env_steps_per_second", float("nan")) for m in ("async", "sync")
    )
    for k in ("async", "sync"):
        for v in vectorizers:
            r = res[k if v == "gymnasium" else f"{k}_{v}"]
            print(
                f"  asyncrl {k:5s} {v:9s}: {r['env_steps_per_second']:8.0f} env steps/s, "
                f"{r['cpu_us_per_step']:.0f} us of CPU per env step"
            )
        if res[f"sf_{k}"]:
            print(f"  SF {k:5s}     : {res[f'sf_{k}']['env_steps_per_second']:8.0f} env steps/s")
    for v in vectorizers:
        key = "async" if v == "gymnasium" else f"async_{v}"
        res["ratio" if v == "gymnasium" else f"ratio_{v}"] = res[key]["env_steps_per_second"] / sf
        print(
            f"  asyncrl async ({v}) / best Sample Factory = "
            f"{res[key]['env_steps_per_second'] / sf:.2f} (target >= 1.5)"
        )
    _vectorizer_ratio(res, "async", "sync")
    return res


def part_e(steps: int, repeats: int) -> dict:
    print("\n[e] HalfCheetah-v5, 1 actor x 8 envs x 256 steps, 4 epochs: backends side by side")
    cfg = base_cfg(
        env="HalfCheetah-v5",
        actors=1,
        envs_per_actor=8,
        rollout=256,
        epochs=4,
        minibatch_size=64,
        total_steps=steps,
        norm_obs=True,
    )
    res = {}
    for backend in ("inline", "thread", "process"):
        for mode in ("sync", "async"):
            r = ours(dataclasses.replace(cfg, backend=backend, mode=mode), repeats)
            res[f"{backend}/{mode}"] = r
            print(
                f"  {backend:7s} {mode:5s}: {r['env_steps_per_second']:7.0f} env steps/s "
                f"(lag {r['policy_lag_mean']:.2f})"
            )
    base = res["inline/sync"]["env_steps_per_second"]
    for r in res.values():
        r["vs_inline_sync"] = r["env_steps_per_second"] / base
    print(
        "  thread async / inline sync = "
        f"{res['thread/async']['vs_inline_sync']:.2f}; process async / inline sync = "
        f"{res['process/async']['vs_inline_sync']:.2f}"
    )
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--parts", default="a,b,c,d,e")
    p.add_argument("--quick", action="store_true", help="smaller budgets, 1 repeat")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--compile", action="store_true", help="torch.compile the learner step in (a)")
    p.add_argument(
        "--vectorizers",
        default="gymnasium",
        help="parts c and d with each of these, alternating: gymnasium,envpool",
    )
    p.add_argument(
        "--no-baselines", action="store_true", help="leave out SB3 and Sample Factory (parts a, d)"
    )
    args = p.parse_args()
    vectorizers = args.vectorizers.split(",")
    bad = [v for v in vectorizers if v not in ("gymnasium", "envpool")]
    if bad:
        sys.exit(f"--vectorizers: {bad} unknown; choose from gymnasium,envpool")
    if "envpool" in vectorizers:
        from asyncrl.envs import import_envpool

        try:
            import_envpool()  # one clear line here if it is not installed, not a traceback later
        except ConfigError as e:
            sys.exit(str(e))
    repeats = 1 if args.quick else args.repeats
    scale = 0.4 if args.quick else 1.0
    budgets = {"a": 61_440, "b": 49_152, "c": 30_720, "d": 102_400, "e": 40_960}
    fns = {
        "a": lambda n: part_a(n, repeats, args.compile, not args.no_baselines),
        "b": lambda n: part_b(n, repeats),
        "c": lambda n: part_c(n, repeats, vectorizers),
        "d": lambda n: part_d(n, repeats, vectorizers, not args.no_baselines),
        "e": lambda n: part_e(n, repeats),
    }
    results = {"torch": torch.__version__, "argv": sys.argv[1:]}
    for part in args.parts.split(","):
        results[part] = fns[part](int(budgets[part] * scale))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"ppo_throughput-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2, default=float))
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
