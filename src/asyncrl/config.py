"""Run-level settings: what to train on, where actors run, faults, run directory and logging --
what a run is, whatever the algorithm. Each algorithm's hyperparameters are a dataclass in its
own folder; :mod:`asyncrl.settings` composes them with these into one ``TrainConfig``.

Settings whose good value depends on the algorithm and the kind of env default to ``None``, *not
set*, and a preset fills them; anything given wins, even when it equals the preset's value.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from asyncrl.system import cpus_allowed

MODES = ("sync", "async")
BACKENDS = ("inline", "thread", "process", "ray")
SYNC_MODES = ("shared", "synced")
ON_ENV_ERROR = ("raise", "restart")
ON_NONFINITE = ("raise", "skip")
DEVICES = ("cpu", "cuda", "auto")
PRECISIONS = ("fp32", "bf16")
ENCODERS = ("auto", "mlp", "cnn")
VECTORIZERS = ("gymnasium", "envpool")
POLICY_MAPPINGS = ("fixed", "random")
SAVED_FUNCTION = "function"  # a saved config's mark of a Python function given to a setting
POPULATION_INITS = ("given", "perturb")
OPPONENTS = ("self", "pool")
# the presets: one per env family (envs.env_family); generic for an env no family claims
FAMILIES = ("generic", "classic", "box2d", "mujoco", "atari", "pixels", "game")


class ConfigError(ValueError):
    """A setting that cannot work; the message names the field and what is allowed."""


def setting(default: Any, help: str, **meta: Any) -> Any:
    """A dataclass field whose help text lives next to its default (it becomes the CLI help)."""
    if isinstance(default, list | dict):
        return field(
            default_factory=lambda: type(default)(default), metadata={"help": help, **meta}
        )
    return field(default=default, metadata={"help": help, **meta})


def preset_setting(default: Any, help: str, **meta: Any) -> Any:
    """A setting a preset fills when it is not given; ``default`` is its value where the
    family's preset leaves it out. In a run's TrainConfig its default is None (not set)."""
    return setting(default, help, preset=True, **meta)


@dataclass(frozen=True)
class Warmup:
    """A preset's warm-up (``learning_starts``) that a short run scales down: ``steps``, or
    ``share`` of ``total_steps`` if that is fewer, so that no run spends most of its budget
    acting at random."""

    steps: int
    share: float = 0.01

    def of(self, total_steps: int) -> int:
        return max(1, min(self.steps, int(self.share * total_steps)))

    def __str__(self) -> str:
        return f"{self.steps} (at most {self.share:.0%} of total_steps)"


class Hyperparameters:
    """Base of an algorithm's hyperparameter dataclass."""

    @classmethod
    def of(cls, cfg: Settings) -> Any:
        """The algorithm's typed view of a run's settings."""
        return cls(**{name: getattr(cfg, name) for name in cls.__dataclass_fields__})


class ConfigMethods:
    """What every settings dataclass offers: its values as plain data, and saving them."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data: a Python function given to a setting (``policy_mapping``) is saved as
        ``function``, which a resumed run is given again."""
        values = dataclasses.asdict(self)  # type: ignore[call-overload]
        return {k: SAVED_FUNCTION if callable(v) else v for k, v in values.items()}

    def save(self, path: Path) -> None:
        path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @property
    def slots_per_actor(self) -> int:
        """Rollout buffers each actor owns: one in sync mode; in async mode, counted in batches
        of ``rollouts_per_batch``, one to write, up to ``max_batches_waiting`` waiting and one
        being trained on, so that only the waiting-batch bound, never a missing buffer, makes
        one actor wait."""
        if self.mode == "sync":  # type: ignore[attr-defined]
            return 1
        return (self.max_batches_waiting + 2) * self.rollouts_per_batch  # type: ignore


