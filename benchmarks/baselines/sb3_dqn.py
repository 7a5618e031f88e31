"""Stable-Baselines3 DQN at CleanRL's dqn.py CartPole settings (1 env, 120-84 MLP, lr 2.5e-4,
buffer 10k, batch 128, a gradient step per 10 env steps, target copy every 500, epsilon 1 ->
0.05 over half the budget, learning from 10k); prints one JSON line. SB3's loss is Huber
(smooth L1) and its gradient norm is clipped at 10; neither can be set to CleanRL's.

One ``learn`` call over learning_starts + ``--steps`` env steps, so that the exploration
schedule spans the whole budget as asyncrl's does; the rate counts the ``--steps`` after the
warm-up, timed by a callback from the step learning starts."""

import argparse
import json
import time

import gymnasium as gym
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger


class StartClock(BaseCallback):
    """Notes the time at which ``num_timesteps`` reaches ``at``."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.t0 = at, None

    def _on_step(self) -> bool:
        if self.t0 is None and self.num_timesteps >= self.at:
            self.t0 = time.perf_counter()
        return True


p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=50_000)
p.add_argument("--env", default="CartPole-v1")
p.add_argument("--learning-starts", type=int, default=10_000)
args = p.parse_args()
torch.set_num_threads(1)
model = DQN(
    "MlpPolicy",
    gym.make(args.env),
    learning_rate=2.5e-4,
    buffer_size=10_000,
    learning_starts=args.learning_starts,
    batch_size=128,
    tau=1.0,
    gamma=0.99,
    train_freq=10,
    gradient_steps=1,
    target_update_interval=500,
    exploration_fraction=0.5,
    exploration_initial_eps=1.0,
    exploration_final_eps=0.05,
    policy_kwargs={"net_arch": [120, 84]},
    device="cpu",
    seed=0,
    verbose=0,
)
model.set_logger(Logger(None, []))  # SB3 would leave an empty /tmp/SB3-<time> folder
clock = StartClock(args.learning_starts)
cpu0 = time.process_time()
model.learn(total_timesteps=args.learning_starts + args.steps, callback=clock)
seconds = time.perf_counter() - clock.t0
cpu = time.process_time() - cpu0  # the whole learn call, warm-up included, as asyncrl's
steps = model.num_timesteps - args.learning_starts
print(
    json.dumps(
        {
            "impl": "sb3",
            "algo": "dqn",
            "env": args.env,
            "env_steps": steps,
            "seconds": seconds,
            "env_steps_per_second": steps / seconds,
            "cpu_us_per_step": cpu / model.num_timesteps * 1e6,
        }
    )
)
