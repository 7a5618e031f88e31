"""CPU seconds a run costs, the learner's process and every child it joined, per env step.

Wall-clock rates on this shared 2-core machine move by tens of percent between identical runs;
the CPU time a run consumes moves far less, so an overhead (a busier supervisor, a costlier
publish) shows here even when the rates drown it. Children count once they are joined, which
``train`` does before it returns.
"""

from __future__ import annotations

import resource


def cpu_seconds() -> float:
    """User + system seconds of this process and its joined children so far."""
    return sum(
        r.ru_utime + r.ru_stime
        for r in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
    )


def cpu_us_per_step(before: float, env_steps: int) -> float:
    """Microseconds of CPU per env step since ``before`` (a :func:`cpu_seconds` reading)."""
    return (cpu_seconds() - before) / max(env_steps, 1) * 1e6
