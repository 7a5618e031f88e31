"""torch.compile kept working when a compile is cut short.

A signal for the whole process group (Ctrl+C) also kills inductor's C++ compiler, and a linker
killed mid-write leaves an empty or truncated shared library in inductor's on-disk cache, which
inductor then takes as built (pytorch/pytorch#102539): every later compile of that graph fails
("file too short"), and a damaged ISA probe silently drops the vector ISA it tests. Here such
files are removed (under inductor's own lock for them) before the first compile of a process,
and a compile that failed on one, or on a compiler killed by a signal, is tried once more.
"""

from __future__ import annotations

import fcntl
import functools
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_repaired = False


def cache_dir() -> Path:
    """Inductor's on-disk cache (TORCHINDUCTOR_CACHE_DIR, else its per-user default)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir

    return Path(inductor_cache_dir())


def _whole_elf(path: Path) -> bool:
    """Whether ``path`` holds an ELF file as long as its header says (the section header
    table, which linkers write last, ends inside the file)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return True  # gone or unreadable: not ours to judge
    if len(head) < 52 or head[:4] != b"\x7fELF":
        return False
    end = "<" if head[5] == 1 else ">"
    if head[4] == 2:  # 64-bit
        if len(head) < 64:
            return False
        (shoff,) = struct.unpack(end + "Q", head[0x28:0x30])
        shentsize, shnum = struct.unpack(end + "HH", head[0x3A:0x3E])
    else:
        (shoff,) = struct.unpack(end + "I", head[0x20:0x24])
        shentsize, shnum = struct.unpack(end + "HH", head[0x2E:0x32])
    return shoff + shentsize * shnum <= size


def repair_cache(root: Path | None = None) -> list[Path]:
    """Remove the damaged shared libraries and objects of inductor's cache at ``root`` (not an
    ELF file, or shorter than its header says); one whose compile lock another process holds is
    being built and is left. Returns the paths removed."""
    root = cache_dir() if root is None else root
    removed: list[Path] = []
    try:
        subdirs = [d for d in root.iterdir() if d.is_dir() and len(d.name) == 2]
    except OSError:
        return removed
    for sub in subdirs:
        try:
            files = [p for p in sub.iterdir() if p.suffix in (".so", ".o") and p.is_file()]
        except OSError:
            continue
        for path in files:
            if _whole_elf(path):
                continue
            key = path.name.split(".", 1)[0]
            if _remove_unlocked(path, root / "locks" / f"{key}.lock"):
                removed.append(path)
    return removed


def _remove_unlocked(path: Path, lock: Path) -> bool:
    """Remove ``path`` while holding ``lock`` (inductor's FileLock is a flock on it); False if
    another process holds it."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        try:
            if _whole_elf(path):  # rebuilt since it was read
                return False
            path.unlink()
            return True
        except FileNotFoundError:
            return False
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _report(removed: list[Path], why: str) -> None:
    if removed:
        shown = ", ".join(p.name for p in removed[:3]) + (" ..." if len(removed) > 3 else "")
        print(
            f"asyncrl: removed {len(removed)} damaged file(s) from torch.compile's cache "
            f"{removed[0].parent.parent} ({why}): {shown}",
            file=sys.stderr,
            flush=True,
        )


def _killed_compiler(e: BaseException) -> bool:
    """Whether ``e`` or what caused it is a compiler process ended by a signal."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, subprocess.CalledProcessError):
            out = e.output.decode(errors="replace") if isinstance(e.output, bytes) else e.output
            if e.returncode < 0 or "signal terminated program" in (out or ""):
                return True
        e = e.__cause__ or e.__context__
    return False


def _clear_loaded() -> None:
    """Forget what this process loaded or failed to build, so that a retry builds again."""
    from torch._inductor.utils import clear_caches

    clear_caches()


def compiled(fn: Callable, **options: Any) -> Callable:
    """``torch.compile(fn, **options)``; the first of a process repairs inductor's cache
    first, and a call whose compile failed on a damaged cache file or a killed compiler
    repairs it and compiles once more (what else fails is raised as it is)."""
    import torch

    global _repaired
    if not _repaired:
        _repaired = True
        _report(repair_cache(), "left by a compile cut short")
    inner = torch.compile(fn, **options)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return inner(*args, **kwargs)
        except Exception as e:
            removed = repair_cache()
            if not removed and not _killed_compiler(e):
                raise
            why = "a compile cut short" if removed else "the compiler was killed"
            _report(removed, why)
            print(f"asyncrl: compiling again ({why})", file=sys.stderr, flush=True)
            _clear_loaded()
            return inner(*args, **kwargs)

    return call
