"""The actor-learner pipeline: the same lines for every mode, backend and number of policies.

    publish version 0 -> start actors -> repeat, per policy: [work ahead] its next batch ->
    train -> publish -> release

Sync vs async is decided by how many slots a batch holds and when an actor may start its next
rollout (the backends' SlotBooks); the backend decides where actors run and how rollouts and
policy versions travel, and supervises its actors. This is the one place a backend is made.

The run's policies are a :class:`~asyncrl.runtime.population.Population` (one policy: a
population of one), each trained by a :class:`PolicyLoop` on its own slots and policy store.
The :class:`Driver` is one loop -- until the run shell says stop: step the learners, record
their rows -- whichever way the learners step: in this process, their loops taking turns in
this thread (:class:`LoopsInTurn`), or each in a process of its own, whose loops run in threads
of the driver that wait on them (:class:`LoopsInThreads`); the main thread then writes the
rows, evaluates, checkpoints and watches the run's end.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.metrics import Throughput
from asyncrl.rundir import save_config
from asyncrl.runtime.backends import check_backend, make_backend
from asyncrl.runtime.backends.base import Backend
from asyncrl.runtime.lifecycle import RunEnd, StopRequested, StopSignals
from asyncrl.runtime.pbt import PBT
from asyncrl.runtime.pool import OpponentPool
from asyncrl.runtime.population import Population
from asyncrl.runtime.processes import POLL
from asyncrl.runtime.shell import RunShell
from asyncrl.settings import trains

if TYPE_CHECKING:
    from asyncrl.settings import Prepared, TrainConfig

__all__ = ["Pipeline", "check_backend"]

Row = tuple[int, dict[str, Any]]  # a policy and the figures of one of its iterations


class PoolTurns:
    """Sync mode with learners in processes (a loop per thread): each round's changes to a
    shared pool (games rated, snapshots numbered and placed) in policy order, as the inline
    backend makes them, not in the order the learners happen to finish. ``policies`` 0:
    none waits (one loop, or async mode, whose rounds have no order to keep)."""

    def __init__(self, policies: int):
        self.policies, self.next = policies, 0
        self.turn = threading.Condition()

    @contextlib.contextmanager
    def of(self, policy: int, stop: Any) -> Iterator[None]:
        """Policy ``policy``'s turn (a stop ends the wait: the run is ending)."""
        if not self.policies:
            yield
            return
        with self.turn:
            while not self.turn.wait_for(lambda: self.next == policy or bool(stop), POLL):
                pass
        try:
            yield
        finally:
            with self.turn:
                if self.next == policy:
                    self.next = (policy + 1) % self.policies
                self.turn.notify_all()


class PolicyLoop:
    """One policy's training loop on its own slots: work ahead, its next batch, train,
    publish, release; the figures of each iteration as a row."""

    def __init__(
        self, index: int, cfg: TrainConfig, learner: Any, backend: Any, end: RunEnd,
        meter: Throughput, pbt: PBT, pool: OpponentPool | None = None,
        turns: PoolTurns | None = None,
    ):  # fmt: skip
        self.index, self.cfg, self.learner, self.backend = index, cfg, learner, backend
        self.end, self.meter, self.pbt, self.pool = end, meter, pbt, pool
        self.turns = turns or PoolTurns(0)
        self.rounds = 0  # iterations done in this run (a resumed learner counts on from more)
        # its env steps after its latest rounds (those another loop may still ask about)
        self.steps_after = {0: learner.env_steps}

    def updating(self) -> contextlib.AbstractContextManager:
        """Where the learner's state changes: in this process, a signal's abort waits for it."""
        return contextlib.nullcontext() if self.learner.remote else self.end.updating()

    def step(self, stop: Any) -> dict[str, Any]:
        """One iteration; raises StopRequested if ``stop`` comes while it waits for a batch."""
        learner, backend, p = self.learner, self.backend, self.index
        with self.updating():
            learner.work_ahead()  # what it can do before the batch arrives
        t0 = time.perf_counter()
        batch = backend.next_batch(stop, p)  # a signal ends the wait (hung actors)
        waited = time.perf_counter() - t0
        with self.updating():
            stats = learner.train(batch)
        learner.publish(backend.sink(p))
        learner.record(batch)  # a learner process's episodes, mirrored here
        self.pbt.record(p, batch)
        if self.pool is not None:  # the games' outcomes, then a snapshot if one is due
            with self.turns.of(p, stop):
                self.pool.record(batch)
                if trains(self.cfg, p):  # a frozen policy's snapshots would all be the same
                    self.pool.updated(learner.policy_vector, p)
        backend.release(batch, p)
        self.rounds += 1
        self.steps_after[self.rounds] = learner.env_steps
        return {**stats, **self.meter.iteration(waited, stats)}


