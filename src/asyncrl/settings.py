"""Every setting of a run as one dataclass, :data:`TrainConfig`: the run-level settings of
:class:`asyncrl.config.RunConfig` and each registered algorithm's hyperparameters, composed from
the registry -- and what is done with them: presets, resolving, checking, resuming.

The command line, the YAML ``--config`` file, ``config.yaml`` in a run directory and the Python
API's keywords are all views of TrainConfig. A setting several algorithms declare is one field.
A setting left unset (None) is filled by :func:`resolve`: from the chosen preset (``auto``: the
env's family), else from the algorithm's own default; settings the algorithm does not read take
another algorithm's values, so that a resolved config holds no unset value. A run saves its
config resolved: resuming it never changes its meaning.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.algos import REGISTRY, algorithm, algorithms
from asyncrl.config import (
    FAMILIES,
    RUN_DERIVED,
    RUN_FIXED_ON_RESUME,
    SAVED_FUNCTION,
    ConfigError,
    RunConfig,
    Settings,
    Warmup,
    as_field_type,
    format_value,
    kind_of,
    learner_threads,
    load_yaml,
    validate_run,
    worker_config,
)
from asyncrl.learning.population import envs_of_policy, perturb

if TYPE_CHECKING:
    from asyncrl.core import Algorithm
    from asyncrl.envs import EnvSpec

RUN = "run"  # the owner of run-level settings in the composed fields' metadata


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _declarations() -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """(owner, field, type) of every declared setting: the run's, then each algorithm's."""
    hints = typing.get_type_hints(RunConfig)
    for f in dataclasses.fields(RunConfig):
        yield RUN, f, hints[f.name]
    for algo in algorithms():
        hints = typing.get_type_hints(algo.hyperparameters)
        for f in dataclasses.fields(algo.hyperparameters):
            yield algo.name, f, hints[f.name]


def _compose() -> type:
    declared: dict[str, list[tuple[str, dataclasses.Field, Any]]] = {}
    for owner, f, hint in _declarations():
        declared.setdefault(f.name, []).append((owner, f, hint))
    fields = []
    for name, decls in declared.items():
        kinds = {kind_of(hint) for _, _, hint in decls}
        if len(kinds) > 1:
            raise TypeError(f"setting {name} is declared with different types: {kinds}")
        owner, first, hint = decls[0]
        defaults = {o: _default(f) for o, f, _ in decls}
        preset = any(f.metadata.get("preset") for _, f, _ in decls)
        values = list(defaults.values())
        unset = preset or any(v != values[0] for v in values)
        meta = dict(first.metadata)
        meta.update(owners=tuple(defaults), defaults=defaults, preset=preset)
        if name == "algo":
            meta["choices"] = tuple(REGISTRY)
        if unset:
            field = dataclasses.field(default=None, metadata=meta)
            hint = hint | None
        elif isinstance(values[0], list | dict):
            value = values[0]
            field = dataclasses.field(default_factory=lambda v=value: type(v)(v), metadata=meta)
        else:
            field = dataclasses.field(default=values[0], metadata=meta)
        fields.append((name, hint, field))
    cls = dataclasses.make_dataclass("TrainConfig", fields, bases=(Settings,))
    cls.__module__ = __name__  # where pickle (spawned processes, Ray) finds it
    return cls


TrainConfig = _compose()
TrainConfig.__doc__ = "Every setting of a run (see :mod:`asyncrl.settings`)."

FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
KINDS: dict[str, type] = {n: kind_of(t) for n, t in typing.get_type_hints(TrainConfig).items()}
PRESET_FIELDS = tuple(name for name, f in FIELDS.items() if f.metadata["preset"])
# env family -> algorithm -> the values its preset gives settings left unset
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    family: {a.name: dict(a.presets.get(family, {})) for a in algorithms()} for family in FAMILIES
}
# env family -> algorithm -> (the env they were tuned on, values that override the family's)
TUNED: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    family: {a.name: a.tuned[family] for a in algorithms() if family in a.tuned}
    for family in FAMILIES
}
PRESET_CHOICES = ("auto", *FAMILIES)
DERIVED: dict[str, Any] = {**RUN_DERIVED}
for _algo in algorithms():
    DERIVED.update(_algo.derive_markers)


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def _bare(env: str) -> str:
    return env.split(":", 1)[-1]  # "module:EnvId" names EnvId


def tuned_env(preset: str, algo: str, env: str | None) -> str | None:
    """The env whose tuned values ``preset`` gives ``algo`` here: for ``env`` if they were
    tuned on it, for any env if ``env`` is None (the preset named, not chosen by auto)."""
    tuned = TUNED[preset].get(algo)
    if tuned is None or (env is not None and _bare(env) != tuned[0]):
        return None
    return tuned[0]


def unset_value(name: str, preset: str, algo: str, tuned: bool = False) -> Any:
    """What an unset ``name`` becomes for ``algo`` under ``preset`` (``tuned``: with the values
    the preset's family was tuned with on one env): the preset's value, else the algorithm's
    (or the run's) default; a setting the algorithm does not read takes the first other
    algorithm's, so that a resolved config holds no unset value. A :class:`Warmup` is
    returned as such: :func:`resolve` scales it to the run's budget."""
    meta = FIELDS[name].metadata
    own = dict(PRESETS[preset][algo])
    if tuned and algo in TUNED[preset]:
        own.update(TUNED[preset][algo][1])
    if name in own:
        return _copy(own[name])
    defaults = meta["defaults"]
    for owner in (algo, RUN):
        if owner in defaults:
            return _copy(defaults[owner])
    for other in REGISTRY:
        if name in PRESETS[preset][other]:
            return _copy(PRESETS[preset][other][name])
    return _copy(next(iter(defaults.values())))


def preset_values(preset: str, algo: str, tuned: bool = False) -> dict[str, Any]:
    """Every preset-governed setting for ``algo`` under ``preset``, as a run of the preset's
    own budget has them."""
    values = {name: unset_value(name, preset, algo, tuned) for name in PRESET_FIELDS}
    return {n: _warmup(n, v, algo, values["total_steps"]) for n, v in values.items()}


def _warmup(name: str, value: Any, algo: str, budget: int) -> Any:
    """A :class:`Warmup` as a number: scaled to the budget for an algorithm that reads it."""
    if not isinstance(value, Warmup):
        return value
    return value.of(budget) if algo in FIELDS[name].metadata["owners"] else value.steps


def plugin(cfg: TrainConfig) -> Algorithm:
    """The algorithm ``cfg.algo`` names: the one place a name is looked up in the registry. A
    run looks it up once (:func:`prepare_settings`) and hands the object on."""
    return algorithm(cfg.algo)


def resolve(
    cfg: TrainConfig,
    family: str | None = None,
    agree: bool = True,
    algo: Algorithm | None = None,
    agents: int = 1,
) -> TrainConfig:
    """Fill what was left unset (see the module doc; ``family``: the env's, from
    ``asyncrl.envs.env_family``, for preset ``auto``), make the values filled agree with the
    others (``agree``; see :func:`agreed`; ``agents``: the env's agents, once it was made),
    then the settings derived from others. A resolved config resolves to itself (its preset is
    a name, not auto). ``algo``: ``cfg.algo``'s plug-in, if the caller holds it."""
    lists = {n: getattr(cfg, n) for n in FIELDS if n != "population" and _listed(n, cfg)}
    if lists:  # per-policy values given to TrainConfig itself: as from_dict takes them
        cfg = from_dict(lists, cfg)
    check_kinds(cfg, FIELDS, KINDS)  # the derived settings below compute with them
    preset = cfg.preset
    if preset == "auto":
        if family not in FAMILIES:
            raise ValueError(
                "resolve: preset 'auto' needs the env's family: "
                "resolve(cfg, asyncrl.envs.env_family(cfg.env))"
            )
        preset = family
    tuned = tuned_env(preset, cfg.algo, cfg.env if cfg.preset == "auto" else None) is not None
    changes: dict[str, Any] = {"preset": preset}
    for name in FIELDS:
        if getattr(cfg, name) is None:
            changes[name] = unset_value(name, preset, cfg.algo, tuned)
    if cfg.rollouts_per_batch == 0:  # a population's batches: each as large as one policy's
        batches = changes.get("mode", cfg.mode) == "async" and not cfg.hogwild
        changes["rollouts_per_batch"] = cfg.policies if batches else 1
    budget = changes.get("total_steps", cfg.total_steps)
    changes.update((n, _warmup(n, v, cfg.algo, budget)) for n, v in changes.items())
    cfg = dataclasses.replace(cfg, **changes)
    algo = algo or plugin(cfg)
    if agree:
        filled = frozenset(changes) - {"preset"}
        cfg = dataclasses.replace(cfg, **agreed(cfg, filled, algo, agents))
    changes = {}
    if cfg.actor_restarts == -1:
        changes["actor_restarts"] = 3 * (cfg.hogwild or cfg.actors)
    changes.update(algo.derived(cfg))
    return _drawn_population(dataclasses.replace(cfg, **changes), algo)


@dataclass(frozen=True)
class Prepared:
    """A run as :func:`prepare_settings` leaves it: the settings as given and resolved, the
    env's spec, the algorithm (the runtime is handed this object, never its name) and the
    lines the run prints at its start (the preset's, then for_env's)."""

    given: TrainConfig
    cfg: TrainConfig
    spec: EnvSpec
    algo: Algorithm
    lines: list[str]
    # what the runtime is told once rather than asking the settings again: each policy's
    # settings (one policy: the run's), whether its learners get a process each, whether a
    # policy's slots hold every row with its own steps marked, and the torch threads of the
    # learner in the run's own process; whether each policy's checkpoints get a folder
    policies: tuple[TrainConfig, ...] = ()
    in_processes: bool = False
    marks_own: bool = False
    threads: int = 1
    policy_folders: bool = False


def prepare_settings(given: TrainConfig) -> Prepared:
    """``given`` resolved, validated and fitted to its env's spec in one pass, before any
    process, segment or file exists: the algorithm looked up once, the settings resolved once
    (twice for an env whose images or game change its family). A setting that cannot work raises
    ConfigError here."""
    from asyncrl.rundir import policy_folders  # (torch: not imported with settings)

    algo = plugin(given)
    cfg, _, spec = resolve_for_env(given, algo)
    cfg, env_lines = for_env(cfg, spec, given, algo)  # what depends on the observations
    line = preset_line(given, cfg, algo, spec.agents)
    lines = ([line] if line else []) + env_lines
    return Prepared(
        given, cfg, spec, algo, lines,
        policies=tuple(policy_configs(cfg)),
        in_processes=learners_in_processes(cfg),
        marks_own=marks_own(cfg, spec),
        policy_folders=policy_folders(cfg.policies),
        threads=learner_threads(cfg),
    )  # fmt: skip


# the opponent pool's own settings: read only with --opponents pool
POOL_SETTINGS = ("pool_size", "snapshot_every", "pool_random", "snapshot_win_rate")


def refuse_unread_pool_settings(given: TrainConfig, cfg: TrainConfig) -> None:
    """A pool's setting given to a run that plays no pool (``cfg``: ``given`` resolved) is
    refused, not ignored. Only a value other than the one the run's preset fills counts as
    given: a saved run's config.yaml holds the filled ones, and stays a template."""
    if cfg.opponents == "pool":
        return
    for name in POOL_SETTINGS:
        value = getattr(given, name)
        if value is not None and value != unset_value(name, cfg.preset, cfg.algo):
            raise ConfigError(
                f"{name}: a setting of the opponent pool, which this run does not play "
                f"(opponents {cfg.opponents}), so {format_value(value)} would change nothing; "
                f"allowed: --opponents pool, or {name} left unset"
            )


def resolve_for_env(
    given: TrainConfig, algo: Algorithm | None = None
) -> tuple[TrainConfig, str, EnvSpec]:
    """``given`` resolved and validated with the family of its env (for preset ``auto``), that
    family and the env's spec: the one place a run (:func:`prepare_settings`) and a study
    (compare, tune, sweep: to resolve its variants of ``given`` on the same env) decide it.
    From the env's id first, then, the env made once, from its spec: image observations
    outside ALE are pixels, a two-player turn-based game with action masks the game family,
    and ``given`` is resolved again with that and the env's agents (whole games of seats)."""
    from asyncrl.envs import check_env, env_family

    algo = algo or plugin(given)
    family = env_family(given.env)
    cfg = resolve(given, family, algo=algo)
    try:
        _checked(cfg, algo)
        # the env made once (no preset sets how it is made: atari_preprocessing, vectorizer)
        made = check_env(cfg.env, cfg.atari_preprocessing, cfg.vectorizer)
        # images or a game (known once the env is made), or seats short of whole games:
        # resolved again with those
        known = env_family(cfg.env, made)
        if known != family or cfg.envs_per_actor % made.agents:
            family = known
            cfg = resolve(given, family, algo=algo, agents=made.agents)
            _checked(cfg, algo)
        return cfg, family, checked_spec(cfg, made, algo)
    except ConfigError as e:
        raise _named_preset(e, given, cfg) from None


def _named_preset(e: ConfigError, given: TrainConfig, cfg: TrainConfig) -> ConfigError:
    """A refusal of a value the preset the user named filled (not one given): said as the
    preset's, so that the line names what the user wrote."""
    name, _, why = str(e).partition(": ")
    if given.preset == "auto" or name not in FIELDS or getattr(given, name) is not None:
        return e
    flag = "--" + name.replace("_", "-")
    return ConfigError(
        f"preset: {given.preset} sets {name} {format_value(getattr(cfg, name))}, and {why}; "
        f"give {flag} or another preset"
    )


def agreed(
    cfg: TrainConfig, filled: frozenset[str], algo: Algorithm, agents: int = 1
) -> dict[str, Any]:
    """New values of settings in ``filled`` (a preset's or a default's, not the user's): those a
    switch gives (``Algorithm.switch_values``; also in place of values tuned on the env, which
    were tuned without it), then
    those that would contradict others of ``cfg``, so that only settings given can conflict:
    the fixed mapping's envs per actor, at least one per policy (SAC's presets have one env),
    and on an env of ``agents`` agents a multiple of them (rounded up: whole games);
    a population's opponents, itself (its agents go to its policies by --policy-mapping; a
    preset's pool would override that, so a population plays a pool only when it is asked
    for); then the algorithm's own (see Algorithm.agree)."""
    changes = algo.switch_values(cfg, filled)[1]
    cfg = dataclasses.replace(cfg, **changes)
    if "envs_per_actor" in filled and acting_mapping(cfg) == "fixed":
        if cfg.envs_per_actor < cfg.policies:
            changes["envs_per_actor"] = cfg.policies
    seats = changes.get("envs_per_actor", cfg.envs_per_actor)
    if "envs_per_actor" in filled and seats % agents:
        changes["envs_per_actor"] = -(-seats // agents) * agents
    if "opponents" in filled and cfg.opponents == "pool" and cfg.policies > 1:
        changes["opponents"] = "self"
    own = algo.agree(dataclasses.replace(cfg, **changes), filled)
    return {**changes, **own}


POPULATION_SEED = 104_729  # added to the run's seed: the draws of --population-init perturb


def _drawn_population(cfg: TrainConfig, algo: Algorithm) -> TrainConfig:
    """``--population-init perturb``: the mutable settings without per-policy values get them,
    policy 0 the value given and every other a perturbation of it, drawn from the run's seed
    (once: a resolved config holds the lists, and resolving it again changes nothing)."""
    if cfg.policies < 2 or cfg.population_init != "perturb":
        return cfg
    mutable = {
        n: b
        for n, b in algo.mutable.items()
        if n not in cfg.population and getattr(cfg, n) is not None
    }
    if not mutable:
        return cfg
    import numpy as np

    rng = np.random.default_rng(cfg.seed + POPULATION_SEED)
    given = {n: getattr(cfg, n) for n in mutable}
    draws = [perturb(given, mutable, rng, cfg.pbt_resample) for _ in range(cfg.policies - 1)]
    population = dict(cfg.population)
    for n in mutable:
        population[n] = [given[n]] + [d[n] for d in draws]
    return dataclasses.replace(cfg, population=population)


def policy_config(cfg: TrainConfig, policy: int) -> TrainConfig:
    """The settings policy ``policy``'s learner trains with: its own values of the population's
    settings, its own seed (seed + policy) and its share of the envs and of the step budget --
    ``envs_per_actor`` is the envs of each actor it acts on (all K under the random mapping,
    whose slots mark its steps), ``total_steps`` its share, over which its schedules run. One
    policy's is the run's config itself. A multi-agent env's seats: every policy's slots hold
    every seat (its own steps marked), and its share is 1/P, whatever the mapping (how many
    moves a seat makes is the game's)."""
    if cfg.policies == 1:
        return cfg
    from asyncrl.envs.pettingzoo import is_pettingzoo

    K, P = cfg.envs_per_actor, cfg.policies
    if cfg.policy_mapping == "fixed" and not is_pettingzoo(cfg.env):
        envs = envs_of_policy(K, P, policy)
        share = cfg.total_steps * envs / (K * 1.0)
    else:
        envs, share = K, cfg.total_steps / P
    own = {n: v[policy] for n, v in cfg.population.items()}
    return dataclasses.replace(
        cfg,
        **own,
        seed=cfg.seed + policy,
        envs_per_actor=envs,
        total_steps=max(1, round(share)),
    )


def acting_mapping(cfg: TrainConfig) -> str | Callable[[str, int], int]:
    """The policy mapping a run's actors follow: ``policy_mapping`` (fixed, random, or a user's
    function of (agent id, episode)), but fixed for one policy (a random draw among one policy
    is that policy, and its slots mark no steps)."""
    return cfg.policy_mapping if cfg.policies > 1 else "fixed"


def trains(cfg: TrainConfig, policy: int) -> bool:
    """Whether policy ``policy``'s learner updates: it is in ``policies_to_train``, or that is
    unset (every policy trains)."""
    return cfg.policies_to_train is None or policy in cfg.policies_to_train


def marks_own(cfg: TrainConfig, spec: EnvSpec) -> bool:
    """Whether a policy's slot holds every row of its actors, the steps it acted marked ``own``:
    under the random mapping, and for a multi-agent env's seats, which wait their turn."""
    return acting_mapping(cfg) == "random" or spec.agents > 1


def learners_in_processes(cfg: TrainConfig) -> bool:
    """Whether a run's learners each get a process: a population on a backend whose slots and
    policy stores are shared memory (process; ray, whose driver-side slots then are)."""
    return cfg.policies > 1 and cfg.backend in ("process", "ray")


def policy_configs(cfg: TrainConfig) -> list[TrainConfig]:
    return [policy_config(cfg, p) for p in range(cfg.policies)]


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


def validate(cfg: TrainConfig, family: str | None = None, algo: Algorithm | None = None) -> None:
    """Reject settings that cannot work, one clear sentence each. Touches no env or process.
    Checks ``cfg`` as :func:`resolve` completes it (``family``: for preset auto)."""
    algo = algo or plugin(cfg)
    _checked(resolve(cfg, family, algo=algo), algo)


def _checked(cfg: TrainConfig, algo: Algorithm) -> None:
    """:func:`validate` of a resolved ``cfg``: the run's own settings (``config.validate_run``),
    then what only the composed settings and the algorithm can say."""
    validate_run(cfg)
    precisions = getattr(algo, "precisions", ("fp32",))
    if cfg.precision not in precisions:
        raise ConfigError(
            f"precision: {cfg.algo} trains in {' or '.join(precisions)} (got {cfg.precision})"
        )
    _refuse_others_settings(cfg)
    _validate_population(cfg, algo)
    if cfg.policies == 1:
        algo.validate(cfg)
    for p, pcfg in enumerate(policy_configs(cfg) if cfg.policies > 1 else []):
        try:
            algo.validate(pcfg)
        except ConfigError as e:  # the setting named first, as every refusal does
            name, _, why = str(e).partition(": ")
            raise ConfigError(f"{name}: policy {p}: {why}") from None
    if cfg.hogwild:  # a worker runs the synchronous one-actor loop: check the one it runs
        _checked(worker_config(cfg, 0), algo)


def _validate_population(cfg: TrainConfig, algo: Algorithm) -> None:
    """Per-policy values: of the algorithm's own settings, one per policy, and not of those
    the acting networks' shapes or the replay's layout depend on."""
    fixed = set(RUN_FIXED_ON_RESUME) | set(algo.fixed_on_resume)
    if acting_mapping(cfg) != "fixed" and not algo.masked_slots:
        raise ConfigError(
            f"policy_mapping: random gives an env's episodes to different policies within one "
            f"rollout, which {cfg.algo}'s replay cannot split; use the fixed mapping"
        )
    if cfg.population and cfg.policies == 1:
        raise ConfigError(
            f"{next(iter(cfg.population))}: a list of per-policy values needs --policies > 1"
        )
    for name, values in cfg.population.items():
        if name not in FIELDS:
            raise ConfigError(f"population: unknown setting {meant(name)}")
        owners = FIELDS[name].metadata["owners"]
        if cfg.algo not in owners or RUN in owners:
            raise ConfigError(
                f"{name}: one value for the whole run, not per policy (only {cfg.algo}'s own "
                "settings may differ between policies)"
            )
        if name in fixed:
            raise ConfigError(
                f"{name}: must be the same for every policy (the acting networks or the replay "
                "are made with it)"
            )
        if not (isinstance(values, list) and len(values) == cfg.policies):
            raise ConfigError(
                f"{name}: {len(values) if isinstance(values, list) else values!r} per-policy "
                f"values for --policies {cfg.policies}; give one value, or a list of "
                f"{cfg.policies}"
            )


def _refuse_others_settings(cfg: TrainConfig) -> None:
    """A setting declared ``owners_only`` (one that changes what is trained, as a recurrent
    core) given to an algorithm that does not declare it is refused, not silently ignored."""
    for name, f in FIELDS.items():
        owners = f.metadata["owners"]
        if not f.metadata.get("owners_only") or cfg.algo in owners:
            continue
        default = f.metadata["defaults"][owners[0]]
        if getattr(cfg, name) != default:
            raise ConfigError(
                f"{name}: {cfg.algo} has no such setting (only {', '.join(owners)}); leave it at "
                f"{format_value(default)}"
            )


def env_spec(cfg: TrainConfig, algo: Algorithm | None = None) -> EnvSpec:
    """The spec of ``cfg.env`` as its actors make it, checked against what ``cfg.algo`` can
    train: a ConfigError naming the setting (and the algorithms that can) otherwise."""
    from asyncrl.envs import check_env

    return checked_spec(cfg, check_env(cfg.env, cfg.atari_preprocessing, cfg.vectorizer), algo)


def checked_spec(cfg: TrainConfig, spec: EnvSpec, algo: Algorithm | None = None) -> EnvSpec:
    """:func:`env_spec` of an env already made (``spec``: ``asyncrl.envs.check_env``'s)."""
    why = (algo or plugin(cfg)).accepts(spec)
    if why is not None:
        others = [a.name for a in algorithms() if a.accepts(spec) is None]
        use = f" (use --algo {' or '.join(others)})" if others else ""
        raise ConfigError(f"algo: {why}{use}")
    if callable(cfg.policy_mapping) and spec.agents == 1:
        raise ConfigError(
            f"policy_mapping: a function maps the agents of a multi-agent env "
            f"(pettingzoo:<module>) to policies; {cfg.env} has one agent (allowed: fixed or random)"
        )
    if spec.agents > 1:  # what a multi-agent env cannot use yet
        from asyncrl.envs.pettingzoo import check_seats

        if cfg.policies > 1 and not (algo or plugin(cfg)).masked_slots:
            raise ConfigError(
                f"policies: a population's games give one env's seats to different policies, "
                f"which {cfg.algo}'s replay cannot split; it trains one policy on {cfg.env} "
                "(allowed: 1)"
            )
        spec = check_seats(cfg, spec)  # each policy's spaces too, where the agents' differ
    if cfg.opponents == "pool":
        _check_pool(cfg, spec)
    return spec


def _check_pool(cfg: TrainConfig, spec: EnvSpec) -> None:
    """Self-play against a pool needs seats to give the learner and its snapshots."""
    if spec.agents < 2:
        raise ConfigError(
            f"opponents: pool plays the learner against its past snapshots, which needs a "
            f"multi-agent env (pettingzoo:<module>); {cfg.env} has one agent (allowed: self)"
        )
    if cfg.pool_random > 0 and not spec.action_mask:
        raise ConfigError(
            f"pool_random: the random player draws among the legal moves of an action mask, "
            f"which {cfg.env} has none of; allowed: 0 (got {cfg.pool_random})"
        )
    if cfg.policies < 2:
        return
    # a population's pool (runtime.mapping.PoolSeats draws each game's players)
    if callable(cfg.policy_mapping):
        raise ConfigError(
            "policy_mapping: --opponents pool draws each game's players itself (a policy for "
            "the learning seat, a policy or a snapshot against it); allowed: fixed or random"
        )
    if cfg.pool_size < cfg.policies:
        raise ConfigError(
            f"pool_size: a population's pool starts with a snapshot of each of its "
            f"{cfg.policies} policies; allowed: at least {cfg.policies} (got {cfg.pool_size})"
        )


def for_env(
    cfg: TrainConfig,
    spec: EnvSpec,
    given: TrainConfig | None = None,
    algo: Algorithm | None = None,
) -> tuple[TrainConfig, list[str]]:
    """The settings that depend on the env's observations, checked and resolved against its
    ``spec`` before any process starts: ``encoder auto`` becomes cnn for uint8 images of rank
    3, else mlp; then the algorithm's own (a replay buffer that must fit in memory, a
    normaliser images do not need). ``given``: the config as the user gave it (None: all
    settings given). Returns the config and the lines to print."""
    shape = tuple(spec.obs_shape)
    image = spec.obs_dtype == "uint8" and len(shape) == 3
    encoder = cfg.encoder
    if encoder == "auto":
        encoder = "cnn" if image else "mlp"
    if encoder == "cnn":
        if len(shape) != 3:
            raise ConfigError(
                f"encoder: cnn needs image observations of rank 3 (channels x height x width, or "
                f"height x width x channels); {cfg.env} has observations of shape {shape}"
            )
        if sorted(shape)[1] < 5:
            raise ConfigError(
                f"encoder: cnn needs images of at least 5 x 5 pixels; {cfg.env} has {shape}"
            )
    cfg = dataclasses.replace(cfg, encoder=encoder)
    changes, lines = (algo or plugin(cfg)).for_env(cfg, spec, given)
    return dataclasses.replace(cfg, **changes), lines


def check_resume(saved: TrainConfig, new: TrainConfig) -> None:
    """Refuse, in one ConfigError naming them, the settings a resumed run changes that its
    checkpoint depends on (the networks' shapes, the env, the replay's layout). Everything
    else may change: total_steps, max_seconds, learning rates, logging, ..."""
    names = RUN_FIXED_ON_RESUME + plugin(saved).fixed_on_resume
    changed = [n for n in names if getattr(saved, n) != getattr(new, n)]
    if saved.encoder == "auto":  # a run saved before encoders were resolved: as auto chose
        changed = [n for n in changed if n != "encoder"]
    if changed:
        what = ", ".join(
            f"{n} {format_value(getattr(saved, n))} -> {format_value(getattr(new, n))}"
            for n in changed
        )
        raise ConfigError(
            f"{changed[0]}: cannot change on resume, the checkpoint was made with it ({what}); "
            "resume with the run's settings, or start a new run"
        )


def preset_line(
    given: TrainConfig, resolved: TrainConfig, algo: Algorithm | None = None, agents: int = 1
) -> str | None:
    """The one line a run prints at its start: the preset and the values it filled for the
    algorithm, those tuned on one env apart and named with it (None if it filled none, as when
    a saved run resumes; ``agents``: the env's)."""
    algo_name = resolved.algo
    env = tuned_env(resolved.preset, algo_name, given.env if given.preset == "auto" else None)
    tuned = TUNED[resolved.preset][algo_name][1] if env else {}
    table = {**PRESETS[resolved.preset][algo_name], **tuned}
    if "total_steps" in table:  # the budget last, after values the tuned ones add
        table["total_steps"] = table.pop("total_steps")
    unset = frozenset(name for name in FIELDS if getattr(given, name) is None)
    owner = algo or plugin(resolved)
    unagreed = resolve(given, resolved.preset, agree=False, algo=owner)
    made_to_agree = agreed(unagreed, unset, owner, agents) if unset else {}
    switch, by_switch = owner.switch_values(unagreed, unset)
    filled = [
        name
        for name in table
        if name in unset and name not in made_to_agree and _read_in_mode(name, resolved)
    ]
    if not filled and not made_to_agree:
        return None
    why = f" (auto: {given.env})" if given.preset == "auto" else ""

    def values(names: list[str]) -> str:
        return ", ".join(f"{name} {_shown(name, resolved)}" for name in names)

    plain, by_env = [n for n in filled if n not in tuned], [n for n in filled if n in tuned]
    parts = [values(plain)] if plain else []  # each part only where it names a value
    if by_env:
        parts.append(f"tuned on {env}: " + values(by_env))
    if by_switch:  # e.g. --recurrent lstm's rate and sequences
        parts.append(f"for {switch}: " + values([n for n in made_to_agree if n in by_switch]))
    agreeing = [n for n in made_to_agree if n not in by_switch]
    if agreeing:  # e.g. a minibatch of whole recurrent sequences
        whole = f" (whole games of {agents} agents)" if agents > 1 else ""
        parts.append(
            "derived to agree with the others: "
            + ", ".join(values([n]) + (whole if n == "envs_per_actor" else "") for n in agreeing)
        )
    return f"asyncrl: preset {resolved.preset}{why} for {algo_name}: " + "; ".join(parts)


ASYNC_ONLY = ("max_batches_waiting",)  # settings a sync run does not read


def _read_in_mode(name: str, cfg: TrainConfig) -> bool:
    """Whether ``cfg``'s mode reads setting ``name`` (the start-up line shows only those)."""
    return cfg.mode == "async" or name not in ASYNC_ONLY


def _shown(name: str, cfg: TrainConfig) -> str:
    value = format_value(getattr(cfg, name))
    if name == "threads_learner" and cfg.threads_learner == 0:
        return f"{value} (one per CPU: {learner_threads(cfg)})"
    return value


def preset_help(name: str) -> str:
    """What the presets set ``name`` to, for the CLI help: 'ppo: generic 0.99, classic 0.99
    (CartPole-v1 0.98), ...; sac 0.99'."""
    owners = FIELDS[name].metadata["owners"]
    parts = []
    for algo in REGISTRY:
        if algo not in owners and RUN not in owners:
            continue
        shown = {}
        for p in FAMILIES:
            text = _help_value(unset_value(name, p, algo))
            env = tuned_env(p, algo, None)
            if env and name in TUNED[p][algo][1]:
                text += f" ({env} {_help_value(TUNED[p][algo][1][name])})"
            shown[p] = text
        if len(set(shown.values())) == 1:
            parts.append(f"{algo} {shown[FAMILIES[0]]}")
        else:
            parts.append(f"{algo}: " + ", ".join(f"{p} {v}" for p, v in shown.items()))
    return "; ".join(parts)


def _help_value(value: Any) -> str:
    return str(value) if isinstance(value, Warmup) else format_value(value)


def check_kinds(cfg: TrainConfig, fields: dict[str, Any], kinds: dict[str, type]) -> None:
    """Every setting given is of its kind (unset ones are the presets' to fill), and so is each
    of a population's per-policy values, named with its policy."""
    # the per-policy values first: policy 0's also stands as the setting's own value
    for name, values in (getattr(cfg, "population", None) or {}).items():
        if name not in fields or not isinstance(values, list):
            continue  # refused by name where the population is checked
        for p, value in enumerate(values):
            _check_kind(name, fields[name], kinds[name], value, f"policy {p}: ")
    for name, f in fields.items():
        value = getattr(cfg, name)
        if value is None and (f.metadata.get("preset") or f.default is None):
            continue
        _check_kind(name, f, kinds[name], value)


def _check_kind(name: str, f: Any, kind: type, value: Any, policy: str = "") -> None:
    """``value`` of setting ``name`` (of type ``kind``) refused unless it is one; ``policy``
    names the policy whose value it is ("policy 1: "), as refusals of per-policy values do."""
    if f.metadata.get("callable") and (callable(value) or value == SAVED_FUNCTION):
        return  # a Python function (from the API), or a saved run's mark of one: see validate
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{name}: {policy}{value!r} is not one of {', '.join(choices)}")
    # a bool is an int to Python, never a number to a user (see as_field_type)
    if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ConfigError(f"{name}: {policy}expected a number, got {value!r}")
    if kind is bool and not isinstance(value, bool):
        raise ConfigError(f"{name}: {policy}expected true or false, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name}: {policy}must be a finite number, got {value!r}")
    if value is None:  # a per-policy list holds no unset value (str and list settings)
        raise ConfigError(f"{name}: {policy}expected a {kind.__name__}, got None")


# the peers' names (SB3, CleanRL, RLlib, Sample Factory) for settings asyncrl names otherwise
PEER_NAMES = {
    "learning_rate": "lr",
    "total_timesteps": "total_steps",
    "env_id": "env",
    "n_envs": "envs_per_actor",
    "num_envs": "envs_per_actor",
    "n_steps": "rollout",
    "num_steps": "rollout",
    "n_epochs": "epochs",
    "update_epochs": "epochs",
    "num_workers": "actors",
    "num_env_runners": "actors",
    "clip_range": "clip_coef",
    "target_network_frequency": "target_every",
}


def nearest_name(name: str, known: Iterable[str]) -> str | None:
    """The name among ``known`` (snake_case) a user most likely meant by ``name``: asyncrl's for
    a peer's name, else the closest spelling, else None."""
    name, known = name.replace("-", "_"), list(known)
    if PEER_NAMES.get(name) in known:
        return PEER_NAMES[name]
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return near[0] if near else None


def meant(name: str) -> str:
    """``name`` as an unknown setting is named in an error: with the setting it likely meant."""
    near = nearest_name(name, FIELDS)
    return f"{name} (did you mean {near}?)" if near else name


def from_dict(values: dict[str, Any], base: TrainConfig | None = None) -> TrainConfig:
    """Build a config from a mapping (YAML file, saved run), rejecting unknown keys by name.
    Numbers take the type of their field (``total_steps: 1e6`` is an int; 2.5 steps is
    refused, not rounded)."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(map(meant, unknown))}; "
            f"known settings: {', '.join(FIELDS)}"
        )
    base = base or TrainConfig()
    values, population = _per_policy(values, base)
    values = {name: as_field_type(name, KINDS[name], value) for name, value in values.items()}
    if "env" in values:  # a Python function (asyncrl.train(env=fn)) is kept by its name
        from asyncrl.envs.pettingzoo import env_name

        values["env"] = env_name(values["env"])
    cfg = dataclasses.replace(base, **values, population=population)
    # policy 0's value stands for the setting where the run reads one value (the presets' line)
    return dataclasses.replace(cfg, **{n: v[0] for n, v in population.items() if v})


def _listed(name: str, cfg: TrainConfig) -> bool:
    """Whether ``cfg`` holds a list of per-policy values for ``name``."""
    value = getattr(cfg, name)
    if not isinstance(value, list):
        return False
    return KINDS[name] is not list or (bool(value) and all(isinstance(v, list) for v in value))


def _per_policy(
    values: dict[str, Any], base: TrainConfig
) -> tuple[dict[str, Any], dict[str, list]]:
    """A list of values for a setting that takes one (``lr: [3e-4, 1e-7]``) gives each policy
    its own (the config's ``population``); a single value given replaces the per-policy
    values of ``base``; a ``population`` given (a saved config) is taken as it is."""
    values = dict(values)
    given = values.pop("population", None) or {}
    if not isinstance(given, dict):
        raise ConfigError(f"population: must be a mapping of setting: list, got {given!r}")
    population = dict(base.population)
    for name, value in list(values.items()):
        kind = KINDS[name]
        per_policy = isinstance(value, list) and (
            kind is not list or (bool(value) and all(isinstance(v, list) for v in value))
        )
        if per_policy:
            if not value:
                raise ConfigError(f"{name}: an empty list of per-policy values")
            given = {**given, name: value}
            del values[name]
        elif name in population:
            del population[name]
    for name, vals in given.items():
        if name not in FIELDS:
            raise ConfigError(f"population: unknown setting {meant(name)}")
        if not isinstance(vals, list) or not vals:
            raise ConfigError(f"{name}: per-policy values must be a non-empty list, got {vals!r}")
        population[name] = [_policy_value(name, p, v) for p, v in enumerate(vals)]
    return values, population


def _policy_value(name: str, policy: int, value: Any) -> Any:
    """Policy ``policy``'s value of ``name`` as its field's type, a refusal naming the policy."""
    try:
        return as_field_type(name, KINDS[name], value)
    except ConfigError as e:
        raise ConfigError(str(e).replace(f"{name}: ", f"{name}: policy {policy}: ", 1)) from None


# Preset-governed settings that runs saved before they existed did not have, with the value
# those runs ran with: left unset, a preset would fill them and change the run on resume.
ADDED_SINCE = {
    "norm_reward": False,
    "norm_obs_keep_sparse": False,
    # plain settings before the game preset governed them: their defaults then
    "opponents": "self",
    "pool_size": 8,
    "snapshot_every": 10,
    "max_batches_waiting": 1,
    "pool_random": 0.0,
}
CONFIG_FILE = "config.yaml"


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The resolved settings a run directory was saved with."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        raise ConfigError(f"run_dir: {run_dir} is not a run directory (no {CONFIG_FILE})")
    from asyncrl.rundir import check_run_dir_format  # (torch: not imported with settings)

    check_run_dir_format(run_dir)  # before its config, which a newer format may change
    return from_dict({**ADDED_SINCE, **load_yaml(path)})
