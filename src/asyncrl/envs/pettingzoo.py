"""PettingZoo envs as an actor's rows: ``--env pettingzoo:<module>``, or
``pettingzoo:<module>:<function>`` for an env made with arguments (:func:`maker` reads both;
docs: Guides, multi-agent).

A row is one (env, agent) seat. The actor steps its K rows as one vector env
(:class:`SeatVectorEnv`): K / N games of N agents each, every seat's observation flattened with
its action mask appended (the policy masks its logits with it). Agents of different spaces
each have policies of their own spaces (:func:`with_policy_specs`), which read the first
columns of their rows. ``active`` says which seats act
at the coming step (the agent to move in a turn-based game; the live agents of a parallel one):
the others contribute no samples, but their rewards and episode ends are reported (a loss comes
at the opponent's move). A seat's episode ends where its agent's does; a new game resets all its
agents. Turn-based (AEC) games run through PettingZoo's own ``turn_based_aec_to_parallel``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np

from asyncrl.config import ConfigError
from asyncrl.envs.state import object_state, set_object_state

if TYPE_CHECKING:
    from asyncrl.config import Settings

PREFIX = "pettingzoo:"
MASK = "action_mask"  # PettingZoo's key of the legal actions in an observation dict


def is_pettingzoo(env_id: str) -> bool:
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


FORMS = (
    "pettingzoo:<module> (its parallel_env() or env()) or pettingzoo:<module>:<function> (a "
    "function of the module called with no arguments, returning a PettingZoo ParallelEnv or "
    "AECEnv)"
)


def _module(env_id: str, name: str) -> Any:
    try:
        import pettingzoo  # noqa: F401
    except ImportError as e:
        raise ConfigError(
            f'env: {env_id} needs PettingZoo; install it with: pip install "asyncrl[multiagent]"'
        ) from e
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ConfigError(
            f"env: cannot import {name!r} ({e}); name a PettingZoo env module, e.g. "
            "pettingzoo:pettingzoo.classic.connect_four_v3"
        ) from e


class Maker(NamedTuple):
    """How to make the envs of a ``pettingzoo:`` name (:func:`maker`): ``parallel()``, a
    ParallelEnv (a turn-based AEC game through PettingZoo's ``turn_based_aec_to_parallel``);
    ``aec(render)``, the AEC game itself (drawing ``rgb_array`` frames if ``render``), None for
    an env with no turns to play against an opponent; ``renders``: whether ``aec`` takes a
    ``render_mode``."""

    parallel: Callable[[], Any]
    aec: Callable[[bool], Any] | None
    renders: bool


def _converted(aec: Any) -> Any:
    from pettingzoo.utils.conversions import turn_based_aec_to_parallel

    return turn_based_aec_to_parallel(aec)


def maker(env_id: str) -> Maker:
    """The one reading of a ``pettingzoo:`` name. ``pettingzoo:<module>``: the module's
    ``parallel_env()``, else its AEC ``env()`` through the conversion for turn-based games; its
    ``env()``, if it has one, is the game played against an opponent. ``pettingzoo:<module>:
    <function>``: the function, called with no arguments (an env's own arguments fixed inside
    it), made once here to tell a ParallelEnv from an AECEnv (a game) and to refuse anything
    else in one line naming ``env``."""
    module_name, _, function = env_id[len(PREFIX) :].partition(":")
    if not module_name or ":" in function:
        raise ConfigError(f"env: {env_id!r} is not a PettingZoo env's name; allowed: {FORMS}")
    module = _module(env_id, module_name)
    if function:
        return _factory_maker(env_id, module, function)
    if not hasattr(module, "parallel_env") and not hasattr(module, "env"):
        raise ConfigError(f"env: module {module_name!r} has neither parallel_env() nor env()")

    def aec(render: bool) -> Any:
        return module.env(render_mode="rgb_array") if render else module.env()

    game = aec if hasattr(module, "env") else None
    if hasattr(module, "parallel_env"):
        return Maker(module.parallel_env, game, True)
    return Maker(lambda: _converted(module.env()), game, True)


def _factory_maker(env_id: str, module: Any, function: str) -> Maker:
    from pettingzoo import AECEnv, ParallelEnv

    fn = getattr(module, function, None)
    if not callable(fn):
        what = "a non-callable" if hasattr(module, function) else "no attribute"
        raise ConfigError(
            f"env: {env_id}: module {module.__name__!r} has {what} {function!r}; allowed: {FORMS}"
        )

    def made(**kwargs: Any) -> Any:
        try:
            env = fn(**kwargs)
        except Exception as e:
            raise ConfigError(f"env: {env_id} raised {e!r} when called; allowed: {FORMS}") from e
        if isinstance(env, AECEnv | ParallelEnv):
            return env
        if isinstance(env, gym.Env):
            gym_id = env.spec.id if env.spec is not None else "<registered id>"
            env.close()
            raise ConfigError(
                f"env: {env_id} returned a Gymnasium env, which is named by its registered id "
                f"(--env {gym_id}, env={gym_id!r}), not by a function; allowed: {FORMS}"
            )
        raise ConfigError(f"env: {env_id} returned {type(env).__name__}; allowed: {FORMS}")

    probe = made()
    turn_based = isinstance(probe, AECEnv)
    probe.close()
    if not turn_based:
        return Maker(made, None, False)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a callable whose signature Python cannot read
        params = ()
    renders = any(p.name == "render_mode" or p.kind is p.VAR_KEYWORD for p in params)

    def aec(render: bool) -> Any:
        return made(render_mode="rgb_array") if render else made()

    return Maker(lambda: _converted(made()), aec, renders)


def make_parallel(env_id: str) -> Any:
    """A ParallelEnv of ``env_id`` (:func:`maker`)."""
    return maker(env_id).parallel()


def env_name(env: Any) -> str:
    """``env`` as a run keeps it: an id as it is; a Python function as its name
    (:func:`factory_name`); anything else a ConfigError naming ``env``."""
    if isinstance(env, str):
        return env
    if callable(env):
        return factory_name(env)
    raise ConfigError(
        f"env: {env!r} is neither an env id nor a function; allowed: an env id, or a function "
        "defined at the top level of an importable module returning a PettingZoo env"
    )


def factory_name(fn: Any) -> str:
    """A Python function given as ``env`` as the name a run keeps, ``pettingzoo:<module>:
    <function>``, so the config, its checkpoints and ``asyncrl.load`` hold a string and other
    processes import the function by name; a ConfigError naming ``env`` for one no other
    process can import. What it returns is checked where the name is read (:func:`maker`)."""
    qualname, module_name = getattr(fn, "__qualname__", None), getattr(fn, "__module__", None)
    module = sys.modules.get(module_name or "")
    found = None
    if isinstance(qualname, str) and qualname.isidentifier() and module is not None:
        found = getattr(module, qualname, None)
    if module_name == "__main__" and module is not None:
        module_name = _main_name(module)  # a script's: by the name it can be imported under
    elif found is not fn and (bound := _bound_name(fn)) is not None:
        module_name, qualname = bound  # made elsewhere, bound at a module's top level
        found = fn
    if found is not fn or module_name is None:
        what = "a lambda" if qualname == "<lambda>" else f"{fn!r}"
        raise ConfigError(
            f"env: {what} cannot be imported by name in another process (a lambda, a nested "
            "function, a functools.partial or a function of an interactive session cannot); "
            "allowed: an env id, or a function defined at the top level of an importable "
            "module, called with no arguments and returning a PettingZoo ParallelEnv or AECEnv "
            "(a Gymnasium env is named by its registered id)"
        )
    return f"{PREFIX}{module_name}:{qualname}"


def _bound_name(fn: Any) -> tuple[str, str] | None:
    """A module already imported that binds ``fn`` at its top level, and the name it binds it
    to: how PettingZoo's own ``<env>_v<N>.parallel_env``, a function its conversions make
    inside another, is imported by name in another process. Public modules first, then the
    shortest path (the versioned module an env is documented under); None if none binds it."""
    found = []
    for module_name, module in list(sys.modules.items()):
        attrs = getattr(module, "__dict__", None)
        if module_name == "__main__" or not isinstance(attrs, dict):
            continue
        for name, value in list(attrs.items()):
            if value is fn and name.isidentifier():
                private = any(part.startswith("_") for part in module_name.split("."))
                found.append((private, module_name.count("."), len(module_name), module_name, name))
    return min(found)[3:] if found else None


def _main_name(main: Any) -> str | None:
    """The name a script run as ``__main__`` can be imported under by another process: its
    ``-m`` module name, or its file's stem where that name finds the same file; None for an
    interactive session (or a script not importable by name)."""
    path = getattr(main, "__file__", None)
    if path is None:  # an interactive session (a notebook's, the REPL's)
        return None
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name != "__main__":
        return spec.name
    stem = Path(path).stem
    try:
        found = importlib.util.find_spec(stem)
    except (ImportError, ValueError):
        return None
    same = (
        found is not None and found.origin and Path(found.origin).resolve() == Path(path).resolve()
    )
    return stem if same else None


def _turn_based(par: Any) -> bool:
    from pettingzoo.utils.conversions import turn_based_aec_to_parallel_wrapper

    return isinstance(par, turn_based_aec_to_parallel_wrapper)


def _parts(space: gym.Space) -> tuple[gym.spaces.Box, bool]:
    """The Box a seat observes and whether an ``action_mask`` comes with it."""
    if isinstance(space, gym.spaces.Dict) and "observation" in space.spaces:
        inner, masked = space.spaces["observation"], MASK in space.spaces
        if isinstance(inner, gym.spaces.Box) and set(space.spaces) <= {"observation", MASK}:
            return inner, masked
    elif isinstance(space, gym.spaces.Box):
        return space, False
    raise ConfigError(
        f"env: observation space {space} cannot be trained here; allowed: a Box, or a Dict of "
        "a Box 'observation' and an 'action_mask'"
    )


class SeatSpace(NamedTuple):
    """One agent's spaces as a policy reads them: its flat observation's width (the action
    mask appended), its number of actions, and whether a mask comes with its observations."""

    width: int
    n_actions: int
    masked: bool


def agent_spaces(env_id: str) -> tuple[list[str], list[SeatSpace], int]:
    """The agents of a game of ``env_id`` (seat order), each one's spaces, and their first
    action: a ConfigError naming ``env`` where asyncrl cannot train an agent's spaces."""
    par = make_parallel(env_id)
    try:
        names = list(par.possible_agents)
        obs_spaces = [par.observation_space(a) for a in names]
        act_spaces = [par.action_space(a) for a in names]
    finally:
        par.close()
    seats = []
    for name, obs, act in zip(names, obs_spaces, act_spaces, strict=True):
        if not isinstance(act, gym.spaces.Discrete):
            raise ConfigError(f"env: {env_id}'s agent {name!r} acts in {act}; allowed: Discrete")
        inner, masked = _parts(obs)
        n = int(act.n)
        seats.append(SeatSpace(int(np.prod(inner.shape)) + (n if masked else 0), n, masked))
    starts = sorted({int(a.start) for a in act_spaces})
    if len(starts) > 1:
        raise ConfigError(
            f"env: the agents of {env_id} number their actions from {starts}; allowed: one "
            "first action for every agent"
        )
    return names, seats, starts[0]


def seat_spaces(
    env_id: str,
) -> tuple[int, gym.spaces.Box, gym.spaces.Discrete, bool, tuple[SeatSpace, ...]]:
    """Agents per env; the flat observation of a seat's row, the action space and the masking,
    every seat's; and, where the agents' spaces differ, each seat's own (:class:`SeatSpace`),
    else (). Rows of different seats are as wide as the widest agent's observation (a
    narrower one is padded with zeros after its own); the action space is then the largest,
    masked if any agent's is: the env's, never a policy's (see :func:`with_policy_specs`)."""
    names, seats, start = agent_spaces(env_id)
    differ = any(s != seats[0] for s in seats)
    width, n = max(s.width for s in seats), max(s.n_actions for s in seats)
    box = gym.spaces.Box(-np.inf, np.inf, (width,), np.float32)
    act = gym.spaces.Discrete(n, start=start)
    return len(names), box, act, any(s.masked for s in seats), tuple(seats) if differ else ()


def check_seats(cfg: Settings, spec: Any) -> Any:
    """What a run on a multi-agent env cannot use yet, refused in one line naming the setting
    (before anything starts); returns ``spec`` with each policy's own where the agents' spaces
    differ (:func:`with_policy_specs`)."""
    population = cfg.policies > 1
    pool = cfg.opponents == "pool"
    refusals = (
        # a population's pool: one live policy per game's learning seat, its opponent a live
        # policy or a snapshot (runtime.mapping.PoolSeats), on two-player games
        (
            not population or not pool or spec.games,
            "policies",
            "1 with --opponents pool (a population plays its pool on two-player games of "
            "shared spaces)",
        ),
        # per agent: seat i of every game plays policy i mod P, so each policy needs a seat
        (
            cfg.policy_mapping != "fixed" or pool or cfg.policies <= spec.agents,
            "policies",
            f"at most {spec.agents} under the fixed mapping (the agent in seat i plays policy "
            "i mod P; --policy-mapping random draws each game's seats among more)",
        ),
        (cfg.envs_per_actor % spec.agents == 0, "envs_per_actor", f"multiples of {spec.agents}"),
        (cfg.recurrent == "none", "recurrent", "none"),
        (cfg.correction != "vtrace", "correction", "none or decoupled"),
        (cfg.eval_every == 0, "eval_every", "0 (games are evaluated by play_vs_random)"),
        (cfg.on_env_error == "raise", "on_env_error", "raise"),
        (cfg.vectorizer == "gymnasium", "vectorizer", "gymnasium"),
        (not cfg.hogwild, "hogwild", "0"),
        # DQN: a seat's transition spans one of its moves to its next (replay/seats.py), in
        # a replay of whole observations
        (getattr(cfg, "n_step", 1) == 1, "n_step", "1"),
        (getattr(cfg, "replay_layout", "auto") != "frames", "replay_layout", "auto or transitions"),
    )
    for ok, name, allowed in refusals:
        if not ok:
            raise ConfigError(
                f"{name}: {spec.env_id} is a multi-agent env, which trains with {name} "
                f"{allowed} today (got {getattr(cfg, name)})"
            )
    if callable(cfg.policy_mapping):
        check_mapping_function(cfg.policy_mapping, spec.env_id, cfg.policies, cfg.backend)
    return with_policy_specs(cfg, spec)


def describe(seat: SeatSpace) -> str:
    """A seat's spaces in a few words, as a refusal names them."""
    mask = " masked" if seat.masked else ""
    return f"observation width {seat.width}, {seat.n_actions}{mask} actions"


def seat_space(spec: Any) -> SeatSpace:
    """The spaces a policy's spec (an EnvSpec) gives it, as a seat's are described."""
    return SeatSpace(spec.obs_dim, spec.n_actions, spec.action_mask)


def with_policy_specs(cfg: Settings, spec: Any) -> Any:
    """``spec`` (an EnvSpec of a multi-agent env) with each policy's own, where its agents'
    spaces differ (``spec.seats``): a policy's spaces are those of the agents the mapping gives
    it -- per agent, seat i's for policy i mod P; a user's function, its answers at episode 0.
    Refused in one line naming the setting: a policy given agents of different spaces (or
    none), and what needs every policy to have the same spaces (one policy, the random
    mapping, a pool of snapshots, PBT's copies)."""
    if not spec.seats:
        return spec
    names = agent_ids(spec.env_id)
    kinds = "; ".join(f"{a!r}: {describe(s)}" for a, s in zip(names, spec.seats, strict=True))
    refusals = (
        (cfg.opponents == "self", "opponents", "a pool of the learner's snapshots", "self"),
        (cfg.policies > 1, "policies", "one policy", f"--policies {spec.agents} (one per agent)"),
        (not cfg.pbt, "pbt", "policies PBT copies into one another", "off"),
    )
    for ok, name, who, allowed in refusals:
        if not ok:
            raise ConfigError(
                f"{name}: the agents of {spec.env_id} have different spaces ({kinds}), which "
                f"{who} cannot play; allowed: {allowed} (got {getattr(cfg, name)})"
            )
    kind = cfg.policy_mapping  # more than one policy: the run's own (settings.acting_mapping)
    if kind == "random":
        raise ConfigError(
            f"policy_mapping: random draws any policy for any agent, and the agents of "
            f"{spec.env_id} have different spaces ({kinds}); allowed: fixed or a function"
        )
    choose = per_agent(names, cfg.policies) if kind == "fixed" else kind
    name = "policies" if kind == "fixed" else "policy_mapping"
    played: dict[int, list[int]] = {p: [] for p in range(cfg.policies)}
    for i, agent in enumerate(names):
        played[policy_index(choose(agent, 0), agent, 0, cfg.policies)].append(i)
    specs = []
    for p, seats in played.items():
        if not seats:
            raise ConfigError(
                f"{name}: policy {p} plays no agent of {spec.env_id} at episode 0, so it has no "
                f"spaces (the agents' differ: {kinds}); allowed: a mapping that gives every "
                "policy an agent"
            )
        odd = [i for i in seats if spec.seats[i] != spec.seats[seats[0]]]
        if odd:
            raise ConfigError(
                f"{name}: policy {p} would play agents {names[seats[0]]!r} "
                f"({describe(spec.seats[seats[0]])}) and {names[odd[0]]!r} "
                f"({describe(spec.seats[odd[0]])}), whose spaces differ; allowed: a mapping "
                f"that gives a policy agents of one space (--policies {spec.agents}: one each)"
            )
        own = spec.seats[seats[0]]
        specs.append(
            dataclasses.replace(
                spec,
                obs_shape=(own.width,),
                n_actions=own.n_actions,
                action_mask=own.masked,
                seats=(),
            )
        )
    return dataclasses.replace(spec, policies=tuple(specs))


def saved_policy_spec(cfg: Settings, spec: Any, policy: int) -> Any:
    """Policy ``policy``'s spec in a saved run of ``spec``'s env, whose agents' spaces differ:
    the fixed mapping's (:func:`with_policy_specs`); a function's answers are not saved."""
    if cfg.policy_mapping != "fixed":
        raise ConfigError(
            f"policy_mapping: the agents of {spec.env_id} have different spaces and this run "
            "mapped them by a function, whose answers its config does not hold; loading its "
            "policies needs the fixed mapping (--policies with one policy per agent)"
        )
    return with_policy_specs(cfg, spec).for_policy(policy)


def check_plays(spec: Any, seat: int, agent: str, policy: int, episode: int) -> None:
    """A ConfigError naming ``policy_mapping`` where policy ``policy`` cannot play ``agent``
    (in seat ``seat``) at ``episode``: the run's policies have their own spaces (a mapping
    function's answer at episode 0 gave them) and the agent's are not that policy's."""
    if spec.policies and spec.seats[seat] != seat_space(spec.policies[policy]):
        raise ConfigError(
            f"policy_mapping: the function gave agent {agent!r} ({describe(spec.seats[seat])}) "
            f"policy {policy} at episode {episode}, whose spaces are "
            f"{describe(seat_space(spec.policies[policy]))}; allowed: a policy of the agent's "
            "spaces"
        )


def per_agent(names: list[str], policies: int) -> Callable[[str, int], int]:
    """The fixed mapping of a game's agents: the agent in seat i to policy i mod P."""
    seat = {name: i for i, name in enumerate(names)}
    return lambda name, episode: seat[name] % policies


def agent_ids(env_id: str) -> list[str]:
    """The agents of a game of ``env_id``, in seat order (its ``possible_agents``)."""
    par = make_parallel(env_id)
    try:
        return list(par.possible_agents)
    finally:
        par.close()


def policy_index(p: Any, agent: str, episode: int, policies: int) -> int:
    """``p``, a mapping function's answer for ``agent`` at ``episode``, as a policy index below
    ``policies``; anything else a ConfigError naming ``policy_mapping``."""
    if not (isinstance(p, int | np.integer) and not isinstance(p, bool) and 0 <= p < policies):
        raise ConfigError(
            f"policy_mapping: the function returned {p!r} for agent {agent!r} at episode "
            f"{episode}; allowed: a policy index 0..{policies - 1} (--policies {policies})"
        )
    return int(p)


def check_mapping_function(
    fn: Callable[[str, int], int], env_id: str, policies: int, backend: str
) -> None:
    """A user's mapping of agents to policies, tried before anything starts: on every agent of
    ``env_id`` for episode 0, each answer a policy index below ``policies``; and, for a backend
    whose actors are other processes, picklable and importable there (spawn)."""
    for agent in agent_ids(env_id):
        try:
            p = fn(agent, 0)
        except Exception as e:
            raise ConfigError(
                f"policy_mapping: the function raised {e!r} for agent {agent!r} at episode 0; "
                "allowed: a function of (agent id, episode) to a policy index"
            ) from None
        policy_index(p, agent, 0, policies)
    if backend not in ("process", "ray"):
        return
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    try:
        pickle.dumps(fn)
        # a function of an interactive session pickles by name, but a spawned actor cannot
        # import the session to find it
        if module is None or (module.__name__ == "__main__" and not hasattr(module, "__file__")):
            raise pickle.PicklingError("its module cannot be imported by another process")
    except Exception as e:
        raise ConfigError(
            f"policy_mapping: the {backend} backend sends the function to its actors' processes, "
            f"and it cannot be sent ({e}); allowed: a function defined at the top level of a "
            "module or script (not a lambda or a nested function), or --backend inline or thread"
        ) from None


def flat_obs(obs: Any, masked: bool) -> np.ndarray:
    """A seat's observation as the policy reads it: flattened, with its action mask after."""
    if not masked:
        inner = obs["observation"] if isinstance(obs, dict) else obs
        return np.asarray(inner, np.float32).reshape(-1)
    return np.concatenate([np.ravel(obs["observation"]), np.ravel(obs[MASK])]).astype(np.float32)


def legal(row: np.ndarray, n: int) -> np.ndarray:
    """The legal actions of a flat, masked observation (its last ``n`` entries)."""
    return np.flatnonzero(row[-n:] > 0)


class SeatVectorEnv:
    """``rows`` seats of ``rows / N`` PettingZoo games stepped as one same-step autoreset vector
    env, as an actor steps Gymnasium's: ``step(actions)`` takes one action per seat (those of
    seats not ``active`` are ignored), and where a seat's episode ends returns its final
    observation in ``info["final_obs"]``; a game whose agents are all done starts anew."""

    def __init__(self, env_id: str, rows: int):
        self.agents, box, act, masked, seats = seat_spaces(env_id)
        self.masked = masked  # any seat's
        # each seat's own: where the agents' spaces differ, a row holds its agent's flat
        # observation first and zeros after (rows are as wide as the widest agent's)
        self.seat_masked = [s.masked for s in seats] if seats else [masked] * self.agents
        self.n_actions = int(act.n)
        self.action_start = int(act.start)
        if rows % self.agents:
            raise ConfigError(
                f"envs_per_actor: {env_id} seats {self.agents} agents per env; allowed: a "
                f"multiple of {self.agents} (got {rows})"
            )
        make = maker(env_id).parallel
        self.games = [make() for _ in range(rows // self.agents)]
        self.names = list(self.games[0].possible_agents)
        self.seat = {agent: i for i, agent in enumerate(self.names)}  # an agent's seat in a game
        self.turn_based = _turn_based(self.games[0])
        self.rows = rows
        self.obs = np.zeros((rows, box.shape[0]), np.float32)
        self.active = np.zeros(rows, bool)
        self.done = np.zeros(rows, bool)  # seats whose agent is done in the current game

    def _row(self, game: int, agent: Any) -> int:
        return game * self.agents + self.seat[agent]

    def _start(self, g: int, seed: int | None) -> None:
        obs, _ = self.games[g].reset(seed=seed)
        seats = slice(g * self.agents, (g + 1) * self.agents)
        self.done[seats] = False
        for agent, o in obs.items():
            flat = flat_obs(o, self.seat_masked[self.seat[agent]])
            self.obs[self._row(g, agent), : flat.size] = flat
        self._set_active(g)

    def _set_active(self, g: int) -> None:
        par = self.games[g]
        self.active[g * self.agents : (g + 1) * self.agents] = False
        if not par.agents:
            return
        # a turn-based game's mover: the converted AEC env's agent_selection (the conversion's
        # infos carry it only after a step, not after a reset)
        acting = [par.aec_env.agent_selection] if self.turn_based else par.agents
        for agent in acting:
            self.active[self._row(g, agent)] = True

    def reset(self, *, seed: list[int] | None = None, options: Any = None) -> tuple:
        for g in range(len(self.games)):
            self._start(g, None if seed is None else int(seed[g * self.agents]))
        return self.obs.copy(), {}

    def step(self, actions: np.ndarray) -> tuple:
        reward = np.zeros(self.rows, np.float32)
        terminated = np.zeros(self.rows, bool)
        truncated = np.zeros(self.rows, bool)
        final = self.obs.copy()
        for g, par in enumerate(self.games):
            acting = {
                a: int(actions[self._row(g, a)]) for a in par.agents if self.active[self._row(g, a)]
            }
            obs, rewards, terms, truncs, _ = par.step(acting)
            for agent in self.names:
                r = self._row(g, agent)
                if self.done[r]:
                    continue
                if agent in obs:
                    flat = flat_obs(obs[agent], self.seat_masked[self.seat[agent]])
                    self.obs[r, : flat.size] = final[r, : flat.size] = flat
                reward[r] = rewards.get(agent, 0.0)
                terminated[r] = bool(terms.get(agent, False))
                truncated[r] = bool(truncs.get(agent, False)) and not terminated[r]
                self.done[r] = terminated[r] or truncated[r]
            if par.agents:
                self._set_active(g)
            else:  # every agent done: the game starts anew (its generator goes on)
                self._start(g, None)
        return self.obs.copy(), reward, terminated, truncated, {"final_obs": final}

    def game_states(self) -> list[dict[str, Any]]:
        """Each game as plain data, with its seats' observations and turns: what a resumed
        actor needs to go on with the games in progress (see envs.state.object_state)."""
        out = []
        for g, par in enumerate(self.games):
            seats = slice(g * self.agents, (g + 1) * self.agents)
            out.append(
                {
                    "game": object_state(par),
                    "obs": self.obs[seats].copy(),
                    "active": self.active[seats].copy(),
                    "done": self.done[seats].copy(),
                }
            )
        return out

    def set_game_states(self, states: list[dict[str, Any]]) -> None:
        for g, (par, state) in enumerate(zip(self.games, states, strict=True)):
            seats = slice(g * self.agents, (g + 1) * self.agents)
            set_object_state(par, state["game"])
            for name in ("obs", "active", "done"):
                getattr(self, name)[seats] = np.asarray(state[name])

    def close(self) -> None:
        for par in self.games:
            par.close()


# the players a policy is evaluated against in a game, and how a line names them
OPPONENT_NAMES = {
    "random": "a uniform random player",
    "lookahead": "the look-ahead player",
    "pool": "the run's pool of past snapshots",
}
OPPONENTS = tuple(OPPONENT_NAMES)
CONNECT_FOUR = "pettingzoo.classic.connect_four_v"  # a module name's stem (connect_four_v3)
ROWS, COLS = 6, 7  # connect four's board


def is_connect_four(env_id: str) -> bool:
    """Connect four named by its module: a function's env (``pettingzoo:<module>:<function>``)
    may change the board or the observations the look-ahead player reads, so it is not."""
    name = env_id[len(PREFIX) :] if is_pettingzoo(env_id) else ""
    return name.startswith(CONNECT_FOUR) and ":" not in name


def _fours(plane: np.ndarray, r: int, c: int) -> bool:
    """Whether the piece at (r, c) of a 0/1 board plane lies in a line of four."""
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        run = 1
        for sign in (1, -1):
            y, x = r + sign * dr, c + sign * dc
            while 0 <= y < ROWS and 0 <= x < COLS and plane[y, x]:
                run, y, x = run + 1, y + sign * dr, x + sign * dc
        if run >= 4:
            return True
    return False


def winning_move(plane: np.ndarray, taken: np.ndarray, moves: np.ndarray) -> int | None:
    """The first of ``moves`` (columns) that completes four of ``plane``'s pieces, the piece
    falling to the lowest empty row; None if none does."""
    for c in moves:
        r = int(np.flatnonzero(~taken[:, c])[-1])  # row 0 is the top, as PettingZoo draws it
        plane[r, c] = 1
        wins = _fours(plane, r, c)
        plane[r, c] = 0
        if wins:
            return int(c)
    return None


def lookahead_move(row: np.ndarray, rng: np.random.Generator) -> int:
    """Connect four's one-step look-ahead player, from a flat, masked observation (its
    6 x 7 x 2 board: the mover's pieces, then the opponent's): a move that wins at once, else
    one that blocks the opponent's win at its next move, else one drawn uniformly among the
    legal moves with ``rng``."""
    board = row[: ROWS * COLS * 2].reshape(ROWS, COLS, 2) > 0
    mine, theirs = board[..., 0].astype(np.int8), board[..., 1].astype(np.int8)
    taken, moves = board.any(-1), legal(row, COLS)
    for plane in (mine, theirs):  # win if it can; else block if it must
        move = winning_move(plane, taken, moves)
        if move is not None:
            return move
    return int(rng.choice(moves))


def play_vs_random(
    env_id: str, choose: Callable[[np.ndarray], int], games: int = 200, seed: int = 0
) -> dict[str, float]:
    """:func:`play_vs` against the uniform random player."""
    return play_vs(env_id, choose, "random", games, seed)


def check_opponent(env_id: str, opponent: str, pool: bool = True) -> None:
    """A ConfigError naming ``opponent`` where ``env_id`` cannot be played against it, or it is
    ``pool`` and the run has none (``pool``: whether it trained with ``--opponents pool``)."""
    if opponent not in OPPONENTS:
        raise ConfigError(f"opponent: {opponent!r}; allowed: {', '.join(OPPONENTS)}")
    here = "random, lookahead" if is_connect_four(env_id) else "random"
    if opponent == "lookahead" and not is_connect_four(env_id):
        raise ConfigError(
            f"opponent: lookahead plays connect four only ({PREFIX}{CONNECT_FOUR}3), not "
            f"{env_id}; allowed here: {here}"
        )
    if opponent == "pool" and not pool:
        raise ConfigError(
            "opponent: pool plays a run's past snapshots; this run trained with --opponents "
            f"self and has none; allowed here: {here}"
        )


def two_player_game(env_id: str, agents: int, masked: bool, seats: tuple) -> bool:
    """Whether ``env_id`` can be played against an opponent (:func:`play_vs`), from what
    :func:`seat_spaces` told of it: a two-player turn-based game with action masks whose
    players share their spaces (the policy plays either seat); a parallel env has no such
    games. ``check_env`` keeps the answer on the spec (``EnvSpec.games``)."""
    return masked and not seats and agents == 2 and maker(env_id).aec is not None


def play_vs(
    env_id: str,
    choose: Callable[[np.ndarray], int],
    opponent: str = "random",
    games: int = 200,
    seed: int = 0,
    players: list[Callable[[np.ndarray], int]] | None = None,
    record: Callable[[Any], None] | None = None,
) -> dict[str, float]:
    """Win, draw and loss rates of ``choose`` (a flat, masked observation to an action) in a
    two-player turn-based game against ``opponent``: ``random``, uniform over the legal moves,
    ``lookahead``, connect four's one-step look-ahead (:func:`lookahead_move`), or ``pool``,
    the ``players`` given (a run's snapshots), in turn, two games each (one as either
    player). Half of the games as the first player, half as the second; game ``i`` seeded
    ``seed + i``; the random and look-ahead players' draws from one generator seeded
    ``seed``. ``record(env)``: called after every reset and move, on envs made to render
    ``rgb_array`` frames (the same games)."""
    check_opponent(env_id, opponent)
    if (opponent == "pool") != bool(players):
        raise ValueError("play_vs: the pool's players are given with opponent 'pool' only")
    make = maker(env_id)
    if make.aec is None:
        raise ConfigError(f"env: {env_id} has no turn-based env(); allowed: a two-player AEC game")
    if record is not None and not make.renders:
        raise ConfigError(
            f"video: {env_id} is called without arguments and takes no render_mode, so its "
            "games cannot be drawn; allowed: a function that takes render_mode=None and passes "
            "it to the env it makes"
        )
    _, _, act, masked, seats = seat_spaces(env_id)
    if seats:
        raise ConfigError(
            f"env: the players of {env_id} have different spaces, and a policy plays either "
            "seat against an opponent; allowed: a game whose players share their spaces"
        )
    n = int(act.n)
    if not masked:
        raise ConfigError(f"env: {env_id} has no action mask; playing it against random needs one")
    rng = np.random.default_rng(seed)
    if opponent == "lookahead":
        other = lambda row: lookahead_move(row, rng)  # noqa: E731
    else:
        other = lambda row: int(rng.choice(legal(row, n)))  # noqa: E731
    wins = draws = losses = 0
    for i in range(games):
        if players:
            other = players[(i // 2) % len(players)]
        env = make.aec(record is not None)
        env.reset(seed=seed + i)
        if len(env.possible_agents) != 2:
            raise ConfigError(f"env: {env_id} has {len(env.possible_agents)} agents; allowed: 2")
        me = env.possible_agents[i % 2]
        total = 0.0
        if record is not None:
            record(env)
        for agent in env.agent_iter():
            obs, rew, term, trunc, _ = env.last()
            if agent == me:
                total += float(rew)
            if term or trunc:
                action = None
            else:
                row = flat_obs(obs, True)
                action = choose(row) if agent == me else other(row)
            env.step(action)
            if record is not None and action is not None:  # a move (not a finished agent's)
                record(env)
        env.close()
        wins, draws, losses = wins + (total > 0), draws + (total == 0), losses + (total < 0)
    return {"win": wins / games, "draw": draws / games, "loss": losses / games}
