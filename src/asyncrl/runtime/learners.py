"""A population's learners: each policy's learner as the training loop holds it -- in the
driver's own process (:class:`LocalLearner`: one policy, or the inline and thread backends) or
in a process of its own (:class:`RemoteLearner`: the process and Ray backends with a population, so
that the learners train at the same time on a machine with the cores).

A learner process attaches its policy's slots and policy store (shared memory), builds its
learner (resumed from its own checkpoint directory), publishes version 0 and then serves the
driver's commands one at a time: ``train`` a batch of slot indices and publish the new version,
hand over its ``state`` (without its replay when another adopts it), ``adopt`` another's
(PBT), ``close`` its optimizer thread. A learner process that dies ends the run
(:class:`~asyncrl.runtime.faults.LearnerLost`, with its traceback) once the other learners'
checkpoints are written."""

from __future__ import annotations

import io
import os
import signal
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asyncrl.config import learner_process_config, learner_threads
from asyncrl.core import Adoptable, Algorithm, NonFiniteError
from asyncrl.metrics import EpisodeStats
from asyncrl.runtime.faults import LearnerLost
from asyncrl.runtime.processes import (
    POLL,
    ChildProcesses,
    Stopped,
    die_with_parent,
    report_failure,
)
from asyncrl.runtime.supervisor import Supervisor
from asyncrl.runtime.transport import PolicyStore, SlotStore
from asyncrl.settings import TrainConfig, trains


def pack(value: Any) -> bytes:
    """A learner's state as bytes (tensors copied, not shared: no segment outlives a send)."""
    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


def unpack(data: bytes) -> Any:
    # from a learner process of this run (not a file): its numpy replay arrays are allowed
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def policy_learner(
    algo: Algorithm, cfg: TrainConfig, spec: Any, policy: int, marks_own: bool
) -> Any:
    """A population's policy ``policy``'s learner (``cfg``: that policy's settings), told what
    its slots hold (``marks_own``: every row of its actors, its own steps marked ``own``, as
    the run's preparation said) and whether it is frozen (not in ``policies_to_train``).
    ``spec``: the run's, whose ``for_policy`` gives the policy's own spaces."""
    spec = spec.for_policy(policy)
    learner = algo.learner(cfg, spec)
    learner.marks_own = marks_own
    learner.frozen = not trains(cfg, policy)
    return learner


def adoptable(learner: Any) -> Adoptable:
    """``learner`` as PBT uses it: its algorithm must offer adoption (a capability)."""
    if not isinstance(learner, Adoptable):
        raise TypeError(f"{learner.cfg.algo}: its learner offers no adoption (PBT)")
    return learner


def learner_state(learner: Any, algo: Algorithm, replay: bool = True) -> dict[str, Any]:
    """What a checkpoint holds of a learner: its state, what acts taken from that state
    (consistent, though an optimizer thread runs on) and the values of its mutable settings
    it trains with (read with the state: an exploit changes both in one call).
    ``replay=False``: the state another learner adopts, without a replay (PBT's exploit)."""
    state = learner.state_dict() if replay else adoptable(learner).adoptable_state()
    return {
        "learner": state,
        "policy": algo.acting_state({"learner": state}),
        "hyperparameters": {n: getattr(learner.cfg, n) for n in algo.mutable},
    }


def counters(learner: Any) -> dict[str, Any]:
    return {
        "version": learner.version,
        "env_steps": learner.env_steps,
        "iterations": learner.iterations,
        "learn_seconds": learner.learn_seconds,
    }


