"""Training settings: one dataclass, its defaults, and every error message about them.

The command line, the YAML ``--config`` file and ``config.yaml`` in a run directory are all views
of :class:`TrainConfig`. :func:`validate` explains an impossible setting in one line *before*
any environment is built or process started; :func:`check_env` does the same for what can only
be known by looking at the env (its id and its spaces).

Settings whose good value depends on the algorithm and the kind of env (discount, learning rate,
rollout length, normalisation, ...) default to ``None``: *not set*. :func:`resolve` fills them
from a named preset (:data:`PRESETS`; ``--preset auto`` picks it from the env's family), so
anything the user did set -- a flag, a YAML key, a keyword -- wins, even when it equals the
preset's value. A run saves its config resolved: resuming it never changes its meaning.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ALGOS = ("ppo", "sac")
MODES = ("sync", "async")
BACKENDS = ("inline", "thread", "process", "ray")
CORRECTIONS = ("none", "vtrace", "decoupled")
LR_SCHEDULES = ("constant", "linear")
SYNC_MODES = ("shared", "synced")
ACTIVATIONS = ("tanh", "relu")
ON_ENV_ERROR = ("raise", "restart")
DEVICES = ("cpu", "cuda", "auto")
ENCODERS = ("auto", "mlp", "cnn")
VECTORIZERS = ("gymnasium", "envpool")

# Named presets: per algorithm, the values of the settings left unset (None). "classic" holds
# the values for classic control (CartPole, Pendulum), SAC's apart; PPO's minibatch is 64, so an
# async batch of one actor's 8 x 32 samples is 4 minibatches per epoch, not one (with one of 256,
# async CartPole collapsed after nearly solving and ended at 165 in 1 of 9 seeds, the others
# passing 475 only at 74-135k; with 64, 8 of 8 seeds ended at 500, past 475 by 25-49k in 7 and
# by 74k in the eighth; README, presets); "mujoco"
# those of the references for continuous-control robots (MuJoCo, PyBullet locomotion):
# CleanRL's ppo_continuous_action and SB3's PPO defaults (gamma 0.99, lambda 0.95, Adam 3e-4
# linearly annealed, 10 epochs of minibatch 64, observation and return normalisation, and
# CleanRL's clipped value loss, clip_vloss, at the ratio clip 0.2); SAC as
# SB3 and CleanRL run it (gamma 0.99, 256x256, one update per env step), warming up for
# CleanRL's 5,000 random steps on MuJoCo.
#
# PPO's rollout on MuJoCo: 128 steps per env. With the default 2 actors x 8 envs a sync
# iteration trains on 2 x 8 x 128 = 2,048 samples, CleanRL's and SB3's batch (32 minibatches of
# 64); an async iteration on one actor's 1,024 (16 minibatches), so each sample still takes
# 10 x 1/64 gradient steps and the policy moves twice as often, by half as much. The figures of
# issue 15 (HalfCheetah 1,585, Hopper 1,918 at 1M steps with --norm-obs, async) used it.
#
# "atari": CleanRL's ppo_atari (8 envs x 128 steps, 4 epochs of 4 minibatches -- 256 samples --,
# Adam 2.5e-4 linearly annealed, clip 0.1, entropy 0.01, gamma 0.99, lambda 0.95, the Nature-CNN
# torso with its 512-unit layer). Its SAC table, mujoco's, only completes the config: SAC here
# needs continuous actions, which ALE envs do not have.
#
# The budget is the family's too: what the references report their figures at and run by
# default (CleanRL's total_timesteps; RL Zoo's n_timesteps for these envs), so that a run with
# no flag but the env is the run those figures describe -- 1M env steps on MuJoCo (PPO and SAC),
# 10M agent steps (40M frames) on Atari. Classic control keeps 150k: CartPole is solved within
# it in both modes.

# SAC as SB3 and CleanRL run it on MuJoCo, with CleanRL's 5,000 random warm-up steps
_SAC_WITH_CLEANRL_WARMUP: dict[str, Any] = {
    "gamma": 0.99,
    "rollout": 1,
    "hidden": [256, 256],
    "learning_starts": 5000,
    "norm_obs": False,
    "norm_reward": False,
    "total_steps": 1_000_000,
}
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "classic": {
        "ppo": {
            "gamma": 0.98,
            "gae_lambda": 0.8,
            "lr": 5e-4,
            "epochs": 10,
            "minibatch_size": 64,
            "rollout": 32,
            "hidden": [64, 64],
            "norm_obs": False,
            "norm_reward": False,
            "total_steps": 150_000,
        },
        "sac": {
            "gamma": 0.99,
            "rollout": 1,
            "hidden": [256, 256],
            "learning_starts": 1000,
            "norm_obs": False,
            "norm_reward": False,
            "total_steps": 150_000,
        },
    },
    "mujoco": {
        "ppo": {
            "gamma": 0.99,
            "gae_lambda": 0.95,
            "lr": 3e-4,
            "epochs": 10,
            "minibatch_size": 64,
            "rollout": 128,
            "hidden": [64, 64],
            "norm_obs": True,
            "norm_reward": True,
            "value_clip": 0.2,
            "total_steps": 1_000_000,
        },
        "sac": dict(_SAC_WITH_CLEANRL_WARMUP),
    },
    "atari": {
        "ppo": {
            "gamma": 0.99,
            "gae_lambda": 0.95,
            "lr": 2.5e-4,
            "epochs": 4,
            "minibatch_size": 256,
            "rollout": 128,
            "hidden": [512],
            "norm_obs": False,
            "norm_reward": False,
            "clip_coef": 0.1,
            "ent_coef": 0.01,
            # The Nature-CNN learner bounds Atari training on CPUs while the actors idle half
            # the time: it takes every CPU (README, pixels).
            "threads_learner": 0,
            "total_steps": 10_000_000,
        },
        "sac": dict(_SAC_WITH_CLEANRL_WARMUP),
    },
}
# Preset-governed settings a preset may leave out: it then has these values (asyncrl's
# defaults before presets governed them).
PRESET_DEFAULTS: dict[str, Any] = {
    "clip_coef": 0.2,
    "ent_coef": 0.0,
    "value_clip": 0.0,
    "threads_learner": 1,
}
PRESET_CHOICES = ("auto", *PRESETS)


class ConfigError(ValueError):
    """A setting that cannot work; the message names the field and what is allowed."""


def _f(default: Any, help: str, **meta: Any) -> Any:
    """A dataclass field whose help text lives next to its default (it becomes the CLI help)."""
    if isinstance(default, list | dict):
        return field(
            default_factory=lambda: type(default)(default), metadata={"help": help, **meta}
        )
    return field(default=default, metadata={"help": help, **meta})


def _p(help: str) -> Any:
    """A setting a preset fills when it is not set (None); its values are in PRESETS."""
    return field(default=None, metadata={"help": help, "preset": True})


@dataclass
class TrainConfig:
    # --- what to train
    algo: str = _f("ppo", "algorithm", choices=ALGOS)
    env: str = _f("CartPole-v1", "Gymnasium env id (any registered id, e.g. HalfCheetah-v5)")
    vectorizer: str = _f(
        "gymnasium",
        "what steps an actor's K envs: gymnasium (a SyncVectorEnv in the actor's process) or "
        "envpool (EnvPool's C++ batched envs, for MuJoCo v5 and Atari ids; "
        "pip install 'asyncrl[envpool]')",
        choices=VECTORIZERS,
    )
    atari_preprocessing: bool = _f(
        True,
        "ALE ids: the standard preprocessing (no-op starts, frame skip 4, 84x84 grayscale, 4 "
        "stacked frames; for training also episodic life and reward clipping, while the logged "
        "return stays the game's score); off: the raw env",
    )
    preset: str = _f(
        "auto",
        "where unset settings take their values: classic (classic control), mujoco (MuJoCo and "
        "PyBullet robots), atari (ALE ids), or auto (chosen from the env's family)",
        choices=PRESET_CHOICES,
    )
    seed: int = _f(1, "seed of envs, networks and sampling")
    total_steps: int | None = _p("env steps to train for (summed over all envs)")
    max_seconds: float = _f(
        0.0, "also stop after this many seconds of wall-clock time (0: no limit)"
    )
    # --- topology
    mode: str = _f(
        "async", "sync: actors wait while the learner trains; async: they go on", choices=MODES
    )
    backend: str = _f(
        "process",
        "where actors run: inline (one process, in turn), thread, process, or ray (Ray actors "
        "on a Ray cluster's nodes; pip install 'asyncrl[ray]')",
        choices=BACKENDS,
    )
    ray_address: str = _f(
        "",
        "--backend ray: the cluster to join, auto or HOST:PORT ('': start a local Ray instance "
        "on loopback for this run)",
    )
    ray_cpus_per_actor: float = _f(1.0, "--backend ray: CPUs Ray reserves for each actor")
    actors: int = _f(2, "N, the number of actors")
    envs_per_actor: int = _f(8, "K, the envs each actor steps as one batched env")
    rollout: int | None = _p("T, env steps per env in one rollout")
    max_batches_waiting: int = _f(
        1,
        "async: filled batches that may wait for the learner ahead of an actor's last one "
        "before that actor blocks (>= 0; 0: an actor starts its next rollout only once the "
        "learner has taken its last one, the least lag async allows)",
    )
    # --- faults
    actor_restarts: int = _f(
        -1,
        "dead, crashed or hung actors (or Hogwild! workers) replaced per run before the run "
        "ends with an error (-1: auto, 3 x actors; 0: the first fault ends the run)",
    )
    on_env_error: str = _f(
        "raise",
        "an env whose step or reset raises: raise (end the run naming actor and env) or "
        "restart (recreate that env in place, end its episode as a truncation, count it)",
        choices=ON_ENV_ERROR,
    )
    env_step_timeout: float = _f(
        60.0,
        "seconds one batched env step may take before its actor counts as hung and is "
        "replaced (0: off)",
    )
    # --- Hogwild!
    hogwild: int = _f(
        0,
        "M Hogwild! worker processes, each an actor and learner of K envs training one shared "
        "network (0: off, the actor-learner pipeline; --mode and --backend do not apply)",
    )
    sync_mode: str = _f(
        "shared",
        "Hogwild!: shared (read the global network before every gradient step, add the change "
        "after it, no lock) or synced (push and pull every --sync-every steps)",
        choices=SYNC_MODES,
    )
    sync_every: int = _f(0, "Hogwild! synced: gradient steps between syncs with the global network")
    # --- PPO
    lr: float | None = _p("Adam learning rate")
    lr_schedule: str = _f("linear", "learning-rate schedule over total_steps", choices=LR_SCHEDULES)
    epochs: int | None = _p("passes over each training batch")
    minibatch_size: int | None = _p("samples per gradient step")
    gamma: float | None = _p("discount")
    gae_lambda: float | None = _p("GAE lambda (also V-trace's lambda)")
    clip_coef: float | None = _p("PPO ratio clip")
    clip_schedule: str = _f(
        "constant", "ratio-clip schedule over total_steps", choices=LR_SCHEDULES
    )
    value_clip: float | None = _p("clip the value update to +/- this around the old value (0: off)")
    ent_coef: float | None = _p("entropy bonus coefficient")
    vf_coef: float = _f(0.5, "value loss coefficient")
    max_grad_norm: float = _f(0.5, "clip the global gradient norm to this (0: off)")
    norm_adv: bool = _f(True, "normalise advantages per minibatch")
    norm_obs: bool | None = _p(
        "running normalisation of observations (saved in checkpoints; MuJoCo wants it)"
    )
    norm_reward: bool | None = _p(
        "PPO: divide rewards by the running std of the discounted return (kept by the learner, "
        "saved in checkpoints; logged returns stay unscaled)"
    )
    reward_clip: float = _f(10.0, "with --norm-reward: clip scaled rewards to +/- this (0: off)")
    hidden: list | None = _p(
        "hidden layer sizes of the networks (with --encoder cnn: the linear layers after the "
        "convolutions)"
    )
    encoder: str = _f(
        "auto",
        "what reads the observations: mlp (flattened), cnn (the Nature-DQN convolutions; "
        "images under 36 pixels a side get two 3x3 layers), or auto (cnn for uint8 images of "
        "rank 3, mlp otherwise)",
        choices=ENCODERS,
    )
    activation: str = _f("tanh", "PPO: hidden activation", choices=ACTIVATIONS)
    correction: str = _f(
        "none",
        "PPO's lag correction: vtrace (V-trace value targets and advantages) or decoupled (the "
        "clip around the current policy, lagged samples importance-weighted to it)",
        choices=CORRECTIONS,
    )
    vtrace_rho_bar: float = _f(
        1.0, "truncation of importance weights (V-trace's TD errors; decoupled's sample weights)"
    )
    vtrace_c_bar: float = _f(1.0, "V-trace clip of the trace-cutting coefficients")
    compile: bool = _f(False, "torch.compile the learner's minibatch step")
    # --- SAC
    replay_ratio: float = _f(1.0, "SAC: gradient steps per env step, independent of N and K")
    ratio_tolerance: float = _f(
        0.0, "SAC async: how far (in gradient steps) either side may run ahead (0: auto)"
    )
    learning_starts: int | None = _p("SAC: transitions collected (randomly) before updates start")
    batch_size: int = _f(256, "SAC: transitions per gradient step")
    buffer_size: int = _f(1_000_000, "SAC: replay capacity in transitions")
    policy_lr: float = _f(3e-4, "SAC: actor and temperature learning rate")
    q_lr: float = _f(3e-4, "SAC: critic learning rate")
    tau: float = _f(0.005, "SAC: Polyak factor of the target critics")
    save_replay: bool = _f(False, "SAC: store the replay buffer in checkpoints (resume with data)")
    # --- run directory, logging, checkpoints
    run_dir: str = _f("", "run directory (default: runs/<env>-<mode>-<time>)")
    checkpoint_every: float = _f(60.0, "seconds between periodic checkpoints (0: only at exit)")
    keep_checkpoints: int = _f(
        2,
        "checkpoints kept in the run directory, newest first: an older one is there to fall "
        "back to if the newest turns out damaged (>= 1)",
    )
    log_every: int = _f(
        0,
        "training iterations folded into one metrics row (metrics.jsonl, TensorBoard); "
        "0: every iteration for PPO, every 1,000 env steps for SAC",
    )
    progress: bool = _f(True, "show a live progress bar")
    tensorboard: bool = _f(True, "write TensorBoard scalars to the run directory")
    threads_learner: int | None = _p(
        "torch threads of the learner (0: as many as the CPUs this process may use)"
    )
    threads_actor: int = _f(1, "torch threads of each actor")
    device: str = _f(
        "cpu",
        "where the learner's networks and updates run: cpu, cuda, or auto (cuda if there is "
        "one); actors always act on the CPU and policy versions travel as CPU tensors",
        choices=DEVICES,
    )
    # --- evaluation during training
    eval_every: int = _f(
        0,
        "env steps between evaluations during training: deterministic episodes on separate "
        "envs in a background process, logged as eval/* rows; the best policy so far is kept "
        "as checkpoint-best.pt (0: off)",
    )
    eval_episodes: int = _f(10, "episodes per evaluation during training")

    # ------------------------------------------------------------------ derived quantities
    @property
    def insert_batch(self) -> int:
        """Transitions one actor's rollout holds: one insert into a replay buffer."""
        return self.envs_per_actor * self.rollout

    @property
    def ppo_batch(self) -> int:
        """Samples PPO trains on per iteration: one actor's batch, or all of them."""
        per_actor = self.envs_per_actor * self.rollout
        return per_actor * (self.actors if self.mode == "sync" else 1)

    @property
    def slots_per_actor(self) -> int:
        """Rollout buffers each actor owns: one in sync mode; in async mode one to write, up to
        ``max_batches_waiting`` waiting and one being trained on, so that only the waiting-batch
        bound, never a missing buffer, makes an actor wait."""
        return 1 if self.mode == "sync" else self.max_batches_waiting + 2

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: Path) -> None:
        path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def _kind(hint: Any) -> type:
    """The type a setting's values have: ``float`` for ``float | None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return typing.get_origin(hint) or hint


# name -> int, float, bool, str or list: what the CLI parses a flag as, what YAML numbers become
KINDS: dict[str, type] = {n: _kind(t) for n, t in typing.get_type_hints(TrainConfig).items()}
# the settings a preset fills when they are not set
PRESET_FIELDS = tuple(name for name, f in FIELDS.items() if f.metadata.get("preset"))


def from_dict(values: dict[str, Any], base: TrainConfig | None = None) -> TrainConfig:
    """Build a config from a mapping (YAML file, saved run), rejecting unknown keys by name.

    Numbers take the type of their field: people write ``total_steps: 1e6``, which YAML reads as
    a float, and a run must not count steps in floats; ``2.5`` steps is refused, not rounded.
    """
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(unknown)}; known settings: {', '.join(FIELDS)}"
        )
    values = {name: _as_field_type(name, value) for name, value in values.items()}
    return dataclasses.replace(base or TrainConfig(), **values)


def _as_field_type(name: str, value: Any) -> Any:
    kind = KINDS[name]
    if isinstance(value, bool):  # a bool is an int to Python, never a number to a user
        return value
    if kind is int and isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(f"{name}: expected a whole number, got {value!r}")
        return int(value)
    if kind is float and isinstance(value, int):
        return float(value)
    return value


class _Loader(yaml.SafeLoader):
    """YAML 1.1, which PyYAML implements, reads ``3e-4`` and ``1e6`` as strings: its floats need
    a dot and a signed exponent. Everyone writes them as numbers (YAML 1.2 and JSON agree), so
    this loader also resolves an exponent without a dot or a sign to a float."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_yaml(path: str | Path) -> dict[str, Any]:
    try:
        data = yaml.load(Path(path).read_text(), Loader=_Loader) or {}
    except FileNotFoundError as e:
        raise ConfigError(f"config: file {path} does not exist") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"config: {path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"config: {path} must hold a mapping of setting: value")
    return {k.replace("-", "_"): v for k, v in data.items()}


