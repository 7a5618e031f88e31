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

from asyncrl.algos import algorithm
from asyncrl.envs import (
    EnvSpec,
    actor_seed,
    env_restarts,
    env_state,
    make_vector_env,
    restart_seed,
    set_env_state,
)
from asyncrl.learning.population import policy_envs
from asyncrl.nets import FlatParams
from asyncrl.runtime.supervisor import ActorStatus
from asyncrl.runtime.transport import PolicyStore, Slot
from asyncrl.settings import TrainConfig

POLICY_SEED_STRIDE = 7919  # policy p acts with generator seed + 7919 p (policy 0: the seed)
MAPPING_SEED = 31337  # the random mapping's draws: an actor's first seed + this


class Actor:
    """The actor acts with the published parameters themselves where the store allows it (a
    single-buffer store: no version is published while actors act, see PolicyStore.attach),
    else with a copy per version. ``generation``: how many actors held this id before (restarts); it
    moves the env seeds on. ``status``: a row the actor keeps its phase in (see ActorStatus).

    A population (``store`` a list: one policy store per policy) acts with each policy on its
    envs, in one forward for all where the algorithm offers it (``joint_acting``), else one
    batched forward per policy, and a rollout fills one slot per policy: under the
    fixed mapping each policy's slot holds its envs (env k: policy k mod P), under the random
    mapping every env, the steps of the policy that acted marked ``own`` (docs: Guides,
    populations)."""

    def __init__(
        self,
        actor_id: int,
        cfg: TrainConfig,
        spec: EnvSpec,
        store: PolicyStore | list[PolicyStore],
        generation: int = 0,
        status: np.ndarray | None = None,
    ):
        self.actor_id, self.cfg, self.spec = actor_id, cfg, spec
        self.stores = list(store) if isinstance(store, list) else [store]
        self.store = self.stores[0]
        self.P = len(self.stores)
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
        algo = algorithm(cfg.algo)
        first_seed = actor_seed(cfg.seed, actor_id, self.K, cfg.actors, generation)
        self.policies, self.flats, self.in_places = [], [], []
        self.generators, self.actings = [], []
        for p, policy_store in enumerate(self.stores):
            # Its initial weights are overwritten by the first published version: drawing them
            # must not advance the global random stream, which the learner's updates use when
            # the actor lives in the learner's process (inline, thread), or a run would depend
            # on the backend.
            with torch.random.fork_rng(devices=[]):
                module = algo.acting_module(cfg, spec)
            module.requires_grad_(False)
            flat = FlatParams(module)
            self.in_places.append(policy_store.attach(flat))
            generator = torch.Generator().manual_seed(first_seed + POLICY_SEED_STRIDE * p)
            self.policies.append(module)
            self.flats.append(flat)
            self.generators.append(generator)
            self.actings.append(algo.acting(cfg, spec, module, generator))
        self.policy, self.flat, self.in_place = self.policies[0], self.flats[0], self.in_places[0]
        self.generator, self.acting = self.generators[0], self.actings[0]
        # a population's policies in one forward where the algorithm can (else each in turn)
        self.joint = algo.joint_acting(self.actings) if self.P > 1 else None
        self.versions = [-1] * self.P
        # the fixed mapping: each policy's envs, and where env k lies in its policy's slot
        self.parts = [policy_envs(self.K, self.P, p) for p in range(self.P)]
        self.part_envs = [np.arange(self.K)[part] for part in self.parts]
        self.env_policy = np.arange(self.K) % self.P
        self.env_column = np.arange(self.K) // self.P
        # the random mapping: the policy of each env's episode, drawn at its start
        self.mapping_rng: np.random.Generator | None = None
        self.owner: np.ndarray | None = None
        if self.P > 1 and cfg.policy_mapping == "random":
            self.mapping_rng = np.random.default_rng(first_seed + MAPPING_SEED)
            self.owner = self.mapping_rng.integers(self.P, size=self.K)
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
        if self.owner is not None:
            self._random_rollout(slots)
        else:
            self._fixed_rollout(slots)
        restarts = env_restarts(self.envs)
        new_restarts, self.env_restarts = restarts - self.env_restarts, restarts
        for s in slots:
            s.env_restarts[0] = new_restarts
            s.actor[0] = self.actor_id
            s.rollout_seconds[0] = time.perf_counter() - t0
            s.wait_seconds[0] = waited
            if self.owner is None:
                s.env_steps[0] = self.cfg.rollout * s.rewards.shape[1]
            else:
                s.env_steps[0] = int(s.own.sum())
        ActorStatus.set(status, ActorStatus.WAITING)

    def _fixed_rollout(self, slots: list[Slot]) -> None:
        """Env k acts with policy k mod P, its steps in that policy's slot (one policy: every
        env's, in the one slot, with no copy)."""
        status, envs, T = self.status, self.envs, self.cfg.rollout
        one = self.P == 1
        groups = list(zip(self.actings, slots, self.parts, strict=True))
        env_action = None
        if not one:
            dtype = slots[0].actions.dtype
            env_action = np.empty((self.K, *slots[0].actions.shape[2:]), dtype=dtype)
        for t in range(T):
            obs_np, actable = self.obs.numpy(), _actable(self.obs)
            for _, slot, part in groups:
                slot.obs[t] = obs_np if one else obs_np[part]
            if self.joint is not None:
                jobs = [(envs, slot, t) for envs, slot in zip(self.part_envs, slots, strict=True)]
                acted = self.joint.act(actable, jobs)
            else:
                acted = [a.act(actable if one else actable[part], t, s) for a, s, part in groups]
            for (_, slot, part), action in zip(groups, acted, strict=True):
                if one:
                    env_action = slot.actions[t] = action.numpy()
                else:
                    env_action[part] = slot.actions[t] = action.numpy()
            if not self.spec.discrete:
                env_action = np.clip(env_action, self.low, self.high)
            elif self.spec.action_start:  # the slot keeps the network's 0..n-1
                env_action = env_action + self.spec.action_start
            ActorStatus.set(status, ActorStatus.STEPPING)
            obs, reward, terminated, truncated, info = envs.step(env_action)
            ActorStatus.set(status, ActorStatus.ACTING)
            for _, slot, part in groups:
                slot.rewards[t] = reward[part]
                slot.terminated[t] = terminated[part]
                slot.truncated[t] = truncated[part]
            self.ep_return += reward
            self.ep_length += 1
            done = terminated | truncated
            if "episode_score" in info:  # the env logs whole games (Atari: all lives, unclipped)
                scored = np.flatnonzero(~np.isnan(info["episode_score"]))
                for p, envs_of, cols in self._by_policy(scored):
                    slots[p].ep_returns[t, cols] = info["episode_score"][envs_of]
                    slots[p].ep_lengths[t, cols] = info["episode_steps"][envs_of]
            if done.any():
                idx = np.flatnonzero(done)
                trunc = np.asarray(truncated)
                for p, envs_of, cols in self._by_policy(idx):
                    slot = slots[p]
                    if "episode_score" not in info:
                        slot.ep_returns[t, cols] = self.ep_return[envs_of]
                        slot.ep_lengths[t, cols] = self.ep_length[envs_of]
                    part = self.parts[p]
                    final = info["final_obs"] if one else info["final_obs"][part]
                    self.actings[p].episodes_ended(slot, t, cols, trunc[part], final)
                self.ep_return[idx] = 0.0
                self.ep_length[idx] = 0
            self.obs = torch.as_tensor(np.asarray(obs, dtype=self.obs_dtype))
        obs_np = self.obs.numpy()
        for _, slot, part in groups:
            slot.obs[T] = obs_np[part]

    def _by_policy(self, envs: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``envs`` (indices) by the policy the fixed mapping gives them: (policy, its envs,
        their columns in its slot)."""
        if self.P == 1:
            return [(0, envs, envs)] if envs.size else []
        out = []
        for p in np.unique(self.env_policy[envs]):
            mine = envs[self.env_policy[envs] == p]
            out.append((int(p), mine, self.env_column[mine]))
        return out

    def _random_rollout(self, slots: list[Slot]) -> None:
        """Each env acts with the policy its episode drew; every policy's slot holds all K envs,
        the steps it acted marked ``own`` (the others' are left as they were: its learner
        drops them). A policy draws again for an env when that env's episode ends."""
        status, envs, T, owner = self.status, self.envs, self.cfg.rollout, self.owner
        assert owner is not None and self.mapping_rng is not None
        for slot in slots:
            slot.own.fill(False)
        env_action = np.empty((self.K, *slots[0].actions.shape[2:]), dtype=slots[0].actions.dtype)
        for t in range(T):
            obs_np, actable = self.obs.numpy(), _actable(self.obs)
            every = [np.flatnonzero(owner == p) for p in range(self.P)]
            # the algorithm writes its fields of the acting envs into a row of their own
            rows = [
                SimpleNamespace(
                    **{
                        name: np.zeros((1, idx.size, *shape), dtype=dtype)
                        for name, shape, dtype in self.row_fields
                    }
                )
                for idx in every
            ]
            if self.joint is not None:
                acted = self.joint.act(
                    actable, [(idx, row, 0) for idx, row in zip(every, rows, strict=True)]
                )
            else:
                acted = [
                    self.actings[p].act(actable[idx], 0, rows[p]) if idx.size else None
                    for p, idx in enumerate(every)
                ]
            groups = [(p, idx) for p, idx in enumerate(every) if idx.size]
            for p, idx in groups:
                slot = slots[p]
                slot.obs[t, idx] = obs_np[idx]
                for name, _, _ in self.row_fields:
                    getattr(slot, name)[t, idx] = getattr(rows[p], name)[0]
                env_action[idx] = slot.actions[t, idx] = acted[p].numpy()
                slot.own[t, idx] = True
            step_action = env_action
            if not self.spec.discrete:
                step_action = np.clip(env_action, self.low, self.high)
            elif self.spec.action_start:  # the slot keeps the network's 0..n-1
                step_action = env_action + self.spec.action_start
            ActorStatus.set(status, ActorStatus.STEPPING)
            obs, reward, terminated, truncated, info = envs.step(step_action)
            ActorStatus.set(status, ActorStatus.ACTING)
            for p, idx in groups:
                slot = slots[p]
                slot.rewards[t, idx] = reward[idx]
                slot.terminated[t, idx] = terminated[idx]
                slot.truncated[t, idx] = truncated[idx]
            self.ep_return += reward
            self.ep_length += 1
            done = terminated | truncated
            if "episode_score" in info:
                for k in np.flatnonzero(~np.isnan(info["episode_score"])):
                    slots[owner[k]].ep_returns[t, k] = info["episode_score"][k]
                    slots[owner[k]].ep_lengths[t, k] = info["episode_steps"][k]
            if done.any():
                idx = np.flatnonzero(done)
                trunc = np.asarray(truncated)
                for p in np.unique(owner[idx]):
                    ended = idx[owner[idx] == p]
                    slot = slots[p]
                    if "episode_score" not in info:
                        slot.ep_returns[t, ended] = self.ep_return[ended]
                        slot.ep_lengths[t, ended] = self.ep_length[ended]
                    self.actings[p].episodes_ended(slot, t, ended, trunc, info["final_obs"])
                self.ep_return[idx] = 0.0
                self.ep_length[idx] = 0
                owner[idx] = self.mapping_rng.integers(self.P, size=idx.size)
            self.obs = torch.as_tensor(np.asarray(obs, dtype=self.obs_dtype))
        obs_np = self.obs.numpy()
        for p in range(self.P):
            idx = np.flatnonzero(owner == p)
            slots[p].obs[T, idx] = obs_np[idx]

    # ---------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict:
        """Where this actor is, between rollouts: its envs' episodes, their observations and
        running returns, and its random generator -- what a resumed run needs to go on exactly
        as if it had not stopped (see :func:`asyncrl.envs.env_state`)."""
        state = {
            "generator": self.generator.get_state(),
            "obs": self.obs.clone(),
            "ep_return": self.ep_return.copy(),
            "ep_length": self.ep_length.copy(),
            "env_restarts": self.env_restarts,
            # EnvPool's C++ envs and the Atari training wrapper keep state this cannot read:
            # those continue from fresh episodes
            "envs": [env_state(e) for e in _env_list(self.envs)],
            "acting": self.acting.state_dict(),  # a recurrent policy's hidden states
        }
        if self.P > 1:  # a population: every policy's generator, and the random mapping's
            state["generators"] = [g.get_state() for g in self.generators]
            if self.owner is not None and self.mapping_rng is not None:
                state["owner"] = self.owner.copy()
                state["mapping_rng"] = self.mapping_rng.bit_generator.state
        return state

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        for g, saved in zip(self.generators, state.get("generators") or [], strict=False):
            g.set_state(saved)
        if self.owner is not None and "owner" in state and self.mapping_rng is not None:
            self.owner = _array(state["owner"], np.int64)
            self.mapping_rng.bit_generator.state = state["mapping_rng"]
        self.obs = torch.as_tensor(_array(state["obs"], self.obs_dtype))
        self.ep_return = _array(state["ep_return"], np.float64)
        self.ep_length = _array(state["ep_length"], np.int64)
        self.env_restarts = int(state["env_restarts"])
        self.acting.load_state_dict(state.get("acting", {}))
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


def _actable(obs: torch.Tensor) -> torch.Tensor:
    """``obs`` with any NaN or inf as 0: acting on them would fail (a categorical) or send NaN
    actions to the env. The slot keeps them as they came, and the learner reports them."""
    if not obs.is_floating_point() or np.isfinite(obs.numpy().sum(dtype=np.float64)):
        return obs
    return torch.nan_to_num(obs, nan=0.0, posinf=0.0, neginf=0.0)


def _env_list(envs) -> list:
    """The Gymnasium envs inside an actor's vector env, if it is one that holds them."""
    return list(getattr(envs, "envs", ()))


def _array(value, dtype) -> np.ndarray:
    """A copy of an array as saved: a checkpoint holds numpy arrays as tensors."""
    if isinstance(value, torch.Tensor):
        value = value.numpy()
    return np.array(value, dtype=dtype)