class LocalLearner:
    """A learner in the driver's process: the training loop calls it directly."""

    remote = False
    lost: LearnerLost | None = None

    def __init__(self, learner: Any, algo: Algorithm):
        self.learner, self.algo = learner, algo
        self.episode_stats: EpisodeStats = learner.episode_stats

    @property
    def env_steps(self) -> int:
        return self.learner.env_steps

    @property
    def iterations(self) -> int:
        return self.learner.iterations

    @property
    def learn_seconds(self) -> float:
        return self.learner.learn_seconds

    def work_ahead(self) -> None:
        self.learner.work_ahead()

    def train(self, batch: list[Any]) -> dict[str, float]:
        return self.learner.train(batch)

    def publish(self, sink: Any) -> None:
        self.learner.publish(sink)

    def record(self, batch: list[Any]) -> None:
        """The learner has recorded the batch's episodes itself."""

    def state(self, replay: bool = True) -> dict[str, Any]:
        return learner_state(self.learner, self.algo, replay)

    def adopt(self, state: dict[str, Any], values: dict[str, float], sink: Any) -> None:
        adoptable(self.learner).adopt(state, values)
        self.learner.publish(sink)

    def policy_vector(self) -> np.ndarray:
        return self.learner.policy_vector()

    def stop_updates(self) -> None:
        self.learner.close()  # async optimizers stop first, so the counters saved are final

    def summary_fields(self, wall: float) -> dict[str, Any]:
        return self.learner.summary_fields(wall)

    def close(self) -> None:
        self.learner.close()


