"""Single-agent counterparts of PettingZoo games for the throughput part of selfplay.py,
registered on import (actor processes import this module for the "one_seat:" ids).

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


gym.register("ConnectFourOneSeat-v0", entry_point=ConnectFourOneSeat)
