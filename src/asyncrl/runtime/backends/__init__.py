"""Where actors run. :data:`BACKENDS` is the one place a backend is chosen by name: each entry
is a module of its own whose class takes the prepared run and each policy's size; a backend's
module is imported only when a run chooses it (Ray's is large)."""

from __future__ import annotations

import importlib

from asyncrl.runtime.backends.base import Backend
from asyncrl.settings import Prepared, TrainConfig

BACKENDS = {
    "inline": "asyncrl.runtime.backends.inline:InlineBackend",
    "thread": "asyncrl.runtime.backends.thread:ThreadBackend",
    "process": "asyncrl.runtime.backends.process:ProcessBackend",
    "ray": "asyncrl.runtime.backends.ray:RayBackend",
}


def backend_class(name: str) -> type[Backend]:
    """The backend registered as ``name`` (settings have checked that it is one)."""
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_backend(run: Prepared, numel: list[int]) -> Backend:
    """The backend the run's settings name, owning its slots (each policy's layout, from the
    prepared run) and policy stores for policies of ``numel`` float32 parameters (one count per
    policy)."""
    return backend_class(run.cfg.backend)(run, numel)


def check_backend(cfg: TrainConfig) -> None:
    """What only the backend can check (a Ray cluster's size), as a ConfigError: called before
    the run directory is claimed, so a setting that cannot work never costs the run that
    ``--overwrite`` would delete."""
    backend_class(cfg.backend).check_settings(cfg)
