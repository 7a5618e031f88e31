"""A small PettingZoo Parallel env for the tests: agent "a" plays 5 steps, agent "b" 2; each
observes the step count and its own last action, and is rewarded with its action."""

from __future__ import annotations

import numpy as np
from gymnasium.spaces import Box, Discrete
from pettingzoo import ParallelEnv

LENGTHS = {"a": 5, "b": 2, "c": 3}  # "c": tests/trio_game.py's third agent


class Game(ParallelEnv):
    metadata = {"name": "parallel_game_v0"}

    def __init__(self, agents=("a", "b")):
        self.possible_agents = list(agents)

    def observation_space(self, agent):
        return Box(-10.0, 10.0, (2,), np.float32)

    def action_space(self, agent):
        return Discrete(3)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        obs = {a: np.array([self.t, actions[a]], np.float32) for a in self.agents}
        rewards = {a: float(actions[a]) for a in self.agents}
        terms = {a: self.t >= LENGTHS[a] for a in self.agents}
        truncs = dict.fromkeys(self.agents, False)
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not terms[a]]
        return obs, rewards, terms, truncs, infos


def parallel_env():
    return Game()
