"""The policies a run trains; one policy is a population of one.

:class:`Population` holds each policy's learner handle -- in the driver's process, or in a
process of its own (``Prepared.in_processes``, decided once with the settings) -- PBT
(exploit and explore, pbt.jsonl), the leader, the checkpoints and the summary. The driver
(:mod:`asyncrl.runtime.pipeline`) steps the learners and hands the population their rows.

What a user sees differs with the number of policies in one way: the run directory's layout.
It is chosen once, with the settings (``Prepared.policy_folders``): one policy keeps its files
at the top of the run directory, as they always were (:class:`OnePolicyFiles`); a population
keeps each policy's checkpoints in ``policy_<i>/`` beside the run's own, tags its rows with the
policy, and sums its policies in the summary (:class:`PolicyFolders`).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import sys
from pathlib import Path
from typing import Any

from asyncrl.core import NonFiniteError
from asyncrl.metrics import RowWindow, Throughput
from asyncrl.nets import FlatParams
from asyncrl.rundir import (
    CheckpointWriteError,
    checkpoint_files,
    load_checkpoint_file,
    policy_dir,
    restore_learner,
    save_best_checkpoint,
    save_checkpoint,
)
from asyncrl.runtime.learners import LocalLearner, RemoteLearner, adoptable, policy_learner
from asyncrl.runtime.memory import MB, MemoryWatch, Process
from asyncrl.runtime.pbt import PBT
from asyncrl.runtime.pool import OpponentPool
from asyncrl.runtime.shell import RunShell, run_figures
from asyncrl.settings import Prepared, TrainConfig, trains

NONFINITE_COUNTS = ("nonfinite_skipped_rollouts", "nonfinite_skipped_steps")


class Population:
    """A run's policies: made before the backend (:meth:`numel` sizes its policy stores), their
    learners started on it (:meth:`start`), then wrapped in the run's shell (:meth:`attach`).
    ``best`` is the leader, ranked by the driver after each round of rows (:meth:`rank`)."""

    def __init__(self, run: Prepared, run_dir: Path, resume: bool):
        cfg = run.cfg
        self.cfg, self.spec, self.algo, self.run_dir = cfg, run.spec, run.algo, run_dir
        self.configs, self.in_processes, self.marks_own = (
            run.policies,
            run.in_processes,
            run.marks_own,
        )
        files = PolicyFolders if run.policy_folders else OnePolicyFiles
        self.files = files(cfg, run_dir, resume)
        # a resume: the run's own checkpoint (actors, PBT, clock; a population's policies each
        # have their own)
        self.state, self.resumed_from = load_checkpoint_file(run_dir) if resume else ({}, None)
        self.values, saved = self._pbt_values()
        self.pbt = PBT(cfg, dict(self.algo.mutable), self.values, run_dir, enabled=cfg.pbt)
        if saved:
            self.pbt.load_state_dict(saved)
            self.pbt.values = [dict(v) for v in self.values]  # what the learners are given
        self.given = cfg.pbt or bool(saved)  # whether the learners start on these values
        self.handles: list[Any] = []
        self.best = 0
        self.memory = MemoryWatch()
        self.replay_mb: dict[int, float] = {}  # each policy's, from its newest row
        self.pool: OpponentPool | None = None  # --opponents pool (shared by the policies)

    def _pbt_values(self) -> tuple[list[dict[str, float]], dict[str, Any] | None]:
        """Each policy's values of its algorithm's mutable settings, and PBT's saved state."""
        values = [{n: getattr(c, n) for n in self.algo.mutable} for c in self.configs]
        saved = (self.state.get("population") or {}).get("pbt")
        if saved:  # a resume: PBT's values go on, not the config's; with --no-pbt those an
            # exploit gave a policy stay as they are (frozen), the others are its config's
            kept = [p for p in range(len(values)) if self.cfg.pbt or saved["exploits"][p]]
            for p in kept:
                values[p] = dict(saved["values"][p])
            if kept and not self.cfg.pbt:
                which = f"polic{'ies' if len(kept) > 1 else 'y'} {', '.join(map(str, kept))}"
                print(f"asyncrl: pbt off: the values PBT gave {which} stay, frozen", flush=True)
        return values, saved

    # ------------------------------------------------------------ before the run
    def numel(self) -> list[int]:
        """Each policy's float32 parameters, from a throwaway network of each one's spaces
        (torch's global random state kept)."""
        with torch_rng_kept():
            specs = self.spec.policies or (self.spec,)  # one network where all share spaces
            sizes = [FlatParams(self.algo.acting_module(self.cfg, s)).numel for s in specs]
        return sizes if self.spec.policies else sizes * len(self.configs)

    def start(self, backend: Any, cleanup: contextlib.ExitStack) -> None:
        """Each policy's learner (resumed from its checkpoint), version 0 published; the
        backend's actors go on from the checkpoint's."""
        self.backend = backend
        if "actors" in self.state:
            backend.load_actor_state(self.state["actors"])
        if getattr(backend, "pool", None) is not None:  # self-play against snapshots
            self.pool = OpponentPool(self.cfg, self.spec.agents, backend.pool)
        for p, pcfg in enumerate(self.configs):
            given = self.values[p] if self.given else None
            if self.in_processes:  # (with backends that save no actors: no episodes go on)
                handle: Any = RemoteLearner(
                    mp.get_context("spawn"), p, pcfg, self.spec, self.algo,
                    backend.slot_stores[p], backend.stores[p], self.files.restore_dir(p), given,
                    self.marks_own,
                )  # fmt: skip
                cleanup.callback(handle.close)
            else:
                learner = policy_learner(self.algo, pcfg, self.spec, p, self.marks_own)
                cleanup.callback(learner.close)
                self.files.restore(p, learner, self.state)
                if given:
                    adoptable(learner).set_hyperparameters(given)
                learner.episodes_continue(backend.continuing_actors())
                learner.publish(backend.sink(p))  # version 0
                handle = LocalLearner(learner, self.algo)
            self.handles.append(handle)
        for handle in self.handles:
            if handle.remote:
                handle.ready()  # built, resumed and version 0 published
        if self.pool is not None:  # its first snapshots: each policy's version 0
            if "pool" in self.state:
                self.pool.load_state_dict(self.state["pool"])
            else:
                for p, h in enumerate(self.handles):
                    self.pool.snapshot(h.policy_vector(), p)
        backend.learner_pids = self.learner_pids

    def attach(self, shell: RunShell) -> None:
        """Inside the run's shell: each policy's throughput meter and row window."""
        self.shell = shell
        self.steps_at_start = [h.env_steps for h in self.handles]
        self.meters = [self.files.meter(shell, c) for c in self.configs]
        self.windows = [RowWindow(c.envs_per_actor) for c in self.configs]

    # ------------------------------------------------------------ during the run
    def env_steps(self) -> int:
        return sum(h.env_steps for h in self.handles)

    def learner_pids(self) -> dict[int, int | None]:
        return {p: h.pid() for p, h in enumerate(self.handles) if h.remote}

    def leader(self) -> int:
        return self.pbt.leader([h.episode_stats.final_return for h in self.handles])

    def rank(self) -> None:
        self.best = self.leader()

    def exploit(self, p: int) -> None:
        """PBT at policy ``p``'s period: copy a better policy and perturb its values, if ``p``
        ranks in the bottom fraction."""
        h = self.handles[p]
        if not trains(self.cfg, p) or not self.pbt.due(p, h.env_steps):
            return  # a frozen policy's parameters never change, by PBT neither
        decision = self.pbt.decide(p, h.env_steps)
        if decision is None:
            return
        source, new = decision
        # without the source's replay (and ratio): it keeps its own, and none is sent
        learner_state = self.handles[source].state(replay=False)["learner"]
        h.adopt(learner_state, new, self.backend.sink(p))
        if self.pool is not None:  # its weights are the source's now: so is its rating
            self.pool.adopted(p, source)
        self.pbt.exploited(p, source, new, h.env_steps, self.env_steps())

    def counters(self, p: int) -> dict[str, Any]:
        h = self.handles[p]
        return {
            **self.backend.health(),
            "episodic_return": h.episode_stats.final_return,
            "episodic_length": h.episode_stats.final_length,
            "iteration": h.iterations,
            "wall_seconds": self.shell.wall_seconds,
            **self.files.tag(p, h),
        }

    def record(self, p: int, row: dict[str, Any]) -> bool:
        """Log an iteration of policy ``p``; False if the callback ends the run."""
        self.windows[p].add(row)
        if self.handles[p].iterations % self.configs[p].log_every == 0:
            self.write_row(p)
        h = self.handles[self.leader()]
        return self.shell.after_iteration(
            self.env_steps(), row, h.episode_stats, h.policy_vector, lambda: self.counters(p)
        )

    def write_row(self, p: int) -> None:
        row = self.windows[p].fold()
        row.update(self.counters(p))
        if "memory/replay_mb" in row:
            self.replay_mb[p] = row["memory/replay_mb"]
        row.update(self.memory.sample(self.env_steps(), self.processes()))
        if self.pool is not None:
            row.update(self.pool.figures(p))
        self.shell.log.write(self.env_steps(), row, self.files.row_policy(p))

    def write_rows(self) -> None:
        """The rows of the iterations since each policy's last."""
        for p, window in enumerate(self.windows):
            if len(window):
                self.write_row(p)

    def processes(self) -> list[Process]:
        """The run's processes on this machine, what their buffers hold, and what a leak there
        would be in: the driver (the learners unless they have processes; the actors too on
        the inline and thread backends), the actors' and the learners'."""
        cfg, backend = self.cfg, self.backend
        envs = f"the env ({cfg.env}) or a wrapper"
        here = sum(mb for p, mb in self.replay_mb.items() if not self.handles[p].remote)
        if self.in_processes:
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
        for p, h in enumerate(self.handles):
            if h.remote:
                explained = int(self.replay_mb.get(p, 0.0) * MB)
                out.append(Process(f"learner_mb/{p}", h.label(), h.pid(), explained, "the learner"))
        return out

    # ------------------------------------------------------------ the end
    def checkpoint(self) -> Path:
        return self.files.checkpoint(self)

    def summary(self, fields: dict[str, Any]) -> dict[str, Any]:
        new_steps = self.env_steps() - self.shell.steps_at_start
        return self.shell.summary(fields, self.files.summary(self, new_steps))

    def stop_updates(self) -> None:
        """Async optimizers stop first, so the counters saved are final."""
        for h in self.handles:
            if h.lost is None:
                h.stop_updates()


