"""A small PettingZoo Parallel env whose agents have different spaces, for the tests of agents
mapped to policies of their own spaces: tagged_game.py's 6 steps and rewards (the action), but
"small" observes [tag 1, step] and has 2 actions, "big" observes [tag 2, step, 0.5] with an
action mask of its 3 actions (action 2 legal at even steps only; an illegal one raises)."""

from __future__ import annotations

import numpy as np
from gymnasium.spaces import Box, Dict, Discrete

import tagged_game

TAGS = {"small": 1.0, "big": 2.0}
ACTIONS = {"small": 2, "big": 3}


class Game(tagged_game.Game):
    metadata = {"name": "spaces_game_v0"}

    def __init__(self):
        self.possible_agents = ["small", "big"]

    def observation_space(self, agent):
        if agent == "small":
            return Box(-10.0, 10.0, (2,), np.float32)
        return Dict(
            {"observation": Box(-10.0, 10.0, (3,), np.float32), "action_mask": Box(0, 1, (3,))}
        )

    def action_space(self, agent):
        return Discrete(ACTIONS[agent])

    def _obs(self, agent):
        if agent == "small":
            return np.array([TAGS[agent], self.t], np.float32)
        mask = np.array([1, 1, self.t % 2 == 0], np.int8)
        inner = np.array([TAGS[agent], self.t, 0.5], np.float32)
        return {"observation": inner, "action_mask": mask}

    def step(self, actions):
        for agent, action in actions.items():
            if not 0 <= action < ACTIONS[agent] or (agent == "big" and action == 2 and self.t % 2):
                raise ValueError(f"{agent} took the illegal action {action} at step {self.t}")
        return super().step(actions)


def parallel_env():
    return Game()


def env():
    """The game as an AEC env too (PettingZoo's conversion), as a turn-based game offers one:
    asyncrl trains ``parallel_env()``, and would play a policy against an opponent in this one
    if its players shared their spaces."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(Game())
