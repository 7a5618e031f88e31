"""PPO's hyperparameters (each field a flag of ``asyncrl train``), its presets per env family,
and what it refuses. Where the presets' values come from: docs, Guides: presets."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asyncrl.config import Hyperparameters, need, preset_setting, setting
from asyncrl.envs.pettingzoo import is_pettingzoo
from asyncrl.envs.spec import is_image
from asyncrl.learning.population import envs_of_policy

if TYPE_CHECKING:
    from asyncrl.config import Settings

CORRECTIONS = ("none", "vtrace", "decoupled")
# Gradient steps from which --compile is on by default: a first compilation on a machine (an
# empty compile cache) costs ~20-25 s of a 2-core CPU and saves ~0.4 ms per MLP step, so it
# pays back after ~60,000 steps (docs/benchmarks/learner-floor.md)
COMPILE_MIN_STEPS = 100_000
# Longest --recurrence a recurrent step is compiled for: its graph unrolls the sequence, and a
# first compilation grows by ~1.4 s of a 2-core CPU per step (~50 s at 32, ~95 s at 64)
COMPILE_MAX_RECURRENCE = 64
SCHEDULES = ("constant", "linear")
ACTIVATIONS = ("tanh", "relu")
RECURRENT = ("none", "lstm", "gru")


@dataclass
class PPOConfig(Hyperparameters):
    lr: float = preset_setting(3e-4, "Adam learning rate")
    lr_schedule: str = preset_setting(
        "constant",
        "learning-rate schedule over total_steps: constant (SB3's) or linear to 0 (CleanRL's)",
        choices=SCHEDULES,
    )
    epochs: int = preset_setting(10, "passes over each training batch")
    minibatch_size: int = preset_setting(64, "samples per gradient step")
    gamma: float = preset_setting(0.99, "discount")
    gae_lambda: float = preset_setting(0.95, "GAE lambda (also V-trace's lambda)")
    clip_coef: float = preset_setting(0.2, "PPO ratio clip")
    clip_schedule: str = setting(
        "constant", "ratio-clip schedule over total_steps", choices=SCHEDULES
    )
    value_clip: float = preset_setting(
        0.0, "clip the value update to +/- this around the old value (0: off)"
    )
    ent_coef: float = preset_setting(0.0, "entropy bonus coefficient")
    vf_coef: float = setting(0.5, "value loss coefficient")
    max_grad_norm: float = setting(0.5, "clip the global gradient norm to this (0: off)")
    norm_adv: bool = setting(True, "normalise advantages per minibatch (one of 2 samples or more)")
    norm_obs: bool = preset_setting(
        False, "running normalisation of observations (saved in checkpoints; MuJoCo wants it)"
    )
    norm_obs_min_std: float = setting(
        0.0,
        "with --norm-obs: the smallest std it divides by; narrower dimensions are only centred "
        "(0: every dimension to unit variance; 1: wide ones shrink, narrow and sparse ones, "
        "such as Ant-v5's contact forces, keep their scale)",
    )
    norm_obs_keep_sparse: bool = preset_setting(
        False,
        "with --norm-obs: never scale up a sparse dimension, one that was exactly 0 in at "
        "least half the observations of the first update (contact forces: Ant-v5's, "
        "Humanoid-v5's), where unit variance turns each contact into a spike of many stds",
    )
    norm_reward: bool = preset_setting(
        False,
        "divide rewards by the running std of the discounted return (kept by the learner, "
        "saved in checkpoints; logged returns stay unscaled)",
    )
    reward_clip: float = setting(
        10.0, "with --norm-reward: clip scaled rewards to +/- this (0: off)"
    )
    activation: str = setting("tanh", "hidden activation", choices=ACTIVATIONS)
    correction: str = setting(
        "none",
        "lag correction: vtrace (V-trace value targets and advantages) or decoupled (the "
        "clip around the current policy, lagged samples importance-weighted to it)",
        choices=CORRECTIONS,
    )
    vtrace_rho_bar: float = setting(
        1.0, "truncation of importance weights (V-trace's TD errors; decoupled's sample weights)"
    )
    vtrace_c_bar: float = setting(1.0, "V-trace clip of the trace-cutting coefficients")
    compile: bool | None = setting(
        None,
        "torch.compile the learner's minibatch step (unset: on where it pays, MLP policies, "
        "recurrent ones with --recurrence up to "
        f"{COMPILE_MAX_RECURRENCE} included, in runs of at least {COMPILE_MIN_STEPS:,} gradient "
        "steps on the CPU; off in shorter runs, for the CNN and with --device cuda or auto)",
    )
    recurrent: str = setting(
        "none",
        "a recurrent core after the encoder: lstm or gru (memory, for partially observed "
        "envs), or none (feed-forward); on the generic and classic families it also sets the "
        "recurrent settings left unset (docs: Guides, presets; Guides, recurrent policies)",
        choices=RECURRENT,
        owners_only=True,
    )
    rnn_size: int = setting(128, "--recurrent: units of the LSTM or GRU", owners_only=True)
    recurrence: int = setting(
        0,
        "--recurrent: env steps per backpropagation-through-time chunk, whose starting hidden "
        "state each slot stores (0: the rollout length, or gcd(rollout, minibatch_size) for a "
        "--minibatch-size given that holds no whole preset rollout; must divide the rollout)",
        owners_only=True,
    )


# The values of settings left unset, per env family (docs, Guides: presets). generic: SB3's and
# CleanRL's PPO defaults (a 2,048-sample batch: 2 actors x 8 envs x 128) with SB3's constant
# learning rate, the base of every family; classic and box2d add observation and return
# normalisation, box2d CleanRL's annealed learning rate (the defaults table's choice per
# family); mujoco CleanRL's clipped value loss and annealed rate, in sync mode (async's lag cost
# HalfCheetah and Ant return, Hopper none; Sample Factory's MuJoCo defaults are sync too);
# atari (and other pixels) CleanRL's ppo_atari with the Nature-CNN torso, whose learner takes
# every CPU. Modes the family leaves unset are async.
GENERIC: dict[str, Any] = {
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "lr": 3e-4,
    "lr_schedule": "constant",
    "epochs": 10,
    "minibatch_size": 64,
    "rollout": 128,
    "hidden": [64, 64],
    "norm_obs": False,
    "norm_reward": False,
    "total_steps": 1_000_000,
}


def _family(**values: Any) -> dict[str, Any]:
    table = {**GENERIC, **values}
    table["total_steps"] = table.pop("total_steps")  # the budget last, as the line shows it
    return table


_ATARI = _family(
    lr=2.5e-4,
    lr_schedule="linear",
    epochs=4,
    minibatch_size=256,
    hidden=[512],
    clip_coef=0.1,
    ent_coef=0.01,
    threads_learner=0,
    total_steps=10_000_000,
)
PRESETS: dict[str, dict[str, Any]] = {
    "generic": _family(),
    "classic": _family(norm_obs=True, norm_reward=True, total_steps=150_000),
    "box2d": _family(norm_obs=True, norm_reward=True, lr_schedule="linear"),
    "mujoco": _family(
        norm_obs=True,
        norm_obs_keep_sparse=True,
        norm_reward=True,
        value_clip=0.2,
        lr_schedule="linear",
        mode="sync",
    ),
    "atari": _ATARI,
    "pixels": dict(_ATARI),
    # two-player turn-based games (PettingZoo, action masks): self-play against a pool of 64
    # snapshots of the learner, one every 5 updates, and a uniform random player in a quarter
    # of the games; in async, an actor's next rollout waits for the learner to take its last
    # (a lag of 1-2 versions). The budget counts the learner's moves, about half of the
    # game's: 100k is about 200k moves. Screened on connect four (docs, Guides: multi-agent;
    # Guides: presets).
    "game": _family(
        gamma=0.8,
        ent_coef=0.01,
        opponents="pool",
        pool_size=64,
        snapshot_every=5,
        pool_random=0.25,
        max_batches_waiting=0,
        total_steps=100_000,
    ),
}
# Values tuned on one env, per family: auto gives them to that env alone (a preset named with
# --preset gives them to any env). CartPole's: solved within 150k steps in both modes, with
# minibatches of 64 so that an async batch of 8 x 32 samples is 4 of them.
TUNED: dict[str, tuple[str, dict[str, Any]]] = {
    "classic": (
        "CartPole-v1",
        {
            "gamma": 0.98,
            "gae_lambda": 0.8,
            "lr": 5e-4,
            "lr_schedule": "linear",
            "rollout": 32,
            "norm_obs": False,
            "norm_reward": False,
        },
    ),
}

# What --recurrent lstm|gru gives the settings left unset, per family, in place of the preset's
# and of values tuned on one env for a feed-forward policy (CartPole-v1's): the recurrent guide's
# CartPole settings, with which a position-only CartPole is solved in 300k async steps where the
# generic preset's stay near 150, and CartPole-v1 in its 150k where its tuned values reach ~140
# (docs, Guides: presets, what --recurrent derives). mujoco takes them too: on Hopper-v5 (300k
# steps, sync, seeds 1-2) they ended higher than the preset's one 128-step sequence per rollout
# and 10 epochs at 3e-4. box2d keeps its preset's: on LunarLander-v3 (seeds 1-2) the two were
# level within the seeds' spread.
_RECURRENT = {
    "rollout": 64,
    "recurrence": 16,
    "minibatch_size": 256,
    "epochs": 4,
    "lr": 1e-3,
    "lr_schedule": "linear",
    "norm_obs": True,
    "norm_reward": True,
}
# Atari's: CleanRL's ppo_atari_lstm.py (8 envs x 128 steps, each env's rollout one sequence,
# minibatches of 2 envs' sequences, 4 epochs, Adam 2.5e-4 annealed), the atari preset's values
# but for the sequences, which it names; Breakout learns with them (docs: the defaults-generality
# page), not measured at 10M steps.
_RECURRENT_ATARI = {
    "rollout": 128,
    "recurrence": 128,
    "minibatch_size": 256,
    "epochs": 4,
    "lr": 2.5e-4,
    "lr_schedule": "linear",
}
RECURRENT_PRESETS: dict[str, dict[str, Any]] = {
    "generic": _RECURRENT,
    "classic": _RECURRENT,
    "mujoco": _RECURRENT,
    "atari": _RECURRENT_ATARI,
}

FIXED_ON_RESUME = (
    "activation",
    "norm_obs",
    "norm_obs_min_std",
    "norm_obs_keep_sparse",
    "norm_reward",
    "recurrent",
    "rnn_size",
)


def recurrence(cfg: Settings) -> int:
    """Env steps per BPTT chunk: ``recurrence``, or with 0 the rollout length."""
    return cfg.recurrence or cfg.rollout


def state_rows(kind: str) -> int:
    """S of a ``[batch, S, rnn_size]`` hidden state: an LSTM keeps h and c, a GRU h."""
    return 2 if kind == "lstm" else 1


def memory_note(cfg: Settings) -> str | None:
    """The hidden states a recurrent policy's slots hold, for the start-up memory line."""
    kind, size = cfg.recurrent, cfg.rnn_size
    if kind == "none":
        return None
    rows = state_rows(kind)
    per_sample = rows * size * 4 / recurrence(cfg)
    return (
        f"{kind} states {rows} x {size} float32 at each of {cfg.rollout // recurrence(cfg)} "
        f"chunk start(s) per env and rollout, {per_sample:,.0f} B per sample of the above"
    )


