"""DQN's update on a fixed replay of uniformly random CartPole-v1 transitions, with the classic
preset's settings (lr 2.5e-4, batch 128, a target copy every 50 updates): the mean Q value after
3,000 updates with the squared error and with Huber, the same batches (docs/benchmarks/dqn.md).

    python benchmarks/dqn_td_loss.py
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from asyncrl.algos.dqn.config import DQNConfig
from asyncrl.algos.dqn.networks import QNetwork
from asyncrl.algos.dqn.update import DQN
from asyncrl.envs import check_env


def replay(n: int = 10_000) -> dict[str, np.ndarray]:
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    rows: dict[str, list] = {k: [] for k in ("obs", "action", "reward", "next_obs", "term")}
    for _ in range(n):
        a = env.action_space.sample()
        nxt, r, term, trunc, _ = env.step(a)
        for k, v in zip(rows, (obs, a, r, nxt, term), strict=True):
            rows[k].append(v)
        obs = env.reset()[0] if term or trunc else nxt
    return {k: np.array(v) for k, v in rows.items()}


def mean_q(data: dict[str, np.ndarray], loss: str, clip: float) -> float:
    torch.manual_seed(0)
    q = QNetwork(check_env("CartPole-v1"), [120, 84], "mlp")
    rule = DQN(q, DQNConfig(lr=2.5e-4, td_loss=loss, max_grad_norm=clip), 50)
    rng = np.random.default_rng(0)
    stats = None
    for _ in range(3_000):
        i = rng.integers(0, len(data["obs"]), 128)
        stats = rule.update(
            {
                "obs": torch.as_tensor(data["obs"][i], dtype=torch.float32),
                "action": torch.as_tensor(data["action"][i]),
                "reward": torch.as_tensor(data["reward"][i], dtype=torch.float32),
                "next_obs": torch.as_tensor(data["next_obs"][i], dtype=torch.float32),
                "discount": torch.as_tensor(0.99 * (1 - data["term"][i]), dtype=torch.float32),
            }
        )
    return float(stats[1])


def main() -> None:
    data = replay()
    for loss, clip in (("mse", 0.0), ("huber", 0.0), ("huber", 10.0)):
        print(
            f"{loss:5s} clip {clip:4g}: mean Q after 3,000 updates {mean_q(data, loss, clip):,.1f}"
        )


if __name__ == "__main__":
    main()
