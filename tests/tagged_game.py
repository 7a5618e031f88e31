"""A small PettingZoo Parallel env for the mapping tests: agents "left" and "right" play 6
steps together; each observes its own tag (1 for left, 2 for right) and the step count, so a
sample says which agent made it; rewarded 1 for action 1."""

from __future__ import annotations

import numpy as np
from gymnasium.spaces import Box, Discrete
from pettingzoo import ParallelEnv

TAGS = {"left": 1.0, "right": 2.0}
LENGTH = 6


class Game(ParallelEnv):
    metadata = {"name": "tagged_game_v0"}

    def __init__(self):
        self.possible_agents = ["left", "right"]

    def observation_space(self, agent):
        return Box(-10.0, 10.0, (2,), np.float32)

    def action_space(self, agent):
        return Discrete(2)

    def _obs(self, agent):
        return np.array([TAGS[agent], self.t], np.float32)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: float(actions[a]) for a in self.agents}
        terms = dict.fromkeys(self.agents, self.t >= LENGTH)
        truncs = dict.fromkeys(self.agents, False)
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not terms[a]]
        return obs, rewards, terms, truncs, infos


def parallel_env():
    return Game()
