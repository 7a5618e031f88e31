"""Training settings: one dataclass, its defaults, and every error message about them.

The command line, the YAML ``--config`` file and ``config.yaml`` in a run directory are all views
of :class:`TrainConfig`. :func:`validate` explains an impossible setting in one line *before*
any environment is built or process started; :func:`check_env` does the same for what can only
be known by looking at the env (its id and its spaces).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ALGOS = ("ppo",)
MODES = ("sync", "async")
BACKENDS = ("inline", "process")
CORRECTIONS = ("none", "vtrace")
LR_SCHEDULES = ("constant", "linear")
ACTIVATIONS = ("tanh", "relu")


class ConfigError(ValueError):
    """A setting that cannot work; the message names the field and what is allowed."""


def _f(default: Any, help: str, **meta: Any) -> Any:
    """A dataclass field whose help text lives next to its default (it becomes the CLI help)."""
    if isinstance(default, list | dict):
        return field(
            default_factory=lambda: type(default)(default), metadata={"help": help, **meta}
        )
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class TrainConfig:
    # --- what to train
    algo: str = _f("ppo", "algorithm", choices=ALGOS)
    env: str = _f("CartPole-v1", "Gymnasium env id (any registered id, e.g. HalfCheetah-v5)")
    seed: int = _f(1, "seed of envs, networks and sampling")
    total_steps: int = _f(150_000, "env steps to train for (summed over all envs)")
    # --- topology
    mode: str = _f(
        "async", "sync: actors wait while the learner trains; async: they go on", choices=MODES
    )
    backend: str = _f(
        "process", "where actors run: inline (one process) or process", choices=BACKENDS
    )
    actors: int = _f(2, "N, the number of actors")
    envs_per_actor: int = _f(8, "K, the envs each actor steps as one batched env")
    rollout: int = _f(32, "T, env steps per env in one rollout")
    max_batches_waiting: int = _f(
        1, "async: filled batches that may wait for the learner before actors block (>= 1)"
    )
    # --- PPO
    lr: float = _f(5e-4, "Adam learning rate")
    lr_schedule: str = _f("linear", "learning-rate schedule over total_steps", choices=LR_SCHEDULES)
    epochs: int = _f(10, "passes over each training batch")
    minibatch_size: int = _f(256, "samples per gradient step")
    gamma: float = _f(0.98, "discount")
    gae_lambda: float = _f(0.8, "GAE lambda (also V-trace's lambda)")
    clip_coef: float = _f(0.2, "PPO ratio clip")
    clip_schedule: str = _f("constant", "ratio-clip schedule over total_steps", choices=LR_SCHEDULES)
    value_clip: float = _f(0.0, "clip the value update to +/- this around the old value (0: off)")
    ent_coef: float = _f(0.0, "entropy bonus coefficient")
    vf_coef: float = _f(0.5, "value loss coefficient")
    max_grad_norm: float = _f(0.5, "clip the global gradient norm to this (0: off)")
    norm_adv: bool = _f(True, "normalise advantages per minibatch")
    norm_obs: bool = _f(
        False, "running normalisation of observations (saved in checkpoints; MuJoCo wants it)"
    )
    hidden: list = _f([64, 64], "hidden layer sizes of the policy and value MLPs")
    activation: str = _f("tanh", "hidden activation", choices=ACTIVATIONS)
    correction: str = _f("none", "lag correction of value targets/advantages", choices=CORRECTIONS)
    vtrace_rho_bar: float = _f(1.0, "V-trace clip of importance weights in the TD errors")
    vtrace_c_bar: float = _f(1.0, "V-trace clip of the trace-cutting coefficients")
    compile: bool = _f(False, "torch.compile the learner's minibatch step")
    # --- run directory, logging, checkpoints
    run_dir: str = _f("", "run directory (default: runs/<env>-<mode>-<time>)")
    checkpoint_every: float = _f(60.0, "seconds between periodic checkpoints (0: only at exit)")
    progress: bool = _f(True, "show a live progress bar")
    tensorboard: bool = _f(True, "write TensorBoard scalars to the run directory")
    threads_learner: int = _f(1, "torch threads of the learner")
    threads_actor: int = _f(1, "torch threads of each actor")

    # ------------------------------------------------------------------ derived quantities
    @property
    def batch_size(self) -> int:
        """Samples the learner trains on per iteration: one actor's batch, or all of them."""
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


def from_dict(values: dict[str, Any], base: TrainConfig | None = None) -> TrainConfig:
    """Build a config from a mapping (YAML file, saved run), rejecting unknown keys by name."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(unknown)}; known settings: {', '.join(FIELDS)}"
        )
    return dataclasses.replace(base or TrainConfig(), **values)


def load_yaml(path: str | Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
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


def validate(cfg: TrainConfig) -> None:
    """Reject settings that cannot work, one clear sentence each. Touches no env or process."""
    for name, f in FIELDS.items():
        choices = f.metadata.get("choices")
        value = getattr(cfg, name)
        if choices and value not in choices:
            raise ConfigError(f"{name}: {value!r} is not one of {', '.join(choices)}")
        if f.type in ("int", "float") and not isinstance(value, int | float):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}: must be a finite number, got {value!r}")
    for name in ("actors", "envs_per_actor", "rollout", "epochs", "minibatch_size", "total_steps"):
        _need(getattr(cfg, name) >= 1, f"{name}: must be >= 1, got {getattr(cfg, name)}")
    _need(
        cfg.max_batches_waiting >= 1,
        f"max_batches_waiting: must be >= 1, got {cfg.max_batches_waiting}",
    )
    _need(
        cfg.minibatch_size <= cfg.batch_size,
        f"minibatch_size: {cfg.minibatch_size} is larger than the training batch of "
        f"{cfg.batch_size} samples (envs_per_actor x rollout"
        + (" x actors" if cfg.mode == "sync" else "")
        + "); lower it or raise the batch",
    )
    _need(cfg.lr > 0, f"lr: must be > 0, got {cfg.lr}")
    _need(0 <= cfg.gamma <= 1, f"gamma: must be in [0, 1], got {cfg.gamma}")
    _need(0 <= cfg.gae_lambda <= 1, f"gae_lambda: must be in [0, 1], got {cfg.gae_lambda}")
    _need(cfg.clip_coef > 0, f"clip_coef: must be > 0, got {cfg.clip_coef}")
    for name in ("value_clip", "ent_coef", "vf_coef", "max_grad_norm", "checkpoint_every"):
        _need(getattr(cfg, name) >= 0, f"{name}: must be >= 0, got {getattr(cfg, name)}")
    _need(cfg.vtrace_rho_bar > 0, f"vtrace_rho_bar: must be > 0, got {cfg.vtrace_rho_bar}")
    _need(cfg.vtrace_c_bar > 0, f"vtrace_c_bar: must be > 0, got {cfg.vtrace_c_bar}")
    _need(
        isinstance(cfg.hidden, list)
        and len(cfg.hidden) >= 1
        and all(isinstance(h, int) and h >= 1 for h in cfg.hidden),
        f"hidden: must be a non-empty list of positive layer sizes, got {cfg.hidden!r}",
    )
    _need(cfg.threads_learner >= 1, f"threads_learner: must be >= 1, got {cfg.threads_learner}")
    _need(cfg.threads_actor >= 1, f"threads_actor: must be >= 1, got {cfg.threads_actor}")