def _summary_head(cfg: TrainConfig, leader: Any) -> dict[str, Any]:
    """What every summary starts with: the run's layout and its (leading) policy's returns."""
    return {
        **run_figures(cfg, leader.episode_stats),
        "mode": cfg.mode,
        "backend": cfg.backend,
        "actors": cfg.actors,
        "envs_per_actor": cfg.envs_per_actor,
        "rollout": cfg.rollout,
    }


class OnePolicyFiles:
    """One policy: its checkpoints, rows and summary are the run's, at the top of the run
    directory; its throughput is the run's."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, resume: bool):
        self.cfg, self.run_dir, self.resume = cfg, run_dir, resume

    def restore_dir(self, p: int) -> Path | None:
        """Where a learner process resumes policy ``p`` from: the run's checkpoints."""
        return self.run_dir if self.resume else None

    def restore(self, p: int, learner: Any, state: dict[str, Any]) -> None:
        """Resume policy ``p``'s learner here, from the run's checkpoint (loaded already)."""
        if self.resume:
            learner.load_state_dict(state["learner"])

    def meter(self, shell: RunShell, cfg: TrainConfig) -> Throughput:
        return shell.meter

    def tag(self, p: int, handle: Any) -> dict[str, Any]:
        return {}

    def row_policy(self, p: int) -> int | None:
        return None

    def checkpoint(self, pop: Population) -> Path:
        state = {**pop.handles[0].state(), "actors": pop.backend.actor_state()}
        if pop.pool is not None:
            state["pool"] = pop.pool.state_dict()
        return pop.shell.checkpoint(state)

    def summary(self, pop: Population, new_steps: int) -> dict[str, Any]:
        h, meter = pop.handles[0], pop.shell.meter
        return {
            **_summary_head(self.cfg, h),
            "env_steps": h.env_steps,
            "iterations": h.iterations,
            **meter.summary(new_steps, self.cfg.actors),
            "learn_seconds": h.learn_seconds,
            **h.summary_fields(meter.wall),
            **pop.backend.health(),
            **(pop.pool.summary() if pop.pool is not None else {}),
        }


