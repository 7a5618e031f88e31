"""A policy-store reader for the random-kill test, in a module of its own: a forkserver child
that unpickles it imports numpy and the transport only (not torch, gymnasium and the test
module), and the forkserver preloads it, so a new reader copies within milliseconds of its start
and the kills land on readers at work rather than on readers still importing."""

from __future__ import annotations

import numpy as np

from asyncrl.runtime.transport import PolicyStore


def read_forever(store: PolicyStore, torn, reads) -> None:
    """Copy every new version and check it is whole: every element equals the version."""
    out = np.empty(store.numel, np.float32)
    have = -1
    while True:
        got = store.read_if_newer(have, lambda a: np.copyto(out, a))
        if got != have:
            if not (out == got).all():
                torn.value += 1
            reads.value += 1
            have = got
