"""torch.compile's on-disk cache after a compile cut short (asyncrl.compiling).

A Ctrl+C reaches inductor's compiler too (it is in the run's process group); a linker killed
mid-write leaves an empty shared library that inductor takes as built, and every later run
compiling that graph failed ("file too short"). The end-to-end test does what a user does:
Ctrl+C while the learner's step links, in a real run with a cache of its own.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asyncrl.compiling import _killed_compiler, repair_cache


def _elf() -> Path:
    """A real ELF file of this machine."""
    return Path(os.path.realpath(sys.executable))


def _cache(tmp_path: Path) -> Path:
    root = tmp_path / "inductor"
    (root / "ab").mkdir(parents=True)
    (root / "locks").mkdir()
    return root


def test_repair_removes_empty_truncated_and_foreign_files_and_keeps_whole_and_locked_ones(
    tmp_path,
):
    root = _cache(tmp_path)
    whole = root / "ab" / "cabwhole.main.so"
    shutil.copyfile(_elf(), whole)
    data = whole.read_bytes()
    empty = root / "ab" / "cabempty.main.so"
    empty.write_bytes(b"")
    truncated = root / "ab" / "cabcut.so"
    truncated.write_bytes(data[: len(data) // 2])
    foreign = root / "ab" / "cabtext.o"
    foreign.write_bytes(b"not an object file")
    source = root / "ab" / "cabsource.cpp"  # not a built file: never judged
    source.write_bytes(b"")
    building = root / "ab" / "cabbusy.so"  # another process holds its lock: being built
    building.write_bytes(b"")
    lock = os.open(root / "locks" / "cabbusy.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        removed = repair_cache(root)
    finally:
        os.close(lock)
    assert sorted(removed) == sorted([empty, truncated, foreign])
    assert whole.read_bytes() == data and source.exists() and building.exists()
    assert repair_cache(root) == [building]  # its lock released


def test_a_compiler_ended_by_a_signal_is_told_from_a_compile_error():
    def chained(returncode: int, output: bytes) -> Exception:
        try:
            try:
                raise subprocess.CalledProcessError(returncode, ["g++"], output=output)
            except subprocess.CalledProcessError as e:
                raise RuntimeError("C++ compile error") from e
        except RuntimeError as e:
            return e

    assert _killed_compiler(chained(-2, b""))
    assert _killed_compiler(chained(1, b"g++: fatal error: Killed signal terminated program"))
    assert not _killed_compiler(chained(1, b"error: 'x' was not declared in this scope"))
    assert not _killed_compiler(ValueError("no process"))


def _train(cache: Path, run: Path, steps: int) -> subprocess.Popen:
    """``asyncrl train`` with the compiled step, in a session of its own (a terminal's process
    group: a signal to it reaches the compiler too), SIGINT at its default as in a shell."""
    cmd = [sys.executable, "-m", "asyncrl.cli", "train", "--env", "CartPole-v1"]
    cmd += ["--total-steps", str(steps), "--compile", "--run-dir", str(run), "--overwrite"]
    cmd += ["--no-tensorboard", "--no-progress", "--actors", "1", "--envs-per-actor", "4"]
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache))
    return subprocess.Popen(
        cmd,
        env=env,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _linking(pgid: int, target: str) -> bool:
    """Whether a linker of the process group ``pgid`` is writing ``target``."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        comm = stat.split("(", 1)[1].rsplit(")", 1)[0]
        if int(fields[2]) == pgid and comm in ("collect2", "ld") and target in b" ".join(args):
            return True
    return False


def _ended(run: Path) -> str:
    return json.loads((run / "summary.json").read_text())["ended"]


@pytest.mark.slow
def test_ctrl_c_while_the_learner_links_its_step_interrupts_the_run_and_spoils_no_later_one(
    tmp_path,
):
    cache, first, second = tmp_path / "inductor", tmp_path / "first", tmp_path / "second"
    run = _train(cache, first, 10**6)
    try:
        deadline = time.monotonic() + 300
        while not _linking(run.pid, b".main.so"):
            assert run.poll() is None, run.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the learner's step was never linked"
            time.sleep(0.005)
        os.killpg(run.pid, signal.SIGINT)
        out = run.communicate(timeout=300)[0]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    # the linker died with the signal; the step was compiled again and the run stopped as a
    # Ctrl+C stops it: at the end of its update, with a checkpoint
    assert run.returncode == 130, out[-3000:]
    assert "compiling again" in out, out[-3000:]
    assert _ended(first) == "signal"
    assert list(first.glob("checkpoint-*.pt"))

    # a cache file cut short as the linker leaves it: the next run removes it and compiles
    built = list(cache.glob("*/*.main.so"))
    assert built
    for path in built:
        path.write_bytes(path.read_bytes()[:4096])
    run = _train(cache, second, 2048)
    out = run.communicate(timeout=600)[0]
    assert run.returncode == 0, out[-3000:]
    assert f"removed {len(built)} damaged file(s) from torch.compile's cache {cache}" in out, out[
        -3000:
    ]
    assert _ended(second) == "budget"