class PolicyFolders:
    """A population: policy i's checkpoints in ``policy_<i>/`` (the leader's also as the run's
    best unless evaluations choose it), the run's own checkpoint with the actors and PBT; rows
    tagged with their policy; a summary of the leader's figures, the fleet's throughput and a
    row per policy, and a table of them on stdout."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, resume: bool):
        self.cfg, self.run_dir, self.resume = cfg, run_dir, resume

    def restore_dir(self, p: int) -> Path | None:
        """Policy ``p``'s folder, on a resume that finds a checkpoint there."""
        where = policy_dir(self.run_dir, p) if self.resume else None
        if where is not None and not checkpoint_files(where):
            print(
                f"asyncrl: policy {p} has no checkpoint in {where} (its learner was lost "
                "before its first): it starts anew",
                file=sys.stderr,
                flush=True,
            )
            return None
        return where

    def restore(self, p: int, learner: Any, state: dict[str, Any]) -> None:
        where = self.restore_dir(p)
        if where is not None:
            restore_learner(where, learner)

    def meter(self, shell: RunShell, cfg: TrainConfig) -> Throughput:
        return Throughput(cfg.envs_per_actor)

    def tag(self, p: int, handle: Any) -> dict[str, Any]:
        return {"policy": p, "policy_env_steps": handle.env_steps}

    def row_policy(self, p: int) -> int | None:
        return p

    def checkpoint(self, pop: Population) -> Path:
        paired: dict[int, dict[str, float]] = {}
        for p, h in enumerate(pop.handles):
            if h.lost is not None:
                continue  # its newest checkpoint stands
            policy_state = {
                **h.state(),  # its hyperparameters too, read with its weights
                "config": pop.configs[p].to_dict(),
                "wall_seconds": pop.shell.wall_seconds,
            }
            where = policy_dir(self.run_dir, p)
            where.mkdir(exist_ok=True)
            save_checkpoint(where, policy_state, self.cfg.keep_checkpoints)
            if p == pop.best and self.cfg.eval_every == 0:
                self.save_best(pop, p, policy_state)
            paired[p] = policy_state["hyperparameters"]
        # an exploit since a policy's state was read is in PBT's values, not in its weights
        # saved: a resume gives each learner the values its weights go with
        pbt_state = pop.pbt.state_dict()
        for p, v in paired.items():
            pbt_state["values"][p] = v
        population = {
            "pbt": pbt_state,
            "leader": pop.best,
            "env_steps": [h.env_steps for h in pop.handles],
        }
        state = {"actors": pop.backend.actor_state(), "population": population}
        if pop.pool is not None:
            state["pool"] = pop.pool.state_dict()
        return pop.shell.checkpoint(state)

    def save_best(self, pop: Population, p: int, policy_state: dict[str, Any]) -> None:
        """The population's best policy (by its final return) as the run's best."""
        h = pop.handles[p]
        try:
            save_best_checkpoint(
                self.run_dir,
                {
                    "policy": policy_state["policy"],
                    "config": pop.configs[p].to_dict(),
                    "env_steps": h.env_steps,
                    "eval": {"policy": p, "final_return": h.episode_stats.final_return},
                },
            )
        except (CheckpointWriteError, NonFiniteError) as e:  # the earlier best stands
            print(f"asyncrl: warning: {e}", file=sys.stderr, flush=True)

    def summary(self, pop: Population, new_steps: int) -> dict[str, Any]:
        own = population_summary(pop, new_steps)
        print(population_table(own), flush=True)
        return own


