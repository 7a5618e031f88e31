"""An actor: one batched env of K envs and a CPU copy of the policy, filling rollout slots.

The actor knows nothing of processes or queues: a backend hands it a slot and the policy store,
and it loads the newest policy version, steps T times, and writes every field of the slot --
what its algorithm records beside observations, actions and rewards through the algorithm's
``Acting`` (asyncrl.core). Env state carries over between rollouts (no reset).
"""

from __future__ import annotations

import time

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
from asyncrl.nets import FlatParams
from asyncrl.runtime.transport import PolicyStore, Slot
from asyncrl.settings import TrainConfig


class ActorStatus:
    """What each actor is doing and since when: one row ``[phase, since]`` per actor, written by
    the actor (``since`` is ``time.monotonic()``, the same clock in every process), read by its
    supervisor. Backed by any float64 array of shape (actors, 2): shared memory for processes."""

    WAITING, POLICY, ACTING, STEPPING, DONE, STARTING = range(6)
    # the phases that wait on envs, which may hang: what a supervisor times (--env-step-timeout)
    WATCHED = {STEPPING: "one env step", STARTING: "building and resetting its envs"}

    def __init__(self, rows: np.ndarray):
        self.rows = rows

    @staticmethod
    def set(row: np.ndarray | None, phase: int) -> None:
        if row is not None:
            row[1] = time.monotonic()
            row[0] = phase

    def hung(self, actor: int, timeout: float, pauses: Pauses | None = None) -> float | None:
        """Seconds ``actor`` has been in a watched phase (an env step; building and first
        resetting its envs), if more than ``timeout`` (0: never); the ``pauses`` its supervisor
        saw are not counted."""
        phase, since = self.rows[actor]
        if timeout and int(phase) in self.WATCHED:
            now = time.monotonic()
            busy = now - since - (pauses.within(since, now) if pauses is not None else 0.0)
            if busy > timeout:
                return busy
        return None

    def doing(self, actor: int) -> str:
        """What ``actor`` is timed for, in words ("one env step")."""
        return self.WATCHED.get(self.phase(actor), "its work")

    def phase(self, actor: int) -> int:
        return int(self.rows[actor][0])


class Pauses:
    """Stretches in which a supervisor did not run at all. A Ctrl+Z, a frozen container or a
    suspended job stops the actors with it while the monotonic clock runs on: the supervisor
    calls :meth:`tick` at least every ``POLL`` seconds, and a gap of more than ``GAP`` between
    two ticks is a pause, not charged to an actor as time spent in a step."""

    GAP = 1.0  # seconds; a supervisor that merely was busy or starved meanwhile is not charged

    def __init__(self) -> None:
        self.last: float | None = None
        self.seen: list[tuple[float, float]] = []  # (start, end) of each pause, newest last

    def tick(self) -> None:
        now = time.monotonic()
        if self.last is not None and now - self.last > self.GAP:
            self.seen = self.seen[-255:] + [(self.last, now)]
        self.last = now

    def within(self, since: float, now: float) -> float:
        """Seconds of pauses between ``since`` and ``now``."""
        return sum(max(0.0, min(end, now) - max(start, since)) for start, end in self.seen)