def _need(ok: bool, msg: str) -> None:
    if not ok:
        raise ConfigError(msg)


def _check_kinds(cfg: TrainConfig) -> None:
    """Every setting given is of its kind (unset ones are the presets' to fill)."""
    for name, f in FIELDS.items():
        choices = f.metadata.get("choices")
        value = getattr(cfg, name)
        if value is None and f.metadata.get("preset"):
            continue
        if choices and value not in choices:
            raise ConfigError(f"{name}: {value!r} is not one of {', '.join(choices)}")
        if KINDS[name] in (int, float) and not isinstance(value, int | float):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        if KINDS[name] is bool and not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}: must be a finite number, got {value!r}")


def preset_values(preset: str, algo: str) -> dict[str, Any]:
    """Every preset-governed setting for ``algo`` under ``preset``. The settings ``algo`` does
    not read (SAC: lr, gae_lambda, epochs, minibatch_size; PPO: learning_starts) take the other
    algorithm's values of the same preset, so that a resolved config holds no unset value."""
    values: dict[str, Any] = dict(PRESET_DEFAULTS)
    for other, table in PRESETS[preset].items():
        if other != algo:
            values.update(table)
    values.update(PRESETS[preset][algo])
    return {k: list(v) if isinstance(v, list) else v for k, v in values.items()}


