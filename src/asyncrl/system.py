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


def bf16_support(device: str) -> tuple[bool, str]:
    """Whether ``device`` (cpu, cuda or auto) multiplies bfloat16 natively, and what says so:
    on CUDA torch's answer; on a CPU the flags ``avx512_bf16`` or ``amx_bf16`` (/proc/cpuinfo,
    else torch's AVX-512 BF16 check). Without them torch still runs bfloat16, emulated and
    slower than float32."""
    import torch

    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        ok = bool(torch.cuda.is_bf16_supported())
        return ok, f"torch.cuda.is_bf16_supported() is {ok}"
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((row.split(":", 1)[1].split() for row in f if row.startswith("flags")), [])
        found = sorted({"avx512_bf16", "amx_bf16"} & set(flags))
        return bool(found), f"CPU flags: {', '.join(found) or 'neither avx512_bf16 nor amx_bf16'}"
    except OSError:
        ok = bool(torch.cpu._is_avx512_bf16_supported())
        return ok, f"torch's AVX-512 BF16 check is {ok}"
