"""Stable-Baselines3 PPO on HalfCheetah-v5 with SB3's own defaults; prints one JSON line.

Runs in its own venv (benchmarks/baselines/setup.sh): n_steps 2048, batch 64, 10 epochs,
64x64 MLP, one env, CPU, one torch thread. Only ``model.learn`` is timed.
"""

import argparse
import json
import time

import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20_480)
p.add_argument("--env", default="HalfCheetah-v5")
args = p.parse_args()
torch.set_num_threads(1)
model = PPO("MlpPolicy", gym.make(args.env), device="cpu", seed=0, verbose=0)
model.set_logger(Logger(None, []))  # SB3 would leave an empty /tmp/SB3-<time> folder
t0 = time.perf_counter()
model.learn(total_timesteps=args.steps)
seconds = time.perf_counter() - t0
print(
    json.dumps(
        {
            "impl": "sb3",
            "algo": "ppo",
            "env": args.env,
            "env_steps": model.num_timesteps,
            "seconds": seconds,
            "env_steps_per_second": model.num_timesteps / seconds,
        }
    )
)
