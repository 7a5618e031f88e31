"""The learner at its floor: time per minibatch step against the step's arithmetic, from one run.

    python benchmarks/learner_floor.py                      # all cases
    python benchmarks/learner_floor.py --cases classic,mujoco --rounds 9
    python benchmarks/learner_floor.py --cold               # compile into an empty cache
    python benchmarks/learner_floor.py --precision fp32,bf16  # bf16 rows beside fp32's

Cases, each at its preset's sizes (issue 35):
  classic  PPO, CartPole-v1: 64x64 tanh MLPs, minibatch 64, 10 epochs of 256 samples
  mujoco   PPO, HalfCheetah-v5: 64x64 tanh MLPs, minibatch 64, value clipping, 10 epochs of 2,048
  atari    PPO, Breakout: Nature CNN + 512, minibatch 256, 4 epochs of 1,024 frames, the preset's
           learner threads (all CPUs)
  atari-lstm  PPO on Breakout with ``--recurrent lstm`` beside the feed-forward step, one rollout
           of 8 envs x 128 steps with life losses inside, as the learner takes it: rows ``ff``
           (the atari case's update), ``lstm`` (Nature CNN -> LSTM(512, 128), sequences of 128,
           2 per minibatch of 256 frames) and ``lstm-threads`` (the same with torch's LSTM on all
           the learner's threads, as before ``run_core``); "vs old" is against ``ff``
  sac      SAC, HalfCheetah-v5: 256x256 actor and twin critics, batch 256 (one gradient step of
           critics, actor and temperature)
  sac-small  SAC, Pendulum-v1 at the learning tests' 64x64, batch 256 (issue 57)
  dqn      DQN, CartPole-v1, what `asyncrl train --algo dqn --env CartPole-v1` runs: the values
           tuned there (256x256 ReLU MLP, batch 64), double DQN, MSE, clip 10 (issue 57)
  dqn-acrobot  DQN, Acrobot-v1, the classic family's preset for its other envs (CleanRL's: 120x84,
           batch 128), the sizes the dqn case had before CartPole-v1 had tuned values

Each variant of a case trains its own copy of one initial network on one fixed batch; variants
alternate round by round, so a change in the machine's load falls on all of them. For each: the
median wall time per minibatch step (the whole PPO update -- shuffles, steps, the statistics'
one host sync -- divided by its steps; one SAC update; DQN's gradient steps, timed 50 at a time
as a learner takes them, one after another) and the process's CPU time for it (less
sensitive to others' load on a shared machine), its FLOPs (matmuls and convolutions,
forward and backward, as torch's FlopCounterMode counts them in the reference step), the
machine's matmul rate measured in this run (a 1024^3 float32 matmul on the same threads) and
the ratio time / (FLOPs / rate): how far the step is from its arithmetic floor. Rates, ratios
and speed-ups are given twice: in wall time, and in CPU time (per CPU second, for the matmul
rate), which others' load on a shared machine disturbs less: each "CPU" column is the one
before it in CPU time.

Variants: ``old`` is the autograd step as it was before the fused step (PPO(fused=False), whose
step is the code of 971e76e; SAC's update, unchanged; DQN(fused=False)); ``old-compiled`` the
same under torch.compile (what --compile did before; for the CNN and SAC, where the fused step
does not apply); ``fused`` the step of fused.py (PPO's, DQN's, SAC's), eager; ``compiled`` the same,
torch.compile'd. A compiled variant's first call, compilation included, is reported apart:
--cold compiles into an empty cache directory, else the machine's cache answers.

``--precision fp32,bf16``: every variant also under ``--precision bf16`` (rows ``<variant>+bf16``:
PPO(precision="bf16"), SAC(precision="bf16")), and every row's ratio to a second floor, the
step's FLOPs at the rate of a 1024^3 bfloat16 matmul measured in this run ("x bf16"). DQN
trains in fp32 only (its --precision refuses bf16): its cases have fp32 rows alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

if "--cold" in sys.argv:  # before torch is imported: inductor reads it once
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="learner-floor-cache-")

import copy  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from asyncrl.algos.dqn.config import DQNConfig  # noqa: E402
from asyncrl.algos.dqn.networks import QNetwork  # noqa: E402
from asyncrl.algos.dqn.update import DQN  # noqa: E402
from asyncrl.algos.ppo.config import PPOConfig  # noqa: E402
from asyncrl.algos.ppo.networks import build_policy  # noqa: E402
from asyncrl.algos.ppo.update import PPO, step_hyperparameters  # noqa: E402
from asyncrl.algos.sac.config import SACConfig  # noqa: E402
from asyncrl.algos.sac.update import SAC  # noqa: E402
from asyncrl.config import learner_threads  # noqa: E402
from asyncrl.envs import check_env, env_family  # noqa: E402
from asyncrl.settings import TrainConfig, resolve  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ENVS = {
    "classic": ("ppo", "CartPole-v1"),
    "mujoco": ("ppo", "HalfCheetah-v5"),
    "atari": ("ppo", "ALE/Breakout-v5"),
    "atari-lstm": ("ppo", "ALE/Breakout-v5"),
    "sac": ("sac", "HalfCheetah-v5"),
    "sac-small": ("sac", "Pendulum-v1"),
    "dqn": ("dqn", "CartPole-v1"),
    "dqn-acrobot": ("dqn", "Acrobot-v1"),
}
DQN_STEPS = 50  # DQN's gradient steps per timing: one takes ~1 ms, near the timers' noise


def matmul_rate(
    threads: int, n: int = 1024, repeats: int = 15, dtype: torch.dtype = torch.float32
) -> tuple[float, float]:
    """FLOP/s of an n x n x n matmul of ``dtype`` on ``threads`` torch threads (median): per
    second of wall time, and per second of this process's CPU time."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    out = torch.empty(n, n, dtype=dtype)
    torch.mm(a, b, out=out)
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        torch.mm(a, b, out=out)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return 2 * n**3 / statistics.median(wall), 2 * n**3 / statistics.median(cpu)


