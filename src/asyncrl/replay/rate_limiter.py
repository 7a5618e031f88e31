"""Keeping off-policy learning at a fixed replay ratio: Reverb's ``SampleToInsertRatio`` in
gradient steps per env step. ``error = samples_per_insert * (inserts - min_size_to_sample) -
samples`` stays within ``+/- error_buffer`` once the warm-up is over; a constructor check
refuses windows that cannot make progress. Exact (rational) arithmetic; the invariant and its
proof are in docs (Internals: the rate limiter)."""

from __future__ import annotations

import math
import threading
import time
from fractions import Fraction
from typing import Any


class LimiterClosed(RuntimeError):
    """Raised by a wait on a limiter that was closed, so that shutdown ends every loop."""


def _exact(x: float | int | Fraction, name: str) -> Fraction:
    """``x`` as the decimal it prints as (0.1 -> 1/10), so schedules do not drift by a step."""
    if isinstance(x, (int, Fraction)):
        return Fraction(x)
    xf = float(x)
    if not math.isfinite(xf):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return Fraction(repr(xf))


def _positive_int(x: Any, name: str) -> int:
    if isinstance(x, bool) or int(x) != x or x < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {x!r}")
    return int(x)


class RateLimiter:
    """Reverb's ``SampleToInsertRatio`` for env steps (inserts) and gradient steps (samples).

    Thread-safe. Blocking uses one lock and two condition variables (one per side): a wait
    sleeps until the other side commits or the limiter closes, never polls.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: float,
        max_insert_batch: int = 1,
        max_sample_batch: int = 1,
    ) -> None:
        spi = _exact(samples_per_insert, "samples_per_insert")
        if spi <= 0:
            raise ValueError(f"samples_per_insert must be > 0, got {samples_per_insert!r}")
        self.min_size_to_sample = _positive_int(min_size_to_sample, "min_size_to_sample")
        self.max_insert_batch = _positive_int(max_insert_batch, "max_insert_batch")
        self.max_sample_batch = _positive_int(max_sample_batch, "max_sample_batch")
        eb = _exact(error_buffer, "error_buffer")
        need = max(Fraction(self.max_sample_batch), spi * self.max_insert_batch)
        if eb < need:
            raise ValueError(
                f"error_buffer must be >= max(max_sample_batch, samples_per_insert * "
                f"max_insert_batch) = {float(need):g} so that one insert batch and one sample "
                f"batch both fit in the window (else the limiter can deadlock); "
                f"got {error_buffer!r}"
            )
        self.samples_per_insert = float(samples_per_insert)
        self.error_buffer = float(error_buffer)
        # Everything in units of 1/_den gradient steps, as ints: error * _den is exact.
        self._den = math.lcm(spi.denominator, eb.denominator)
        self._spi = int(spi * self._den)  # samples_per_insert * _den
        self._eb = int(eb * self._den)  # error_buffer * _den

        self._lock = threading.Lock()
        self._can_insert_cv = threading.Condition(self._lock)
        self._can_sample_cv = threading.Condition(self._lock)
        self._inserts = 0
        self._samples = 0
        # spi * (the inserts from which samples are due), scaled: spi * min_size_to_sample unless
        # a resume with another ratio or warm-up re-based it (load_state_dict)
        self._origin = self._spi * self.min_size_to_sample
        self._insert_blocked = 0.0
        self._sample_blocked = 0.0
        self._closed = False

    # ------------------------------------------------------------------ predicates (lock held)
    def _scaled_error(self) -> int:
        return self._spi * self._inserts - self._origin - self._den * self._samples

    def _insert_ok(self, n: int) -> bool:
        if self._inserts + n <= self.min_size_to_sample:  # warm-up: inserts are free
            return True
        return self._scaled_error() + self._spi * n <= self._eb

    def _sample_ok(self, k: int) -> bool:
        if self._inserts < self.min_size_to_sample:
            return False
        return self._scaled_error() - self._den * k >= -self._eb

    def _check_batch(self, n: int, limit: int, name: str) -> int:
        n = _positive_int(n, name)
        if n > limit:
            raise ValueError(
                f"{name}={n} exceeds the limit of {limit} this RateLimiter was built for "
                f"(its error_buffer may be too narrow for such a batch ever to fit)"
            )
        return n

    # ------------------------------------------------------------------ async mode
    def can_insert(self, n: int = 1) -> bool:
        """Whether inserting ``n`` now would be admitted (a snapshot: another thread may race)."""
        n = self._check_batch(n, self.max_insert_batch, "n")
        with self._lock:
            return not self._closed and self._insert_ok(n)

    def can_sample(self, n: int = 1) -> bool:
        """Whether ``n`` gradient steps now would be admitted (a snapshot, like ``can_insert``)."""
        n = self._check_batch(n, self.max_sample_batch, "n")
        with self._lock:
            return not self._closed and self._sample_ok(n)

    def await_can_insert(self, n: int, timeout: float | None = None) -> bool:
        """Wait until inserting ``n`` env steps keeps the window, then count them as inserted.

        Call before adding the batch to the replay. Returns True once committed, False if
        ``timeout`` seconds (0 = just try) passed first; raises ``LimiterClosed`` if the limiter
        is or gets closed, so an actor's loop ends at shutdown whatever it was waiting for.
        """
        n = self._check_batch(n, self.max_insert_batch, "n")
        with self._lock:
            if not self._wait(self._can_insert_cv, lambda: self._insert_ok(n), timeout, True):
                return False
            self._inserts += n
            self._can_sample_cv.notify_all()  # inserting only ever makes sampling easier
            return True

    def await_can_sample(self, n: int = 1, timeout: float | None = None) -> bool:
        """Wait until ``n`` gradient steps keep the window, then count them as done.

        Same contract as ``await_can_insert``; call before the gradient step(s).
        """
        n = self._check_batch(n, self.max_sample_batch, "n")
        with self._lock:
            if not self._wait(self._can_sample_cv, lambda: self._sample_ok(n), timeout, False):
                return False
            self._samples += n
            self._can_insert_cv.notify_all()  # sampling only ever makes inserting easier
            return True

    def _wait(self, cv: threading.Condition, ok: Any, timeout: float | None, insert: bool) -> bool:
        if self._closed:
            raise LimiterClosed("RateLimiter has been closed")
        if ok():
            return True
        start = time.monotonic()
        granted = cv.wait_for(lambda: self._closed or ok(), timeout)
        waited = time.monotonic() - start
        if insert:
            self._insert_blocked += waited
        else:
            self._sample_blocked += waited
        if self._closed:
            raise LimiterClosed("RateLimiter has been closed")
        return bool(granted)

    def close(self) -> None:
        """Wake every waiter; current and later waits raise ``LimiterClosed``. Idempotent."""
        with self._lock:
            self._closed = True
            self._can_insert_cv.notify_all()
            self._can_sample_cv.notify_all()

    cancel = close  # Reverb's name for it

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ sync mode
    def record_inserts(self, n: int) -> None:
        """Count ``n`` env steps without any admission check (sync mode's bookkeeping)."""
        n = _positive_int(n, "n")
        with self._lock:
            self._inserts += n
            self._can_sample_cv.notify_all()

    def record_samples(self, n: int) -> None:
        """Count ``n`` gradient steps without any admission check (sync mode's bookkeeping)."""
        n = _positive_int(n, "n")
        with self._lock:
            self._samples += n
            self._can_insert_cv.notify_all()

    def due_samples(self, after_inserts: int = 0) -> int:
        """Gradient steps due now: ``floor(spi * (inserts - min_size_to_sample)) - samples``;
        with ``after_inserts``, those that will be due once that many more are recorded.

        Zero during warm-up, never negative. Fractions carry over (exactly), so a sync loop that
        does ``due_samples()`` steps after every insert ends with exactly
        ``floor(spi * post-warm-up inserts)`` gradient steps in total.
        """
        with self._lock:
            inserts = self._inserts + int(after_inserts)
            if inserts <= self.min_size_to_sample:
                return 0
            return max(0, (self._spi * inserts - self._origin) // self._den - self._samples)

    def inserts_due(self, samples: int) -> int:
        """The inserts after which the ``samples``-th gradient step of the run is due (the
        least count at which ``due_samples`` would include it): where a sync loop that inserts
        a rollout of several steps at once places an update within it."""
        with self._lock:
            first = -(-(self._den * int(samples) + self._origin) // self._spi)
            return max(self.min_size_to_sample + 1, first)

    # ------------------------------------------------------------------ stats and state
    @property
    def inserts(self) -> int:
        return self._inserts

    @property
    def samples(self) -> int:
        return self._samples

    @property
    def error(self) -> float:
        """``spi * (inserts - min_size_to_sample) - samples``, in gradient steps (module doc)."""
        with self._lock:
            return self._scaled_error() / self._den

    @property
    def achieved_ratio(self) -> float:
        """Samples per post-warm-up insert so far; nan before the first post-warm-up insert."""
        with self._lock:
            post = self._inserts - self.min_size_to_sample
            return self._samples / post if post > 0 else math.nan

    @property
    def insert_blocked_seconds(self) -> float:
        """Total time insert calls spent waiting, summed over threads."""
        return self._insert_blocked

    @property
    def sample_blocked_seconds(self) -> float:
        """Total time sample calls spent waiting, summed over threads."""
        return self._sample_blocked

    def stats(self) -> dict[str, float]:
        """One consistent snapshot of the counters (for logging, and for checking invariants)."""
        with self._lock:
            post = self._inserts - self.min_size_to_sample
            return {
                "inserts": self._inserts,
                "samples": self._samples,
                "error": self._scaled_error() / self._den,
                "achieved_ratio": self._samples / post if post > 0 else math.nan,
                "insert_blocked_seconds": self._insert_blocked,
                "sample_blocked_seconds": self._sample_blocked,
            }

    def state_dict(self, samples: int | None = None) -> dict[str, Any]:
        """Counters to resume with, alongside the replay (else the warm-up would restart), and
        the ratio and warm-up they were counted at with the error then (exact, as a fraction).
        ``samples``: the gradient steps to save instead of those counted (a caller that knows
        which of them reached its networks)."""
        with self._lock:
            done = self._samples if samples is None else int(samples)
            error = self._spi * self._inserts - self._origin - self._den * done
            return {
                "inserts": self._inserts,
                "samples": done,
                "insert_blocked_seconds": self._insert_blocked,
                "sample_blocked_seconds": self._sample_blocked,
                "samples_per_insert": str(Fraction(self._spi, self._den)),
                "min_size_to_sample": self.min_size_to_sample,
                "error": str(Fraction(error, self._den)),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from saved counters. Saved at another ratio or warm-up (a resume that changed
        them), the debt is re-based: gradient steps are due at this ratio from here on, with the
        error carried over (within this window), not re-counted over every earlier insert."""
        with self._lock:
            self._inserts = int(state["inserts"])
            self._samples = int(state["samples"])
            self._insert_blocked = float(state["insert_blocked_seconds"])
            self._sample_blocked = float(state["sample_blocked_seconds"])
            self._origin = self._spi * self.min_size_to_sample
            if "error" in state:  # older checkpoints: counted from the warm-up, as before
                error = Fraction(state["error"])
                spi = Fraction(state["samples_per_insert"])
                warm = int(state["min_size_to_sample"])
                start = self._inserts
                if spi != Fraction(self._spi, self._den) or warm != self.min_size_to_sample:
                    eb = Fraction(self._eb, self._den)
                    error = min(max(error, -eb), eb) if self._inserts >= warm else Fraction(0)
                    start = max(self._inserts, self.min_size_to_sample)  # a longer warm-up
                scaled = math.floor(error * self._den)
                self._origin = self._spi * start - self._den * self._samples - scaled
            self._can_insert_cv.notify_all()
            self._can_sample_cv.notify_all()

    def __repr__(self) -> str:
        return (
            f"RateLimiter(samples_per_insert={self.samples_per_insert}, "
            f"min_size_to_sample={self.min_size_to_sample}, error_buffer={self.error_buffer}, "
            f"max_insert_batch={self.max_insert_batch}, "
            f"max_sample_batch={self.max_sample_batch}, inserts={self._inserts}, "
            f"samples={self._samples})"
        )