def train_batch(cfg: Settings) -> int:
    """Samples PPO trains on per iteration: every actor's rollout in sync, ``rollouts_per_batch``
    rollouts in async."""
    rollouts = cfg.actors if cfg.mode == "sync" else cfg.rollouts_per_batch
    return cfg.envs_per_actor * cfg.rollout * rollouts


def gradient_steps(cfg: Settings) -> int:
    """The minibatch steps a run of ``cfg`` takes, all its updates together (0 for settings
    validate refuses: derived settings are computed before it runs)."""
    batch = train_batch(cfg)
    if batch < 1 or cfg.minibatch_size < 1 or cfg.epochs < 1 or cfg.total_steps < 1:
        return 0
    return cfg.total_steps // batch * cfg.epochs * max(batch // cfg.minibatch_size, 1)


def _smallest_batch(cfg: Settings, rollout: int) -> int:
    """The training batch of the policy with the fewest envs (a population's policies train
    on their own envs' share of each rollout under the fixed mapping)."""
    envs = cfg.envs_per_actor
    if cfg.policies > 1 and cfg.policy_mapping == "fixed":
        envs = min(envs_of_policy(envs, cfg.policies, p) for p in range(cfg.policies))
    return train_batch(dataclasses.replace(cfg, envs_per_actor=envs, rollout=rollout))


