"""Actors as Ray actors, on the nodes of a Ray cluster; the learner stays in the driver.

A rollout call carries the newest policy version (put in Ray's object store once) and returns
the slot's bytes as one object; grants follow the same :class:`SlotBook` as on one machine, and
a driver thread books every call that ends and makes the next. Failed, dead and hung actors are
replaced within the restart budget (docs: Internals; Ray's security: docs/ray-security.md)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np

from asyncrl.config import ConfigError
from asyncrl.core import Algorithm
from asyncrl.envs import EnvSpec
from asyncrl.runtime.backends.base import OwnedTransport, SlotBooks
from asyncrl.runtime.faults import ActorError, actor_label, is_env_error
from asyncrl.runtime.supervisor import Pauses, Supervisor
from asyncrl.runtime.transport import Slot, SlotLayout
from asyncrl.settings import Prepared, TrainConfig

POLL = 0.2  # seconds between looks at the calls in flight when none completes
# an actor Ray has not started this long after it was asked to (no node with the CPUs it needs:
# a lost node's replacement on a cluster with none free) ends the run rather than stall it
PLACEMENT_TIMEOUT = 120.0


class RolloutWorker:
    """The Ray actor: one asyncrl Actor (K envs and a policy copy) and one slot of its own (a
    population: a policy copy and a slot per policy); with ``--opponents pool`` a copy of the
    driver's pool, which each rollout call brings up to date first.

    Made remote by :func:`_remote_class`; a second concurrency slot answers :meth:`status`
    while :meth:`collect` runs (hang detection)."""

    def __init__(
        self,
        actor_id: int,
        generation: int,
        cfg: TrainConfig,
        spec: EnvSpec,
        algo: Algorithm,
        numel: list[int],
        layouts: list[SlotLayout],
        snapshots: list,
    ):
        import torch

        from asyncrl.runtime.actor import Actor
        from asyncrl.runtime.transport import PolicyStore, PoolStore

        torch.set_num_threads(cfg.threads_actor)
        self.raws, self.slots, self.stores = [], [], []
        for p, layout in enumerate(layouts):  # the driver's: each policy's, as its slots
            _, nbytes = layout.offsets()
            self.raws.append(np.zeros(nbytes, dtype=np.uint8))
            self.slots.append(Slot(layout, self.raws[-1]))
            self.stores.append(PolicyStore(numel[p], shared=False, buffers=1))  # acts in place
        self.pool = None
        if cfg.opponents == "pool":  # the actor draws its first opponents as it is made
            self.pool = PoolStore(numel[0], cfg.pool_size, shared=False)
            self._update_pool(snapshots)
        self.status = np.zeros(2)
        self.actor = Actor(
            actor_id, cfg, spec, algo, self.stores, generation, status=self.status, pool=self.pool
        )

    def where(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {
            "node_id": ctx.get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
        }

    def collect(
        self, versions: list[int], waited: float, snapshots: list, *params: np.ndarray
    ) -> list:
        """One rollout with policy ``versions`` (``params``, one per policy, resolved by Ray
        from the references the driver passed), the pool's ``snapshots`` that changed since
        the last call first ((buffer, snapshot id, reference) each); each slot's bytes."""
        self._update_pool(snapshots)
        for store, version, vector in zip(self.stores, versions, params, strict=True):
            if version != store.version:
                store.publish(version, lambda a, v=vector: np.copyto(a, v))
        self.actor.collect(self.slots, waited)
        return self.raws

    def _update_pool(self, snapshots: list) -> None:
        """Write the driver's ``snapshots`` ((buffer, snapshot id, reference) each) into this
        worker's copy of the pool."""
        if snapshots:
            import ray

            for index, snapshot, ref in snapshots:
                self.pool.write(index, snapshot, ray.get(ref))

    def status(self) -> tuple[int, float]:
        """The actor's phase and for how long (see ActorStatus)."""
        return int(self.status[0]), time.monotonic() - float(self.status[1])


_REMOTE: Any = None