@dataclass
class RunConfig(ConfigMethods):
    # --- what to train
    algo: str = setting("ppo", "algorithm")
    env: str = setting(
        "CartPole-v1",
        "Gymnasium env id (any registered id, e.g. HalfCheetah-v5; module:EnvId imports the "
        "module that registers it), or a PettingZoo env: pettingzoo:<module> (its "
        "parallel_env() or env()) or pettingzoo:<module>:<function> (a function that makes it)",
    )
    vectorizer: str = setting(
        "gymnasium",
        "what steps an actor's K envs: gymnasium (a SyncVectorEnv in the actor's process) or "
        "envpool (EnvPool's C++ batched envs, for MuJoCo v5 and Atari ids; "
        "pip install 'asyncrl[envpool]')",
        choices=VECTORIZERS,
    )
    atari_preprocessing: bool = setting(
        True,
        "ALE ids: the standard preprocessing (no-op starts, frame skip 4, 84x84 grayscale, 4 "
        "stacked frames; for training also episodic life and reward clipping, while the logged "
        "return stays the game's score); off: the raw env",
    )
    preset: str = setting(
        "auto",
        "where unset settings take their values: generic (the field's defaults, for any env), "
        "classic (classic control), box2d (Box2D), mujoco (MuJoCo and PyBullet robots), atari "
        "(ALE ids), pixels (other image observations), game (PettingZoo two-player "
        "turn-based games with action masks), or auto (chosen from the env's family; values "
        "tuned on one env only for that env)",
        choices=("auto", *FAMILIES),
    )
    seed: int = setting(1, "seed of envs, networks and sampling")
    total_steps: int = preset_setting(
        150_000,
        "env steps to train for (summed over all envs; --opponents pool: the learner's moves "
        "only, about half of a two-player game's)",
    )
    max_seconds: float = setting(
        0.0, "also stop after this many seconds of wall-clock time (0: no limit)"
    )
    # --- topology
    mode: str = preset_setting(
        "async", "sync: actors wait while the learner trains; async: they go on", choices=MODES
    )
    backend: str = setting(
        "process",
        "where actors run: inline (one process, in turn), thread, process, or ray (Ray actors "
        "on a Ray cluster's nodes; pip install 'asyncrl[ray]')",
        choices=BACKENDS,
    )
    ray_address: str = setting(
        "",
        "--backend ray: the cluster to join, auto or HOST:PORT ('': start a local Ray instance "
        "on loopback for this run)",
    )
    ray_cpus_per_actor: float = setting(1.0, "--backend ray: CPUs Ray reserves for each actor")
    actors: int = preset_setting(2, "N, the number of actors")
    envs_per_actor: int = preset_setting(8, "K, the envs each actor steps as one batched env")
    rollout: int = preset_setting(32, "T, env steps per env in one rollout")
    max_batches_waiting: int = preset_setting(
        1,
        "async: filled batches that may wait for the learner ahead of an actor's last one "
        "before that actor blocks (>= 0; 0: an actor starts its next rollout only once the "
        "learner has taken its last one, the least lag async allows)",
    )
    rollouts_per_batch: int = setting(
        0,
        "async: filled rollouts one learner batch takes, oldest first (each one actor's K envs "
        "x T steps, a population's policy its envs of them). 0: auto, P for a population of P "
        "policies in async mode (each learner's batch then as large as a one-policy run's, at "
        "its number of iterations), else 1 (Hogwild! too). Sync: 1 (its batch is one rollout "
        "of every actor)",
    )
    # --- populations and Population-Based Training (docs: Guides, populations)
    policies: int = setting(
        1,
        "P, policies trained in one run by one fleet of actors, each with its own learner (a "
        "process of its own on the process and ray backends when P > 1)",
    )
    policy_mapping: str = setting(
        "fixed",
        "which policy acts on each env: fixed (env k of every actor: policy k mod P; a "
        "multi-agent env's agent in seat i: policy i mod P) or random (a policy drawn at every "
        "episode start; async mode). From Python also a function of (agent id, episode) to a "
        "policy index, for a multi-agent env (async mode)",
        choices=POLICY_MAPPINGS,
        callable=True,
    )
    policies_to_train: list | None = setting(
        None,
        "the policies whose learners update, as indices, comma-separated (in YAML: a list); "
        "the others act but never change",
        shown="every policy",
    )
    population: dict = setting(
        {},
        "per-policy values of the algorithm's settings, one list of P values per setting (in "
        "YAML: lr: [3e-4, 1e-7]; saved resolved in config.yaml)",
        cli=False,
    )
    population_init: str = setting(
        "given",
        "given (every policy starts with the values given, or its own from a list) or perturb "
        "(policies 1..P-1 start from PBT's perturbation of the mutable values given)",
        choices=POPULATION_INITS,
    )
    pbt: bool = setting(
        False,
        "Population-Based Training: every --pbt-period env steps of a policy, one in the bottom "
        "--pbt-fraction copies a top one's weights, optimizer and settings and perturbs them",
    )
    pbt_period: int = setting(50_000, "PBT: env steps of a policy between its exploit checks")
    pbt_fraction: float = setting(
        0.25, "PBT: the bottom and top fraction of the population by return (at least 1 each)"
    )
    pbt_resample: float = setting(
        0.25,
        "PBT: probability that a mutable setting is drawn anew within its bounds instead of "
        "multiplied by 0.8 or 1.2",
    )
    # --- self-play on a two-player game (docs: Guides, multi-agent)
    opponents: str = preset_setting(
        "self",
        "a multi-agent game's opponents: self (one policy plays every seat, against its current "
        "self) or pool (in each game one seat is the learner, the others a frozen snapshot of "
        "its past drawn from a pool at the game's start; with --policies P, a learning policy "
        "drawn among the P against one of the P or a snapshot of any of them)",
        choices=OPPONENTS,
    )
    pool_size: int = preset_setting(
        8, "--opponents pool: snapshots the pool holds (the oldest leaves; at least P)"
    )
    snapshot_every: int = preset_setting(
        10, "--opponents pool: a policy's updates between its snapshots (at least; >= 1)"
    )
    pool_random: float = preset_setting(
        0.0,
        "--opponents pool: the share of games whose opponent is a uniform random player over "
        "the legal moves instead of a snapshot (in [0, 1); needs an action mask)",
    )
    snapshot_win_rate: float = setting(
        0.0,
        "--opponents pool: a policy's snapshot joins only once it has won this share of its "
        "games against the pool since its last one (0: every --snapshot-every updates)",
    )
    # --- faults
    actor_restarts: int = setting(
        -1,
        "dead, crashed or hung actors (or Hogwild! workers) replaced per run before the run "
        "ends with an error (-1: auto, 3 x actors; 0: the first fault ends the run)",
    )
    on_env_error: str = setting(
        "raise",
        "an env whose step or reset raises: raise (end the run naming actor and env) or "
        "restart (recreate that env in place, end its episode as a truncation, count it)",
        choices=ON_ENV_ERROR,
    )
    on_nonfinite: str = setting(
        "raise",
        "a NaN or inf in what an actor collected (observations, rewards, ...) or in a gradient "
        "step: raise (end the run naming the actor, env and step, or the update) or skip (drop "
        "that rollout or step, and count it)",
        choices=ON_NONFINITE,
    )
    env_step_timeout: float = setting(
        60.0,
        "seconds one batched env step may take before its actor counts as hung and is "
        "replaced (0: off)",
    )
    # --- Hogwild!
    hogwild: int = setting(
        0,
        "M Hogwild! worker processes, each an actor and learner of K envs training one shared "
        "network (0: off, the actor-learner pipeline; --mode and --backend do not apply)",
    )
    sync_mode: str = setting(
        "shared",
        "Hogwild!: shared (read the global network before every gradient step, add the change "
        "after it, no lock) or synced (push and pull every --sync-every steps)",
        choices=SYNC_MODES,
    )
    sync_every: int = setting(
        0, "Hogwild! synced: gradient steps between syncs with the global network"
    )
    # --- networks
    hidden: list = preset_setting(
        [64, 64],
        "hidden layer sizes of the networks (with --encoder cnn: the linear layers after the "
        "convolutions)",
    )
    encoder: str = setting(
        "auto",
        "what reads the observations: mlp (flattened), cnn (the Nature-DQN convolutions; "
        "images under 36 pixels a side get two 3x3 layers), or auto (cnn for uint8 images of "
        "rank 3, mlp otherwise)",
        choices=ENCODERS,
    )
    # --- run directory, logging, checkpoints
    run_dir: str = setting("", "run directory (default: runs/<env>-<mode>-<time>)")
    checkpoint_every: float = setting(
        60.0, "seconds between periodic checkpoints (0: only at exit)"
    )
    keep_checkpoints: int = setting(
        2,
        "checkpoints kept in the run directory, newest first: an older one is there to fall "
        "back to if the newest turns out damaged (>= 1)",
    )
    log_every: int = setting(
        0,
        "training iterations folded into one metrics row (metrics.jsonl, TensorBoard); "
        "0: every iteration for PPO, every 1,000 env steps for off-policy algorithms",
    )
    progress: bool = setting(True, "show a live progress bar")
    tensorboard: bool = setting(True, "write TensorBoard scalars to the run directory")
    # --- experiment tracking on Weights & Biases (docs: Guides, experiment tracking)
    wandb: bool = setting(
        False,
        "also log the run to Weights & Biases: its config, metrics rows, evaluations and "
        "summary; a resumed run goes on in the same W&B run (pip install 'asyncrl[wandb]'; "
        "WANDB_MODE=offline keeps it on this machine)",
    )
    wandb_project: str = setting("asyncrl", "--wandb: the W&B project")
    wandb_entity: str = setting(
        "", "--wandb: the W&B entity (user or team)", shown="your W&B default entity"
    )
    wandb_group: str = setting("", "--wandb: the W&B group the run is in", shown="none")
    wandb_tags: list = setting(
        [],
        "--wandb: the W&B run's tags, comma-separated (in YAML: a list)",
        items=str,
        shown="none",
    )
    wandb_name: str = setting("", "--wandb: the W&B run's name", shown="the run directory's name")
    threads_learner: int = preset_setting(
        1, "torch threads of the learner (0: as many as the CPUs this process may use)"
    )
    threads_actor: int = setting(1, "torch threads of each actor")
    device: str = setting(
        "cpu",
        "where the learner's networks and updates run: cpu, cuda, or auto (cuda if there is "
        "one); actors always act on the CPU and policy versions travel as CPU tensors",
        choices=DEVICES,
    )
    precision: str = setting(
        "fp32",
        "the learners' arithmetic: fp32, or bf16 (bfloat16 autocast for the matrix products of "
        "PPO's and SAC's updates; weights, optimizer state and losses' reductions stay float32; "
        "refused where the CPU or GPU has no native bfloat16); never derived on",
        choices=PRECISIONS,
    )
    # --- evaluation during training
    eval_every: int = setting(
        0,
        "env steps between evaluations during training: deterministic episodes on separate "
        "envs in a background process, logged as eval/* rows; the best policy so far is kept "
        "as checkpoint-best.pt (0: off)",
    )
    eval_episodes: int = setting(10, "episodes per evaluation during training")


