"""The supervisor on real child processes: liveness, hangs (a sleep without heartbeat, a
SIGSTOP), kills from outside, the restart budget, pauses."""

import multiprocessing as mp
import multiprocessing.resource_tracker
import os
import signal
import time
from types import SimpleNamespace

import pytest

from asyncrl.runtime.faults import ActorError
from asyncrl.runtime.processes import ChildProcesses, report_failure
from asyncrl.runtime.supervisor import ActorStatus, Lost, Pauses, Supervisor
from asyncrl.runtime.transport import SharedArray

CFG = SimpleNamespace(env="CartPole-v1", envs_per_actor=4)  # what a child's label names
LABEL = "actor {} (env CartPole-v1 x 4)"
TIMEOUT = 1.0  # --env-step-timeout of these tests


def _exit_with(outbox, code: int) -> None:
    os._exit(code)


def _raise(outbox, fatal: bool) -> None:
    try:
        raise ValueError("the child's own error")
    except ValueError:
        report_failure(outbox, fatal=fatal)
        os._exit(1)


def _step_forever(outbox, status, index: int, seconds: float) -> None:
    """Env steps of ``seconds`` each, the heartbeat written at each (``seconds`` past the
    timeout: one step that never ends)."""
    row = status.array[index]
    while True:
        ActorStatus.set(row, ActorStatus.STEPPING)
        time.sleep(seconds)
        ActorStatus.set(row, ActorStatus.ACTING)


@pytest.fixture
def children():
    out = ChildProcesses(mp.get_context("spawn"), "actor", CFG)
    yield out
    out.close()


@pytest.fixture
def status():
    out = SharedArray((2, 2), "float64")
    yield out
    out.close()