def _remote_class() -> Any:
    global _REMOTE
    if _REMOTE is None:
        import ray

        _REMOTE = ray.remote(max_restarts=0, max_task_retries=0, max_concurrency=2)(RolloutWorker)
    return _REMOTE


def connect(address: str, needed_cpus: float) -> bool:
    """Connect this driver to Ray; True if this call started the instance (then it is ours to
    shut down). An empty address starts a local instance on loopback only."""
    import ray

    if ray.is_initialized():
        return False
    # ray.init makes SIGTERM raise SystemExit in the driver, which would end the run as an
    # error (exit code 15); the run's own handler (a stop flag, as for SIGINT) goes back
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        return _init(ray, address, needed_cpus)
    finally:
        if sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, sigterm)


def _init(ray: Any, address: str, needed_cpus: float) -> bool:
    if address:
        ray.init(address=address, log_to_driver=True, configure_logging=False)
        return False
    cpus, need = os.cpu_count() or 1, int(np.ceil(needed_cpus))
    if need > cpus:  # Ray would place the actors, but a process each on too few cores
        print(
            f"asyncrl: warning: --backend ray: the actors need {need} CPUs (--actors x "
            f"--ray-cpus-per-actor) and this machine has {cpus}; the run's own Ray instance "
            f"claims {need}, oversubscribed {need / cpus:.1f}x: each actor is a process, and "
            "starting them alone can take minutes. Lower --actors, or give --ray-address of a "
            "cluster with the CPUs.",
            file=sys.stderr,
            flush=True,
        )
    with _loopback_only():
        ray.init(
            # "local": a new instance of the run's own, never one found on this machine (ray.init
            # would join the latest one started here, another run's or a test's cluster)
            address="local",
            num_cpus=max(cpus, need),
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            configure_logging=False,
            log_to_driver=True,
            # Ray starts its workers at nice 15 so that its own daemons keep the CPU; on the
            # learner's machine that would starve the actors whenever the learner trains (a
            # 2-core machine under load: 370 env steps/s instead of 5,400 with the process
            # backend). The actors are this run's work, so they get the learner's priority.
            _system_config={"worker_niceness": 0},
        )
    return True


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """While the run's own instance starts: Ray turns a node address of 127.0.0.1 into the
    machine's network address (so that other nodes could join) and its servers then listen on
    every interface, unless its multi-node mode is off. Off here, in this process (read at call
    time) and for the processes Ray starts (its environment variable, read at their import)."""
    from ray._private import ray_constants

    var = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
    env, flag = os.environ.get(var), getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[var], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:  # a later ray.init of this process (a cluster's address) is not affected
        if env is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = env
        ray_constants.ENABLE_RAY_CLUSTER = flag


def check_cluster(cfg: TrainConfig) -> None:
    """A cluster the run joins (``ray_address``, or a driver already connected) must have the
    CPUs its actors ask for; raises ConfigError if not. One asyncrl starts is sized to fit."""
    import ray

    if not (cfg.ray_address or ray.is_initialized()):
        return
    if not ray.is_initialized():
        check_address(cfg.ray_address)
    connect(cfg.ray_address, 0)  # joins: a connection made here is not ours to shut down
    short = cluster_shortfall(cfg, ray.cluster_resources())
    if short:
        raise ConfigError(short)


def cluster_shortfall(cfg: TrainConfig, resources: dict) -> str:
    """What the cluster of ``resources`` lacks for the run's actors, in one line ('' if
    nothing): checked before the run (ConfigError) and as the backend starts (ActorError)."""
    need = cfg.actors * cfg.ray_cpus_per_actor
    have = resources.get("CPU", 0.0)
    if need <= have:
        return ""
    return (
        f"ray_cpus_per_actor: {cfg.actors} actors x {cfg.ray_cpus_per_actor:g} CPUs need "
        f"{need:g} CPUs, the Ray cluster has {have:g}; lower --ray-cpus-per-actor or "
        "--actors, or add nodes"
    )


