"""The tests' parallel env (tests/parallel_game.py) with a third agent, "c": games of three."""

from __future__ import annotations

from parallel_game import Game


class Trio(Game):
    metadata = {"name": "trio_game_v0"}

    def __init__(self):
        self.possible_agents = ["a", "b", "c"]


def parallel_env():
    return Trio()
