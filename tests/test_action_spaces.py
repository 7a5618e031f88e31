"""Action spaces as envs declare them: a Discrete space that does not start at 0, and Box
bounds SAC cannot squash into."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import asyncrl
from asyncrl.runtime.trainer import train


def test_discrete_actions_starting_at_minus_one_reach_the_env_in_its_own_numbering(small_cfg):
    """Discrete(3, start=-1): the network picks 0..2, the env gets -1..1 (it raises on anything
    else), in training and in evaluation; the slots keep the network's numbering."""
    cfg = dataclasses.replace(
        small_cfg, env="fake_envs:ShiftedActions-v0", backend="inline", total_steps=512
    )
    summary = train(cfg)
    assert summary["ended"] == "budget" and summary["env_steps"] >= 512
    policy = asyncrl.load(cfg.run_dir)
    assert policy.spec.action_start == -1
    actions = policy.act(np.zeros((64, 2), np.float32), deterministic=False)
    assert set(actions.tolist()) <= {-1, 0, 1} and -1 in actions.tolist()
    assert policy.evaluate(episodes=2).lengths == [5, 5]


def test_sac_refuses_infinite_action_bounds_in_one_line_before_anything_starts(small_cfg, capfd):
    """SAC squashes its Gaussian into [low, high]: with infinite bounds scale is inf and bias
    NaN, so it would act with NaN from the first step. It refuses such an env by name (PPO,
    which samples unsquashed and clips to the bounds, trains on it)."""
    cfg = dataclasses.replace(
        small_cfg,
        env="fake_envs:UnboundedActions-v0",
        algo="sac",
        backend="inline",
        mode="sync",
        rollout=1,
        learning_starts=16,
        total_steps=64,
    )
    with pytest.raises(asyncrl.ConfigError) as e:
        train(cfg)
    msg = str(e.value)
    assert msg.startswith("algo: sac squashes actions") and "\n" not in msg
    assert "infinite" in msg and "(use --algo ppo)" in msg
    assert not (Path(cfg.run_dir) / "config.yaml").exists()  # before anything was written
    ppo = dataclasses.replace(small_cfg, env="fake_envs:UnboundedActions-v0", backend="inline")
    assert train(ppo)["ended"] == "budget"
