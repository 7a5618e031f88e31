"""Where trajectories and policy versions live between actors and the learner.

Trajectories go into preallocated *slots*: one slot holds one actor's rollout of T steps of K
envs, every field a fixed-shape array. Actors write a slot in place and send only its index; the
learner reads the arrays where they lie. With ``shared=True`` the slots are POSIX shared-memory
segments (names start with ``asyncrl_``) so actor processes can write them; otherwise plain
memory for the inline backend. A backend without shared memory (several machines) would ship a
slot's arrays as one message instead: the layout is the contract, not the segment.

The creator of a store owns its segments and unlinks them in :meth:`close`, also on error paths.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import queue
import re
import sys
import time
import uuid
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the transport needs no env package at run time (light child imports)
    from asyncrl.core import Algorithm, SlotField
    from asyncrl.envs import EnvSpec
    from asyncrl.settings import Prepared, TrainConfig

SHM_PREFIX = "asyncrl_"
SHM_DIR = "/dev/shm"  # where Linux keeps POSIX shared-memory segments (a tmpfs)

# What an actor reports of one rollout beside its samples: one number each, read by the learner
# (``slot.env_steps[0]``) and by the backend (``slot.actor[0]``, ``slot.env_restarts[0]``).
ROLLOUT_FIGURES = (
    ("actor", (1,), "int64"),  # the actor that filled the slot
    ("rollout_seconds", (1,), "float64"),  # stepping envs and choosing actions
    ("wait_seconds", (1,), "float64"),  # waiting for the slot (backpressure included)
    ("env_steps", (1,), "int64"),  # samples in the slot
    ("env_restarts", (1,), "int64"),  # envs recreated during the rollout (--on-env-error)
)


@dataclass(frozen=True)
class SlotLayout:
    """Field name -> (shape, dtype) of one rollout slot."""

    fields: tuple[tuple[str, tuple[int, ...], str], ...]

    @staticmethod
    def for_rollout(
        spec: EnvSpec, rollout: int, num_envs: int, extra: tuple[SlotField, ...] = ()
    ) -> SlotLayout:
        """Every slot holds observations (T + 1 rows: the last is the one after the rollout, in
        the env's dtype: uint8 frames stay uint8), actions, rewards, episode ends, the policy
        version of each step and finished episodes' returns; ``extra``: what the algorithm
        records beside them (its ``slot_fields``)."""
        T, K = rollout, num_envs
        act_dtype = "int64" if spec.discrete else "float32"
        return SlotLayout(
            (
                ("obs", (T + 1, K, *spec.obs_shape), spec.obs_dtype),
                ("actions", (T, K, *spec.action_shape), act_dtype),
                ("rewards", (T, K), "float32"),
                ("terminated", (T, K), "bool"),
                ("truncated", (T, K), "bool"),
                *extra,
                ("versions", (T, K), "int64"),  # policy version that chose each action
                ("ep_returns", (T, K), "float32"),  # finished episode's return, NaN elsewhere
                ("ep_lengths", (T, K), "int32"),
                *ROLLOUT_FIGURES,
            )
        )

    def bytes_per_sample(self) -> float:
        """Bytes of slot memory one sample (one env step of one env) takes, every field and
        the row-T observation included: a slot's size over the T x K samples it holds."""
        _, nbytes = self.offsets()
        shape = dict((name, shape) for name, shape, _ in self.fields)["rewards"]
        return nbytes / int(np.prod(shape))

    def offsets(self) -> tuple[list[tuple[str, tuple[int, ...], np.dtype, int]], int]:
        out, pos = [], 0
        for name, shape, dtype in self.fields:
            dt = np.dtype(dtype)
            pos = (pos + 63) // 64 * 64  # cache-line aligned fields
            out.append((name, shape, dt, pos))
            pos += int(np.prod(shape)) * dt.itemsize
        return out, max(pos, 1)


def rollout_layout(cfg: TrainConfig, spec: EnvSpec, algo: Algorithm) -> SlotLayout:
    """The layout of a run's slots: one actor's rollout, with what its algorithm records. For
    one policy of a population pass its config (``settings.policy_config``): its slots hold the
    envs it acts on, and under the random mapping every env with its own steps marked."""
    from asyncrl.settings import marks_own

    return slot_layout(cfg, spec, algo, marks_own(cfg, spec))


def run_layouts(run: Prepared) -> list[SlotLayout]:
    """The slot layouts of a prepared run: the run's own (what the start-up line reports),
    then each policy's for its own settings and spaces (one policy: the run's again)."""
    owners = [
        (run.cfg, run.spec),
        *((c, run.spec.for_policy(p)) for p, c in enumerate(run.policies)),
    ]
    return [slot_layout(c, spec, run.algo, run.marks_own) for c, spec in owners]


def policy_layouts(run: Prepared) -> list[SlotLayout]:
    """Each policy's slot layout (:func:`run_layouts` after the run's own): what a backend
    makes its slots of."""
    return run_layouts(run)[1:]


def slot_layout(cfg: TrainConfig, spec: EnvSpec, algo: Algorithm, own: bool) -> SlotLayout:
    """:func:`rollout_layout` with ``own`` (``settings.marks_own``) given: every row of the
    actor in the slot, the steps this policy acted marked."""
    T, K = cfg.rollout, cfg.envs_per_actor
    extra = algo.slot_fields(spec, T, K, cfg)
    if own:
        extra = (*extra, ("own", (T, K), "bool"))  # the steps this policy acted
    if spec.agents > 1:  # the actor's restarts: a seat's transition spans slots of one actor
        extra = (*extra, ("generation", (1,), "int64"))
    if cfg.opponents == "pool":  # who played each seat: -1 the learner,
        extra = (*extra, ("seat_player", (T, K), "int64"))  # else a snapshot id (runtime/pool)
    return SlotLayout.for_rollout(spec, T, K, extra)


def memory_line(cfg: TrainConfig, spec: EnvSpec, algo: Algorithm, layout: SlotLayout) -> str:
    """The start-up line on what observations cost: their dtype and bytes, the rollout slots'
    bytes per sample (``layout``: the run's), and the algorithm's own (a replay buffer's
    size)."""
    dtype = np.dtype(spec.obs_dtype)
    obs = int(np.prod(spec.obs_shape)) * dtype.itemsize
    line = (
        f"asyncrl: observations {dtype.name} {tuple(spec.obs_shape)}, {obs:,} B each; rollout "
        f"slots {layout.bytes_per_sample():,.0f} B per sample"
    )
    note = algo.memory_note(cfg, spec)
    return line + (f"; {note}" if note else "")


def shm_free(path: str = SHM_DIR) -> int | None:
    """Bytes free in the shared-memory filesystem; None where there is none to ask (not Linux)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def check_shared_memory(cfg: TrainConfig, layouts: list[SlotLayout]) -> None:
    """Refuse, before any process starts, a process-backend run whose rollout slots do not fit
    in the free space of /dev/shm (Docker gives a container 64 MB): its segments are sparse, so
    they are made without complaint and an actor writing one dies of SIGBUS, again and again
    until the restarts run out. Removes the segments killed runs left there first.
    ``layouts``: each policy's slot layout."""
    if cfg.backend != "process" and not cfg.hogwild:
        return  # no shared memory
    remove_stale_segments()  # they hold space, and no one else removes them
    if cfg.hogwild:
        return  # its slots are plain memory; its shared segments are small
    free = shm_free()
    page = os.sysconf("SC_PAGE_SIZE")
    pages = sum(-(-layout.offsets()[1] // page) for layout in layouts)
    need = cfg.actors * cfg.slots_per_actor * pages * page  # a tmpfs counts pages
    if free is not None and need > free:
        from asyncrl.config import ConfigError

        raise ConfigError(
            f"shared memory: the rollout slots of {cfg.actors} actors need {_mb(need)} in "
            f"{SHM_DIR}, which has {_mb(free)} free; give it more (docker run --shm-size=1g; "
            "Kubernetes: an emptyDir of medium Memory at /dev/shm) or lower --actors, "
            "--envs-per-actor or --rollout (async: --max-batches-waiting, --rollouts-per-batch)"
        )


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MB"


def remove_stale_segments(directory: str = SHM_DIR) -> int:
    """Remove the segments of runs killed with their whole process group (SIGKILL to the group,
    a scheduler's final kill, ``docker kill``): multiprocessing's resource tracker died with
    them, and their segments would stay until reboot. A segment is stale when the pid in its
    name is no live process here and no process holds its lock (every process that opens a
    segment holds one, so a live run in another pid namespace sharing /dev/shm keeps its own).
    Says in one line what it removed; returns the count."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    owners: set[int] = set()
    count = size = 0
    for entry in entries:
        m = re.match(rf"{SHM_PREFIX}(\d+)_", entry.name)
        if m is None or _alive(int(m.group(1))):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken only if no one holds it
            nbytes = os.fstat(fd).st_blocks * 512
            os.unlink(entry.path)
        except OSError:
            continue
        finally:
            os.close(fd)
        owners.add(int(m.group(1)))
        count, size = count + 1, size + nbytes
    if count:
        pids = ", ".join(str(p) for p in sorted(owners))
        print(
            f"asyncrl: removed {count} shared-memory segment(s) ({_mb(size)}) that killed runs "
            f"left in {directory} (pids {pids})",
            file=sys.stderr,
            flush=True,
        )
    return count


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


class Slot:
    """Numpy views of one slot's fields, by attribute: ``slot.obs``, ``slot.rewards``, ...;
    ``slot.index`` is its place in its store (what messages carry)."""

    def __init__(self, layout: SlotLayout, buf: Any, index: int = 0):
        self.index = index
        offsets, _ = layout.offsets()
        self.names = [name for name, *_ in offsets]
        for name, shape, dt, off in offsets:
            count = int(np.prod(shape))
            setattr(
                self, name, np.frombuffer(buf, dtype=dt, count=count, offset=off).reshape(shape)
            )

    def drop_views(self) -> None:
        for name in self.names:
            self.__dict__.pop(name, None)


class _Segments:
    """Owner or user of a set of named shared-memory segments."""

    def __init__(self, names: list[str], size: int, create: bool):
        self.owner = create
        self.shms = [
            shared_memory.SharedMemory(name=n, create=create, size=size if create else 0)
            for n in names
        ]
        # "in use" while open, whatever pid namespace looks (see remove_stale_segments)
        for shm in self.shms:
            fcntl.flock(shm._fd, fcntl.LOCK_SH)  # released by the kernel when the fd closes

    def close(self) -> None:
        for shm in self.shms:
            try:
                shm.close()
            except BufferError:  # a numpy view is still alive; the unlink below still frees it
                pass
            if self.owner:
                try:
                    shm.unlink()
                except FileNotFoundError:
                    pass
        self.shms = []


def _segment_names(kind: str, count: int) -> list[str]:
    tag = f"{SHM_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}_{kind}"
    return [f"{tag}{i}" for i in range(count)]


class SlotStore:
    """All rollout slots of a run. Picklable handle: a child process re-attaches by name."""

    def __init__(self, layout: SlotLayout, count: int, shared: bool):
        self.layout, self.count, self.shared = layout, count, shared
        _, self.nbytes = layout.offsets()
        self._segments: _Segments | None = None
        if shared:
            self.names = _segment_names("slot", count)
            self._segments = _Segments(self.names, self.nbytes, create=True)
            bufs = [s.buf for s in self._segments.shms]
        else:
            self.names = []
            bufs = [bytearray(self.nbytes) for _ in range(count)]
        self.slots = [Slot(layout, b, i) for i, b in enumerate(bufs)]
        # each slot's bytes as one array: what a backend without shared memory ships as one
        # message (the layout tells both ends where each field lies)
        self.raw = [np.frombuffer(b, dtype=np.uint8, count=self.nbytes) for b in bufs]

    def __getstate__(self) -> dict[str, Any]:
        if not self.shared:
            raise TypeError("a non-shared SlotStore cannot be sent to another process")
        return {"layout": self.layout, "count": self.count, "names": self.names}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.layout, self.count, self.names = state["layout"], state["count"], state["names"]
        self.shared = True
        _, self.nbytes = self.layout.offsets()
        self._segments = _Segments(self.names, 0, create=False)
        self.slots = [Slot(self.layout, s.buf, i) for i, s in enumerate(self._segments.shms)]
        self.raw = [
            np.frombuffer(s.buf, dtype=np.uint8, count=self.nbytes) for s in self._segments.shms
        ]

    def close(self) -> None:
        for slot in self.slots:  # drop every view first, or the segments cannot be closed
            slot.drop_views()
        self.slots = []
        self.raw = []
        if self._segments is not None:
            self._segments.close()
            self._segments = None


class StopFlag:
    """A run's stop signal from a parent to its child processes: one shared byte, no lock.
    ``multiprocessing.Event`` takes a lock in ``is_set()``: a child SIGKILLed inside it left the
    lock held and the parent's ``set()`` blocked forever. Set once, never cleared."""

    def __init__(self, ctx: Any):
        self._flag = ctx.RawValue(ctypes.c_bool, False)

    def set(self) -> None:
        self._flag.value = True

    def is_set(self) -> bool:
        return bool(self._flag.value)


class IdChannel:
    """Slot ids from process to process: a one-way pipe of 4-byte messages.

    Lighter than ``multiprocessing.Queue``, whose ``put`` hands the item to a feeder thread: waking
    that thread and then the reader took a median 400-630 us when the reader's core had idled for
    10 ms (as an actor's does through a sync SAC update), a bare pipe 210-290 us. Any number of
    processes may put (a pipe write of a few bytes is atomic); one process gets.
    """

    def __init__(self, ctx: Any):
        self._reader, self._writer = ctx.Pipe(duplex=False)

    @property
    def reader(self) -> Any:
        """The receiving end, for ``multiprocessing.connection.wait``."""
        return self._reader

    def put(self, slot_id: int) -> None:
        self._writer.send_bytes(int(slot_id).to_bytes(4, "little"))

    def get(self, timeout: float) -> int:
        """The next id; ``queue.Empty`` if none arrives within ``timeout`` seconds."""
        if not self._reader.poll(timeout):
            raise queue.Empty
        return int.from_bytes(self._reader.recv_bytes(), "little")

    def close(self) -> None:
        self._reader.close()
        self._writer.close()


class _SeqlockBuffers:
    """``count`` buffers of ``numel`` float32 parameters, each behind a header of int64 words
    (word 0 a sequence number, odd while the buffer is written; word 1 what it holds, -1:
    nothing), after ``PREFIX`` int64 words of the store's own; in one shared-memory segment
    (``shared``), or in this process. What :class:`PolicyStore` and :class:`PoolStore` share."""

    HEADER = 2
    KIND, PREFIX = "", 0

    def __init__(self, numel: int, count: int, shared: bool):
        self.numel, self.count, self.shared = numel, count, shared
        size = 8 * self.PREFIX + count * self._stride
        self._segments: _Segments | None = None
        if shared:
            self.names = _segment_names(self.KIND, 1)
            self._segments = _Segments(self.names, size, create=True)
            buf = self._segments.shms[0].buf
        else:
            self.names = []
            buf = bytearray(size)
        self._bind(buf)
        for head in self._head:
            head[1] = -1

    @property
    def _stride(self) -> int:
        return 8 * self.HEADER + 4 * self.numel

    def _bind(self, buf: Any) -> None:
        self._head, self._params = [], []
        for b in range(self.count):
            off = 8 * self.PREFIX + b * self._stride
            self._head.append(np.frombuffer(buf, dtype=np.int64, count=self.HEADER, offset=off))
            self._params.append(
                np.frombuffer(buf, dtype=np.float32, count=self.numel, offset=off + 8 * self.HEADER)
            )

    def __getstate__(self) -> dict[str, Any]:
        if not self.shared:
            raise TypeError(f"a non-shared {type(self).__name__} cannot be sent to another process")
        return {"numel": self.numel, "count": self.count, "names": self.names}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.numel, self.count, self.names = state["numel"], state["count"], state["names"]
        self.shared = True
        self._segments = _Segments(self.names, 0, create=False)
        self._bind(self._segments.shms[0].buf)

    def close(self) -> None:
        self._head, self._params = [], []
        if self._segments is not None:
            self._segments.close()
            self._segments = None


class PolicyStore(_SeqlockBuffers):
    """The newest policy version, published by one writer (the learner) without any lock.

    A lock held by a reader that is SIGKILLed mid-copy is never released, and the learner's next
    publish would wait forever; so readers take none. Each buffer carries a sequence number
    (a seqlock): the writer makes it odd, writes the parameters and the version, makes it even
    again, and only then points readers at that buffer. A reader notes the sequence, copies, and
    keeps the copy only if the sequence is the same even number afterwards; otherwise the copy may
    be torn and it reads again. Nothing a reader does, or dies doing, can stop the writer.

    ``buffers=2`` (readers copy while the learner publishes: async) double-buffers: the writer
    fills the buffer readers are not pointed at, so a reader retries only if two publishes pass
    during one copy, and a writer that dies mid-publish leaves the previous version intact.
    ``buffers=1`` (nobody reads during a publish: sync) lets readers act with the published
    parameters in place (:meth:`attach`). x86 keeps stores in order; the sequence protocol relies
    on that (and on CPython's own barriers elsewhere).
    """

    KIND, PREFIX = "policy", 1  # word 0: the buffer readers are pointed at

    def __init__(self, numel: int, shared: bool, buffers: int = 2):
        if buffers not in (1, 2):
            raise ValueError(f"buffers must be 1 or 2, got {buffers}")
        super().__init__(numel, buffers, shared)

    def _bind(self, buf: Any) -> None:
        super()._bind(buf)
        self._active = np.frombuffer(buf, dtype=np.int64, count=1, offset=0)

    @property
    def buffers(self) -> int:
        return self.count

    @property
    def version(self) -> int:
        return int(self._head[int(self._active[0])][1])

    def publish(self, version: int, write: Any) -> None:
        """``write(array)`` fills the parameter vector; readers see the version only once it is
        complete. One writer only."""
        b = 1 - int(self._active[0]) if self.buffers == 2 else 0
        head = self._head[b]
        head[0] += 1  # odd: being written
        write(self._params[b])
        head[1] = version
        head[0] += 1  # even: complete
        self._active[0] = b

    def attach(self, flat: Any) -> bool:
        """Make ``flat`` (a FlatParams) a view of the published vector: the reader then holds
        every new version as soon as it is published and need not call :meth:`read_if_newer`.
        Only for a single-buffer store, whose readers never act while a version is being
        published (one process; or sync mode, where actors wait while the learner trains and
        publishes). False if it cannot be viewed (two buffers, or not float32): copy then."""
        return self.buffers == 1 and flat.view_into(self._params[0])

    def read_if_newer(self, have: int, read: Any, patience: float = 5.0) -> int:
        """Call ``read(array)`` if a version newer than ``have`` is published; return the version
        now held by the reader. Raises TimeoutError if no complete version could be read for
        ``patience`` seconds (a writer that died mid-publish of a single buffer)."""
        deadline = None
        while True:
            b = int(self._active[0])
            head = self._head[b]
            seq = int(head[0])
            version = int(head[1])
            if seq % 2 == 0:
                if version == have:
                    return have
                read(self._params[b])
                if int(head[0]) == seq:
                    return version
            # torn or being written: read again, yielding the core to the writer
            now = time.monotonic()
            if deadline is None:
                deadline = now + patience
            elif now > deadline:
                raise TimeoutError(
                    f"policy store: no complete version for {patience:g} s (writer gone?)"
                )
            time.sleep(0.0001)

    def close(self) -> None:
        self._active = None  # type: ignore[assignment]
        super().close()


class SharedArray:
    """One numpy array in a named shared-memory segment, for state every process writes in place
    (Hogwild!'s global parameters and counters). Picklable handle: a child re-attaches by name;
    the creator owns the segment and unlinks it in :meth:`close`."""

    def __init__(self, shape: tuple[int, ...], dtype: str):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.names = _segment_names("array", 1)
        nbytes = max(int(np.prod(self.shape)) * self.dtype.itemsize, 1)
        self._segments: _Segments | None = _Segments(self.names, nbytes, create=True)
        self._bind()
        self.array.fill(0)

    def _bind(self) -> None:
        buf = self._segments.shms[0].buf  # type: ignore[union-attr]
        count = int(np.prod(self.shape))
        self.array = np.frombuffer(buf, dtype=self.dtype, count=count).reshape(self.shape)

    def __getstate__(self) -> dict[str, Any]:
        return {"shape": self.shape, "dtype": self.dtype.str, "names": self.names}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.shape, self.dtype, self.names = (
            state["shape"],
            np.dtype(state["dtype"]),
            state["names"],
        )
        self._segments = _Segments(self.names, 0, create=False)
        self._bind()

    def close(self) -> None:
        self.array = None  # type: ignore[assignment]
        if self._segments is not None:
            self._segments.close()
            self._segments = None


class PoolStore(_SeqlockBuffers):
    """The opponent pool's snapshots (``--opponents pool``): ``capacity`` buffers, each a
    finished copy of the learner's parameters and the id of that snapshot. One writer (the
    driver, between updates) and readers that copy a snapshot at a game's start, without locks:
    each buffer is a seqlock as in :class:`PolicyStore` (odd while written), so a reader keeps a
    copy only if the buffer held the snapshot it asked for, complete, from start to end."""

    KIND = "pool"

    def __init__(self, numel: int, capacity: int, shared: bool):
        super().__init__(numel, capacity, shared)

    @property
    def capacity(self) -> int:
        return self.count

    def ids(self) -> np.ndarray:
        """The snapshot id in each buffer now (-1: empty)."""
        return np.array([int(head[1]) for head in self._head], np.int64)

    def write(self, index: int, snapshot: int, params: np.ndarray) -> None:
        """Buffer ``index`` holds snapshot ``snapshot`` (``params``) from now on. One writer."""
        head = self._head[index]
        head[0] += 1  # odd: being written
        head[1] = snapshot
        self._params[index][:] = params
        head[0] += 1  # even: complete

    def read(self, snapshot: int, read: Any) -> bool:
        """``read(array)`` with snapshot ``snapshot``'s parameters; False if no buffer holds it
        complete (it left the pool, or is being replaced: the reader draws again)."""
        for head, params in zip(self._head, self._params, strict=True):
            seq = int(head[0])
            if seq % 2 or int(head[1]) != snapshot:
                continue
            read(params)
            return int(head[0]) == seq
        return False

    def params(self, index: int) -> np.ndarray:
        """A copy of buffer ``index``'s parameters (the writer's side: checkpoints)."""
        return self._params[index].copy()
