"""Single-agent counterparts of PettingZoo envs for the throughput parts of selfplay.py and
mpe.py, registered on import (actor processes import this module for the "one_seat:" ids).

``ConnectFourOneSeat-v0`` is PettingZoo's connect four as a Gymnasium env: one agent plays both
sides, each env step one move of the player whose turn it is (its observation, with the legal
moves' mask appended as the multi-agent path's rows have it). Every move costs what a move of
the multi-agent env costs (the same AEC env steps the game), without the seats, the mapping or
the masking: it is the "same number of single-agent envs of similar cost" a game's agent steps
per second are measured against. An illegal move is replaced by the first legal one (a
Gymnasium env has no action mask for the policy to honour), so games run their usual length.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ConnectFourOneSeat(gym.Env):
    def __init__(self) -> None:
        from pettingzoo.classic import connect_four_v3

        self.game = connect_four_v3.env()
        self.observation_space = gym.spaces.Box(0.0, 1.0, (6 * 7 * 2 + 7,), np.float32)
        self.action_space = gym.spaces.Discrete(7)

    def _obs(self) -> np.ndarray:
        seen = self.game.observe(self.game.agent_selection)
        board = seen["observation"].reshape(-1).astype(np.float32)
        return np.concatenate([board, seen["action_mask"].astype(np.float32)])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.game.reset(seed=seed)
        return self._obs(), {}

    def step(self, action: int):
        mover = self.game.agent_selection
        mask = self.game.observe(mover)["action_mask"]
        if not mask[action]:
            action = int(np.flatnonzero(mask)[0])
        self.game.step(int(action))
        reward = float(self.game.rewards[mover])
        over = all(self.game.terminations.values()) or all(self.game.truncations.values())
        return self._obs(), reward, over, False, {}

    def close(self) -> None:
        self.game.close()


class SpreadOneSeat(gym.Env):
    """MPE's simple_spread_v3 (mpe2, its defaults: 3 agents, 25 cycles, discrete actions) as a
    Gymnasium env: one agent acts for the three in turn, each env step one agent's action, and
    every third step the parallel env steps with the three actions gathered. So an env step costs
    what an agent step of the multi-agent env costs, without the seats or the mapping. The
    reward of a round (the three agents' mean) comes at its third step, 0 at the two others."""

    def __init__(self) -> None:
        from mpe2 import simple_spread_v3

        self.game = simple_spread_v3.parallel_env()
        self.names = list(self.game.possible_agents)
        self.observation_space = self.game.observation_space(self.names[0])
        self.action_space = self.game.action_space(self.names[0])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.seen, _ = self.game.reset(seed=seed)
        self.turn, self.actions = 0, {}
        return self.seen[self.names[0]], {}

    def step(self, action: int):
        self.actions[self.names[self.turn]] = int(action)
        self.turn += 1
        if self.turn < len(self.names):
            return self.seen[self.names[self.turn]], 0.0, False, False, {}
        self.seen, rewards, _, truncations, _ = self.game.step(self.actions)
        self.turn, self.actions = 0, {}
        over = not self.game.agents or all(truncations.values())
        reward = float(np.mean([rewards[name] for name in self.names]))
        return self.seen[self.names[0]], reward, False, over, {}

    def close(self) -> None:
        self.game.close()


gym.register("ConnectFourOneSeat-v0", entry_point=ConnectFourOneSeat)
gym.register("SpreadOneSeat-v0", entry_point=SpreadOneSeat)
