"""An actor: one batched env of K envs and a CPU copy of the policy, filling rollout slots.

The actor knows nothing of processes or queues: a backend hands it a slot and the policy store,
and it loads the newest policy version, steps T times, and writes every field of the slot --
what its algorithm records beside observations, actions and rewards through the algorithm's
``Acting`` (asyncrl.core). Env state carries over between rollouts (no reset).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import torch

from asyncrl.core import Algorithm
from asyncrl.envs import (
    EnvSpec,
    actor_seed,
    env_restarts,
    env_state,
    make_vector_env,
    restart_seed,
    set_env_state,
)
from asyncrl.nets import FlatParams
from asyncrl.runtime.mapping import (
    MAPPING_SEED,
    Group,
    PolicyMapping,
    PoolSeats,
    policy_mapping,
)
from asyncrl.runtime.pool import OPPONENT_SEED, Opponents
from asyncrl.runtime.supervisor import ActorStatus
from asyncrl.runtime.transport import PolicyStore, PoolStore, Slot
from asyncrl.settings import TrainConfig, acting_mapping

POLICY_SEED_STRIDE = 7919  # policy p acts with generator seed + 7919 p (policy 0: the seed)


class Actor:
    """The actor acts with the published parameters themselves where the store allows it (a
    single-buffer store: no version is published while actors act, see PolicyStore.attach),
    else with a copy per version. ``generation``: how many actors held this id before (restarts); it
    moves the env seeds on. ``status``: a row the actor keeps its phase in (see ActorStatus).

    ``store`` is one policy's store, or a population's (a list: one per policy); a rollout fills
    one slot per policy. Which policy acts for which env is the run's :class:`PolicyMapping`
    (asyncrl.runtime.mapping), asked at every step: each policy acts on its envs, in one forward
    for all where the algorithm offers it (``joint_acting``), else one batched forward per
    policy (docs: Guides, populations)."""

    def __init__(
        self,
        actor_id: int,
        cfg: TrainConfig,
        spec: EnvSpec,
        algo: Algorithm,
        store: PolicyStore | list[PolicyStore],
        generation: int = 0,
        status: np.ndarray | None = None,
        pool: PoolStore | None = None,
    ):
        self.actor_id, self.cfg, self.spec = actor_id, cfg, spec
        self.generation = generation  # actors that held this id before (restarts)
        self.stores = list(store) if isinstance(store, list) else [store]
        self.store = self.stores[0]
        self.K = cfg.envs_per_actor
        self.status = status
        self.envs = make_vector_env(
            cfg.env,
            self.K,
            cfg.on_env_error,
            lambda index, restart: restart_seed(cfg.seed, actor_id, generation, index, restart),
            f"actor {actor_id}",
            vectorizer=cfg.vectorizer,
            atari_preprocessing=cfg.atari_preprocessing,
        )
        self.env_restarts = 0
        first_seed = actor_seed(cfg.seed, actor_id, self.K, cfg.actors, generation)
        self.policies, self.flats, self.in_places = [], [], []
        self.generators, self.actings = [], []
        for p, policy_store in enumerate(self.stores):
            own = spec.for_policy(p)  # the policy's spaces (its own where the agents' differ)
            module, flat = frozen_net(algo, cfg, own)
            self.in_places.append(policy_store.attach(flat))
            generator = torch.Generator().manual_seed(first_seed + POLICY_SEED_STRIDE * p)
            self.policies.append(module)
            self.flats.append(flat)
            self.generators.append(generator)
            self.actings.append(algo.acting(cfg, own, module, generator))
        # where the policies' observations differ in width, each reads the first columns of
        # its seats' rows, its own (envs.pettingzoo.SeatVectorEnv pads a narrower one)
        self.widths = [s.obs_dim for s in spec.policies] if spec.policies else None
        self.policy, self.flat, self.in_place = self.policies[0], self.flats[0], self.in_places[0]
        self.generator, self.acting = self.generators[0], self.actings[0]
        # a population's policies in one forward where the algorithm can (else each in turn)
        self.joint = None if spec.policies else algo.joint_acting(self.actings)
        self.versions = [-1] * len(self.stores)
        seats = (lambda: self.envs.active) if spec.agents > 1 else None
        self.opponents: Opponents | None = None
        if pool is not None:  # self-play against frozen snapshots (runtime/pool.py)
            self.opponents = Opponents(
                lambda: frozen_net(algo, cfg, spec), pool, first_seed + OPPONENT_SEED,
                spec.n_actions,
            )  # fmt: skip
            self.mapping: PolicyMapping = PoolSeats(
                self.K, spec.agents, len(self.stores), seats, self.opponents,
                first_seed + MAPPING_SEED, cfg.pool_random,
            )  # fmt: skip
        else:
            names = list(self.envs.names) if spec.agents > 1 else None  # a game's agent ids
            self.mapping = policy_mapping(
                acting_mapping(cfg), self.K, len(self.stores), first_seed, seats, spec.agents,
                names, spec,
            )  # fmt: skip
        # what the algorithm records of one step of one env (under a mapping that marks own
        # steps it writes them into a row of their own, copied into the slot: see _act)
        extra = algo.slot_fields(spec, 1, 1)
        self.row_fields = [(name, shape[2:], dtype) for name, shape, dtype in extra]
        obs, _ = self.envs.reset(seed=[first_seed + i for i in range(self.K)])
        self.obs_dtype = np.dtype(spec.obs_dtype)  # uint8 frames stay uint8 (nets.as_float)
        self.obs = torch.as_tensor(np.asarray(obs, dtype=self.obs_dtype))
        self.ep_return = np.zeros(self.K, dtype=np.float64)
        self.ep_length = np.zeros(self.K, dtype=np.int64)
        if not spec.discrete:
            self.low, self.high = spec.action_low, spec.action_high

    @property
    def version(self) -> int:
        """Policy 0's version held (one policy's: the run's)."""
        return self.versions[0]

    def load_newest_policy(self) -> None:
        for p, store in enumerate(self.stores):
            if self.in_places[p]:  # the policy's tensors are the published vector
                self.versions[p] = store.version
            else:
                self.versions[p] = store.read_if_newer(self.versions[p], self.flats[p].read_from)

    @torch.no_grad()
    def collect(self, slot: Slot | list[Slot], waited: float = 0.0) -> None:
        """Fill ``slot`` (a population: one slot per policy) with one rollout using the newest
        published policy versions."""
        slots = slot if isinstance(slot, list) else [slot]
        t0 = time.perf_counter()
        status = self.status
        ActorStatus.set(status, ActorStatus.POLICY)
        self.load_newest_policy()
        if self.joint is not None:
            self.joint.refresh()
        ActorStatus.set(status, ActorStatus.ACTING)
        for p, s in enumerate(slots):
            s.ep_returns.fill(np.nan)
            s.ep_lengths.fill(0)
            s.versions.fill(self.versions[p])
            self.actings[p].start_rollout(s, self.versions[p])
        samples = self._rollout(slots)
        restarts = env_restarts(self.envs)
        new_restarts, self.env_restarts = restarts - self.env_restarts, restarts
        for s, n in zip(slots, samples, strict=True):
            s.env_restarts[0] = new_restarts
            s.actor[0] = self.actor_id
            s.rollout_seconds[0] = time.perf_counter() - t0
            s.wait_seconds[0] = waited
            s.env_steps[0] = n
            if self.spec.agents > 1:
                s.generation[0] = self.generation
        ActorStatus.set(status, ActorStatus.WAITING)

    def _rollout(self, slots: list[Slot]) -> list[int]:
        """T steps of every env: act, step, write, keep the episode books. The mapping says at
        every step which policy acts for which env and where it lies in that policy's slot.
        Returns the steps each policy acted (its slot's samples)."""
        T, mapping = self.cfg.rollout, self.mapping
        samples = [0] * len(slots)
        if mapping.marks_own:
            for slot in slots:
                slot.own.fill(False)
        actions = np.empty((self.K, *slots[0].actions.shape[2:]), dtype=slots[0].actions.dtype)
        for t in range(T):
            groups = mapping.groups()
            self._act(slots, t, groups, actions)
            obs, reward, terminated, truncated, info = self._step(actions)
            for g in mapping.outcomes(groups):
                slot = slots[g.policy]
                _write(slot.rewards, t, g, reward)
                _write(slot.terminated, t, g, terminated)
                _write(slot.truncated, t, g, truncated)
            for g in groups:
                samples[g.policy] += g.ids.size
            self._keep_books(slots, t, reward, terminated, truncated, info)
            self.obs = torch.as_tensor(np.asarray(obs, dtype=self.obs_dtype))
        obs_np = self.obs.numpy()
        for g in mapping.outcomes(mapping.groups()):  # the observation after the rollout
            _write(slots[g.policy].obs, T, g, self._own(g.policy, obs_np))
        return samples

    def _act(self, slots: list[Slot], t: int, groups: list[Group], actions: np.ndarray) -> None:
        """Step ``t``'s actions of each policy's envs, into ``actions`` (env order) and its slot,
        with the observations they saw and what the algorithm records beside them."""
        obs_np, actable = self.obs.numpy(), _actable(self.obs)
        marks_own = self.mapping.marks_own
        jobs = []  # per policy: its envs, and where its algorithm writes their fields
        for g in groups:
            _write(slots[g.policy].obs, t, g, self._own(g.policy, obs_np))
            # under a mapping that marks own steps, the slot's row t holds other policies'
            # envs too: the algorithm writes into a row of their own, copied below
            jobs.append(
                (g.ids, self._row(g.ids.size), 0) if marks_own else (g.ids, slots[g.policy], t)
            )
        if self.joint is not None:
            acted = self.joint.act(actable, jobs)
        else:
            acted = [
                self.actings[g.policy].act(
                    self._own(g.policy, actable if g.whole else actable[g.rows]), row, into
                )
                if g.ids.size
                else None
                for g, (_, into, row) in zip(groups, jobs, strict=True)
            ]
        for g, (_, into, _), action in zip(groups, jobs, acted, strict=True):
            if action is None:  # a policy that acts on no env at this step
                continue
            slot = slots[g.policy]
            actions[g.rows] = slot.actions[t, g.columns] = action.numpy()
            if marks_own:
                slot.own[t, g.columns] = True
                for name, _, _ in self.row_fields:
                    getattr(slot, name)[t, g.columns] = getattr(into, name)[0]
        if self.opponents is not None:  # the snapshots' seats: acted for, never trained on
            mapping = self.mapping
            for slot in slots:  # every policy's: who played each seat (its games' outcomes)
                slot.seat_player[t] = mapping.player
            self.opponents.act(actable, mapping.opponent_rows(), mapping.player, actions)

    def _own(self, policy: int, obs: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """Rows of observations as ``policy`` reads them: its own width where the policies'
        differ (a view), else as they are."""
        return obs if self.widths is None else obs[..., : self.widths[policy]]

    def _row(self, envs: int) -> SimpleNamespace:
        """A zeroed row of the algorithm's fields for ``envs`` envs (the slot layout of T=1)."""
        return SimpleNamespace(
            **{
                name: np.zeros((1, envs, *shape), dtype=dtype)
                for name, shape, dtype in self.row_fields
            }
        )

    def _step(self, actions: np.ndarray) -> tuple:
        """One step of every env with the network's ``actions``: a Box's clipped to its bounds,
        a Discrete's moved to its first action (the slot keeps the network's 0..n-1)."""
        if not self.spec.discrete:
            actions = np.clip(actions, self.low, self.high)
        elif self.spec.action_start:
            actions = actions + self.spec.action_start
        ActorStatus.set(self.status, ActorStatus.STEPPING)
        out = self.envs.step(actions)
        ActorStatus.set(self.status, ActorStatus.ACTING)
        return out

    def _keep_books(
        self,
        slots: list[Slot],
        t: int,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        info: dict,
    ) -> None:
        """Episode returns, lengths and scores. Each env's running return and length; where an
        episode ends, they go into the slot of the policy that acted at step ``t`` (an env that
        logs whole games reports its own instead, whenever a game ends: Atari's over every life,
        unclipped), that policy's algorithm hears of the end (a bootstrap value, a final
        observation), and the env's next episode starts from 0, its policy drawn again by the
        mapping."""
        self.ep_return += reward
        self.ep_length += 1
        mapping, scores = self.mapping, info.get("episode_score")
        if scores is not None:
            for g in mapping.of(np.flatnonzero(~np.isnan(scores))):
                slots[g.policy].ep_returns[t, g.columns] = scores[g.rows]
                slots[g.policy].ep_lengths[t, g.columns] = info["episode_steps"][g.rows]
        done = terminated | truncated
        if not done.any():
            return
        ended, trunc = np.flatnonzero(done), np.asarray(truncated)
        for g in mapping.of(ended):
            slot = slots[g.policy]
            if scores is None:
                slot.ep_returns[t, g.columns] = self.ep_return[g.rows]
                slot.ep_lengths[t, g.columns] = self.ep_length[g.rows]
            held = mapping.slot_rows(g.policy)  # what the policy's slot columns are
            final = self._own(g.policy, info["final_obs"][held])
            self.actings[g.policy].episodes_ended(slot, t, g.columns, trunc[held], final)
        self.ep_return[ended] = 0.0
        self.ep_length[ended] = 0
        mapping.episodes_ended(ended)

    # ---------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict:
        """Where this actor is, between rollouts: its envs' episodes, their observations and
        running returns, its random generators and its mapping's -- what a resumed run needs to
        go on exactly as if it had not stopped (see :func:`asyncrl.envs.env_state`)."""
        state = {
            "generator": self.generator.get_state(),
            "obs": self.obs.clone(),
            "ep_return": self.ep_return.copy(),
            "ep_length": self.ep_length.copy(),
            "env_restarts": self.env_restarts,
            # EnvPool's C++ envs and the Atari training wrapper keep state this cannot read:
            # those continue from fresh episodes
            # a multi-agent env's: each game's state (envs.pettingzoo.SeatVectorEnv)
            "envs": self.envs.game_states()
            if self.spec.agents > 1
            else [env_state(e) for e in _env_list(self.envs)],
            "acting": self.acting.state_dict(),  # a recurrent policy's hidden states
        }
        # a population's checkpoints hold every policy's generator too (one policy's never did:
        # its "generator" is the only one)
        if len(self.generators) > 1:
            state["generators"] = [g.get_state() for g in self.generators]
        state.update(self.mapping.state_dict())
        return state

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        for g, saved in zip(self.generators, state.get("generators") or [], strict=False):
            g.set_state(saved)
        self.mapping.load_state_dict(state)
        self.obs = torch.as_tensor(_array(state["obs"], self.obs_dtype))
        self.ep_return = _array(state["ep_return"], np.float64)
        self.ep_length = _array(state["ep_length"], np.int64)
        self.env_restarts = int(state["env_restarts"])
        self.acting.load_state_dict(state.get("acting", {}))
        if self.spec.agents > 1:
            self.envs.set_game_states(state["envs"])
            return
        envs = _env_list(self.envs)
        if len(envs) == len(state["envs"]):
            for env, layers in zip(envs, state["envs"], strict=True):
                set_env_state(env, layers)

    def close(self) -> None:
        self.envs.close()
        # an in-place policy views the store's shared segment, the status row the status
        # segment: drop them, or those cannot close
        self.policy = self.flat = self.status = None
        self.policies, self.flats, self.actings = [], [], []
        self.acting = None


def _write(field: np.ndarray, t: int, group: Group, values: np.ndarray) -> None:
    """The group's rows of ``values`` (one per env) into row ``t`` of a slot's ``field``, at its
    columns; a whole group's without indexing (the hot path of one policy)."""
    if group.whole:
        field[t] = values
    else:
        field[t, group.columns] = values[group.rows]


def _actable(obs: torch.Tensor) -> torch.Tensor:
    """``obs`` with any NaN or inf as 0: acting on them would fail (a categorical) or send NaN
    actions to the env. The slot keeps them as they came, and the learner reports them."""
    if not obs.is_floating_point() or np.isfinite(obs.numpy().sum(dtype=np.float64)):
        return obs
    return torch.nan_to_num(obs, nan=0.0, posinf=0.0, neginf=0.0)


def frozen_net(
    algo: Algorithm, cfg: TrainConfig, spec: EnvSpec
) -> tuple[torch.nn.Module, FlatParams]:
    """An acting network (and its flat view) whose weights are read in afterwards: drawing its
    initial ones must not advance the global random stream, which the learner's updates use
    when actors live in the learner's process (inline, thread), or a run would depend on the
    backend."""
    with torch.random.fork_rng(devices=[]):
        module = algo.acting_module(cfg, spec)
    module.requires_grad_(False)
    return module, FlatParams(module)


def _env_list(envs) -> list:
    """The Gymnasium envs inside an actor's vector env, if it is one that holds them."""
    return list(getattr(envs, "envs", ()))


def _array(value, dtype) -> np.ndarray:
    """A copy of an array as saved: a checkpoint holds numpy arrays as tensors."""
    if isinstance(value, torch.Tensor):
        value = value.numpy()
    return np.array(value, dtype=dtype)
