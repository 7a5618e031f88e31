"""Position-only classic-control tasks for the recurrent rows of defaults_generality.py,
registered on import (actor processes import this module for the "position_only:" ids): no
preset names them, so `auto` gives them the generic preset, as it gives a user's own env."""

from __future__ import annotations

import gymnasium as gym

from asyncrl.envs import MaskObservation


def cartpole(**kw) -> gym.Env:
    return MaskObservation(gym.make("CartPole-v1", **kw), keep=(0, 2))  # [x, theta]


def pendulum(**kw) -> gym.Env:
    return MaskObservation(gym.make("Pendulum-v1", **kw), keep=(0, 1))  # [cos, sin], no speed


gym.register("PositionCartPole-v0", entry_point=cartpole)
gym.register("PositionPendulum-v0", entry_point=pendulum)