class Settings(RunConfig):
    """A run's settings as the layers under :mod:`asyncrl.settings` see them: the run's own,
    typed here, and every algorithm's hyperparameters, which that module composes with them
    into the one dataclass a run holds (``TrainConfig``, a subclass of this) and which an
    algorithm reads by name. Lower layers annotate with this type, so that none of them
    imports the composition above it."""

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...  # an algorithm's hyperparameter


# run-level settings derived from others when left at these values (see settings.resolve)
RUN_DERIVED = {"actor_restarts": -1, "log_every": 0, "rollouts_per_batch": 0}
# what a checkpoint's networks and data are made of, whatever the algorithm
RUN_FIXED_ON_RESUME = (
    "algo", "env", "hidden", "encoder", "atari_preprocessing", "vectorizer", "policies",
    "opponents", "pool_size",
)  # fmt: skip


def kind_of(hint: Any) -> type:
    """The type a setting's values have: ``float`` for ``float | None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return typing.get_origin(hint) or hint


def as_field_type(name: str, kind: type, value: Any) -> Any:
    """A number as its field's type: people write ``total_steps: 1e6``, which YAML reads as a
    float, and a run must not count steps in floats; ``2.5`` steps is refused, not rounded."""
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


def need(ok: bool, msg: str) -> None:
    """Raise a ConfigError saying ``msg`` unless ``ok``."""
    if not ok:
        raise ConfigError(msg)


def format_value(value: Any) -> str:
    """A setting as one writes it on the command line: 3e-4 as 0.0003, [64, 64] as 64,64."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def validate_run(cfg: Settings) -> None:
    """Refuse run-level settings that cannot work, one clear sentence each (``cfg``
    resolved). Touches no env or process."""
    for name in ("actors", "envs_per_actor", "rollout", "total_steps", "keep_checkpoints"):
        need(getattr(cfg, name) >= 1, f"{name}: must be >= 1, got {getattr(cfg, name)}")
    need(
        cfg.max_batches_waiting >= 0,
        f"max_batches_waiting: must be >= 0, got {cfg.max_batches_waiting}",
    )
    need(
        cfg.rollouts_per_batch >= 1,
        f"rollouts_per_batch: must be >= 1 (or 0: auto), got {cfg.rollouts_per_batch}",
    )
    need(
        cfg.rollouts_per_batch == 1 or cfg.mode == "async",
        f"rollouts_per_batch: sync mode's batch is one rollout of every actor, so it takes only "
        f"1, got {cfg.rollouts_per_batch}; use --mode async",
    )
    need(cfg.hogwild >= 0, f"hogwild: must be >= 1 workers (or 0: off), got {cfg.hogwild}")
    # env seeds derive from it and Gymnasium takes no negative seed (an actor would fail)
    need(cfg.seed >= 0, f"seed: must be >= 0, got {cfg.seed}")
    for name in (
        "checkpoint_every",
        "max_seconds",
        "log_every",
        "actor_restarts",
        "env_step_timeout",
        "eval_every",
    ):
        need(getattr(cfg, name) >= 0, f"{name}: must be >= 0, got {getattr(cfg, name)}")
    need(cfg.eval_episodes >= 1, f"eval_episodes: must be >= 1, got {cfg.eval_episodes}")
    need(
        isinstance(cfg.hidden, list)
        and len(cfg.hidden) >= 1
        and all(isinstance(h, int) and h >= 1 for h in cfg.hidden),
        f"hidden: must be a non-empty list of positive layer sizes, got {cfg.hidden!r}",
    )
    need(
        cfg.ray_cpus_per_actor > 0,
        f"ray_cpus_per_actor: must be > 0, got {cfg.ray_cpus_per_actor}",
    )
    if cfg.vectorizer == "envpool":
        import importlib.util

        need(
            importlib.util.find_spec("envpool") is not None,
            "vectorizer: envpool is not installed: pip install 'asyncrl[envpool]'",
        )
        need(
            cfg.on_env_error == "raise",
            "on_env_error: restart recreates one Gymnasium env in place; EnvPool's envs cannot "
            "be recreated one by one (use --vectorizer gymnasium, or --on-env-error raise)",
        )
    if cfg.wandb:
        need_wandb()
    _validate_wandb(cfg)
    if cfg.backend == "ray" and not cfg.hogwild:
        import importlib.util

        need(
            importlib.util.find_spec("ray") is not None,
            "backend: ray needs Ray, which is not installed: pip install 'asyncrl[ray]'",
        )
    if cfg.hogwild:
        _validate_hogwild(cfg)
    _validate_population(cfg)
    _validate_pool(cfg)
    need(
        cfg.threads_learner >= 0,
        f"threads_learner: must be >= 0 (0: one per CPU), got {cfg.threads_learner}",
    )
    need(cfg.threads_actor >= 1, f"threads_actor: must be >= 1, got {cfg.threads_actor}")
    _validate_device(cfg)
    _validate_precision(cfg)