class Actor:
    """The actor acts with the published parameters themselves where the store allows it (a
    single-buffer store: no version is published while actors act, see PolicyStore.attach),
    else with a copy per version. ``generation``: how many actors held this id before (restarts); it
    moves the env seeds on. ``status``: a row the actor keeps its phase in (see ActorStatus)."""

    def __init__(
        self,
        actor_id: int,
        cfg: TrainConfig,
        spec: EnvSpec,
        store: PolicyStore,
        generation: int = 0,
        status: np.ndarray | None = None,
    ):
        self.actor_id, self.cfg, self.spec, self.store = actor_id, cfg, spec, store
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
        # Its initial weights are overwritten by the first published version: drawing them
        # must not advance the global random stream, which the learner's updates use when the
        # actor lives in the learner's process (inline, thread), or a run would depend on the
        # backend.
        with torch.random.fork_rng(devices=[]):
            self.policy = algo.acting_module(cfg, spec)
        self.policy.requires_grad_(False)
        self.flat = FlatParams(self.policy)
        self.in_place = store.attach(self.flat)
        self.version = -1
        first_seed = actor_seed(cfg.seed, actor_id, self.K, cfg.actors, generation)
        self.generator = torch.Generator().manual_seed(first_seed)
        self.acting = algo.acting(cfg, spec, self.policy, self.generator)
        obs, _ = self.envs.reset(seed=[first_seed + i for i in range(self.K)])
        self.obs_dtype = np.dtype(spec.obs_dtype)  # uint8 frames stay uint8 (nets.as_float)
        self.obs = torch.as_tensor(np.asarray(obs, dtype=self.obs_dtype))
        self.ep_return = np.zeros(self.K, dtype=np.float64)
        self.ep_length = np.zeros(self.K, dtype=np.int64)
        if not spec.discrete:
            self.low, self.high = spec.action_low, spec.action_high

    def load_newest_policy(self) -> None:
        if self.in_place:  # the policy's tensors are the published vector
            self.version = self.store.version
        else:
            self.version = self.store.read_if_newer(self.version, self.flat.read_from)

    @torch.no_grad()
    def collect(self, slot: Slot, waited: float = 0.0) -> None:
        """Fill ``slot`` with one rollout using the newest published policy."""
        t0 = time.perf_counter()
        status = self.status
        ActorStatus.set(status, ActorStatus.POLICY)
        self.load_newest_policy()
        ActorStatus.set(status, ActorStatus.ACTING)
        acting, envs = self.acting, self.envs
        slot.ep_returns.fill(np.nan)
        slot.ep_lengths.fill(0)
        slot.versions.fill(self.version)
        acting.start_rollout(slot, self.version)
        for t in range(self.cfg.rollout):
            slot.obs[t] = self.obs.numpy()
            action = acting.act(_actable(self.obs), t, slot)
            env_action = slot.actions[t] = action.numpy()
            if not self.spec.discrete:
                env_action = np.clip(env_action, self.low, self.high)
            elif self.spec.action_start:  # the slot keeps the network's 0..n-1
                env_action = env_action + self.spec.action_start
            ActorStatus.set(status, ActorStatus.STEPPING)
            obs, reward, terminated, truncated, info = envs.step(env_action)
            ActorStatus.set(status, ActorStatus.ACTING)
            slot.rewards[t] = reward
            slot.terminated[t] = terminated
            slot.truncated[t] = truncated
            self.ep_return += reward
            self.ep_length += 1
            done = terminated | truncated
            if "episode_score" in info:  # the env logs whole games (Atari: all lives, unclipped)
                scored = np.flatnonzero(~np.isnan(info["episode_score"]))
                slot.ep_returns[t, scored] = info["episode_score"][scored]
                slot.ep_lengths[t, scored] = info["episode_steps"][scored]
            if done.any():
                idx = np.flatnonzero(done)
                if "episode_score" not in info:
                    slot.ep_returns[t, idx] = self.ep_return[idx]
                    slot.ep_lengths[t, idx] = self.ep_length[idx]
                self.ep_return[idx] = 0.0
                self.ep_length[idx] = 0
                acting.episodes_ended(slot, t, idx, np.asarray(truncated), info["final_obs"])
            self.obs = torch.as_tensor(np.asarray(obs, dtype=self.obs_dtype))
        slot.obs[self.cfg.rollout] = self.obs.numpy()
        restarts = env_restarts(envs)
        slot.env_restarts[0], self.env_restarts = restarts - self.env_restarts, restarts
        slot.actor[0] = self.actor_id
        slot.rollout_seconds[0] = time.perf_counter() - t0
        slot.wait_seconds[0] = waited
        slot.env_steps[0] = self.cfg.rollout * self.K
        ActorStatus.set(status, ActorStatus.WAITING)

    # ---------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict:
        """Where this actor is, between rollouts: its envs' episodes, their observations and
        running returns, and its random generator -- what a resumed run needs to go on exactly
        as if it had not stopped (see :func:`asyncrl.envs.env_state`)."""
        return {
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

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
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
