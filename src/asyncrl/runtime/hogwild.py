"""Hogwild!: M worker processes, each an actor and a learner of its own (the pipeline's learner),
all training one global network in shared memory (Recht et al. 2011). :class:`HogwildSync`
reads the global parameters before each gradient step and adds the worker's change after it,
without a lock (``shared``), or every ``--sync-every`` steps (``synced``). The parent owns the
shared memory and the workers and runs the run shell every run has (docs: Internals;
Guides: Hogwild!)."""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing as mp
import os
import queue
import signal
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asyncrl.config import learner_threads, worker_config
from asyncrl.core import Algorithm, NonFiniteError, SharesParameters
from asyncrl.envs import EnvSpec
from asyncrl.learning.schedule import continue_schedule
from asyncrl.metrics import EpisodeStats, Throughput
from asyncrl.nets import FlatParams
from asyncrl.rundir import restore_learner, save_config
from asyncrl.runtime.faults import ActorError, is_env_error
from asyncrl.runtime.processes import POLL, ChildProcesses, die_with_parent, report_failure
from asyncrl.runtime.shell import RunShell, run_figures
from asyncrl.runtime.supervisor import ActorStatus, Supervisor
from asyncrl.runtime.transport import PolicyStore, SharedArray, SlotStore, StopFlag, rollout_layout
from asyncrl.settings import Prepared, TrainConfig

# columns of the shared counters, one row per worker (each worker writes only its own row)
STEPS, UPDATES, ITERATIONS, READY, ENV_RESTARTS, SKIPPED_ROLLOUTS, SKIPPED_STEPS = range(7)
COUNTERS = 7


class HogwildSync:
    """Keeps one worker's local tensors and the global flat vector in step.

    ``snapshot`` is what the worker last read from (or wrote to) the global vector, so
    ``local - snapshot`` is exactly this worker's own change since: adding it to the global
    vector never counts another worker's change twice.

    Running statistics (``norms``: the observation normaliser's mean, variance and count) are
    not differences of weights: two workers adding ``local - snapshot`` of a variance from the
    same start give ``var_A + var_B - var_0``, negative where it is small. This worker's own
    observations since the snapshot are recovered from the two as (count, mean, M2) and merged
    into the global statistics by Chan et al.'s formula, which keeps a variance >= 0 and a mean
    among the data's whatever another worker writes meanwhile (no lock: one that is lost to a
    concurrent merge costs that batch's statistics, never their validity).
    """

    def __init__(
        self,
        tensors: list[torch.Tensor],
        global_params: np.ndarray,
        mode: str,
        every: int,
        norms: list[Any] = (),
    ):
        self.flat = FlatParams.of(tensors)
        if self.flat.numel != global_params.size:
            raise ValueError(f"{self.flat.numel} local floats vs {global_params.size} global")
        self.global_ = global_params
        self.snapshot = np.empty_like(global_params)
        self.delta = np.empty_like(global_params)
        self.shared = mode == "shared"
        self.every = 1 if self.shared else every
        self.updates = 0
        self.syncs = 0
        at, start = {}, 0
        for t in tensors:
            at[id(t)] = slice(start, start + t.numel())
            start += t.numel()
        # (tensors, slices in the vector, the values the local ones started from) of each norm
        self.norms = [
            ((n.count, n.mean, n.var), tuple(at[id(t)] for t in (n.count, n.mean, n.var)), None)
            for n in norms
        ]
        stats = {s.start for _, slices, _ in self.norms for s in slices}
        self.weights = _ranges([at[id(t)] for t in tensors if at[id(t)].start not in stats])

    def pull(self) -> None:
        """Local tensors <- the global vector (as it is now, possibly mid-write by another)."""
        np.copyto(self.snapshot, self.global_)
        self.flat.read_from(self.snapshot)
        self.norms = [(ts, sl, _float64(ts)) for ts, sl, _ in self.norms]

    def push(self) -> None:
        """Global vector += this worker's change since the last pull or push; its statistics
        merged. No lock."""
        self.flat.write_to(self.delta)
        for s in self.weights:
            d = self.delta[s]
            d -= self.snapshot[s]
            self.global_[s] += d
            self.snapshot[s] += d
        self.norms = [(ts, sl, self._merge(ts, sl, base)) for ts, sl, base in self.norms]

    def _merge(self, tensors: tuple, slices: tuple, base: tuple | None) -> tuple:
        """Merge what the local statistics saw since ``base`` into the global ones; returns the
        new base (the local values now)."""
        local = _float64(tensors)
        if base is None:
            return local
        (n, mean, var), (n0, mean0, var0) = local, base
        batch_n = float(n - n0)
        if batch_n < 0.5:  # nothing seen since: an observation counts 1
            return local
        batch_mean = (n * mean - n0 * mean0) / batch_n
        # M2 = n var; the local merge added batch_M2 + (batch_mean - mean0)^2 n0 batch_n / n
        batch_m2 = n * var - n0 * var0 - np.square(batch_mean - mean0) * n0 * batch_n / n
        g_n, g_mean, g_var = (self.global_[s].astype(np.float64) for s in slices)
        total = g_n + batch_n
        delta = batch_mean - g_mean
        m2 = g_var * g_n + np.maximum(batch_m2, 0.0) + np.square(delta) * g_n * batch_n / total
        for s, value in zip(
            slices, (total, g_mean + delta * batch_n / total, m2 / total), strict=True
        ):
            self.global_[s] = value
            self.snapshot[s] = value
        return local

    def before_update(self) -> None:
        if self.shared:
            self.pull()

    def after_update(self) -> None:
        self.updates += 1
        if self.shared:
            self.push()
        elif self.updates % self.every == 0:
            self.sync()

    def sync(self) -> None:
        self.push()
        self.pull()
        self.syncs += 1


