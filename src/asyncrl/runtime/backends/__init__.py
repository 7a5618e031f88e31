"""Where actors run. ``make_backend`` is the one place a backend is chosen by name."""

from __future__ import annotations

from asyncrl.core import Algorithm
from asyncrl.envs import EnvSpec
from asyncrl.runtime.backends.base import Backend
from asyncrl.settings import TrainConfig


def make_backend(cfg: TrainConfig, spec: EnvSpec, algo: Algorithm, numel: list[int]) -> Backend:
    """The backend ``cfg.backend`` names, owning its slots and policy stores for policies of
    ``numel`` float32 parameters (one count per policy)."""
    if cfg.backend == "inline":
        from asyncrl.runtime.backends.inline import InlineBackend

        return InlineBackend(cfg, spec, algo, numel)
    if cfg.backend == "thread":
        from asyncrl.runtime.backends.thread import ThreadBackend

        return ThreadBackend(cfg, spec, algo, numel)
    if cfg.backend == "ray":
        from asyncrl.runtime.backends.ray import RayBackend

        return RayBackend(cfg, spec, algo, numel)
    from asyncrl.runtime.backends.process import ProcessBackend

    return ProcessBackend(cfg, spec, algo, numel)


def check_backend(cfg: TrainConfig) -> None:
    """What only the backend can check (a Ray cluster's size), as a ConfigError: called before
    the run directory is claimed, so a setting that cannot work never costs the run that
    ``--overwrite`` would delete."""
    if cfg.backend == "ray" and not cfg.hogwild:
        from asyncrl.runtime.backends.ray import check_cluster

        check_cluster(cfg)