def flops_of(fn: Callable[[], object]) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


class Variant:
    """One way of doing the case's work: ``run()`` does one unit (a PPO update, a SAC update)
    and returns its minibatch steps."""

    def __init__(self, name: str, run: Callable[[], int]):
        self.name, self.run = name, run
        self.first_seconds = 0.0
        self.per_step: list[float] = []  # wall seconds per minibatch step
        self.cpu_per_step: list[float] = []  # CPU seconds (all of this process's threads)

    def first(self) -> None:
        t0 = time.perf_counter()
        self.run()
        self.first_seconds = time.perf_counter() - t0

    def timed(self) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        steps = self.run()
        self.per_step.append((time.perf_counter() - t0) / steps)
        self.cpu_per_step.append((time.process_time() - c0) / steps)


def ppo_case(
    name: str, env: str, variants: list[str], precision: str = "fp32"
) -> tuple[list[Variant], Callable, int]:
    cfg = resolve(TrainConfig(env=env, algo="ppo"), env_family(env))
    spec = check_env(env)
    hp = PPOConfig.of(cfg)
    T, B = cfg.rollout, cfg.envs_per_actor
    if name == "mujoco":  # SB3's and the issue's 2,048 samples per update
        T = 2048 // B
    torch.manual_seed(0)
    policy = build_policy(spec, cfg.hidden, cfg.activation, False, "auto")
    g = torch.Generator().manual_seed(1)
    n = T * B
    if spec.obs_dtype == "uint8":
        obs = torch.randint(0, 256, (n, *spec.obs_shape), generator=g, dtype=torch.uint8)
    else:
        obs = torch.randn(n, *spec.obs_shape, generator=g)
    if spec.discrete:
        actions = torch.randint(0, spec.n_actions, (n,), generator=g)
    else:
        actions = torch.randn(n, spec.n_actions, generator=g)
    with torch.no_grad():
        logp, _, values = policy.log_prob_entropy(obs, actions)
    batch = {
        "features": policy.features(obs),
        "actions": actions,
        "logp": logp + 0.1 * torch.randn(n, generator=g),
        "weight": torch.ones(n),
        "adv": torch.randn(n, generator=g),
        "returns": values + torch.randn(n, generator=g),
        "values": values,
    }
    made = []
    for v in variants:
        fused, compile = not v.startswith("old"), v.endswith("compiled")
        if fused != _fused_applies(policy) and v != "old":
            continue  # the CNN: old and old-compiled; MLPs: all but old-compiled by default
        algo = PPO(copy.deepcopy(policy), hp, cfg.lr, compile, fused, precision)
        gen = torch.Generator().manual_seed(2)
        steps = hp.epochs * (n // hp.minibatch_size)

        def run(algo=algo, gen=gen, steps=steps) -> int:
            algo.update(batch, cfg.lr, gen)
            return steps

        made.append(Variant(_named(v, precision), run))
    ref = PPO(copy.deepcopy(policy), hp, cfg.lr, fused=False)
    mb = [batch[k][: hp.minibatch_size] for k in ("features", "actions", "logp", "weight")]
    mb += [batch[k][: hp.minibatch_size] for k in ("adv", "returns", "values")]
    step_hp = step_hyperparameters(hp, cfg.lr)  # [clip, lr, ent_coef], as an update passes it
    flops = flops_of(lambda: ref._minibatch_step(step_hp, *mb))
    return made, flops, learner_threads(cfg, 1)


def recurrent_atari_case(env: str) -> tuple[list[Variant], int, int]:
    """Feed-forward and recurrent PPO updates on one Breakout rollout (see the docstring)."""
    from asyncrl.algos.ppo import networks
    from asyncrl.algos.ppo.config import recurrence
    from asyncrl.algos.ppo.recurrent import RecurrentPPO

    spec = check_env(env)
    g = torch.Generator().manual_seed(1)
    made, flops = [], 0
    for kind in ("none", "lstm"):
        cfg = resolve(TrainConfig(env=env, algo="ppo", recurrent=kind), env_family(env))
        hp, T, B = PPOConfig.of(cfg), cfg.rollout, cfg.envs_per_actor
        if kind == "none":  # one rollout for both: frames, actions, life losses
            rollout = {
                "obs": torch.randint(0, 256, (T + 1, B, *spec.obs_shape), generator=g).byte(),
                "actions": torch.randint(0, spec.n_actions, (T, B), generator=g),
                "logp": torch.full((T, B), -float(np.log(spec.n_actions))),
                "rewards": (torch.rand(T, B, generator=g) < 0.05).float(),
                "terminated": torch.rand(T, B, generator=g) < 1 / 40,
                "truncated": torch.zeros(T, B, dtype=torch.bool),
                "trunc_values": torch.zeros(T, B),
            }
        torch.manual_seed(0)
        policy = build_policy(spec, cfg.hidden, cfg.activation, False, "auto", kind, cfg.rnn_size)
        steps = hp.epochs * (T * B // hp.minibatch_size)
        if kind == "none":
            algo = PPO(policy, hp, cfg.lr, fused=False)
            batch = algo.targets(rollout)
            made.append(Variant("ff", _updating(algo, batch, cfg.lr, steps)))
            continue
        r = {**rollout, "rnn_states": torch.zeros(T // recurrence(cfg), B, 2, cfg.rnn_size)}
        for name, core in (("lstm", networks.run_core), ("lstm-threads", _all_threads)):
            algo = RecurrentPPO(copy.deepcopy(policy), hp, cfg.lr, recurrence(cfg))
            batch = algo.targets(r)
            made.append(Variant(name, _updating(algo, batch, cfg.lr, steps, core)))
        mb = [batch[k][:, :2] for k in ("features", "actions", "logp", "weight", "adv")]
        mb += [batch[k][:, :2] for k in ("returns", "values", "first")] + [batch["states"][:2]]
        hp_t = step_hyperparameters(hp, cfg.lr)
        flops = flops_of(lambda: algo._autograd_step(hp_t, *mb))  # noqa: B023
    return made, flops, learner_threads(cfg, 1)


def _all_threads(core, x, hx):
    return core(x, hx)  # networks.run_core as it was: the learner's thread count


def _updating(algo, batch, lr: float, steps: int, core=None) -> Callable[[], int]:
    """A variant's run: one update of ``algo`` on ``batch`` (``core``: networks.run_core)."""
    from asyncrl.algos.ppo import networks

    gen = torch.Generator().manual_seed(2)

    def run() -> int:
        kept = networks.run_core
        networks.run_core = core or kept
        try:
            algo.update(batch, lr, gen)
        finally:
            networks.run_core = kept
        return steps

    return run


def _fused_applies(policy) -> bool:
    from asyncrl.algos.ppo.fused import supports

    return supports(policy)


def _named(variant: str, precision: str) -> str:
    return variant if precision == "fp32" else f"{variant}+{precision}"


def sac_case(
    case: str, variants: list[str], precision: str = "fp32"
) -> tuple[list[Variant], int, int]:
    env = ENVS[case][1]
    cfg = resolve(TrainConfig(env=env, algo="sac"), env_family(env))
    if case == "sac-small":  # the size the learning tests train (tests/runtime/test_sac_*)
        cfg.hidden = [64, 64]
    spec = check_env(env)
    hp = SACConfig.of(cfg)
    g = torch.Generator().manual_seed(1)
    n = cfg.batch_size
    b = {
        "obs": torch.randn(n, spec.obs_dim, generator=g),
        "action": torch.rand(n, spec.n_actions, generator=g) * 2 - 1,
        "reward": torch.randn(n, generator=g),
        "next_obs": torch.randn(n, spec.obs_dim, generator=g),
        "terminated": torch.zeros(n),
    }

    def make(fused: bool = False) -> SAC:
        torch.manual_seed(0)
        return SAC(
            spec.obs_dim,
            spec.n_actions,
            spec.action_low,
            spec.action_high,
            hp,
            generator=torch.Generator().manual_seed(7),
            hidden=tuple(cfg.hidden),
            precision=precision,
            fused=fused,
        )

    made = []
    for v in variants:
        if v == "compiled":
            continue  # no compiled fused step
        sac = make(fused=v == "fused")
        update = torch.compile(sac.update) if v == "old-compiled" else sac.update
        made.append(Variant(_named(v, precision), lambda update=update: (update(b), 1)[1]))
    ref = make()
    return made, flops_of(lambda: ref.update(b)), learner_threads(cfg, 1)


BF16_HEADER = f" {'x bf16':>6s} {'CPU':>5s}"


def bf16_floor(threads: int, flops: int) -> tuple[float, float, float, float]:
    """The step's floor at the bfloat16 matmul rate measured now: wall and CPU seconds, and
    the two rates."""
    rate, cpu_rate = matmul_rate(threads, dtype=torch.bfloat16)
    return flops / rate, flops / cpu_rate, rate, cpu_rate


def bf16_columns(bf16: tuple | None, ms: float, cpu: float) -> str:
    """A row's ratios to the bf16 floor (blank without --precision bf16)."""
    if bf16 is None:
        return f" {'':>6s} {'':>5s}"
    return f" {ms / bf16[0]:6.1f} {cpu / bf16[1]:5.1f}"


def dqn_case(case: str, variants: list[str]) -> tuple[list[Variant], int, int]:
    env = ENVS[case][1]
    cfg = resolve(TrainConfig(env=env, algo="dqn"), env_family(env))
    spec = check_env(env)
    hp = DQNConfig.of(cfg)
    g = torch.Generator().manual_seed(1)
    n = cfg.batch_size
    b = {
        "obs": torch.randn(n, *spec.obs_shape, generator=g),
        "action": torch.randint(0, spec.n_actions, (n,), generator=g),
        "reward": torch.randn(n, generator=g),
        "next_obs": torch.randn(n, *spec.obs_shape, generator=g),
        "discount": cfg.gamma * (torch.rand(n, generator=g) > 0.05).float(),
    }
    every = max(1, round(cfg.target_every * cfg.replay_ratio))  # as DQNLearner's

    def make(**kw) -> DQN:
        torch.manual_seed(0)
        return DQN(QNetwork(spec, cfg.hidden, "mlp"), hp, every, **kw)

    made = []
    for v in variants:
        if v == "old-compiled":
            continue  # the MLP takes the fused step
        dqn = make(fused=v != "old", compile=v == "compiled")

        def run(dqn=dqn) -> int:
            for _ in range(DQN_STEPS):
                dqn.update(b)
            return DQN_STEPS

        made.append(Variant(v, run))
    ref = make(fused=False)
    return made, flops_of(lambda: ref.update(b)), learner_threads(cfg, 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cases", default="classic,mujoco,atari,sac,sac-small,dqn,dqn-acrobot")
    p.add_argument(
        "--variants",
        default="old,old-compiled,fused,compiled",
        help="old-compiled (the autograd step under torch.compile, as --compile was before) "
        "runs where the fused step does not apply: the CNN",
    )
    p.add_argument("--rounds", type=int, default=7, help="timed rounds (each variant once)")
    p.add_argument("--cold", action="store_true", help="compile into an empty cache directory")
    p.add_argument(
        "--precision",
        default="fp32",
        help="fp32, bf16 or fp32,bf16: the learners' --precision of each variant's rows",
    )
    args = p.parse_args()
    variants = args.variants.split(",")
    precisions = args.precision.split(",")
    results: dict = {
        "torch": torch.__version__,
        "argv": sys.argv[1:],
        "loadavg_start": os.getloadavg(),
    }
    print(f"torch {torch.__version__}; load average at start {os.getloadavg()[0]:.2f}")
    header = (
        f"{'case':11s} {'variant':12s} {'first call':>10s} {'ms/step':>8s} {'CPU ms':>7s} "
        f"{'MFLOP':>7s} {'GFLOP/s':>7s} {'CPU':>5s} {'floor ms':>8s} {'x floor':>7s} {'CPU':>5s} "
        f"{'vs old':>6s} {'CPU':>5s}" + BF16_HEADER
    )
    rows = []
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"learner_floor-{time.strftime('%Y%m%d-%H%M%S')}.json"
    for case in args.cases.split(","):
        algo, env = ENVS[case]
        made = []
        for precision in precisions:
            if case == "atari-lstm":
                if precision != "fp32":
                    print(f"  ({case}: no {precision} rows: a recurrent policy trains in fp32)")
                    continue
                mine, flops, threads = recurrent_atari_case(env)
            elif algo == "ppo":
                mine, flops, threads = ppo_case(case, env, variants, precision)
            elif algo == "dqn":
                if precision != "fp32":
                    print(f"  ({case}: no {precision} rows: DQN trains in fp32 only)")
                    continue
                mine, flops, threads = dqn_case(case, variants)
            else:
                mine, flops, threads = sac_case(case, variants, precision)
            made += mine
        torch.set_num_threads(threads)
        for v in made:
            v.first()
            v.timed()  # a second untimed-in-effect warm-up: caches, allocator
            v.per_step.clear()
            v.cpu_per_step.clear()  # the warm-up's CPU time is no round's either
        for _ in range(args.rounds):
            for v in made:
                v.timed()
        rate, cpu_rate = matmul_rate(threads)
        floor, cpu_floor = flops / rate, flops / cpu_rate
        bf16 = bf16_floor(threads, flops) if "bf16" in precisions else None
        base = "ff" if case == "atari-lstm" else "old"  # what "vs old" compares with
        old = next((v for v in made if v.name == base), None)
        old_ms = statistics.median(old.per_step) if old else float("nan")
        old_cpu = statistics.median(old.cpu_per_step) if old else float("nan")
        out = {
            "threads": threads,
            "flops": flops,
            "matmul_flops_per_s": rate,
            "matmul_flops_per_cpu_s": cpu_rate,
            "variants": {},
        }
        if bf16:
            out["bf16_matmul_flops_per_s"], out["bf16_matmul_flops_per_cpu_s"] = bf16[2:]
        for v in made:
            ms, cpu = statistics.median(v.per_step), statistics.median(v.cpu_per_step)
            out["variants"][v.name] = {
                "seconds_per_step": ms,
                "cpu_seconds_per_step": cpu,
                "all": v.per_step,
                "all_cpu": v.cpu_per_step,
                "first_call_seconds": v.first_seconds,
                "x_floor": ms / floor,
                "x_floor_cpu": cpu / cpu_floor,
                "speedup_vs_old": old_ms / ms,
                "speedup_vs_old_cpu": old_cpu / cpu,
            }
            if bf16:
                out["variants"][v.name]["x_bf16_floor"] = ms / bf16[0]
                out["variants"][v.name]["x_bf16_floor_cpu"] = cpu / bf16[1]
            rows.append(
                f"{case:11s} {v.name:12s} {v.first_seconds:9.1f}s {ms * 1e3:8.3f} "
                f"{cpu * 1e3:7.3f} {flops / 1e6:7.1f} {rate / 1e9:7.0f} {cpu_rate / 1e9:5.0f} "
                f"{floor * 1e3:8.3f} {ms / floor:7.1f} {cpu / cpu_floor:5.1f} "
                f"{old_ms / ms:5.2f}x {old_cpu / cpu:4.2f}x" + bf16_columns(bf16, ms, cpu)
            )
        results[case] = out
        if len(rows) == len(made):
            print(header)
        for r in rows[-len(made) :]:
            print(r)
        print(f"  ({threads} thread(s); load average now {os.getloadavg()[0]:.2f})")
        if bf16:
            print(f"  bf16 matmul {bf16[2] / 1e9:.2f} GFLOP/s, {bf16[3] / 1e9:.2f} per CPU s")
        _write(path, results)  # after every case: a run stopped later keeps what it measured
    results["loadavg_end"] = os.getloadavg()
    _write(path, results)
    print(f"\nwritten {path}")


def _write(path: Path, results: dict) -> None:
    """``results`` as JSON at ``path``, replaced whole (never left half-written)."""
    part = path.with_suffix(".json.part")
    part.write_text(json.dumps(results, indent=2, default=float))
    part.replace(path)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
