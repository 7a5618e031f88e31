"""compare, tune and sweep give each run the preset ``asyncrl train`` gives the same settings,
also where the env's family is known only once the env is made (image observations outside
ALE: pixels; issues #53/#54). Their configs are taken where training would start."""

from __future__ import annotations

import dataclasses

import pytest

from asyncrl.config import ConfigError
from asyncrl.settings import PRESETS, TrainConfig, from_dict, prepare_settings
from asyncrl.study.compare import compare
from asyncrl.study.sweep import parse
from asyncrl.study.tune import MIN_PROBE_SECONDS, tune

DOT = "fake_envs:DotSide-v0"  # 1x12x12 uint8 images; its id alone says generic


class _Stop(Exception):
    """Raised by the stand-in for train: the first config is all a test needs."""


def _first_trained(monkeypatch, study) -> TrainConfig:
    seen = []

    def train(cfg, **_):
        seen.append(cfg)
        raise _Stop

    monkeypatch.setattr("asyncrl.runtime.trainer.train", train)
    with pytest.raises(_Stop):
        study()
    return seen[0]


def _as_train_resolves(cfg: TrainConfig, given: TrainConfig) -> None:
    """``cfg`` (a study's) has the preset, and the preset's values, that a run of ``given``
    prepares (total_steps aside: a study sets its own budget)."""
    run = prepare_settings(given).cfg
    assert run.preset == "pixels"
    assert cfg.preset == run.preset
    names = sorted(set(PRESETS["pixels"][cfg.algo]) - {"total_steps"})
    assert {n: getattr(cfg, n) for n in names} == {n: getattr(run, n) for n in names}


def _base(**kw) -> TrainConfig:
    return TrainConfig(env=DOT, actors=1, progress=False, tensorboard=False, **kw)


def test_compare_runs_a_pixel_env_with_the_pixels_preset(tmp_path, monkeypatch):
    base = _base()
    cfg = _first_trained(
        monkeypatch, lambda: compare(base, [2], ["sync"], steps=512, out=tmp_path, echo=print)
    )
    given = dataclasses.replace(base, envs_per_actor=2, mode="sync", total_steps=512)
    _as_train_resolves(cfg, given)
    # as trained: the study's config is the run's own, so train resolves nothing again
    assert prepare_settings(cfg).cfg.encoder == "cnn"


def test_tune_probes_a_pixel_env_with_the_pixels_preset(tmp_path, monkeypatch):
    base = _base()
    cfg = _first_trained(
        monkeypatch,
        lambda: tune(base, [1], [2], ["inline"], MIN_PROBE_SECONDS, tmp_path, echo=print),
    )
    _as_train_resolves(cfg, dataclasses.replace(base, backend="inline", envs_per_actor=2))


def test_a_sweep_on_a_pixel_env_budgets_with_the_pixels_preset():
    base = {"env": DOT, "actors": 1}
    sweep = parse({"base": base, "space": {"lr": {"low": 1e-5, "high": 1e-3}}})
    steps = prepare_settings(from_dict(base)).cfg.total_steps
    assert steps == PRESETS["pixels"]["ppo"]["total_steps"]
    # reported every 1/20 of the budget the trials run with, prunable after its first fifth
    assert (sweep.every, sweep.warmup) == (steps // 20, steps // 5)


def test_a_sweep_checks_each_env_of_its_space_as_train_would():
    """An env drawn from the space is made (once) and checked with its own family: one its
    algorithm cannot train stops the sweep before any trial, as ``asyncrl train`` would."""
    space = {"env": {"choices": ["Acrobot-v1", "Pendulum-v1"]}}
    with pytest.raises(ConfigError, match=r"^algo: .*\(with env Pendulum-v1 from space\)$"):
        parse({"base": {"algo": "dqn"}, "space": space})
