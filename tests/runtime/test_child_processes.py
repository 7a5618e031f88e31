"""ChildProcesses: how children's messages and failure reports reach the parent."""

import multiprocessing as mp
import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path

from asyncrl.runtime.processes import ChildProcesses, report_failure
from asyncrl.settings import TrainConfig


def _send_more_than_a_pipe_holds(outbox, ready) -> None:
    ready.send_bytes(b"r")
    outbox.send(b"x" * (4 << 20))  # 4 MiB: blocks mid-message until the parent reads
    time.sleep(120)


def _raise_when_told(outbox, go) -> None:
    go.recv_bytes()
    try:
        raise RuntimeError("child 1 failed here")
    except RuntimeError:
        report_failure(outbox, fatal=True)
        os._exit(1)


def _raise_at_length(outbox) -> None:
    try:
        raise RuntimeError("y" * (256 << 10))  # its traceback is 4x what a pipe holds
    except RuntimeError:
        report_failure(outbox, fatal=True)
        os._exit(1)


def _send_then_exit(outbox, n: int, fail: bool) -> None:
    for i in range(n):
        outbox.send(("message", i))
    if fail:
        try:
            raise ValueError("after the messages")
        except ValueError:
            report_failure(outbox, fatal=False)
            os._exit(1)


def _dead_within(children: ChildProcesses, n: int, seconds: float) -> dict[int, tuple]:
    deadline = time.monotonic() + seconds
    found: dict[int, tuple] = {}
    while len(found) < n and time.monotonic() < deadline:
        for index, cause, tb, fatal in children.dead():
            found[index] = (cause, tb, fatal)
        time.sleep(0.05)
    return found


def test_a_child_killed_mid_message_does_not_hold_up_another_childs_failure_report():
    """Child 0 is SIGKILLed in the middle of sending a message; child 1 then fails: its
    traceback reaches the parent and it exits. (Through one ``multiprocessing.Queue`` for all
    children, child 0's feeder thread would have died holding the queue's write lock: child 1's
    report never arrives and child 1 cannot exit -- a run waiting on it waits for good.)"""
    ctx = mp.get_context("spawn")
    children = ChildProcesses(ctx, "actor", TrainConfig())
    ready_r, ready_w = ctx.Pipe(duplex=False)
    go_r, go_w = ctx.Pipe(duplex=False)
    try:
        children.start(_send_more_than_a_pipe_holds, (ready_w,), 0)
        children.start(_raise_when_told, (go_r,), 1)
        ready_w.close()
        go_r.close()
        assert ready_r.poll(60), "child 0 never started"
        time.sleep(1.0)  # it fills its pipe (64 KiB) within microseconds and blocks there
        os.kill(children.pid(0), signal.SIGKILL)
        go_w.send_bytes(b"go")
        found = _dead_within(children, 2, 20)
        assert set(found) == {0, 1}, f"only {sorted(found)} reported dead within 20 s"
        assert found[0] == ("was killed by SIGKILL", "", False)  # its cut message is dropped
        cause, tb, fatal = found[1]
        assert cause == "raised" and fatal
        assert "RuntimeError: child 1 failed here" in tb
        assert "_raise_when_told" in tb
    finally:
        children.close()
        for end in (ready_r, go_w):
            end.close()


def test_a_childs_death_is_reported_after_every_message_it_sent():
    """Messages come out in the order sent, and a child's death only once they have all been
    received: a Hogwild! worker's goodbye is read before its exit is judged."""
    ctx = mp.get_context("spawn")
    children = ChildProcesses(ctx, "hogwild worker", TrainConfig())
    try:
        children.start(_send_then_exit, (3, False), 0)
        children.start(_send_then_exit, (2, True), 1)
        for p in children.procs.values():
            p.join(60)
        assert children.dead() == []  # both exited, but their messages are still to be read
        got: dict[int, list] = {0: [], 1: []}
        while True:
            try:
                index, message = children.receive(timeout=1.0)
            except queue.Empty:
                break
            got[index].append(message)
        assert got == {0: [("message", i) for i in range(3)], 1: [("message", 0), ("message", 1)]}
        found = {index: (cause, tb, fatal) for index, cause, tb, fatal in children.dead()}
        assert found[0] == ("exited with code 0", "", False)
        cause, tb, fatal = found[1]
        assert cause == "raised" and not fatal and "ValueError: after the messages" in tb
        assert children.dead() == [] and children.inbox == {}
    finally:
        children.close()


def test_a_failure_report_longer_than_a_pipe_holds_arrives_whole():
    """A child sending more than its pipe holds waits until the parent reads: the parent reads
    while it watches (not only once the child is dead, which it would then never be)."""
    ctx = mp.get_context("spawn")
    children = ChildProcesses(ctx, "actor", TrainConfig())
    try:
        children.start(_raise_at_length, (), 0)
        found = _dead_within(children, 1, 30)
        assert 0 in found, "the child is still alive: its report was never read"
        cause, tb, fatal = found[0]
        assert cause == "raised" and fatal
        assert "RuntimeError: " + "y" * (256 << 10) in tb
    finally:
        children.close()


def _ignore_sigint_then_exit(outbox) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as every asyncrl child does first
    outbox.send(("ran", os.getpid()))


def test_a_ctrl_c_while_a_child_is_still_starting_does_not_kill_it():
    """A Ctrl+C reaches the whole process group, a child still importing included. Sent to a
    child just started (long before its own code runs), it neither kills the child nor prints
    a KeyboardInterrupt traceback into the run's last lines: the child starts with SIGINT
    blocked, then ignores it."""
    ctx = mp.get_context("spawn")
    children = ChildProcesses(ctx, "evaluator", TrainConfig())
    try:
        children.start(_ignore_sigint_then_exit, (), 0)
        pid = children.pid(0)
        os.kill(pid, signal.SIGINT)
        index, message = children.receive(timeout=60)
        assert (index, message) == (0, ("ran", pid))
        children.procs[0].join(60)
        assert children.procs[0].exitcode == 0
    finally:
        children.close()


_FIRST_CHILD = """
import multiprocessing as mp, os, signal
from asyncrl.runtime.processes import ChildProcesses
from asyncrl.settings import TrainConfig
from tests.runtime.test_child_processes import _ignore_sigint_then_exit

children = ChildProcesses(mp.get_context("spawn"), "evaluator", TrainConfig())
try:
    children.start(_ignore_sigint_then_exit, (), 0)
    os.kill(children.pid(0), signal.SIGINT)
    print(children.receive(timeout=60)[1][0])
    children.procs[0].join(60)
    print(children.procs[0].exitcode)
finally:
    children.close()
"""


def test_the_first_child_a_process_starts_is_covered_too():
    """Starting multiprocessing's resource tracker unblocks SIGINT, and a process starts it with
    its first spawned child: in a fresh interpreter (no tracker yet) that child must still start
    with SIGINT blocked, and survive a Ctrl+C sent at once."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_CHILD], cwd=root, capture_output=True, text=True, timeout=180
    )
    assert out.stdout.split() == ["ran", "0"], out.stderr[-2000:]