def _lost_within(supervisor: Supervisor, seconds: float = 60.0) -> list[Lost]:
    """Look as an owner does, every 0.2 s, until a child is reported lost."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lost = supervisor.check()
        if lost:
            return lost
        time.sleep(0.2)
    raise AssertionError(f"no child reported lost within {seconds} s")


def _phase_within(status: SharedArray, index: int, phase: int, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while ActorStatus(status).phase(index) != phase:
        assert time.monotonic() < deadline, "the child never started stepping"
        time.sleep(0.05)


def test_a_child_that_exits_non_zero_is_reported_with_its_exit_code(children):
    supervisor = Supervisor(children, TIMEOUT)
    children.start(_exit_with, (3,), 0)
    assert _lost_within(supervisor) == [Lost(0, "exited with code 3", "", False)]
    assert supervisor.lost() == []  # each once
    assert children.indices() == []


def test_a_child_killed_from_outside_is_reported_as_killed(children, status):
    supervisor = Supervisor(children, TIMEOUT, ActorStatus(status))
    children.start(_step_forever, (status, 0, 0.01), 0)
    _phase_within(status, 0, ActorStatus.STEPPING)
    os.kill(children.pid(0), signal.SIGKILL)
    assert _lost_within(supervisor) == [Lost(0, "was killed by SIGKILL", "", False)]


@pytest.mark.parametrize("how", ["sleeps", "SIGSTOP"])
def test_a_hung_child_is_killed_and_its_healthy_sibling_is_not(children, status, how):
    """Child 0 stays in one env step (a sleep without heartbeat, or stopped by SIGSTOP);
    child 1 steps every 10 ms. Only child 0 is killed, named hung in its step; the resource
    tracker (a process of this run too) is untouched."""
    supervisor = Supervisor(children, TIMEOUT, ActorStatus(status))
    children.start(_step_forever, (status, 0, 0.01 if how == "SIGSTOP" else 3600.0), 0)
    children.start(_step_forever, (status, 1, 0.01), 1)
    _phase_within(status, 0, ActorStatus.STEPPING)
    if how == "SIGSTOP":
        os.kill(children.pid(0), signal.SIGSTOP)
        ActorStatus.set(status.array[0], ActorStatus.STEPPING)  # stopped in a step
    t0 = time.monotonic()
    [lost] = _lost_within(supervisor)
    assert time.monotonic() - t0 >= TIMEOUT
    assert lost.index == 0 and not lost.fatal and lost.traceback == ""
    assert lost.cause.startswith("hung: one env step took over ")
    assert lost.cause.endswith(f" s (--env-step-timeout {TIMEOUT:g}); killed")
    assert children.indices() == [1]  # the sibling runs on
    children.kill(1)  # (it never ends by itself)
    tracker = multiprocessing.resource_tracker._resource_tracker._pid
    if tracker is not None:
        os.kill(tracker, 0)  # raises if it were gone


def test_a_pause_of_the_whole_run_is_no_hang(children, status):
    """A stretch in which the supervisor did not run at all (Ctrl+Z, a frozen container: here,
    the test does not call it) is not charged; the same time with the supervisor looking is."""
    supervisor = Supervisor(children, TIMEOUT, ActorStatus(status))
    children.start(_step_forever, (status, 0, 3600.0), 0)
    _phase_within(status, 0, ActorStatus.STEPPING)
    assert supervisor.check() == []
    time.sleep(Pauses.GAP + TIMEOUT + 0.5)  # stopped: past the timeout, all of it a pause
    assert supervisor.check() == []
    assert children.indices() == [0]
    [lost] = _lost_within(supervisor)  # looked at every 0.2 s: the step's own time counts
    assert lost.index == 0 and lost.cause.startswith("hung: one env step")


def test_restarts_within_the_budget_then_the_error_names_the_child(children, capsys):
    """Budget 1: the first loss is replaced (counted, one line on stderr with the child's
    traceback), the second ends the run with an error naming the child and its env, with the
    whole traceback."""
    started = []

    def restart(index: int) -> None:
        started.append(index)
        children.start(_raise, (False,), index, children.generation[index] + 1)

    supervisor = Supervisor(children, TIMEOUT, budget=1, restart=restart)
    children.start(_raise, (False,), 0)
    [lost] = _lost_within(supervisor)
    assert lost.cause == "raised" and "the child's own error" in lost.traceback
    supervisor.replace(lost, dropped=1)
    assert started == [0] and children.generation[0] == 1
    assert (supervisor.restarts.used, supervisor.restarts.dropped) == (1, 1)
    line = capsys.readouterr().err
    assert line.startswith(f"asyncrl: {LABEL.format(0)} raised; restarting it (1 of 1 restarts")
    assert "the child's own error" in line
    [lost] = _lost_within(supervisor)
    with pytest.raises(ActorError) as err:
        supervisor.replace(lost, dropped=0)
    text = str(err.value)
    assert text.startswith(f"{LABEL.format(0)} raised; no restarts left (--actor-restarts 1)")
    assert "Traceback" in text and "the child's own error" in text
    assert started == [0] and supervisor.restarts.used == 1


def test_an_error_that_ends_the_run_is_not_restarted(children):
    """A fatal error (an env's, under --on-env-error raise) ends the run at once, whatever the
    budget: the child named, its traceback given, no restart charged."""
    supervisor = Supervisor(children, TIMEOUT, budget=5, restart=lambda i: None)
    children.start(_raise, (True,), 1)
    [lost] = _lost_within(supervisor)
    with pytest.raises(ActorError) as err:
        supervisor.replace(lost, dropped=1)
    assert str(err.value).startswith(f"{LABEL.format(1)} failed:\nTraceback")
    assert "the child's own error" in str(err.value)
    assert supervisor.restarts.used == 0


def test_a_child_that_said_goodbye_may_exit(children):
    supervisor = Supervisor(children, TIMEOUT)
    supervisor.done.add(0)
    children.start(_exit_with, (0,), 0)
    children.start(_exit_with, (0,), 1)  # no goodbye: its exit is a loss
    lost, deadline = [], time.monotonic() + 60
    while children.indices() and time.monotonic() < deadline:
        lost += supervisor.check()
        time.sleep(0.2)
    assert lost == [Lost(1, "exited with code 0", "", False)] and children.indices() == []


def test_a_ray_actor_hung_in_a_call_is_killed_by_its_handle_and_replaced():
    """The Ray backend's adapter (no cluster: a stand-in for ``ray``): an actor whose rollout
    call has run past the timeout is asked its phase; stepping past the timeout, it is killed
    through its handle, its calls forgotten and reported lost once, as hung; an actor that is
    not past the timeout is not even asked."""
    import threading

    from asyncrl.runtime.backends.ray import RayActors

    killed, asked = [], []

    class Handle:
        def __init__(self, index: int):
            self.index = index
            self.status = SimpleNamespace(remote=lambda: asked.append(index) or index)

    fake_ray = SimpleNamespace(
        get=lambda ref, timeout: (ActorStatus.STEPPING, 2.5 * TIMEOUT),
        kill=lambda handle, no_restart: killed.append(handle.index),
        exceptions=SimpleNamespace(RayTaskError=type("RayTaskError", (Exception,), {})),
    )
    now = time.perf_counter()
    backend = SimpleNamespace(
        ray=fake_ray,
        cfg=SimpleNamespace(env_step_timeout=TIMEOUT),
        book=SimpleNamespace(cond=threading.Condition()),
        workers=[Handle(0), Handle(1)],
        # every call in flight: ("rollout", actor, slot, started)
        pending={"a": ("rollout", 0, 0, now - 3 * TIMEOUT), "b": ("rollout", 1, 1, now)},
        _label=lambda i: LABEL.format(i),
    )
    actors = RayActors(backend)
    restarted = []
    supervisor = Supervisor(actors, TIMEOUT, actors, budget=1, restart=restarted.append)
    [lost] = supervisor.check()
    assert asked == [0] and killed == [0] and list(backend.pending) == ["b"]
    assert lost == Lost(
        0, f"hung: one env step took over {2.5 * TIMEOUT:.1f} s (--env-step-timeout 1); killed",
        "", False,
    )  # fmt: skip
    supervisor.replace(lost, dropped=1)
    assert restarted == [0] and supervisor.check() == []
    actors.died(1, fake_ray.exceptions.RayTaskError("Traceback ... ValueError: boom"))
    [lost] = supervisor.lost()
    assert (lost.index, lost.cause, lost.fatal) == (1, "raised", False) and not backend.pending
    assert "boom" in lost.traceback
