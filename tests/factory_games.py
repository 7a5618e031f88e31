"""Env factories for the tests (``pettingzoo:factory_games:<function>``, or the function itself
from Python): PettingZoo envs made with arguments fixed inside, as a user's factory makes MPE's
``simple_spread`` with ``N=3``; and factories that return what a run cannot take."""

from __future__ import annotations

import gymnasium as gym
from pettingzoo.classic import connect_four_v3

from parallel_game import Game

NOT_A_FUNCTION = 3


def trio():
    """tests/parallel_game.py's env with a third agent, "c", given as an argument."""
    return Game(agents=("a", "b", "c"))


def connect_four():
    """Connect four's AEC game, wrapped: no ``render_mode`` taken, so it cannot be drawn."""
    return connect_four_v3.env()


def drawn_connect_four(render_mode=None):
    """Connect four, drawn where a video asks for frames."""
    return connect_four_v3.env(render_mode=render_mode)


def cartpole():
    return gym.make("CartPole-v1")


def a_number():
    return 3


def broken():
    raise RuntimeError("no such board")
