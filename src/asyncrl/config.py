"""Training settings: one dataclass, its defaults, and every error message about them.

The command line, the YAML ``--config`` file and ``config.yaml`` in a run directory are all views
of :class:`TrainConfig`. :func:`validate` explains an impossible setting in one line *before*
any environment is built or process started; :func:`check_env` does the same for what can only
be known by looking at the env (its id and its spaces).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ALGOS = ("ppo", "sac")
MODES = ("sync", "async")
BACKENDS = ("inline", "thread", "process")
CORRECTIONS = ("none", "vtrace")
LR_SCHEDULES = ("constant", "linear")
SYNC_MODES = ("shared", "synced")
ACTIVATIONS = ("tanh", "relu")
ON_ENV_ERROR = ("raise", "restart")
DEVICES = ("cpu", "cuda", "auto")


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
    max_seconds: float = _f(
        0.0, "also stop after this many seconds of wall-clock time (0: no limit)"
    )
    # --- topology
    mode: str = _f(
        "async", "sync: actors wait while the learner trains; async: they go on", choices=MODES
    )
    backend: str = _f(
        "process",
        "where actors run: inline (one process, in turn), thread, or process",
        choices=BACKENDS,
    )
    actors: int = _f(2, "N, the number of actors")
    envs_per_actor: int = _f(8, "K, the envs each actor steps as one batched env")
    rollout: int = _f(0, "T, env steps per env in one rollout (0: auto, PPO 32, SAC 1)")
    max_batches_waiting: int = _f(
        1, "async: filled batches that may wait for the learner before actors block (>= 1)"
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
    lr: float = _f(5e-4, "Adam learning rate")
    lr_schedule: str = _f("linear", "learning-rate schedule over total_steps", choices=LR_SCHEDULES)
    epochs: int = _f(10, "passes over each training batch")
    minibatch_size: int = _f(256, "samples per gradient step")
    gamma: float = _f(0.98, "discount")
    gae_lambda: float = _f(0.8, "GAE lambda (also V-trace's lambda)")
    clip_coef: float = _f(0.2, "PPO ratio clip")
    clip_schedule: str = _f(
        "constant", "ratio-clip schedule over total_steps", choices=LR_SCHEDULES
    )
    value_clip: float = _f(0.0, "clip the value update to +/- this around the old value (0: off)")
    ent_coef: float = _f(0.0, "entropy bonus coefficient")
    vf_coef: float = _f(0.5, "value loss coefficient")
    max_grad_norm: float = _f(0.5, "clip the global gradient norm to this (0: off)")
    norm_adv: bool = _f(True, "normalise advantages per minibatch")
    norm_obs: bool = _f(
        False, "running normalisation of observations (saved in checkpoints; MuJoCo wants it)"
    )
    hidden: list = _f(
        [], "hidden layer sizes of the networks (empty: auto, PPO 64,64, SAC 256,256)"
    )
    activation: str = _f("tanh", "PPO: hidden activation", choices=ACTIVATIONS)
    correction: str = _f("none", "lag correction of value targets/advantages", choices=CORRECTIONS)
    vtrace_rho_bar: float = _f(1.0, "V-trace clip of importance weights in the TD errors")
    vtrace_c_bar: float = _f(1.0, "V-trace clip of the trace-cutting coefficients")
    compile: bool = _f(False, "torch.compile the learner's minibatch step")
    # --- SAC
    replay_ratio: float = _f(1.0, "SAC: gradient steps per env step, independent of N and K")
    ratio_tolerance: float = _f(
        0.0, "SAC async: how far (in gradient steps) either side may run ahead (0: auto)"
    )
    learning_starts: int = _f(1000, "SAC: transitions collected (randomly) before updates start")
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
    threads_learner: int = _f(1, "torch threads of the learner")
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
    kind = FIELDS[name].type
    if isinstance(value, bool):  # a bool is an int to Python, never a number to a user
        return value
    if kind == "int" and isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(f"{name}: expected a whole number, got {value!r}")
        return int(value)
    if kind == "float" and isinstance(value, int):
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


def resolve(cfg: TrainConfig) -> TrainConfig:
    """Fill the settings whose default depends on the algorithm (saved resolved, so a resumed
    run never changes meaning when a default changes)."""
    auto = {"ppo": {"rollout": 32, "hidden": [64, 64]}, "sac": {"rollout": 1, "hidden": [256, 256]}}
    fill = auto.get(cfg.algo, {})
    changes = {}
    if cfg.rollout == 0 and "rollout" in fill:
        changes["rollout"] = fill["rollout"]
    if cfg.hidden == [] and "hidden" in fill:
        changes["hidden"] = fill["hidden"]
    if cfg.actor_restarts == -1:
        changes["actor_restarts"] = 3 * (cfg.hogwild or cfg.actors)
    if cfg.log_every == 0:
        # A SAC iteration is one batched env step: a row each would be a line per env step.
        per_iteration = cfg.actors * cfg.envs_per_actor * (cfg.rollout or fill["rollout"])
        changes["log_every"] = -(-1_000 // per_iteration) if cfg.algo == "sac" else 1
    if cfg.algo == "sac" and cfg.ratio_tolerance == 0:
        # twice the narrowest window that can make progress (see RateLimiter)
        changes["ratio_tolerance"] = 2.0 * max(
            1.0, cfg.replay_ratio * cfg.envs_per_actor * (cfg.rollout or fill["rollout"])
        )
    return dataclasses.replace(cfg, **changes)


def validate(cfg: TrainConfig) -> None:
    """Reject settings that cannot work, one clear sentence each. Touches no env or process."""
    cfg = resolve(cfg)
    for name, f in FIELDS.items():
        choices = f.metadata.get("choices")
        value = getattr(cfg, name)
        if choices and value not in choices:
            raise ConfigError(f"{name}: {value!r} is not one of {', '.join(choices)}")
        if f.type in ("int", "float") and not isinstance(value, int | float):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        if f.type == "bool" and not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}: must be a finite number, got {value!r}")
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
        cfg.max_batches_waiting >= 1,
        f"max_batches_waiting: must be >= 1, got {cfg.max_batches_waiting}",
    )
    _need(cfg.hogwild >= 0, f"hogwild: must be >= 1 workers (or 0: off), got {cfg.hogwild}")
    _need(
        cfg.algo != "ppo" or cfg.minibatch_size <= cfg.ppo_batch or cfg.hogwild > 0,
        f"minibatch_size: {cfg.minibatch_size} is larger than the training batch of "
        f"{cfg.ppo_batch} samples (envs_per_actor x rollout"
        + (" x actors" if cfg.mode == "sync" else "")
        + "); lower it or raise the batch",
    )
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
    if cfg.hogwild:
        _validate_hogwild(cfg)
    elif cfg.algo == "sac":
        _validate_sac(cfg)
    _need(cfg.threads_learner >= 1, f"threads_learner: must be >= 1, got {cfg.threads_learner}")
    _need(cfg.threads_actor >= 1, f"threads_actor: must be >= 1, got {cfg.threads_actor}")
    _validate_device(cfg)


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


def _validate_hogwild(cfg: TrainConfig) -> None:
    """A Hogwild! worker runs the synchronous one-actor loop: check the settings it will run."""
    from asyncrl.runtime.hogwild import worker_config

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
