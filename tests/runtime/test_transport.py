"""Slots and policy versions in shared memory: visible across processes, freed by the owner."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import signal
import threading
import time

import numpy as np
import pytest
import torch
from torch import nn

from asyncrl.envs import EnvSpec
from asyncrl.nets import FlatParams
from asyncrl.runtime.transport import (
    IdChannel,
    PolicyStore,
    SlotLayout,
    SlotStore,
    StopFlag,
    policy_layouts,
)
from conftest import shm_segments

SPEC = EnvSpec("x", (3,), True, (), 2)


def _child_writes(slots: SlotStore, store: PolicyStore) -> None:
    slots.slots[1].rewards[:] = 5.0
    slots.slots[1].versions[:] = 3
    store.read_if_newer(-1, lambda a: None)
    store.publish(11, lambda a: a.fill(2.5))
    slots.close()
    store.close()


def test_child_process_writes_are_seen_and_segments_are_unlinked():
    ctx = mp.get_context("spawn")
    slots = SlotStore(SlotLayout.for_rollout(SPEC, 4, 2), 2, shared=True)
    store = PolicyStore(10, shared=True)
    names = set(slots.names) | set(store.names)
    assert names <= shm_segments()
    p = ctx.Process(target=_child_writes, args=(slots, store))
    p.start()
    p.join(30)
    assert p.exitcode == 0
    assert (slots.slots[1].rewards == 5.0).all() and (slots.slots[0].rewards == 0).all()
    assert (slots.slots[1].versions == 3).all()
    got = np.zeros(10, np.float32)
    assert store.read_if_newer(-1, lambda a: got.__setitem__(slice(None), a)) == 11
    assert (got == 2.5).all()
    slots.close()
    store.close()
    assert not names & shm_segments()


def _put_ids(channel: IdChannel, first: int) -> None:
    for i in range(first, first + 100):
        channel.put(i)


def test_id_channel_carries_ids_from_several_processes_and_times_out_when_empty():
    ctx = mp.get_context("spawn")
    channel = IdChannel(ctx)
    with pytest.raises(queue.Empty):
        channel.get(0.05)
    writers = [ctx.Process(target=_put_ids, args=(channel, k * 1000)) for k in range(2)]
    for p in writers:
        p.start()
    # generous: a spawned writer imports torch and this module before its first put, which
    # took over 10 s on a loaded 2-core machine; the timeout only turns a lost id into a failure
    got = [channel.get(120) for _ in range(200)]
    for p in writers:
        p.join(30)
        assert p.exitcode == 0
    assert sorted(got) == [*range(100), *range(1000, 1100)]
    for k in (0, 1000):  # each writer's ids arrive in its order
        mine = [i for i in got if k <= i < k + 100]
        assert mine == sorted(mine)
    channel.close()


def test_reader_skips_copy_when_version_unchanged():
    store = PolicyStore(4, shared=False)
    store.publish(0, lambda a: a.fill(1.0))
    calls = []
    assert store.read_if_newer(-1, calls.append) == 0
    assert store.read_if_newer(0, calls.append) == 0
    assert len(calls) == 1
    store.close()


def test_attached_reader_acts_with_the_published_vector_itself():
    torch.manual_seed(0)
    learner, reader, copier = nn.Linear(3, 2), nn.Linear(3, 2), nn.Linear(3, 2)
    reader.requires_grad_(False)
    source, sink = FlatParams(learner), FlatParams(reader)
    store = PolicyStore(source.numel, shared=False, buffers=1)
    assert store.attach(sink)
    store.publish(0, source.write_to)
    # no read: the reader's tensors are views of the vector
    assert torch.equal(reader.weight, learner.weight) and torch.equal(reader.bias, learner.bias)
    with torch.no_grad():
        learner.weight.add_(1.0)
    store.publish(1, source.write_to)
    assert torch.equal(reader.weight, learner.weight)
    # attaching one reader changes nothing for another that copies
    assert store.read_if_newer(-1, FlatParams(copier).read_from) == 1
    assert torch.equal(copier.weight, learner.weight)
    store.close()


def test_a_reader_that_cannot_be_viewed_keeps_copying():
    reader = nn.Linear(3, 2).double()
    store = PolicyStore(FlatParams(reader).numel, shared=False, buffers=1)
    assert not store.attach(FlatParams(reader))
    store.publish(0, lambda a: a.fill(1.5))
    assert store.read_if_newer(-1, FlatParams(reader).read_from) == 0
    assert (reader.weight == 1.5).all()
    store.close()


def test_layout_fields_are_aligned_and_disjoint():
    offsets, total = SlotLayout.for_rollout(SPEC, 4, 2).offsets()
    spans = sorted((off, off + int(np.prod(shape)) * dt.itemsize) for _, shape, dt, off in offsets)
    assert all(off % 64 == 0 for off, _ in spans)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False))
    assert spans[-1][1] <= total


def test_contiguous_learner_state_trains_and_publishes_as_one_copy():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    twin = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    twin.load_state_dict(net.state_dict())
    twin_opt = torch.optim.Adam(twin.parameters(), lr=0.1)
    flat = FlatParams(net)
    assert flat.make_contiguous()
    vector = flat._vector
    base = torch.from_numpy(vector).untyped_storage().data_ptr()
    # values kept, every tensor a view of the one vector
    for a, b in zip(net.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b) and a.untyped_storage().data_ptr() == base
    before = vector.copy()
    x = torch.randn(5, 3)
    for model, optimizer in ((net, opt), (twin, twin_opt)):  # the optimizer still steps it
        for _ in range(3):
            optimizer.zero_grad()
            model(x).square().sum().backward()
            optimizer.step()
    out, expected = np.empty(flat.numel, np.float32), np.empty(flat.numel, np.float32)
    flat.write_to(out)
    FlatParams(twin).write_to(expected)
    np.testing.assert_array_equal(out, expected)
    assert not np.array_equal(out, before)  # the steps changed the vector itself


def _spin_until_stopped(stop: StopFlag, ready) -> None:
    ready.send_bytes(b"r")
    while not stop.is_set():
        pass


def _spinner(ctx, stop: StopFlag):
    """A started child spinning on ``stop``, and the pipe end it says it is spinning on."""
    ready_r, ready_w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_spin_until_stopped, args=(stop, ready_w))
    p.start()
    ready_w.close()  # the child holds its own copy
    return p, ready_r


def test_stop_flag_is_set_after_children_reading_it_were_killed_mid_read():
    """Children spin on ``is_set()``, as actors poll it, and are SIGKILLed at random moments:
    the parent's ``set()`` still returns at once and a child started afterwards sees it. (With
    ``multiprocessing.Event`` -- a lock taken by ``is_set()`` -- the first kill left the lock
    held and ``set()`` blocked for good: a process-backend run hung in its shutdown.)"""
    ctx = mp.get_context("spawn")
    stop = StopFlag(ctx)
    rng = random.Random(0)
    for _ in range(4):
        p, ready = _spinner(ctx, stop)
        assert ready.poll(60), "the child never started spinning"
        time.sleep(rng.uniform(0.0, 0.05))
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        assert p.exitcode == -signal.SIGKILL
        ready.close()
    setter = threading.Thread(target=stop.set, daemon=True)
    setter.start()
    setter.join(10)
    assert not setter.is_alive(), "set() blocked: a killed reader left the flag locked"
    p, ready = _spinner(ctx, stop)
    p.join(60)
    assert p.exitcode == 0  # it saw the flag set
    ready.close()


# ------------------------------------------------------------------------------ /dev/shm's size
def _big_slots(tmp_path, **kw):
    """CartPole with 64 envs x 1,024 steps per actor: 3.4 MB a slot, 20 MB for 2 async actors."""
    from asyncrl.settings import TrainConfig

    base = dict(
        env="CartPole-v1",
        actors=2,
        envs_per_actor=64,
        rollout=1024,
        minibatch_size=64,
        total_steps=10**6,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
        run_dir=str(tmp_path / "run"),
    )
    return TrainConfig(**{**base, **kw})


def test_slots_larger_than_the_free_shared_memory_stop_the_run_before_it_starts(
    tmp_path, monkeypatch
):
    from asyncrl.config import ConfigError
    from asyncrl.runtime import transport
    from asyncrl.runtime.trainer import train

    monkeypatch.setattr(transport, "shm_free", lambda path=transport.SHM_DIR: 8 * 2**20)
    with pytest.raises(ConfigError) as e:
        train(_big_slots(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("shared memory: the rollout slots of 2 actors need 20.3 MB in /dev/shm")
    assert "which has 8.0 MB free" in msg and "--shm-size" in msg
    assert not (tmp_path / "run").exists()  # refused before anything was written or started
    assert mp.active_children() == []
    # what fits, and the backends whose slots are not shared memory, are not refused
    monkeypatch.setattr(transport, "shm_free", lambda path=transport.SHM_DIR: 22 * 2**20)
    transport.check_shared_memory(*_layouts(_big_slots(tmp_path)))
    # async batches of 2 rollouts: each actor owns twice the slots, and the hint says so
    with pytest.raises(ConfigError) as e:
        big = _big_slots(tmp_path, mode="async", rollouts_per_batch=2)
        transport.check_shared_memory(*_layouts(big))
    assert "need 40.5 MB" in str(e.value) and "--rollouts-per-batch" in str(e.value)
    monkeypatch.setattr(transport, "shm_free", lambda path=transport.SHM_DIR: 0)
    transport.check_shared_memory(*_layouts(_big_slots(tmp_path, backend="thread")))


def _layouts(cfg):
    """``cfg`` and its policies' slot layouts, as check_shared_memory takes them."""
    from asyncrl.settings import prepare_settings

    run = prepare_settings(cfg)
    return run.cfg, policy_layouts(run)