def need_wandb() -> None:
    """Refuse ``--wandb`` where the wandb package is not installed (it is an extra)."""
    import importlib.util

    need(
        importlib.util.find_spec("wandb") is not None,
        "wandb: logging to Weights & Biases needs the wandb package, which is not installed: "
        "pip install 'asyncrl[wandb]'",
    )


def _validate_wandb(cfg: Settings) -> None:
    need(
        isinstance(cfg.wandb_tags, list)
        and all(isinstance(t, str) and 1 <= len(t) <= 64 for t in cfg.wandb_tags),
        f"wandb_tags: must be a list of tags of 1 to 64 characters each (W&B's limit), got "
        f"{cfg.wandb_tags!r}",
    )
    need(cfg.wandb_project != "", "wandb_project: must name a W&B project, got ''")


def _validate_population(cfg: Settings) -> None:
    """The run-level settings of a population (the per-policy values: settings.validate)."""
    need(cfg.policies >= 1, f"policies: must be >= 1, got {cfg.policies}")
    need(
        not (cfg.hogwild and cfg.policies > 1),
        "policies: Hogwild! workers train one shared network; a population needs the "
        "actor-learner pipeline (--hogwild 0)",
    )
    need(
        cfg.policy_mapping == "fixed" or cfg.mode == "async",
        "policy_mapping: sync mode takes only the fixed mapping (every learner trains on its "
        "own envs' samples of the same iteration); use --mode async for random",
    )
    need(
        cfg.policy_mapping != SAVED_FUNCTION,
        "policy_mapping: this run's agents were mapped by a Python function, which its "
        "config.yaml cannot hold; give it again: asyncrl.train(resume=..., policy_mapping=fn) "
        "(else fixed or random)",
    )
    if cfg.policies_to_train is not None:
        chosen = cfg.policies_to_train
        need(
            bool(chosen)
            and all(isinstance(p, int) and not isinstance(p, bool) for p in chosen)
            and all(0 <= p < cfg.policies for p in chosen)
            and len(set(chosen)) == len(chosen),
            f"policies_to_train: {chosen!r}; allowed: distinct policy indices "
            f"0..{cfg.policies - 1} (--policies P), at least one",
        )
    if cfg.policy_mapping == "fixed":
        need(
            cfg.envs_per_actor >= cfg.policies,
            f"envs_per_actor: the fixed mapping gives env k of every actor to policy k mod P, "
            f"so {cfg.policies} policies need envs_per_actor >= {cfg.policies}, got "
            f"{cfg.envs_per_actor}",
        )
    need(
        not cfg.pbt or cfg.policies >= 2,
        f"pbt: Population-Based Training needs --policies >= 2, got {cfg.policies}",
    )
    need(cfg.pbt_period >= 1, f"pbt_period: must be >= 1 env steps, got {cfg.pbt_period}")
    need(
        0 < cfg.pbt_fraction <= 0.5,
        f"pbt_fraction: must be in (0, 0.5], got {cfg.pbt_fraction}",
    )
    need(0 <= cfg.pbt_resample <= 1, f"pbt_resample: must be in [0, 1], got {cfg.pbt_resample}")
    need(
        isinstance(cfg.population, dict),
        f"population: must be a mapping of setting: list of values, got {cfg.population!r}",
    )


