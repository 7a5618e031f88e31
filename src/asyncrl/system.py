"""What this machine allows a run: the CPUs this process may use and the memory a new
allocation can have."""

from __future__ import annotations

import os


def cpus_allowed() -> int:
    """CPUs this process may run on: its affinity mask, which containers and ``taskset``
    narrow (elsewhere than Linux, the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def available_memory() -> tuple[int, str]:
    """Bytes of memory a new allocation can have now, and where the figure comes from: Linux's
    MemAvailable (free plus reclaimable cache; free pages alone would undercount), lowered to
    what the cgroup's memory.max leaves, else free physical pages."""
    avail, source = None, ""
    try:
        with open("/proc/meminfo") as f:
            for row in f:
                if row.startswith("MemAvailable:"):
                    avail, source = int(row.split()[1]) * 1024, "MemAvailable"
    except OSError:
        pass
    if avail is None:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        source = "free physical pages"
    try:
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        used = int(open("/sys/fs/cgroup/memory.current").read())
        if limit != "max" and int(limit) - used < avail:
            avail, source = int(limit) - used, "cgroup memory.max"
    except (OSError, ValueError):
        pass
    return avail, source