def _can_mount_a_private_tmpfs() -> str | None:
    """Why a private /dev/shm cannot be had here (None: it can)."""
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare(1) to mount a private tmpfs on /dev/shm"
    probe = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs -o size=1m tmpfs /dev/shm",
        ],
        capture_output=True,
    )
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a mount namespace: {probe.stderr.decode().strip()}"
    return None


def test_a_real_dev_shm_too_small_for_the_slots_is_refused_in_one_line(tmp_path):
    """The CLI in a mount namespace of its own whose /dev/shm is a 4 MB tmpfs (Docker gives 64 MB
    and Atari needs ~176 MB; here 20 MB of CartPole slots): it stops at once with one line naming
    both sizes and the fix, instead of actors dying of SIGBUS until the restarts run out."""
    import subprocess
    import sys
    from pathlib import Path

    why = _can_mount_a_private_tmpfs()
    if why:
        pytest.skip(why)
    cli = [
        sys.executable, "-m", "asyncrl.cli", "train", "--env", "CartPole-v1",
        "--envs-per-actor", "64", "--rollout", "1024", "--minibatch-size", "64",
        "--no-progress", "--no-tensorboard", "--run-dir", str(tmp_path / "run"),
    ]  # fmt: skip
    script = 'mount -t tmpfs -o size=4m tmpfs /dev/shm && exec "$@"'
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *cli],
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("asyncrl:")]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("asyncrl: error: shared memory: the rollout slots of 2 actors")
    assert "which has 4.0 MB free" in errors[0] and "--shm-size" in errors[0]
    assert not Path(tmp_path / "run").exists()