def _validate_pool(cfg: Settings) -> None:
    """Self-play against a pool: its own numbers (what the env must be: settings.env_spec)."""
    need(cfg.pool_size >= 1, f"pool_size: must be >= 1 snapshots, got {cfg.pool_size}")
    need(
        cfg.snapshot_every >= 1,
        f"snapshot_every: must be >= 1 learner updates, got {cfg.snapshot_every}",
    )
    need(
        0 <= cfg.pool_random < 1,
        f"pool_random: a share of games, in [0, 1) (1 would leave no snapshot a game), "
        f"got {cfg.pool_random}",
    )
    need(
        0 <= cfg.snapshot_win_rate <= 1,
        f"snapshot_win_rate: must be in [0, 1], got {cfg.snapshot_win_rate}",
    )


def _validate_hogwild(cfg: Settings) -> None:
    need(
        cfg.rollouts_per_batch == 1,
        f"rollouts_per_batch: Hogwild! workers each train on their own rollouts, no learner "
        f"takes batches; got {cfg.rollouts_per_batch} (use --hogwild 0)",
    )
    if cfg.sync_mode == "synced":
        need(
            cfg.sync_every >= 1,
            f"sync_every: --sync-mode synced needs --sync-every >= 1 gradient steps between "
            f"syncs, got {cfg.sync_every}",
        )
    else:
        need(
            cfg.sync_every == 0,
            f"sync_every: only --sync-mode synced syncs every N steps; shared syncs around every "
            f"step (got sync_every {cfg.sync_every} with sync_mode shared)",
        )