def learner_main(
    outbox: Connection,
    policy: int,
    cfg: TrainConfig,
    spec: Any,
    algo: Algorithm,
    slots: SlotStore,
    store: PolicyStore,
    commands: Connection,
    replies: Connection,
    restore: str | None,
    hyperparameters: dict[str, float] | None,
    marks_own: bool,
    parent: int,
) -> None:
    """Entry point of a learner process (see the module doc)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how the run ends
    die_with_parent()
    cfg = learner_process_config(cfg)  # with threads_learner 0: its share of the CPUs
    torch.set_num_threads(learner_threads(cfg))
    learner = None
    try:
        learner = policy_learner(algo, cfg, spec, policy, marks_own)
        resumed_from = None
        if restore is not None:
            from asyncrl.rundir import restore_learner

            _, path = restore_learner(Path(restore), learner)
            resumed_from = str(path)
        if hyperparameters:
            adoptable(learner).set_hyperparameters(hyperparameters)
        learner.publish(store)
        # its finished episodes too: the driver's mirror of a resumed learner goes on from them
        episodes = learner.episode_stats.state_dict()
        replies.send(("ready", counters(learner), resumed_from, episodes))
        learner.work_ahead()
        while True:
            while not commands.poll(POLL):
                if os.getppid() != parent:
                    raise Stopped
            command, *args = commands.recv()
            if command == "train":
                try:
                    stats = learner.train([slots.slots[i] for i in args[0]])
                except NonFiniteError as e:  # the driver ends the run with it; the step was
                    replies.send(("nonfinite", str(e), counters(learner)))  # never applied
                    continue
                learner.publish(store)
                replies.send(("trained", stats, counters(learner)))
                learner.work_ahead()  # while its actors fill the next batch
            elif command == "state":
                replies.send_bytes(pack(learner_state(learner, algo, *args)))
            elif command == "adopt":
                adoptable(learner).adopt(unpack(args[0]), args[1])
                learner.publish(store)
                replies.send(("adopted", counters(learner)))
            elif command == "close":
                learner.close()
                fields = {}  # None: stop only (the summary's wall clock is not known yet)
                if args[0] is not None:
                    fields = learner.summary_fields(args[0])
                replies.send(("closed", fields, counters(learner)))
            elif command == "vector":
                replies.send_bytes(learner.policy_vector().tobytes())
            else:  # "stop"
                break
    except (Stopped, EOFError, BrokenPipeError):
        pass  # the driver is gone or done
    except BaseException:
        report_failure(outbox, fatal=True)
        os._exit(1)  # the sentinel tells the driver at once
    finally:
        if learner is not None:
            learner.close()
        slots.close()
        store.close()


class RemoteLearner:
    """The driver's handle of a learner process: the same calls as :class:`LocalLearner`, each
    a command and its reply (one at a time: a lock). Counters and the episodes of its batches
    are mirrored here, so that rows and the summary need no call."""

    remote = True

    def __init__(
        self,
        ctx: Any,
        policy: int,
        cfg: TrainConfig,
        spec: Any,
        algo: Algorithm,
        slots: SlotStore,
        store: PolicyStore,
        restore: Path | None,
        hyperparameters: dict[str, float] | None,
        marks_own: bool,
    ):
        self.policy, self.cfg, self.store = policy, cfg, store
        self.children = ChildProcesses(ctx, "learner", cfg)
        # no heartbeat (an update has no time limit) and no restart: a lost learner ends the run
        self.supervisor = Supervisor(self.children, timeout=0)
        self.lock = threading.Lock()
        self.lost: LearnerLost | None = None
        self.episode_stats = EpisodeStats()
        self.version = self.env_steps = self.iterations = 0
        self.learn_seconds = 0.0
        self.resumed_from: str | None = None
        cmd_r, self._commands = ctx.Pipe(duplex=False)
        self._replies, rep_w = ctx.Pipe(duplex=False)
        try:
            args = (policy, cfg, spec, algo, slots, store, cmd_r, rep_w)
            restore_dir = str(restore) if restore is not None else None
            self.children.start(
                learner_main, (*args, restore_dir, hyperparameters, marks_own, os.getpid()), policy
            )
        finally:
            cmd_r.close()
            rep_w.close()

    def label(self) -> str:
        return self.children.label(self.policy)

    def pid(self) -> int | None:
        return self.children.pid(self.policy)

    # ------------------------------------------------------------ the command protocol
    def _reply(self, raw: bool = False) -> Any:
        """The learner's reply; LearnerLost (with its traceback) if it died instead."""
        while True:
            try:
                if self._replies.poll(POLL):
                    return self._replies.recv_bytes() if raw else self._replies.recv()
            except (EOFError, OSError):
                pass  # it is gone: its death says why
            lost = self.supervisor.lost()
            if lost:
                self.lost = LearnerLost(self.supervisor.ended(lost[0]))
                raise self.lost

    def _call(self, *command: Any, raw: bool = False) -> Any:
        with self.lock:
            if self.lost is not None:
                raise self.lost
            try:
                self._commands.send(command)
            except OSError:
                pass  # it died: the reply's wait says how
            return self._reply(raw)

    def ready(self) -> None:
        """Wait until it has built its learner and published its first version."""
        with self.lock:
            _, c, self.resumed_from, episodes = self._reply()
        self._mirror(c)
        self.episode_stats.load_state_dict(episodes)

    def _mirror(self, c: dict[str, Any]) -> None:
        self.version, self.env_steps = c["version"], c["env_steps"]
        self.iterations, self.learn_seconds = c["iterations"], c["learn_seconds"]

    # ------------------------------------------------------------ the training loop's calls
    def work_ahead(self) -> None:
        """Done in its process, right after each update."""

    def train(self, batch: list[Any]) -> dict[str, float]:
        what, stats, c = self._call("train", [s.index for s in batch])
        self._mirror(c)
        if what == "nonfinite":
            raise NonFiniteError(f"policy {self.policy}: {stats}")
        return stats

    def publish(self, sink: Any) -> None:
        """It published the new version itself."""

    def record(self, batch: list[Any]) -> None:
        self.episode_stats.record(batch)

    def state(self, replay: bool = True) -> dict[str, Any]:
        """Its checkpoint's state; ``replay=False``: without its replay (none is sent)."""
        return unpack(self._call("state", replay, raw=True))

    def adopt(self, state: dict[str, Any], values: dict[str, float], sink: Any) -> None:
        _, c = self._call("adopt", pack(state), values)
        self._mirror(c)

    def policy_vector(self) -> np.ndarray:
        """The newest version it published (read from the store: no call)."""
        out = np.empty(self.store.numel, np.float32)
        self.store.read_if_newer(-1, lambda a: np.copyto(out, a))
        return out

    def stop_updates(self) -> None:
        if self.lost is None:
            self._mirror(self._call("close", None)[2])

    def summary_fields(self, wall: float) -> dict[str, Any]:
        if self.lost is not None:
            return {}
        _, fields, c = self._call("close", wall)
        self._mirror(c)
        return fields

    def close(self) -> None:
        """Tell it to stop, and join it (terminated, then killed, if it does not)."""
        if self.lost is None:
            try:
                self._commands.send(("stop",))
            except OSError:
                pass
        self.children.close()
        self._commands.close()
        self._replies.close()
