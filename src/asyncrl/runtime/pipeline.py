"""The actor-learner pipeline: the same lines for every mode, backend and number of policies.

    publish version 0 -> start actors -> repeat, per policy: [work ahead] its next batch ->
    train -> publish -> release

Sync vs async is decided by how many slots a batch holds and when an actor may start its next
rollout (the backends' SlotBooks); the backend decides where actors run and how rollouts and
policy versions travel, and supervises its actors. This is the one place a backend is made.

A population (``--policies P``) runs one such loop per policy, each on its own slots and policy
store (:class:`PolicyLoop`). Its learners live in the driver's process -- one policy, or the
inline and thread backends, whose loops then take turns in this thread -- or each in a process
of its own (the process and Ray backends), whose loops run in threads of the driver that wait
on them (:mod:`asyncrl.runtime.learners`); the main thread then writes the rows, evaluates,
checkpoints and watches the run's end. One policy is the loop of a single learner, as it always
was: the same calls in the same order, its checkpoint, rows and summary as before.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asyncrl.algos import algorithm
from asyncrl.core import NonFiniteError
from asyncrl.metrics import EpisodeStats, RowWindow, Throughput
from asyncrl.nets import FlatParams
from asyncrl.rundir import (
    CheckpointWriteError,
    checkpoint_files,
    load_checkpoint_file,
    policy_dir,
    restore_learner,
    save_best_checkpoint,
    save_checkpoint,
    save_config,
)
from asyncrl.runtime.backends import check_backend, make_backend
from asyncrl.runtime.backends.base import Backend
from asyncrl.runtime.learners import LocalLearner, RemoteLearner
from asyncrl.runtime.lifecycle import RunEnd, StopRequested, StopSignals
from asyncrl.runtime.memory import MB, MemoryWatch, Process
from asyncrl.runtime.pbt import PBT
from asyncrl.runtime.processes import POLL
from asyncrl.runtime.shell import Callback, RunShell, run_figures
from asyncrl.settings import policy_configs

__all__ = ["check_backend", "learners_in_processes", "train_pipeline"]


NONFINITE_COUNTS = ("nonfinite_skipped_rollouts", "nonfinite_skipped_steps")


def learners_in_processes(cfg: Any) -> bool:
    """Whether a run's learners each get a process: a population on a backend whose slots and
    policy stores are shared memory (process; ray, whose driver-side slots then are)."""
    return cfg.policies > 1 and cfg.backend in ("process", "ray")


class PolicyLoop:
    """One policy's training loop on its own slots: work ahead, its next batch, train,
    publish, release; the figures of each iteration as a row."""

    def __init__(self, index: int, cfg: Any, learner: Any, backend: Any, end: RunEnd, meter):
        self.index, self.cfg, self.learner, self.backend, self.end = (
            index,
            cfg,
            learner,
            backend,
            end,
        )
        self.meter: Throughput = meter
        self.window = RowWindow(cfg.envs_per_actor)
        self.pbt: PBT | None = None

    @property
    def episodes(self) -> EpisodeStats:
        return self.learner.episode_stats

    def step(self, stop: Any) -> dict[str, Any]:
        """One iteration; raises StopRequested if ``stop`` comes while it waits for a batch."""
        learner, backend, end, p = self.learner, self.backend, self.end, self.index
        updating = contextlib.nullcontext() if learner.remote else end.updating()
        with updating:
            learner.work_ahead()  # what it can do before the batch arrives
        t0 = time.perf_counter()
        batch = backend.next_batch(stop, p)  # a signal ends the wait (hung actors)
        waited = time.perf_counter() - t0
        updating = contextlib.nullcontext() if learner.remote else end.updating()
        with updating:
            stats = learner.train(batch)
        learner.publish(backend.sink(p))
        learner.record(batch)  # a learner process's episodes, mirrored here
        if self.pbt is not None:
            self.pbt.record(p, batch)
        backend.release(batch, p)
        return {**stats, **self.meter.iteration(waited, stats)}


class Halt:
    """Truthy once the run stops (a signal, or the driver ends the loops): what a policy loop's
    wait for its batch checks."""

    def __init__(self, stop: StopSignals):
        self.stop, self.flag = stop, False

    def __bool__(self) -> bool:
        return self.flag or bool(self.stop)


def train_pipeline(
    cfg: Any,
    spec: Any,
    run_dir: Path,
    resume: bool,
    on_start: Callable[[Backend], None] | None,
    callback: Callback | None,
    stop: StopSignals | None = None,
) -> dict[str, Any]:
    """The actor-learner run of ``trainer.train``, which has checked ``cfg`` and claimed
    ``run_dir``; it ends as :mod:`asyncrl.runtime.lifecycle` says."""
    stop = stop if stop is not None else StopSignals()
    P = cfg.policies
    configs = policy_configs(cfg)
    algo = algorithm(cfg.algo)
    remote = learners_in_processes(cfg)
    with contextlib.ExitStack() as cleanup:  # every close runs, even if one raises
        earlier_seconds, resumed_from, state = 0.0, None, {}
        local: list[Any] = []
        if P == 1:
            learner = algo.learner(cfg, spec)
            cleanup.callback(learner.close)
            if resume:
                state, resumed_from = restore_learner(run_dir, learner)
            local.append(learner)
            numel = learner.numel
        else:
            if resume:  # the run's own checkpoint: actors, PBT, clock; each policy has its own
                state, resumed_from = load_checkpoint_file(run_dir)
            with torch_rng_kept():
                numel = FlatParams(algo.acting_module(cfg, spec)).numel
        earlier_seconds = state.get("wall_seconds", 0.0)
        population = state.get("population") or {}
        mutable = dict(algo.mutable)
        values = [{n: getattr(c, n) for n in mutable} for c in configs]
        saved = population.get("pbt")
        if saved:  # a resume: PBT's values go on, not the config's; with --no-pbt those an
            # exploit gave a policy stay as they are (frozen), the others are its config's
            kept = [p for p in range(P) if cfg.pbt or saved["exploits"][p]]
            for p in kept:
                values[p] = dict(saved["values"][p])
            if kept and not cfg.pbt:
                which = f"polic{'ies' if len(kept) > 1 else 'y'} {', '.join(map(str, kept))}"
                print(f"asyncrl: pbt off: the values PBT gave {which} stay, frozen", flush=True)
        backend = make_backend(cfg, spec, numel)
        cleanup.callback(backend.close)
        if "actors" in state:
            backend.load_actor_state(state["actors"])
        handles: list[Any] = []
        for p, pcfg in enumerate(configs):
            given = values[p] if cfg.pbt or saved else None
            restore = policy_dir(run_dir, p) if resume and P > 1 else None
            if restore is not None and not checkpoint_files(restore):
                print(
                    f"asyncrl: policy {p} has no checkpoint in {restore} (its learner was lost "
                    "before its first): it starts anew",
                    file=sys.stderr,
                    flush=True,
                )
                restore = None
            if P > 1 and remote:
                handle: Any = RemoteLearner(
                    mp.get_context("spawn"),
                    p,
                    pcfg,
                    spec,
                    backend.slot_stores[p],
                    backend.stores[p],
                    restore,
                    given,
                )
                cleanup.callback(handle.close)
            else:
                if P > 1:
                    learner = algo.learner(pcfg, spec)
                    cleanup.callback(learner.close)
                    if restore is not None:
                        restore_learner(restore, learner)
                    if given:
                        learner.set_hyperparameters(given)
                    local.append(learner)
                handle = LocalLearner(local[p])
                handle.publish(backend.sink(p))
            handles.append(handle)
        for handle in handles:
            if handle.remote:
                handle.ready()  # built, resumed and version 0 published
        for learner in local:  # learners in processes come with backends that save no actors
            learner.episodes_continue(backend.continuing_actors())
        if resume:
            save_config(run_dir, cfg)  # the checkpoints loaded: the run goes on with these

        def total_steps() -> int:
            return sum(h.env_steps for h in handles)

        shell = RunShell(
            cfg, spec, run_dir, stop, resume, total_steps(), resumed_from, earlier_seconds,
            callback,
        )  # fmt: skip
        cleanup.callback(shell.close)
        end = shell.end
        loops = [
            PolicyLoop(p, c, h, backend, end, Throughput(c.envs_per_actor))
            for p, (c, h) in enumerate(zip(configs, handles, strict=True))
        ]
        if P == 1:
            loops[0].meter = shell.meter  # the run's figures are its one policy's
        steps_at_start = [h.env_steps for h in handles]
        pbt = PBT(cfg, mutable, values, run_dir, enabled=cfg.pbt)
        if saved:
            pbt.load_state_dict(saved)
            pbt.values = [dict(v) for v in values]  # what the learners were given
        if P > 1:
            for loop in loops:
                loop.pbt = pbt
        backend.learner_pids = lambda: {p: h.pid() for p, h in enumerate(handles) if h.remote}

        def leader() -> int:
            return pbt.leader([h.episode_stats.final_return for h in handles])

        def counters(loop: PolicyLoop) -> dict[str, Any]:
            h = loop.learner
            out = {
                **backend.health(),
                "episodic_return": h.episode_stats.final_return,
                "episodic_length": h.episode_stats.final_length,
                "iteration": h.iterations,
                "wall_seconds": shell.wall_seconds,
            }
            if P > 1:
                out.update(policy=loop.index, policy_env_steps=h.env_steps)
            return out

        memory = MemoryWatch()
        replay_mb: dict[int, float] = {}  # each policy's, from its newest row

        def processes() -> list[Process]:
            """The run's processes on this machine, what their buffers hold, and what a leak
            there would be in: the driver (the learners unless they have processes; the
            actors too on the inline and thread backends), the actors' and the learners'."""
            envs = f"the env ({cfg.env}) or a wrapper"
            here = sum(mb for p, mb in replay_mb.items() if not handles[p].remote)
            if remote:
                driver = Process("driver_mb", "the driver", os.getpid(), 0, "a callback")
            elif cfg.backend in ("inline", "thread"):
                driver = Process("driver_mb", "the learner", os.getpid(), int(here * MB), envs)
            else:
                suspect = "the learner or a callback"
                driver = Process("driver_mb", "the learner", os.getpid(), int(here * MB), suspect)
            out = [driver]
            actor_pids = getattr(backend, "actor_pids", None)  # actors in processes here
            if actor_pids is not None:
                out += [Process(f"actor_mb/{a}", f"actor {a}", pid, 0, envs)
                        for a, pid in actor_pids().items()]  # fmt: skip
            for p, h in enumerate(handles):
                if h.remote:
                    explained = int(replay_mb.get(p, 0.0) * MB)
                    out.append(
                        Process(f"learner_mb/{p}", h.label(), h.pid(), explained, "the learner")
                    )
            return out

        def write_row(loop: PolicyLoop) -> None:
            row = loop.window.fold()
            row.update(counters(loop))
            if "memory/replay_mb" in row:
                replay_mb[loop.index] = row["memory/replay_mb"]
            row.update(memory.sample(total_steps(), processes()))
            shell.log.write(total_steps(), row, None if P == 1 else loop.index)

        def record(loop: PolicyLoop, row: dict[str, Any]) -> bool:
            """Log an iteration of ``loop``; False if the callback ends the run."""
            loop.window.add(row)
            if loop.learner.iterations % loop.cfg.log_every == 0:
                write_row(loop)
            if P == 1:
                h, vector = loop.learner, loop.learner.policy_vector
            else:
                h = handles[leader()]
                vector = h.policy_vector
            return shell.after_iteration(
                total_steps(), row, h.episode_stats, vector, counters(loop)
            )

        def exploit(loop: PolicyLoop) -> None:
            """PBT at ``loop``'s period: copy a better policy and perturb its values, if its
            policy ranks in the bottom fraction."""
            p, h = loop.index, loop.learner
            if not pbt.due(p, h.env_steps):
                return
            decision = pbt.decide(p, h.env_steps)
            if decision is None:
                return
            source, new = decision
            # without the source's replay (and ratio): it keeps its own, and none is sent
            learner_state = handles[source].state(replay=False)["learner"]
            h.adopt(learner_state, new, backend.sink(p))
            pbt.exploited(p, source, new, h.env_steps, total_steps())

        def checkpoint() -> Path:
            if P == 1:
                return shell.checkpoint({**handles[0].state(), "actors": backend.actor_state()})
            paired: dict[int, dict[str, float]] = {}
            for p, h in enumerate(handles):
                if h.lost is not None:
                    continue  # its newest checkpoint stands
                policy_state = {
                    **h.state(),  # its hyperparameters too, read with its weights
                    "config": configs[p].to_dict(),
                    "wall_seconds": shell.wall_seconds,
                }
                where = policy_dir(run_dir, p)
                where.mkdir(exist_ok=True)
                save_checkpoint(where, policy_state, cfg.keep_checkpoints)
                if p == best and cfg.eval_every == 0:
                    save_best(p, policy_state)
                paired[p] = policy_state["hyperparameters"]
            # an exploit since a policy's state was read is in PBT's values, not in its weights
            # saved: a resume gives each learner the values its weights go with
            pbt_state = pbt.state_dict()
            for p, v in paired.items():
                pbt_state["values"][p] = v
            return shell.checkpoint(
                {
                    "actors": backend.actor_state(),
                    "population": {
                        "pbt": pbt_state,
                        "leader": best,
                        "env_steps": [h.env_steps for h in handles],
                    },
                }
            )

        best = 0

        def save_best(p: int, policy_state: dict[str, Any]) -> None:
            """The population's best policy (by its final return) as the run's best."""
            h = handles[p]
            try:
                save_best_checkpoint(
                    run_dir,
                    {
                        "policy": policy_state["policy"],
                        "config": configs[p].to_dict(),
                        "env_steps": h.env_steps,
                        "eval": {"policy": p, "final_return": h.episode_stats.final_return},
                    },
                )
            except (CheckpointWriteError, NonFiniteError) as e:  # the earlier best stands
                print(f"asyncrl: warning: {e}", file=sys.stderr, flush=True)

        halt = Halt(stop)
        threads: list[threading.Thread] = []
        rows: queue.Queue = queue.Queue()
        failures: queue.Queue = queue.Queue()

        def share_left(loop: PolicyLoop) -> bool:
            """Whether a policy's loop, a thread, starts another iteration: in sync mode while
            its policy is short of its share, in async mode while the run is short of its
            budget (the driver, behind on the rows, would otherwise stop the loops late)."""
            if cfg.mode == "sync":
                return loop.learner.env_steps < loop.cfg.total_steps
            return total_steps() < cfg.total_steps

        def run_loop(loop: PolicyLoop) -> None:
            """A learner process's loop, in a thread of the driver."""
            try:
                while not halt and share_left(loop):
                    row = loop.step(halt)
                    rows.put((loop, row))
                    exploit(loop)
            except StopRequested:
                pass
            except BaseException as e:  # the main thread ends the run with it
                failures.put(e)

        def stop_loops() -> None:
            halt.flag = True
            for t in threads:
                t.join()
            while not rows.empty():  # iterations done meanwhile: into their rows
                loop, row = rows.get()
                loop.window.add(row)

        try:
            backend.start()
            if on_start is not None:
                on_start(backend)
            if remote:
                for loop in loops:
                    t = threading.Thread(  # daemon: an abort must not wait on a learner
                        target=run_loop,
                        args=(loop,),
                        name=f"asyncrl-policy-{loop.index}",
                        daemon=True,
                    )
                    t.start()
                    threads.append(t)
            running = True
            while running and not shell.should_stop(total_steps()):
                if remote:
                    if not failures.empty():
                        raise failures.get()
                    try:
                        done = [rows.get(timeout=POLL)]
                    except queue.Empty:
                        if not any(t.is_alive() for t in threads) and rows.empty():
                            break  # every policy trained its share (shares round down)
                        continue
                else:
                    done = []
                    for loop in loops:
                        done.append((loop, loop.step(stop)))
                        if P > 1:
                            exploit(loop)
                for loop, row in done:
                    if not record(loop, row):
                        running = False
                        break
                if running:
                    if P > 1:
                        best = leader()
                    end.periodic(checkpoint, total_steps())
            stop_loops()
            if not failures.empty():
                raise failures.get()
            for loop in loops:
                if len(loop.window):
                    write_row(loop)
        except BaseException as e:
            end.failed(e)
            stop_loops()
        if P > 1:
            best = leader()

        def summary(fields: dict[str, Any]) -> dict[str, Any]:
            new_steps = total_steps() - shell.steps_at_start
            if P == 1:
                h = handles[0]
                own = {
                    **run_figures(cfg, h.episode_stats),
                    "mode": cfg.mode,
                    "backend": cfg.backend,
                    "actors": cfg.actors,
                    "envs_per_actor": cfg.envs_per_actor,
                    "rollout": cfg.rollout,
                    "env_steps": h.env_steps,
                    "iterations": h.iterations,
                    **shell.meter.summary(new_steps, cfg.actors),
                    "learn_seconds": h.learn_seconds,
                    **local[0].summary_fields(shell.meter.wall),
                    **local[0].nonfinite_counts(),
                    **backend.health(),
                }
                return shell.summary(fields, own)
            own = _population_summary(
                cfg, shell, loops, handles, pbt, best, backend.health(), new_steps, steps_at_start
            )
            print(population_table(own), flush=True)
            return shell.summary(fields, own)

        def stop_updates() -> None:
            for h in handles:
                if h.lost is None:
                    h.stop_updates()

        shell.progress.close()  # before the line that says how the run ended
        # async optimizers stop first, so the counters saved are final
        return end.conclude(total_steps, checkpoint, summary, stop_updates)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def torch_rng_kept():
    """Draw a throwaway network without moving torch's global random state."""
    import torch

    with torch.random.fork_rng(devices=[]):
        yield