def _validate_device(cfg: Settings) -> None:
    """Refuse a device the learner could not use, before anything starts (torch is imported
    only for this question, so the config stays light for everything else)."""
    if cfg.device != "cuda":
        return
    need(
        not cfg.hogwild,
        "device: Hogwild! workers train the network in shared CPU memory; --device cuda "
        "does not apply (use --device cpu)",
    )
    import torch

    need(
        torch.cuda.is_available(),
        "device: cuda asked for, but this torch sees no CUDA device ("
        + ("no GPU or driver found" if torch.version.cuda else "it is a CPU-only build")
        + "); use --device cpu or auto",
    )


def _validate_precision(cfg: Settings) -> None:
    """bf16 where the learner's device has no native bfloat16 would be emulated, slower than
    fp32: refused before anything starts."""
    if cfg.precision != "bf16":
        return
    from asyncrl.system import bf16_support

    ok, why = bf16_support(cfg.device)
    need(
        ok,
        f"precision: bf16 needs native bfloat16 on the learner's device ({cfg.device}; "
        f"{why}); use --precision fp32 (allowed: {', '.join(PRECISIONS)})",
    )


def worker_config(cfg: Settings, worker: int) -> Settings:
    """The config a Hogwild! worker runs: the synchronous single-actor loop on its own envs,
    with its own seeds. Its schedules (learning rate, clip) run over its share of the total step
    budget."""
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
        wandb=False,  # the run's shell logs the run, not each worker
        # "one per CPU" among the workers: each worker's share
        threads_learner=(
            learner_threads(cfg, cfg.hogwild) if cfg.threads_learner == 0 else cfg.threads_learner
        ),
    )


def learner_process_config(cfg: Settings) -> Settings:
    """The config a population's learner runs with in a process of its own (P learner
    processes train at once): "one per CPU" (``threads_learner`` 0) is its share of the CPUs,
    as a Hogwild! worker's is, so that P of them do not take every CPU each; its training loop
    and its optimizer thread both read it. A number given stays as it is."""
    if cfg.threads_learner:
        return cfg
    return dataclasses.replace(cfg, threads_learner=learner_threads(cfg, cfg.policies))


def learner_threads(cfg: Settings, learners: int = 1) -> int:
    """The torch threads a learner runs with: ``threads_learner``, or with 0 the CPUs this
    process may use shared among ``learners`` (Hogwild! workers, a population's learner
    processes), at least one each."""
    if cfg.threads_learner:
        return cfg.threads_learner
    return max(1, cpus_allowed() // learners)
