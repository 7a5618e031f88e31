"""Stable-Baselines3's PPO, SAC or DQN at the library's own defaults on one env, for the defaults'
generality benchmark (benchmarks/defaults_generality.py): what a user of SB3 gets with no
setting but the env and the budget. Prints one JSON line with the mean return of the last 100
training episodes (SB3's ``Monitor``, the env's own returns).

Runs in its own venv (benchmarks/baselines/setup.sh sb3). PPO: one env, n_steps 2048, 10 epochs
of 64, Adam 3e-4, gamma 0.99, lambda 0.95, clip 0.2, 64x64 tanh, no normalisation. SAC: one
env, 256x256, batch 256, buffer 1M, 100 warm-up steps, one update per env step, automatic
temperature. DQN: one env, 64x64, batch 32, buffer 1M, 100 warm-up steps, an update every 4
env steps, the target copied every 10,000, epsilon 1 to 0.05 over 10% of the run, Adam 1e-4.
CPU, one torch thread.
"""

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor

p = argparse.ArgumentParser()
p.add_argument("--algo", choices=("ppo", "sac", "dqn"), default="ppo")
p.add_argument("--env", default="CartPole-v1")
p.add_argument("--steps", type=int, default=100_000)
p.add_argument("--seed", type=int, default=1)
args = p.parse_args()
torch.set_num_threads(1)
model = {"ppo": PPO, "sac": SAC, "dqn": DQN}[args.algo](
    "MlpPolicy", Monitor(gym.make(args.env)), device="cpu", seed=args.seed, verbose=0
)
model.set_logger(Logger(None, []))  # SB3 would leave an empty /tmp/SB3-<time> folder
t0 = time.perf_counter()
model.learn(total_timesteps=args.steps)
seconds = time.perf_counter() - t0
last = [ep["r"] for ep in model.ep_info_buffer]  # SB3 keeps the last 100 episodes
print(
    json.dumps(
        {
            "impl": "sb3",
            "settings": "library defaults",
            "algo": args.algo,
            "env": args.env,
            "seed": args.seed,
            "env_steps": model.num_timesteps,
            "seconds": seconds,
            "last100_return": float(np.mean(last)) if last else float("nan"),
            "episodes_in_mean": len(last),
        }
    )
)