@contextlib.contextmanager
def torch_rng_kept():
    """Draw a throwaway network without moving torch's global random state."""
    import torch

    with torch.random.fork_rng(devices=[]):
        yield


def population_summary(pop: Population, new_steps: int) -> dict[str, Any]:
    """A population run's summary: the best policy's figures as the run's, the fleet's
    throughput, and a row per policy (``population``)."""
    cfg, pbt, handles, meters = pop.cfg, pop.pbt, pop.handles, pop.meters
    wall = pop.shell.meter.wall
    rows, rates, lag_sum, lag_max, samples = [], [], 0.0, -math.inf, 0
    for p, (meter, h, start) in enumerate(zip(meters, handles, pop.steps_at_start, strict=True)):
        figures = meter.summary(h.env_steps - start, cfg.actors)
        rate = figures["env_steps_per_second"]
        rates.append(rate if math.isfinite(rate) else 0.0)
        lag_mean, lag_top = meter.lag_summary()
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
                "policy": p,
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
                "hyperparameters": pbt.values[p],
                "exploits": pbt.exploits[p],
                "lost": h.lost is not None,
                **(pop.pool.policy_summary(p) if pop.pool is not None else {}),
                **{k: v for k, v in fields.items() if isinstance(v, int | float)},
            }
        )
    first = meters[0]
    return {
        **_summary_head(cfg, handles[pop.best]),
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
        "learner_wait_seconds": sum(meter.learner_wait for meter in meters),
        "actor_wait_seconds": first.actor_wait / cfg.actors,
        "learn_seconds": sum(h.learn_seconds for h in handles),
        **pop.backend.health(),
        "policies": cfg.policies,
        "policy_mapping": cfg.to_dict()["policy_mapping"],  # a function's: "function"
        "pbt": cfg.pbt,
        "best_policy": pop.best,
        "pbt_exploits": sum(pbt.exploits),
        **{k: sum(int(row.get(k, 0)) for row in rows) for k in NONFINITE_COUNTS},
        # a shared pool: its snapshots' ratings and origins (each policy's own in its row)
        **(pool_fields(pop.pool, pop.best) if pop.pool is not None else {}),
        "population": rows,
    }


def pool_fields(pool: OpponentPool, best: int) -> dict[str, Any]:
    """A population's pool in its summary: the pool's figures, where each snapshot came from,
    and the leader's rating as the run's ``learner_elo``."""
    return {
        **pool.summary(),
        "pool_origin": pool.origins_by_id(),
        "learner_elo": pool.learner_ratings[best],
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