def _population_summary(
    cfg: Any,
    shell: RunShell,
    loops: list[PolicyLoop],
    handles: list[Any],
    pbt: PBT,
    best: int,
    health: dict[str, int],
    new_steps: int,
    steps_at_start: list[int],
) -> dict[str, Any]:
    """A population run's summary: the best policy's figures as the run's, the fleet's
    throughput, and a row per policy (``population``)."""
    wall = shell.meter.wall
    rows, rates, lag_sum, lag_max, samples = [], [], 0.0, -math.inf, 0
    for loop, h, start in zip(loops, handles, steps_at_start, strict=True):
        figures = loop.meter.summary(h.env_steps - start, cfg.actors)
        rate = figures["env_steps_per_second"]
        rates.append(rate if math.isfinite(rate) else 0.0)
        lag_mean, lag_top = loop.meter.lag_summary()
        weight = h.env_steps - start
        if weight and math.isfinite(lag_mean):
            lag_sum += lag_mean * weight
            samples += weight
            lag_max = max(lag_max, lag_top)
        fields = {}
        if h.lost is None:
            fields = h.summary_fields(wall)
        rows.append(
            {
                "policy": loop.index,
                "env_steps": h.env_steps,
                "iterations": h.iterations,
                "episodes": h.episode_stats.episodes,
                "final_return": h.episode_stats.final_return,
                "last100_return": h.episode_stats.last100_return,
                "final_length": h.episode_stats.final_length,
                "env_steps_per_second": rate,
                "policy_lag_mean": lag_mean,
                "policy_lag_max": lag_top,
                "learn_seconds": h.learn_seconds,
                "hyperparameters": pbt.values[loop.index],
                "exploits": pbt.exploits[loop.index],
                "lost": h.lost is not None,
                **{k: v for k, v in fields.items() if isinstance(v, int | float)},
            }
        )
    first = loops[0].meter
    leader = handles[best]
    return {
        **run_figures(cfg, leader.episode_stats),
        "mode": cfg.mode,
        "backend": cfg.backend,
        "actors": cfg.actors,
        "envs_per_actor": cfg.envs_per_actor,
        "rollout": cfg.rollout,
        "env_steps": sum(h.env_steps for h in handles),
        "iterations": sum(h.iterations for h in handles),
        "wall_seconds": wall,
        "T": first.mean_T,
        "eps": cfg.envs_per_actor / first.mean_T if first.mean_T else math.nan,
        "env_steps_per_second": sum(rates),
        "env_steps_per_second_overall": new_steps / wall,
        "policy_lag_mean": lag_sum / samples if samples else math.nan,
        "policy_lag_max": lag_max if samples else math.nan,
        "rollout_seconds": first.rollout_seconds / cfg.actors,
        "learner_wait_seconds": sum(loop.meter.learner_wait for loop in loops),
        "actor_wait_seconds": first.actor_wait / cfg.actors,
        "learn_seconds": sum(h.learn_seconds for h in handles),
        **health,
        "policies": cfg.policies,
        "policy_mapping": cfg.policy_mapping,
        "pbt": cfg.pbt,
        "best_policy": best,
        "pbt_exploits": sum(pbt.exploits),
        **{k: sum(int(row.get(k, 0)) for row in rows) for k in NONFINITE_COUNTS},
        "population": rows,
    }


def population_table(summary: dict[str, Any]) -> str:
    """The population at the end of a run, one line per policy (the best marked)."""
    names = list(summary["population"][0]["hyperparameters"]) if summary["population"] else []
    head = f"{'policy':>6} {'env steps':>11} {'return':>8} {'lag':>5} {'exploits':>8}"
    lines = ["asyncrl: population", head + "".join(f" {n:>10}" for n in names)]
    for row in summary["population"]:
        mark = "*" if row["policy"] == summary["best_policy"] else " "
        values = "".join(f" {row['hyperparameters'][n]:>10.4g}" for n in names)
        lines.append(
            f"{mark}{row['policy']:>5} {row['env_steps']:>11,} {row['final_return']:>8.1f} "
            f"{row['policy_lag_mean']:>5.2f} {row['exploits']:>8}{values}"
            + ("  (learner lost)" if row["lost"] else "")
        )
    return "\n".join(lines)