ADDRESS_TIMEOUT = 10.0  # seconds a cluster's address has to answer
# HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS and its client
# server) answers with a SETTINGS frame of its own
H2_SETTINGS = 4  # a frame's type, its fourth byte (after 3 of length); flags 0, stream 0
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def check_address(address: str, timeout: float = ADDRESS_TIMEOUT) -> None:
    """A ``--ray-address`` of HOST:PORT (or ``ray://HOST:PORT``) that accepts no connection,
    or that does not answer as Ray's gRPC servers do (another service on that port), is a
    ConfigError: ray.init would retry it for minutes, or wait forever. ``auto`` (or
    RAY_ADDRESS) is Ray's; with RAY_USE_TLS only the connection is checked."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"ray_address: {address!r}; allowed: auto, HOST:PORT, ray://HOST:PORT")
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except OSError as e:
        raise ConfigError(
            f"ray_address: nothing answers at {address} ({e.strerror or e}); start the cluster "
            "there (ray start --head) or give the address of its head node"
        ) from None
    with conn:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return
        answer = b""
        with contextlib.suppress(OSError):  # a reset or a timeout: no answer
            conn.settimeout(timeout)
            conn.sendall(H2_PREFACE)
            while len(answer) < 9 and (chunk := conn.recv(9 - len(answer))):
                answer += chunk
    if len(answer) < 9 or answer[3] != H2_SETTINGS:
        raise ConfigError(
            f"ray_address: {address} accepts a connection but is not a Ray cluster (no gRPC "
            f"answer within {timeout:g} s); give the address of its head node "
            "(ray start --head prints it)"
        )


class RayBackend(OwnedTransport):
    @classmethod
    def check_settings(cls, cfg: TrainConfig) -> None:
        check_cluster(cfg)

    def __init__(self, run: Prepared, numel: list[int]):
        import ray

        self.ray = ray
        cfg = run.cfg
        self.cfg, self.spec, self.algo, self.numel = cfg, run.spec, run.algo, numel
        sync = cfg.mode == "sync"
        per_actor = cfg.slots_per_actor
        # learner-side slots and a store (the version number's bookkeeping and the vector that
        # goes into the object store); async: two buffers, as a call may read it while the
        # learner publishes. In shared memory where the learners are processes.
        shared = run.in_processes
        self._own_transport(run, numel, cfg.actors * per_actor, shared, 1 if sync else 2)
        try:  # the slots are made: any failure below (Ray, the cluster's size) frees them
            # the versions being put, one per policy
            self._outgoing = [np.empty(n, dtype=np.float32) for n in numel]
            self.book = SlotBooks.of_run(cfg)
            self.actors = RayActors(self)
            self.supervisor = Supervisor(
                self.actors, cfg.env_step_timeout, self.actors, cfg.actor_restarts, self._respawn
            )
            self.restarts = self.supervisor.restarts
            self.owns_ray = connect(cfg.ray_address, cfg.actors * cfg.ray_cpus_per_actor)
            # per policy: the object holding version policy_versions[p]
            self.policy_refs: list[Any] = [None] * cfg.policies
            self.policy_versions = [-1] * cfg.policies
            self.workers: list[Any] = [None] * cfg.actors
            # --opponents pool: the snapshot each worker holds in each buffer of its copy, and
            # each snapshot of the pool put into the object store once
            self.pool_held: list[np.ndarray | None] = [None] * cfg.actors
            self.pool_refs: dict[int, Any] = {}
            self._pool_out = np.empty(numel[0], dtype=np.float32)  # the snapshot being put
            self.generation = [0] * cfg.actors
            self.nodes: list[dict[str, Any] | None] = [None] * cfg.actors
            # every call in flight, by its future: ("where", actor, t) or ("rollout", actor,
            # slot, t); a finished call's future is put on _done (by Ray's thread), for the
            # supervisor
            self.pending: dict[Any, tuple] = {}
            self._done: queue.Queue = queue.Queue()
            self.failure: BaseException | None = None
            self.closing = False
            self._nice_warned = False
            self.watcher: threading.Thread | None = None  # the thread that runs the supervisor
            self._check_resources()
        except BaseException:
            self._close_transport()
            raise

    # ------------------------------------------------------------ what the learner calls
    # publish (OwnedTransport's) writes the store only; a call puts what it sends (_newest_policy)
    def start(self) -> None:
        with self.book.cond:
            for i in range(self.cfg.actors):
                self._spawn(i)
            self._send_grants()
        self.watcher = threading.Thread(
            target=self._supervise, name="asyncrl-ray-supervisor", daemon=True
        )
        self.watcher.start()

    def next_batch(self, stop: Any = None, policy: int = 0) -> list[Slot]:
        with self.book.cond:
            ids = self.book.wait_take(lambda: self.failure, lambda: None, POLL, stop, policy)
            self._send_grants()
        return self._batch(ids, policy)

    def release(self, slots: list[Slot], policy: int = 0) -> None:
        with self.book.cond:
            self.book.release([s.index for s in slots], policy)
            self._send_grants()

    def actor_nodes(self) -> dict[int, str | None]:
        """Actor id -> the Ray node id it ran on last (for tools and tests)."""
        with self.book.cond:
            return {i: (n or {}).get("node_id") for i, n in enumerate(self.nodes)}

    def close(self) -> None:
        with self.book.cond:
            self.closing = True
            self.book.cond.notify_all()
        if self.watcher is not None:
            self.watcher.join(timeout=30)
            self.watcher = None
        for w in self.workers:
            if w is not None:
                try:
                    self.ray.kill(w, no_restart=True)
                except Exception:  # already gone with its node
                    pass
        self.workers = [None] * self.cfg.actors
        self.pending.clear()
        self.policy_refs = [None] * self.cfg.policies
        self.policy_versions = [-1] * self.cfg.policies
        if self.owns_ray and self.ray.is_initialized():
            self.ray.shutdown()
            self.owns_ray = False
        self._close_transport()

    # ------------------------------------------------------------ supervision
    def _check_resources(self) -> None:
        short = cluster_shortfall(self.cfg, self.ray.cluster_resources())
        if short:
            if self.owns_ray:
                self.ray.shutdown()
            raise ActorError(short)

    def _warn_niceness(self, actor: int) -> None:
        """Once per run: say so if Ray runs the actors at a lower priority than the learner
        (a cluster started without ``RAY_worker_niceness=0``): on a node the learner shares,
        they then get the CPU only when it does not want it."""
        nice = self.nodes[actor]["nice"]
        if self._nice_warned or nice <= os.getpriority(os.PRIO_PROCESS, 0):
            return
        self._nice_warned = True
        print(
            f"asyncrl: warning: Ray runs {actor_label(self.cfg, actor)} at nice {nice}; where "
            "it shares a machine with the learner it gets the CPU only when the learner does "
            "not need it. Start the cluster's nodes with RAY_worker_niceness=0 (ray start).",
            file=sys.stderr,
            flush=True,
        )

    def _label(self, actor: int) -> str:
        node = self.nodes[actor]
        where = f" on node {node['ip']} ({node['node_id'][:12]})" if node else ""
        return actor_label(self.cfg, actor) + where

    def _generations(self) -> list[int]:
        return list(self.generation)

    def load_actor_state(self, state: dict) -> None:
        super().load_actor_state(state)
        self.generation = [self.first_generation] * self.cfg.actors

    def _spawn(self, actor: int) -> None:
        cls = _remote_class()
        if self.pool is not None:  # a new worker's copy of the pool is empty: it gets all
            self.pool_held[actor] = np.full(self.pool.capacity, -1, np.int64)
        snapshots = self._pool_changes(actor)
        w = cls.options(num_cpus=self.cfg.ray_cpus_per_actor, scheduling_strategy="SPREAD").remote(
            actor, self.generation[actor], self.cfg, self.spec, self.algo, self.numel,
            self.layouts, snapshots,
        )  # fmt: skip
        self.workers[actor] = w
        self._track(w.where.remote(), ("where", actor, time.perf_counter()))

    def _track(self, ref: Any, what: tuple) -> None:
        """Holding the ledger's lock: watch a call; its future lands on ``_done`` when it ends
        (at once, whatever else is in flight: no wait on a list made before the call)."""
        fut = ref.future()
        self.pending[fut] = what
        fut.add_done_callback(self._done.put)

    def _newest_policy(self, p: int) -> tuple[int, Any]:
        """Holding the ledger's lock: policy ``p``'s newest published version and its object,
        put into the object store once. The store's read is a copy that a publish during it
        makes start again, and the put is of that copy, so the number always names the
        parameters put."""
        out = self._outgoing[p]
        version = self.stores[p].read_if_newer(self.policy_versions[p], lambda a: np.copyto(out, a))
        if version != self.policy_versions[p]:
            self.policy_versions[p], self.policy_refs[p] = version, self.ray.put(out)
        return self.policy_versions[p], self.policy_refs[p]

    def _pool_changes(self, actor: int) -> list[tuple[int, int, Any]]:
        """Holding the ledger's lock: (buffer, snapshot id, object) of each snapshot of the
        pool that ``actor``'s copy lacks, each put into the object store once, as
        :meth:`_newest_policy` does: copied out, the read checked, then the copy put; one being
        written now is left for the next call (the store's seqlock says so)."""
        if self.pool is None:
            return []
        ids, held, out = self.pool.ids(), self.pool_held[actor], []
        for index in np.flatnonzero(ids != held):
            snapshot = int(ids[index])
            ref = self.pool_refs.get(snapshot)
            if ref is None and snapshot >= 0:
                if not self.pool.read(snapshot, lambda a: np.copyto(self._pool_out, a)):
                    continue  # torn by the writer: the next call brings it
                ref = self.pool_refs[snapshot] = self.ray.put(self._pool_out)
            if ref is not None:
                out.append((int(index), snapshot, ref))
                held[index] = snapshot
        for gone in set(self.pool_refs) - set(ids.tolist()):  # left the pool
            del self.pool_refs[gone]
        return out

    def _send_grants(self) -> None:
        now = time.perf_counter()
        for actor, slot in self.book.grants():
            newest = [self._newest_policy(p) for p in range(self.cfg.policies)]
            versions, refs = [v for v, _ in newest], [r for _, r in newest]
            snapshots = self._pool_changes(actor)
            self._track(
                self.workers[actor].collect.remote(versions, 0.0, snapshots, *refs),
                ("rollout", actor, slot, now),
            )

    def _supervise(self) -> None:
        try:
            checked = time.monotonic()
            while True:
                with self.book.cond:
                    if self.closing or self.failure is not None:
                        self.book.cond.notify_all()
                        return
                try:
                    self._arrived(self._done.get(timeout=POLL))
                except queue.Empty:
                    pass
                # every POLL, also while other actors deliver (async: they may never pause)
                if time.monotonic() - checked >= POLL:
                    self._check_placement()
                    self.supervisor.kill_hung()  # asks the busy actors, without the lock
                    with self.book.cond:
                        self._replace_lost()
                    checked = time.monotonic()
        except BaseException as e:  # a bug here must not leave the learner waiting
            with self.book.cond:
                self.failure = ActorError(f"ray supervisor failed:\n{traceback.format_exc()}")
                self.failure.__cause__ = e
                self.book.cond.notify_all()

    def _arrived(self, fut: Any) -> None:
        with self.book.cond:
            what = self.pending.pop(fut, None)
            if what is None:  # a call of an actor already replaced
                return
            if what[0] == "where":
                if fut.exception() is None:
                    self.nodes[what[1]] = fut.result()
                    self._warn_niceness(what[1])
                return  # an actor that died at once: its rollout call says so
            _, actor, slot, _ = what
            error = fut.exception()
            if error is not None:
                self.actors.died(actor, error)
                self._replace_lost()
                return
            data = fut.result()  # on this node: read-only views into the object store
            for store, raw in zip(self.slot_stores, data, strict=True):
                np.copyto(store.raw[slot], raw)
            del data
            self.book.delivered(slot)
            self._send_grants()
            self.book.cond.notify_all()

    def _replace_lost(self) -> None:
        """Holding the ledger's lock: replace the actors lost since the last look, or end the
        run (the supervisor says which)."""
        for lost in self.supervisor.lost():
            dropped = self.book.lost(lost.index, started=True)
            try:
                self.supervisor.replace(lost, dropped)
            except ActorError as e:
                self.failure = e
                return
            self.book.resume(lost.index)
            self._send_grants()

    def _respawn(self, actor: int) -> None:
        try:
            self.ray.kill(self.workers[actor], no_restart=True)
        except Exception:
            pass
        self.generation[actor] += 1
        self.nodes[actor] = None
        self._spawn(actor)

    def _check_placement(self) -> None:
        """End the run if an actor has waited longer than PLACEMENT_TIMEOUT to be started."""
        now = time.perf_counter()
        with self.book.cond:
            for what in self.pending.values():
                if what[0] == "where" and now - what[2] > PLACEMENT_TIMEOUT:
                    actor = what[1]
                    free = self.ray.available_resources().get("CPU", 0.0)
                    total = self.ray.cluster_resources().get("CPU", 0.0)
                    self.failure = ActorError(
                        f"{actor_label(self.cfg, actor)}: Ray found no node to start it on for "
                        f"{PLACEMENT_TIMEOUT:g} s (it needs {self.cfg.ray_cpus_per_actor:g} "
                        f"CPUs; the cluster has {free:g} of {total:g} free); add a node, or "
                        "lower --actors or --ray-cpus-per-actor"
                    )
                    self.book.cond.notify_all()
                    return


class RayActors:
    """The Ray backend's actors as the supervisor sees them: liveness from the calls that
    failed (reported by :meth:`died`), phases asked of an actor whose rollout call has run past
    the hang timeout (a Ray call: its ``status``), and kills by ``ray.kill`` of its handle."""

    def __init__(self, backend: RayBackend):
        self.backend = backend
        self.deaths: list[tuple[int, str, str, bool]] = []

    def indices(self) -> list[int]:
        return [i for i, w in enumerate(self.backend.workers) if w is not None]

    def label(self, index: int) -> str:
        return self.backend._label(index)

    def died(self, actor: int, error: BaseException) -> None:
        """Holding the ledger's lock: ``actor``'s call failed with ``error``; its other calls'
        results, if any still come, are ignored."""
        b = self.backend
        if isinstance(error, b.ray.exceptions.RayTaskError):
            cause, tb = "raised", str(error)
        else:  # its process or its node is gone
            cause, tb = f"was lost ({type(error).__name__})", str(error)
        fatal = is_env_error(error) or is_env_error(getattr(error, "cause", None))
        self._forget(actor)
        self.deaths.append((actor, cause, tb, fatal))

    def _forget(self, actor: int) -> None:
        for fut, what in list(self.backend.pending.items()):
            if what[1] == actor:
                del self.backend.pending[fut]

    def dead(self) -> list[tuple[int, str, str, bool]]:
        out, self.deaths = self.deaths, []
        return out

    def busy(self, actor: int, pauses: Pauses) -> tuple[int, float] | None:
        """Its phase and seconds in it, if a rollout call of it has run past the timeout (its
        own clock: a pause of the driver is not one of a remote actor)."""
        b = self.backend
        timeout, now = b.cfg.env_step_timeout, time.perf_counter()
        with b.book.cond:
            long = any(
                what[0] == "rollout" and what[1] == actor and now - what[3] > timeout
                for what in b.pending.values()
            )
            worker = b.workers[actor]
        if not long:
            return None
        try:
            return b.ray.get(worker.status.remote(), timeout=POLL * 5)
        except Exception:  # gone or not answering: its call will fail, or be asked again
            return None

    def kill(self, actor: int) -> None:
        """Kill it and report it dead at once (its call's failure, when it comes, is ignored)."""
        b = self.backend
        with b.book.cond:
            try:
                b.ray.kill(b.workers[actor], no_restart=True)
            except Exception:
                pass
            self._forget(actor)
            self.deaths.append((actor, "was killed", "", False))