def _float64(tensors: tuple) -> tuple:
    return tuple(t.detach().cpu().numpy().astype(np.float64) for t in tensors)


def _ranges(slices: list[slice]) -> list[slice]:
    """Adjacent slices joined: the weights between statistics, as few numpy ops as can be."""
    out: list[slice] = []
    for s in sorted(slices, key=lambda s: s.start):
        if out and out[-1].stop == s.start:
            out[-1] = slice(out[-1].start, s.stop)
        else:
            out.append(s)
    return out


def sharing(learner: Any) -> Any:
    """``learner`` as Hogwild! workers share it: its algorithm must offer sharing (a
    capability, :class:`~asyncrl.core.SharesParameters`)."""
    if not isinstance(learner, SharesParameters):
        raise TypeError(f"{learner.cfg.algo}: its learner offers no Hogwild! sharing")
    return learner


def _stopping(stop: Any, parent: int) -> bool:
    return stop.is_set() or os.getppid() != parent


def worker_main(
    outbox: Connection,
    worker: int,
    cfg: TrainConfig,
    spec: EnvSpec,
    algo: Algorithm,
    params: SharedArray,
    counters: SharedArray,
    status: SharedArray,
    steps_before: int,
    stop: Any,
    parent: int,
    generation: int = 0,
    schedule_from: tuple[int, float] = (0, 1.0),
) -> None:
    """Entry point of a worker process: collect, train with Hogwild! sync, report; repeat until
    all workers together have taken ``cfg.total_steps`` env steps or the parent says stop. A
    replacement (``generation`` > 0) starts from the global network as it is then, with fresh
    envs and optimizer, and counts on in its predecessor's row of the counters."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how the run ends
    die_with_parent()
    torch.set_num_threads(learner_threads(cfg, cfg.hogwild))
    from asyncrl.runtime.actor import Actor

    actor = slots = learner = sync = row = None
    try:
        wcfg = worker_config(cfg, worker)
        learner = sharing(algo.learner(wcfg, spec))
        row = counters.array[worker]
        # a resumed run's (or a replaced worker's) schedules go on where they were
        learner.env_steps = steps_before // cfg.hogwild + int(row[STEPS])
        learner.schedule_from = schedule_from  # in the worker's share of the steps
        sync = HogwildSync(
            learner.shared_tensors(),
            params.array,
            cfg.sync_mode,
            cfg.sync_every,
            learner.running_norms(),
        )
        sync.pull()
        # Shared mode pushes after every step; only a change made outside the steps needs its
        # own push (synced mode carries it to the next sync)
        outside_steps = sync.shared and learner.changes_outside_steps
        learner.set_step_hooks(sync.before_update, sync.after_update)
        store = PolicyStore(learner.numel, shared=False, buffers=1)
        ActorStatus.set(status.array[worker], ActorStatus.STARTING)  # timed: an env may hang
        actor = Actor(  # one process, one buffer: acts with the published parameters in place
            worker,
            wcfg,
            spec,
            algo,
            store,
            generation=generation,
            status=status.array[worker],
        )
        ActorStatus.set(status.array[worker], ActorStatus.WAITING)
        slots = SlotStore(rollout_layout(wcfg, spec, algo), 1, shared=False)
        slot = slots.slots[0]
        row[READY] = 1  # start together: a worker spawned later would find the budget spent
        while not counters.array[:, READY].all():
            if _stopping(stop, parent):
                break
            time.sleep(0.01)
        while steps_before + int(counters.array[:, STEPS].sum()) < cfg.total_steps:
            if _stopping(stop, parent):
                break
            learner.publish(store)
            actor.collect(slot)
            if slot.env_restarts[0]:  # envs recreated in this rollout (rare: no write else)
                row[ENV_RESTARTS] += int(slot.env_restarts[0])
            skipped = learner.skipped_rollouts, learner.skipped_steps
            stats = learner.train([slot])
            row[SKIPPED_ROLLOUTS] += learner.skipped_rollouts - skipped[0]
            row[SKIPPED_STEPS] += learner.skipped_steps - skipped[1]
            if outside_steps:  # PPO's observation statistics move after the update
                sync.push()
            row[STEPS] += int(stats["samples"])
            row[UPDATES] = sync.updates
            row[ITERATIONS] += 1
            done = ~np.isnan(slot.ep_returns)
            stats["worker"] = worker
            stats["worker_syncs"] = sync.syncs
            ended = (slot.ep_returns[done].tolist(), slot.ep_lengths[done].tolist())
            outbox.send((stats, ended))
        sync.push()  # nothing this worker learned is left out of the global network
        outbox.send(None)  # goodbye
    except NonFiniteError as e:  # the parent ends the run with it; the bad step was not applied
        outbox.send(e)
        outbox.send(None)
    except BaseException as e:
        report_failure(outbox, fatal=is_env_error(e))
        os._exit(1)  # the sentinel tells the parent at once
    finally:
        if actor is not None:
            actor.close()
        if slots is not None:
            slots.close()
        # views of the segments go first, or they cannot close: the learner holds the sync's
        # hooks in a reference cycle, so collect it now rather than at interpreter exit
        learner = sync = row = None
        gc.collect()
        params.close()
        counters.close()
        status.close()


def _restore(cfg: TrainConfig, run_dir: Path, holder: Any) -> tuple[float, Any, int]:
    """A resumed run's global network, from its checkpoint: the wall seconds before, the
    checkpoint's path, and the first generation of workers' envs."""
    state, resumed_from = restore_learner(run_dir, holder)
    # the workers' envs go on to seeds no earlier worker had, not the first ones again
    generations = (state.get("actors") or {}).get("generations") or [-1]
    # PPO's schedules go on without a jump, in a worker's share of the steps (the saved
    # leg is in those units: the holder's total is a worker's share)
    saved = state["learner"].get("schedule")
    if saved is not None:
        share = holder.cfg.total_steps
        holder.schedule_from = continue_schedule(saved, share, holder.env_steps // cfg.hogwild)
    save_config(run_dir, cfg)  # the checkpoint loaded: the run goes on with these
    return state.get("wall_seconds", 0.0), resumed_from, max(generations) + 1


class HogwildRun:
    """The parent's side of a Hogwild! run as the run's shell hosts it (``trainer.train`` has
    checked the settings and claimed ``run_dir``): the global network in shared memory
    (``holder`` reads and checkpoints it; a resumed run's loaded), the workers' counters and
    statuses, the workers (spawned, supervised, replaced) and their reports, each a row of the
    shell. The global network is never half-updated from the parent's view, so every ending
    but an abort keeps it."""

    shell: RunShell

    def __init__(
        self, run: Prepared, run_dir: Path, resume: bool, cleanup: contextlib.ExitStack
    ):  # fmt: skip
        cfg, spec, algo = run.cfg, run.spec, run.algo
        # The global network starts as the first worker would have: seeded like a single learner.
        self.holder = holder = sharing(algo.learner(worker_config(cfg, 0), spec))
        self.earlier_seconds, self.resumed_from, self.first_generation = 0.0, None, 0
        if resume:
            self.earlier_seconds, self.resumed_from, self.first_generation = _restore(
                cfg, run_dir, holder
            )
        self.cfg, self.spec, self.algo, self.M = cfg, spec, algo, cfg.hogwild
        self.steps_before = holder.env_steps
        self.schedule_from = holder.schedule_from
        self.episodes = holder.episode_stats
        self.flat = FlatParams.of(holder.shared_tensors())
        self.params = SharedArray((self.flat.numel,), "float32")
        self.counters = SharedArray((self.M, COUNTERS), "int64")
        self.status = SharedArray((self.M, 2), "float64")
        ctx = mp.get_context("spawn")
        self.children = ChildProcesses(ctx, "hogwild worker", cfg)
        self.stop = StopFlag(ctx)  # tells the workers to push their work and say goodbye
        # a lost worker's iteration (rollout and update) is lost; the global network holds
        # every step it had pushed. Workers that said goodbye are its ``done``.
        self.supervisor = Supervisor(
            self.children,
            cfg.env_step_timeout,
            ActorStatus(self.status),
            cfg.actor_restarts,
            lambda w: self.spawn(w, self.children.generation[w] + 1),
        )
        self.finished = 0  # workers that said goodbye
        self.learn_seconds = 0.0
        self.first: tuple[float, int] | None = None  # (time, gradient steps) learning began
        self.t_wait = time.perf_counter()
        self.deadline = math.inf  # once the run stops on a signal: when to stop waiting
        cleanup.callback(self.close)
        self.flat.write_to(self.params.array)

    def drive(self, shell: RunShell, on_start: Any = None) -> None:
        """Spawn the workers and take their reports until the shell says stop and every
        worker has said goodbye; ``on_start`` is the pipeline's (a Hogwild! run has no fleet)."""
        self.shell, end = shell, shell.end
        try:
            self.start()
            self.receive()
            shell.should_stop(self.env_steps())
        except BaseException as e:
            end.failed(e)
            if end.consistent and not isinstance(e, ActorError):
                # let the workers push what they learned and say goodbye
                self.stop.set()
                self.deadline = time.perf_counter() + 10
                with contextlib.suppress(Exception):
                    self.receive()
        self.stop.set()
        self.children.close()

    def stop_updates(self) -> None:
        """Nothing changes the global network once the workers have said goodbye."""

    def start(self) -> None:
        self.t_wait = time.perf_counter()
        for w in range(self.M):
            self.spawn(w, self.first_generation)

    def spawn(self, w: int, generation: int) -> None:
        self.status.array[w] = (ActorStatus.WAITING, time.monotonic())
        args = (w, self.cfg, self.spec, self.algo, self.params, self.counters, self.status)
        args += (self.steps_before, self.stop, os.getpid(), generation, self.schedule_from)
        self.children.start(worker_main, args, w, generation)

    def env_steps(self) -> int:
        """The global network's env steps: before this run, and the workers' since."""
        return self.steps_before + int(self.counters.array[:, STEPS].sum())

    def global_policy(self) -> np.ndarray:
        """The acting policy of the global network as it is now, as a published vector."""
        self.flat.read_from(self.params.array.copy())
        return self.holder.policy_vector()

    def checkpoint(self) -> Path:
        holder, counters = self.holder, self.counters.array
        self.flat.read_from(self.params.array.copy())
        holder.env_steps = self.env_steps()
        holder.iterations = int(counters[:, ITERATIONS].sum())
        generations = [self.children.generation.get(w, 0) for w in range(self.M)]
        return self.shell.checkpoint(
            {
                "learner": holder.state_dict(),
                "policy": holder.policy.state_dict(),  # what acts (shares the tensors)
                "hogwild": counters.tolist(),
                "actors": {"generations": generations},
            }
        )

    def receive(self) -> None:
        """Handle reports until every worker has said it is done (or, once the run stops
        on a signal, until a deadline: a worker ends the iteration it is in first)."""
        shell, stop = self.shell, self.stop
        while self.finished < self.M and time.perf_counter() < self.deadline:
            if not stop.is_set() and shell.should_stop(self.env_steps()):
                stop.set()  # the workers push their work and say goodbye
                if shell.end.kind == "signal":
                    self.deadline = time.perf_counter() + 10
            for lost in self.supervisor.check():
                self.supervisor.replace(lost, dropped=1)
            try:
                worker, report = self.children.receive(timeout=POLL)
            except queue.Empty:
                continue
            if report is None:
                self.finished += 1
                self.supervisor.done.add(worker)
            elif isinstance(report, NonFiniteError):
                raise NonFiniteError(f"hogwild worker {worker}: {report}")
            else:
                self.report(worker, *report)

    def report(self, worker: int, stats: dict[str, Any], ended: tuple[list, list]) -> None:
        """One worker iteration: its row, the run's checks after it, a periodic checkpoint."""
        shell, counters, episodes = self.shell, self.counters.array, self.episodes
        waited = time.perf_counter() - self.t_wait
        episodes.add(*ended)
        self.learn_seconds += stats["learn_seconds"]
        steps = self.env_steps()
        updates = int(counters[:, UPDATES].sum())
        row = {**stats, **shell.meter.iteration(waited, stats)}
        if self.first is None and updates > 0:  # rates from the first gradient step on
            self.first = (shell.meter.last, updates)
        row["episodic_return"] = episodes.final_return
        row["episodic_length"] = episodes.final_length
        row[f"worker_env_steps/{worker}"] = int(counters[worker, STEPS])
        row["gradient_steps"] = updates
        row["wall_seconds"] = shell.wall_seconds
        row.update(self.health())
        shell.log.write(steps, row)
        if not shell.after_iteration(steps, row, episodes, self.global_policy, dict):
            self.stop.set()  # the workers push their work and say goodbye
        shell.end.periodic(self.checkpoint, steps)
        self.t_wait = time.perf_counter()

    def health(self) -> dict[str, int]:
        counters = self.counters.array
        return {
            "actor_restarts": self.supervisor.restarts.used,
            "dropped_rollouts": self.supervisor.restarts.dropped,
            "env_restarts": int(counters[:, ENV_RESTARTS].sum()),
            "nonfinite_skipped_rollouts": int(counters[:, SKIPPED_ROLLOUTS].sum()),
            "nonfinite_skipped_steps": int(counters[:, SKIPPED_STEPS].sum()),
        }

    def summary(self, fields: dict[str, Any]) -> dict[str, Any]:
        meter, counters = self.shell.meter, self.counters.array
        steady = math.nan
        if self.first is not None and meter.last > self.first[0]:
            steps = int(counters[:, UPDATES].sum()) - self.first[1]
            steady = steps / (meter.last - self.first[0])
        new_steps = self.env_steps() - self.steps_before
        own = _summary(self.cfg, meter, counters, new_steps, self.episodes)
        own.update(self.health())
        own.update(
            learn_seconds=self.learn_seconds / self.M,
            gradient_steps_per_second_steady=steady,
            env_steps=self.env_steps(),
        )
        return self.shell.summary(fields, own)

    def close(self) -> None:
        self.stop.set()
        self.children.close()
        self.params.close()
        self.counters.close()
        self.status.close()


def _summary(
    cfg: TrainConfig,
    meter: Throughput,
    counters: np.ndarray,
    new_steps: int,
    episodes: EpisodeStats,
) -> dict[str, Any]:
    updates = counters[:, UPDATES].tolist()
    return {
        **run_figures(cfg, episodes),
        "mode": "hogwild",
        "backend": "process",
        "hogwild": cfg.hogwild,
        "sync_mode": cfg.sync_mode,
        "sync_every": cfg.sync_every,
        "actors": cfg.hogwild,
        "envs_per_actor": cfg.envs_per_actor,
        "rollout": cfg.rollout,
        "iterations": int(counters[:, ITERATIONS].sum()),
        # lag is in each worker's own versions: it trains on what its copy just collected
        **meter.summary(new_steps, cfg.hogwild),
        "worker_env_steps": counters[:, STEPS].tolist(),
        "gradient_steps": int(sum(updates)),
        "worker_gradient_steps": updates,
        "gradient_steps_per_second": sum(updates) / meter.wall,  # start-up included
    }