def switch_values(cfg: Settings, filled: frozenset[str]) -> tuple[str, dict[str, Any]]:
    """What ``--recurrent`` gives the settings in ``filled`` on the preset's family (see
    RECURRENT_PRESETS), and how the start-up line names it. Its sequences of 16 steps go with
    its rollout, and only where they divide the minibatch: with a rollout given, a sequence is
    the rollout (--recurrence 0) as before, and ``agree`` derives what must fit it."""
    table = RECURRENT_PRESETS.get(cfg.preset, {}) if cfg.recurrent != "none" else {}
    derives_sequences = cfg.recurrence == 0 and "rollout" in filled
    unset = filled | ({"recurrence"} if derives_sequences else set())
    out = {n: v for n, v in table.items() if n in unset and getattr(cfg, n) != v}
    if "recurrence" in out:
        sizes = (out.get("rollout", cfg.rollout), out.get("minibatch_size", cfg.minibatch_size))
        if any(size % out["recurrence"] for size in sizes):
            del out["recurrence"]
    return f"--recurrent {cfg.recurrent}", out


def agree(cfg: Settings, filled: frozenset[str]) -> dict[str, Any]:
    """The filled (not given) settings a recurrent policy's sequences or the training batch
    contradict, made to agree (docs, Guides: presets, derived settings): a rollout of whole
    --recurrence chunks; a minibatch of whole sequences and no larger than the batch; and for
    a minibatch given that holds no whole filled rollout, sequences of gcd(rollout, minibatch)
    steps. What the user gave stays; only values given together can still conflict."""
    out: dict[str, Any] = {}
    rollout, minibatch, recurrent = cfg.rollout, cfg.minibatch_size, cfg.recurrent != "none"
    if recurrent and cfg.recurrence > 0 and "rollout" in filled and rollout % cfg.recurrence:
        rollout = out["rollout"] = -(-rollout // cfg.recurrence) * cfg.recurrence
    chunk = (cfg.recurrence or rollout) if recurrent else 1
    if "minibatch_size" in filled:
        minibatch = -(-minibatch // chunk) * chunk
        # a Hogwild! worker trains on its own K envs' rollout
        batch = cfg.envs_per_actor * rollout if cfg.hogwild else _smallest_batch(cfg, rollout)
        minibatch = max(chunk, min(minibatch, batch // chunk * chunk))
        if minibatch != cfg.minibatch_size:
            out["minibatch_size"] = minibatch
    elif recurrent and cfg.recurrence == 0 and "rollout" in filled and minibatch % rollout:
        out["recurrence"] = math.gcd(rollout, minibatch)
    return out


def derived(cfg: Settings) -> dict[str, Any]:
    """``log_every`` (a row per update) and ``compile`` where left unset (see the setting)."""
    out: dict[str, Any] = {"log_every": 1} if cfg.log_every == 0 else {}
    if cfg.compile is None:
        short = cfg.recurrent == "none" or recurrence(cfg) <= COMPILE_MAX_RECURRENCE
        out["compile"] = short and gradient_steps(cfg) >= COMPILE_MIN_STEPS
    return out


def validate(cfg: Settings) -> None:
    for name in ("epochs", "minibatch_size"):
        need(getattr(cfg, name) >= 1, f"{name}: must be >= 1, got {getattr(cfg, name)}")
    need(
        cfg.minibatch_size <= train_batch(cfg) or cfg.hogwild > 0,
        f"minibatch_size: {cfg.minibatch_size} is larger than the training batch of "
        f"{train_batch(cfg)} samples (envs_per_actor x rollout"
        + (" x actors" if cfg.mode == "sync" else " x rollouts_per_batch")
        + "); lower it or raise the batch",
    )
    need(cfg.lr > 0, f"lr: must be > 0, got {cfg.lr}")
    need(
        cfg.precision == "fp32" or cfg.recurrent == "none",
        f"precision: bf16 trains feed-forward policies; a recurrent one (--recurrent "
        f"{cfg.recurrent}) trains in fp32",
    )
    need(0 <= cfg.gamma <= 1, f"gamma: must be in [0, 1], got {cfg.gamma}")
    need(0 <= cfg.gae_lambda <= 1, f"gae_lambda: must be in [0, 1], got {cfg.gae_lambda}")
    need(cfg.clip_coef > 0, f"clip_coef: must be > 0, got {cfg.clip_coef}")
    for name in (
        "value_clip",
        "ent_coef",
        "vf_coef",
        "max_grad_norm",
        "reward_clip",
        "norm_obs_min_std",
    ):
        need(getattr(cfg, name) >= 0, f"{name}: must be >= 0, got {getattr(cfg, name)}")
    need(cfg.vtrace_rho_bar > 0, f"vtrace_rho_bar: must be > 0, got {cfg.vtrace_rho_bar}")
    need(cfg.vtrace_c_bar > 0, f"vtrace_c_bar: must be > 0, got {cfg.vtrace_c_bar}")
    need(
        not (cfg.norm_reward and cfg.policy_mapping != "fixed"),
        "norm_reward: its running return follows each env, whose episodes change policy under "
        "--policy-mapping random (or a function); leave --norm-reward off or use the fixed "
        "mapping",
    )
    # a population's slots on a game hold every seat, the others' never written
    need(
        not (cfg.norm_reward and cfg.policies > 1 and is_pettingzoo(cfg.env)),
        "norm_reward: a population's policies on a multi-agent env hold only some of each "
        "slot's seats, which its running return cannot tell apart; leave --norm-reward off",
    )
    if cfg.recurrent != "none":
        _validate_recurrent(cfg)


def _validate_recurrent(cfg: Settings) -> None:
    need(
        cfg.policies == 1,
        f"recurrent: a population (--policies {cfg.policies}) of recurrent policies is not "
        "supported yet; use --recurrent none or --policies 1",
    )
    need(cfg.rnn_size >= 1, f"rnn_size: must be >= 1, got {cfg.rnn_size}")
    need(cfg.recurrence >= 0, f"recurrence: must be >= 0 (0: the rollout), got {cfg.recurrence}")
    chunk = recurrence(cfg)
    need(
        not cfg.compile or chunk <= COMPILE_MAX_RECURRENCE,
        f"compile: a recurrent step is compiled for --recurrence up to "
        f"{COMPILE_MAX_RECURRENCE} (its graph unrolls each sequence), got {chunk}; leave "
        "--compile off or shorten --recurrence",
    )
    need(
        cfg.rollout % chunk == 0,
        f"recurrence: must divide rollout ({cfg.rollout}), got {cfg.recurrence}",
    )
    need(
        cfg.minibatch_size % chunk == 0,
        f"minibatch_size: with --recurrent a minibatch is whole sequences of recurrence "
        f"({'0: the rollout, ' if not cfg.recurrence else ''}{chunk}) steps; "
        f"{cfg.minibatch_size} is not a multiple of {chunk}",
    )


def for_env(cfg: Settings, spec: Any, given: Settings | None) -> tuple[dict[str, Any], list[str]]:
    """Image observations are scaled by 1/255 in the network: ``norm_obs`` is refused for them
    if the user set it, and turned off, with a line, if a preset did. ``compile`` is off for
    the CNN unless given: its step gains nothing from it (docs/benchmarks/learner-floor.md);
    nor is it derived for a learner that may run on a GPU, where it was never measured."""
    changes: dict[str, Any] = {}
    derived_on = cfg.compile and given is not None and given.compile is None
    if derived_on and (cfg.encoder == "cnn" or cfg.device != "cpu"):
        changes["compile"] = False
    cnn = cfg.encoder == "cnn" or cfg.encoder == "auto" and is_image(spec)
    if cfg.compile and cfg.recurrent != "none" and cnn:
        need(
            derived_on,
            "compile: a recurrent step is compiled after the mlp encoder only; leave --compile "
            "off with the cnn encoder",
        )
        changes["compile"] = False
    if not (cfg.norm_obs and spec.obs_dtype == "uint8"):
        return changes, []
    need(
        given is not None and given.norm_obs is None,
        f"norm_obs: {cfg.env} has uint8 observations, which the network scales by 1/255 "
        "instead; leave --norm-obs off",
    )
    line = (
        f"asyncrl: norm_obs off: {cfg.env} has uint8 observations, which the network "
        f"scales by 1/255 instead (preset {cfg.preset} would normalise them)"
    )
    return {**changes, "norm_obs": False}, [line]