class Halt:
    """Truthy once the run stops (a signal, or the driver ends the loops): what a policy loop's
    wait for its batch checks."""

    def __init__(self, stop: StopSignals):
        self.stop, self.flag = stop, False

    def __bool__(self) -> bool:
        return self.flag or bool(self.stop)


class Loops:
    """The policies' loops as the driver steps them: :meth:`next_rows` gives the rows of the
    iterations done since it last asked (None once every loop has ended by itself)."""

    def __init__(self, loops: list[PolicyLoop], population: Population, halt: Halt):
        self.loops, self.population, self.halt = loops, population, halt

    def start(self) -> None:
        """Nothing runs between the driver's calls."""

    def next_rows(self) -> list[Row] | None:
        raise NotImplementedError

    def stop(self) -> None:
        self.halt.flag = True

    def check(self) -> None:
        """A loop's error has been raised where it happened."""


class LoopsInTurn(Loops):
    """Learners in this process: each policy's loop steps in turn, in this thread."""

    def next_rows(self) -> list[Row] | None:
        """An iteration of every policy, each followed by PBT's check."""
        done = []
        for loop in self.loops:
            done.append((loop.index, loop.step(self.halt)))
            self.population.exploit(loop.index)
        return done


class LoopsInThreads(Loops):
    """Learners in processes: each policy's loop runs in a thread of the driver that waits on
    its learner, and hands its rows (or its error) to the driver's thread."""

    def __init__(self, loops: list[PolicyLoop], population: Population, halt: Halt):
        super().__init__(loops, population, halt)
        self.threads: list[threading.Thread] = []
        self.rows: queue.Queue[Row] = queue.Queue()
        self.failures: queue.Queue[BaseException] = queue.Queue()
        self.round_done = threading.Condition()  # a loop ended an iteration

    def start(self) -> None:
        for loop in self.loops:
            name = f"asyncrl-policy-{loop.index}"  # daemon: an abort must not wait on a learner
            thread = threading.Thread(target=self.run, args=(loop,), name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def share_left(self, loop: PolicyLoop) -> bool:
        """Whether a policy's loop starts another iteration: while the run is short of its
        budget (the driver, behind on the rows, would otherwise stop the loops late). Sync
        mode's rounds are in lock-step (a rollout fills every policy's slot): it is judged
        once every policy has trained as many rounds, so that all stop after the same one --
        a policy's own share would not do where its samples per round vary (a game's seats)."""
        budget = self.population.cfg.total_steps
        if loop.cfg.mode == "sync":
            loops, r = self.loops, loop.rounds

            def judged() -> bool:
                return bool(self.halt) or all(other.rounds >= r for other in loops)

            with self.round_done:
                while not self.round_done.wait_for(judged, timeout=POLL):
                    pass
            if self.halt:
                return False
            loop.steps_after.pop(r - 1, None)  # every loop is past round r - 1
            return sum(other.steps_after[r] for other in loops) < budget
        return self.population.env_steps() < budget

    def run(self, loop: PolicyLoop) -> None:
        """A learner process's loop, in a thread of the driver."""
        try:
            while not self.halt and self.share_left(loop):
                self.rows.put((loop.index, loop.step(self.halt)))
                self.population.exploit(loop.index)
                with self.round_done:
                    self.round_done.notify_all()
        except StopRequested:
            pass
        except BaseException as e:  # the main thread ends the run with it
            self.failures.put(e)
        finally:
            with self.round_done:
                self.round_done.notify_all()

    def next_rows(self) -> list[Row] | None:
        """The next row that came; none yet: []; every loop done: None."""
        self.check()
        try:
            return [self.rows.get(timeout=POLL)]
        except queue.Empty:
            if not any(t.is_alive() for t in self.threads) and self.rows.empty():
                return None  # every policy trained its share (shares round down)
            return []

    def stop(self) -> None:
        super().stop()
        for thread in self.threads:
            thread.join()
        while not self.rows.empty():  # iterations done meanwhile: into their rows
            p, row = self.rows.get()
            self.population.windows[p].add(row)

    def check(self) -> None:
        if not self.failures.empty():
            raise self.failures.get()


class Driver:
    """The run's loop, the same however the learners step: until the run shell says stop, the
    next rows, recorded (the callback may end the run), the leader ranked, a checkpoint at its
    period. How it ends is the run shell's (:class:`~asyncrl.runtime.lifecycle.RunEnd`)."""

    def __init__(self, population: Population, loops: Loops, shell: RunShell):
        self.population, self.loops, self.shell = population, loops, shell

    def run(self, backend: Backend, on_start: Callable[[Backend], None] | None) -> None:
        population, end = self.population, self.shell.end
        try:
            backend.start()
            if on_start is not None:
                on_start(backend)
            self.loops.start()
            while not self.shell.should_stop(population.env_steps()):
                done = self.loops.next_rows()
                if done is None:
                    break
                if not done:
                    continue
                if not all(population.record(p, row) for p, row in done):
                    break  # the callback ended the run
                population.rank()
                end.periodic(population.checkpoint, population.env_steps())
            self.loops.stop()
            self.loops.check()
            population.write_rows()
        except BaseException as e:
            end.failed(e)
            self.loops.stop()
        population.rank()


class Pipeline:
    """The actor-learner pipeline as the run's shell hosts it (``trainer.train`` has checked
    the settings and claimed ``run_dir``): the population (a resumed run's checkpoints loaded)
    and the backend with its actors, whose closing ``cleanup`` holds; :meth:`drive` trains
    until the shell says stop."""

    def __init__(
        self, run: Prepared, run_dir: Path, resume: bool, cleanup: contextlib.ExitStack
    ):  # fmt: skip
        cfg = run.cfg
        self.population = population = Population(run, run_dir, resume)
        self.backend = make_backend(run, population.numel())
        cleanup.callback(self.backend.close)
        population.start(self.backend, cleanup)
        if resume:
            save_config(run_dir, cfg)  # the checkpoints loaded: the run goes on with these
        self.resumed_from = population.resumed_from
        self.earlier_seconds = population.state.get("wall_seconds", 0.0)
        self.env_steps, self.checkpoint = population.env_steps, population.checkpoint
        self.summary, self.stop_updates = population.summary, population.stop_updates

    def drive(self, shell: RunShell, on_start: Callable[[Backend], None] | None) -> None:
        population = self.population
        population.attach(shell)
        ordered = population.in_processes and population.cfg.mode == "sync"
        turns = PoolTurns(len(population.handles) if ordered else 0)
        loops = [
            PolicyLoop(p, c, h, self.backend, shell.end, m, population.pbt, population.pool, turns)
            for p, (c, h, m) in enumerate(
                zip(population.configs, population.handles, population.meters, strict=True)
            )
        ]
        way = LoopsInThreads if population.in_processes else LoopsInTurn
        halt = Halt(shell.end.stop)
        Driver(population, way(loops, population, halt), shell).run(self.backend, on_start)