def resolve(cfg: TrainConfig, family: str | None = None) -> TrainConfig:
    """Fill what was left unset: the preset-governed settings from the preset (``auto``: the one
    named by the env's ``family``, from ``asyncrl.envs.env_family``), then the settings derived
    from others. Saved resolved, so a resumed run never changes meaning when a default or a
    preset changes. A resolved config resolves to itself (its preset is a name, not auto)."""
    _check_kinds(cfg)  # the derived settings below compute with them
    preset = cfg.preset
    if preset == "auto":
        if family not in PRESETS:
            raise ValueError(
                "resolve: preset 'auto' needs the env's family: "
                "resolve(cfg, asyncrl.envs.env_family(cfg.env))"
            )
        preset = family
    changes: dict[str, Any] = {"preset": preset}
    for name, value in preset_values(preset, cfg.algo).items():
        if getattr(cfg, name) is None:
            changes[name] = value
    cfg = dataclasses.replace(cfg, **changes)
    changes = {}
    if cfg.actor_restarts == -1:
        changes["actor_restarts"] = 3 * (cfg.hogwild or cfg.actors)
    if cfg.log_every == 0:
        # A SAC iteration is one batched env step: a row each would be a line per env step.
        per_iteration = max(cfg.actors * cfg.envs_per_actor * cfg.rollout, 1)  # validate: >= 1
        changes["log_every"] = -(-1_000 // per_iteration) if cfg.algo == "sac" else 1
    if cfg.algo == "sac" and cfg.ratio_tolerance == 0:
        # twice the narrowest window that can make progress (see RateLimiter)
        changes["ratio_tolerance"] = 2.0 * max(
            1.0, cfg.replay_ratio * cfg.envs_per_actor * cfg.rollout
        )
    return dataclasses.replace(cfg, **changes)


# settings derived by resolve() from others when left at these values
DERIVED = {"actor_restarts": -1, "log_every": 0, "ratio_tolerance": 0}


def underive(saved: TrainConfig) -> TrainConfig:
    """A saved run's config with the settings :func:`resolve` derived set back to "derive",
    so that a resumed run derives them again from its settings, some of which may change on
    resume (a new ``replay_ratio`` gets its own ``ratio_tolerance``). A value that differs
    from what resolve would derive was given by the user, and stays."""
    changes = {}
    for name, unset in DERIVED.items():
        probe = dataclasses.replace(saved, **{name: unset})
        if getattr(resolve(probe, None), name) == getattr(saved, name):
            changes[name] = unset
    return dataclasses.replace(saved, **changes)


# What a checkpoint's networks and data are made of: a resumed run cannot change these.
FIXED_ON_RESUME = ("algo", "env", "hidden", "activation", "norm_obs", "norm_reward")
FIXED_ON_RESUME_SAC = ("buffer_size",)


def check_resume(saved: TrainConfig, new: TrainConfig) -> None:
    """Refuse, in one ConfigError naming them, the settings a resumed run changes that its
    checkpoint depends on (the networks' shapes, the env, the replay's layout). Everything
    else may change: total_steps, max_seconds, learning rates, logging, ..."""
    names = FIXED_ON_RESUME + (FIXED_ON_RESUME_SAC if saved.algo == "sac" else ())
    changed = [n for n in names if getattr(saved, n) != getattr(new, n)]
    if changed:
        what = ", ".join(
            f"{n} {format_value(getattr(saved, n))} -> {format_value(getattr(new, n))}"
            for n in changed
        )
        raise ConfigError(
            f"{changed[0]}: cannot change on resume, the checkpoint was made with it ({what}); "
            "resume with the run's settings, or start a new run"
        )


def preset_line(given: TrainConfig, resolved: TrainConfig) -> str | None:
    """The one line a run prints at its start: the preset and the values it filled for the
    algorithm (None if it filled none, as when a saved run resumes)."""
    filled = [
        name for name in PRESETS[resolved.preset][resolved.algo] if getattr(given, name) is None
    ]
    if not filled:
        return None
    why = f" (auto: {given.env})" if given.preset == "auto" else ""
    values = ", ".join(f"{name} {_shown(name, resolved)}" for name in filled)
    return f"asyncrl: preset {resolved.preset}{why} for {resolved.algo}: {values}"


def _shown(name: str, cfg: TrainConfig) -> str:
    value = format_value(getattr(cfg, name))
    if name == "threads_learner" and cfg.threads_learner == 0:
        return f"{value} (one per CPU: {learner_threads(cfg)})"
    return value


def format_value(value: Any) -> str:
    """A setting as one writes it on the command line: 3e-4 as 0.0003, [64, 64] as 64,64."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def preset_help(name: str) -> str:
    """What the presets set ``name`` to, for the CLI help: 'ppo: classic 0.98, mujoco 0.99;
    sac 0.99'."""
    parts = []
    for algo in ALGOS:
        by_preset = {
            p: t[algo].get(name, PRESET_DEFAULTS.get(name))
            for p, t in PRESETS.items()
            if name in t[algo] or name in PRESET_DEFAULTS
        }
        if not by_preset:
            continue
        shown = {format_value(v) for v in by_preset.values()}
        if len(shown) == 1:
            parts.append(f"{algo} {shown.pop()}")
        else:
            parts.append(
                f"{algo}: " + ", ".join(f"{p} {format_value(v)}" for p, v in by_preset.items())
            )
    return "; ".join(parts)


def validate(cfg: TrainConfig, family: str | None = None) -> None:
    """Reject settings that cannot work, one clear sentence each. Touches no env or process.
    Checks ``cfg`` as :func:`resolve` completes it (``family``: for preset auto)."""
    cfg = resolve(cfg, family)
    _check_kinds(cfg)
    for name in (
        "actors",
        "envs_per_actor",
        "rollout",
        "epochs",
        "minibatch_size",
        "total_steps",
        "keep_checkpoints",
    ):
        _need(getattr(cfg, name) >= 1, f"{name}: must be >= 1, got {getattr(cfg, name)}")
    _need(
        cfg.max_batches_waiting >= 0,
        f"max_batches_waiting: must be >= 0, got {cfg.max_batches_waiting}",
    )
    _need(cfg.hogwild >= 0, f"hogwild: must be >= 1 workers (or 0: off), got {cfg.hogwild}")
    _need(
        cfg.algo != "ppo" or cfg.minibatch_size <= cfg.ppo_batch or cfg.hogwild > 0,
        f"minibatch_size: {cfg.minibatch_size} is larger than the training batch of "
        f"{cfg.ppo_batch} samples (envs_per_actor x rollout"
        + (" x actors" if cfg.mode == "sync" else "")
        + "); lower it or raise the batch",
    )
    # env seeds derive from it and Gymnasium takes no negative seed (an actor would fail)
    _need(cfg.seed >= 0, f"seed: must be >= 0, got {cfg.seed}")
    _need(cfg.lr > 0, f"lr: must be > 0, got {cfg.lr}")
    _need(0 <= cfg.gamma <= 1, f"gamma: must be in [0, 1], got {cfg.gamma}")
    _need(0 <= cfg.gae_lambda <= 1, f"gae_lambda: must be in [0, 1], got {cfg.gae_lambda}")
    _need(cfg.clip_coef > 0, f"clip_coef: must be > 0, got {cfg.clip_coef}")
    for name in (
        "value_clip",
        "ent_coef",
        "vf_coef",
        "max_grad_norm",
        "checkpoint_every",
        "max_seconds",
        "log_every",
        "actor_restarts",
        "env_step_timeout",
        "reward_clip",
        "eval_every",
    ):
        _need(getattr(cfg, name) >= 0, f"{name}: must be >= 0, got {getattr(cfg, name)}")
    _need(cfg.eval_episodes >= 1, f"eval_episodes: must be >= 1, got {cfg.eval_episodes}")
    _need(cfg.vtrace_rho_bar > 0, f"vtrace_rho_bar: must be > 0, got {cfg.vtrace_rho_bar}")
    _need(cfg.vtrace_c_bar > 0, f"vtrace_c_bar: must be > 0, got {cfg.vtrace_c_bar}")
    _need(
        isinstance(cfg.hidden, list)
        and len(cfg.hidden) >= 1
        and all(isinstance(h, int) and h >= 1 for h in cfg.hidden),
        f"hidden: must be a non-empty list of positive layer sizes, got {cfg.hidden!r}",
    )
    _need(
        cfg.ray_cpus_per_actor > 0,
        f"ray_cpus_per_actor: must be > 0, got {cfg.ray_cpus_per_actor}",
    )
    if cfg.vectorizer == "envpool":
        import importlib.util

        _need(
            importlib.util.find_spec("envpool") is not None,
            "vectorizer: envpool is not installed: pip install 'asyncrl[envpool]'",
        )
        _need(
            cfg.on_env_error == "raise",
            "on_env_error: restart recreates one Gymnasium env in place; EnvPool's envs cannot "
            "be recreated one by one (use --vectorizer gymnasium, or --on-env-error raise)",
        )
    if cfg.backend == "ray" and not cfg.hogwild:
        import importlib.util

        _need(
            importlib.util.find_spec("ray") is not None,
            "backend: ray needs Ray, which is not installed: pip install 'asyncrl[ray]'",
        )
    if cfg.hogwild:
        _validate_hogwild(cfg)
    elif cfg.algo == "sac":
        _validate_sac(cfg)
    _need(
        cfg.threads_learner >= 0,
        f"threads_learner: must be >= 0 (0: one per CPU), got {cfg.threads_learner}",
    )
    _need(cfg.threads_actor >= 1, f"threads_actor: must be >= 1, got {cfg.threads_actor}")
    _validate_device(cfg)


# What one replay transition holds besides its observations; the replay buffer allocates with
# these dtypes, and for_env checks the buffer's total against the memory available.
REWARD_DTYPE = np.dtype(np.float32)
FLAG_DTYPE = np.dtype(np.bool_)


def transition_bytes(
    obs_shape: tuple[int, ...],
    obs_dtype: np.dtype | type | str,
    action_shape: tuple[int, ...],
    action_dtype: np.dtype | type | str = np.float32,
) -> int:
    """Bytes one replay transition takes (obs and next_obs, action, reward, two flags), known
    before any buffer is made."""
    obs = int(np.prod(obs_shape, dtype=np.int64)) * np.dtype(obs_dtype).itemsize
    act = int(np.prod(action_shape, dtype=np.int64)) * np.dtype(action_dtype).itemsize
    return 2 * obs + act + REWARD_DTYPE.itemsize + 2 * FLAG_DTYPE.itemsize


def available_memory() -> tuple[int, str]:
    """Bytes of memory a new allocation can have now, and where the figure comes from: Linux's
    MemAvailable (free plus reclaimable cache; free pages alone would undercount), lowered to
    what the cgroup's memory.max leaves, else free physical pages."""
    avail, source = None, ""
    try:
        with open("/proc/meminfo") as f:
            for row in f:
                if row.startswith("MemAvailable:"):
                    avail, source = int(row.split()[1]) * 1024, "MemAvailable"
    except OSError:
        pass
    if avail is None:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        source = "free physical pages"
    try:
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        used = int(open("/sys/fs/cgroup/memory.current").read())
        if limit != "max" and int(limit) - used < avail:
            avail, source = int(limit) - used, "cgroup memory.max"
    except (OSError, ValueError):
        pass
    return avail, source


def for_env(
    cfg: TrainConfig, spec: Any, given: TrainConfig | None = None
) -> tuple[TrainConfig, list[str]]:
    """The settings that depend on the env's observations, checked and resolved against its
    ``spec`` (an ``envs.EnvSpec``) before any process starts: ``encoder auto`` becomes cnn for
    uint8 images of rank 3, else mlp; SAC's replay buffer must fit in the memory available
    (a buffer of Atari frames at the default buffer_size would take ~56 GB); image
    observations are scaled by 1/255 in the network,
    so ``norm_obs`` is refused for them if the user set it and turned off, with a line, if a
    preset did. ``given``: the config as the user gave it (None: all settings given). Returns
    the config and the lines to print."""
    lines: list[str] = []
    shape, uint8 = tuple(spec.obs_shape), spec.obs_dtype == "uint8"
    image = uint8 and len(shape) == 3
    encoder = cfg.encoder
    if encoder == "auto":
        encoder = "cnn" if image else "mlp"
    if encoder == "cnn":
        _need(
            len(shape) == 3,
            f"encoder: cnn needs image observations of rank 3 (channels x height x width, or "
            f"height x width x channels); {cfg.env} has observations of shape {shape}",
        )
        _need(
            sorted(shape)[1] >= 5,
            f"encoder: cnn needs images of at least 5 x 5 pixels; {cfg.env} has {shape}",
        )
    changes: dict[str, Any] = {"encoder": encoder}
    if cfg.algo == "sac":  # the replay buffer is allocated whole, up front
        per = transition_bytes(shape, spec.obs_dtype, (spec.n_actions,))
        need = per * cfg.buffer_size
        avail, source = available_memory()
        _need(
            need <= avail,
            f"buffer_size: {cfg.buffer_size:,} transitions of {per:,} B need {need:,} B "
            f"({need / 1e9:,.2f} GB) of memory; {avail:,} B ({avail / 1e9:,.2f} GB) is available "
            f"({source}): lower --buffer-size",
        )
    if cfg.norm_obs and uint8:
        _need(
            given is not None and given.norm_obs is None,
            f"norm_obs: {cfg.env} has uint8 observations, which the network scales by 1/255 "
            "instead; leave --norm-obs off",
        )
        changes["norm_obs"] = False
        lines.append(
            f"asyncrl: norm_obs off: {cfg.env} has uint8 observations, which the network "
            f"scales by 1/255 instead (preset {cfg.preset} would normalise them)"
        )
    return dataclasses.replace(cfg, **changes), lines


def _validate_device(cfg: TrainConfig) -> None:
    """Refuse a device the learner could not use, before anything starts (torch is imported
    only for this question, so the config stays light for everything else)."""
    if cfg.device != "cuda":
        return
    _need(
        not cfg.hogwild,
        "device: Hogwild! workers train the network in shared CPU memory; --device cuda "
        "does not apply (use --device cpu)",
    )
    import torch

    _need(
        torch.cuda.is_available(),
        "device: cuda asked for, but this torch sees no CUDA device ("
        + ("no GPU or driver found" if torch.version.cuda else "it is a CPU-only build")
        + "); use --device cpu or auto",
    )


def worker_config(cfg: TrainConfig, worker: int) -> TrainConfig:
    """The config a Hogwild! worker runs: the synchronous single-actor loop on its own envs,
    with its own seeds. Its schedules (learning rate, clip) run over its share of the total step
    budget. (Here, not in runtime/hogwild.py, so that validation checks it without importing
    the runtime.)"""
    return dataclasses.replace(
        cfg,
        hogwild=0,
        actors=1,
        mode="sync",
        backend="inline",
        seed=cfg.seed + worker,
        total_steps=max(1, math.ceil(cfg.total_steps / cfg.hogwild)),
        progress=False,
        tensorboard=False,
        # "one per CPU" among the workers: each worker's share
        threads_learner=(
            learner_threads(cfg, cfg.hogwild) if cfg.threads_learner == 0 else cfg.threads_learner
        ),
    )


def _validate_hogwild(cfg: TrainConfig) -> None:
    """A Hogwild! worker runs the synchronous one-actor loop: check the settings it will run."""
    if cfg.sync_mode == "synced":
        _need(
            cfg.sync_every >= 1,
            f"sync_every: --sync-mode synced needs --sync-every >= 1 gradient steps between "
            f"syncs, got {cfg.sync_every}",
        )
    else:
        _need(
            cfg.sync_every == 0,
            f"sync_every: only --sync-mode synced syncs every N steps; shared syncs around every "
            f"step (got sync_every {cfg.sync_every} with sync_mode shared)",
        )
    _need(
        not cfg.save_replay,
        "save_replay: Hogwild! workers keep their own replay buffers, which checkpoints do not "
        "store; leave --save-replay off",
    )
    validate(worker_config(cfg, 0))


def _validate_sac(cfg: TrainConfig) -> None:
    _need(
        not cfg.norm_obs,
        "norm_obs: SAC here has no observation normaliser (its replay buffer keeps raw "
        "observations, and CleanRL's and SB3's SAC defaults learn MuJoCo without one); leave "
        "--norm-obs off",
    )
    _need(
        not cfg.norm_reward,
        "norm_reward: SAC replays rewards collected under many policy versions, so a scale "
        "that moves would have to be applied when they are sampled, which this SAC does not "
        "do (CleanRL and SB3 SAC do not scale rewards); leave --norm-reward off",
    )
    _need(cfg.replay_ratio > 0, f"replay_ratio: must be > 0, got {cfg.replay_ratio}")
    _need(cfg.batch_size >= 1, f"batch_size: must be >= 1, got {cfg.batch_size}")
    _need(cfg.buffer_size >= 1, f"buffer_size: must be >= 1, got {cfg.buffer_size}")
    _need(
        cfg.batch_size <= cfg.buffer_size,
        f"batch_size: {cfg.batch_size} is larger than the replay capacity buffer_size "
        f"{cfg.buffer_size}",
    )
    _need(cfg.learning_starts >= 1, f"learning_starts: must be >= 1, got {cfg.learning_starts}")
    _need(
        cfg.learning_starts <= cfg.buffer_size,
        f"learning_starts: {cfg.learning_starts} transitions do not fit in buffer_size "
        f"{cfg.buffer_size}",
    )
    _need(0 < cfg.tau <= 1, f"tau: must be in (0, 1], got {cfg.tau}")
    _need(cfg.policy_lr > 0, f"policy_lr: must be > 0, got {cfg.policy_lr}")
    _need(cfg.q_lr > 0, f"q_lr: must be > 0, got {cfg.q_lr}")
    _need(
        cfg.mode == "async" or cfg.rollout == 1,
        f"rollout: sync SAC updates after every batched env step, so rollout must be 1, "
        f"got {cfg.rollout}",
    )
    need = max(1.0, cfg.replay_ratio * cfg.insert_batch)
    _need(
        cfg.ratio_tolerance >= need,
        f"ratio_tolerance: {cfg.ratio_tolerance} gradient steps is too narrow for inserts of "
        f"{cfg.insert_batch} transitions at replay_ratio {cfg.replay_ratio}: it must be >= "
        f"{need:g} or neither side can make progress",
    )


def learner_threads(cfg: TrainConfig, learners: int = 1) -> int:
    """The torch threads a learner runs with: ``threads_learner``, or with 0 the CPUs this
    process may use (its affinity mask, which containers and ``taskset`` narrow) shared among
    ``learners`` (Hogwild! workers), at least one each."""
    if cfg.threads_learner:
        return cfg.threads_learner
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // learners)
