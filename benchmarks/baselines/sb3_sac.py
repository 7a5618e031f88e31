"""Stable-Baselines3 SAC on HalfCheetah-v5 (256x256, batch 256, one update per env step);
prints one JSON line. The warm-up (learning_starts) runs first, untimed; then ``--steps`` env
steps with learning are timed."""

import argparse
import json
import time

import gymnasium as gym
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.logger import Logger

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=2_000)
p.add_argument("--env", default="HalfCheetah-v5")
p.add_argument("--learning-starts", type=int, default=1_000)
args = p.parse_args()
torch.set_num_threads(1)
model = SAC(
    "MlpPolicy",
    gym.make(args.env),
    policy_kwargs={"net_arch": [256, 256]},
    batch_size=256,
    train_freq=1,
    gradient_steps=1,
    learning_starts=args.learning_starts,
    device="cpu",
    seed=0,
    verbose=0,
)
model.set_logger(Logger(None, []))  # SB3 would leave an empty /tmp/SB3-<time> folder
model.learn(total_timesteps=args.learning_starts + 1)
t0 = time.perf_counter()
model.learn(total_timesteps=args.steps, reset_num_timesteps=False)
seconds = time.perf_counter() - t0
print(
    json.dumps(
        {
            "impl": "sb3",
            "algo": "sac",
            "env": args.env,
            "env_steps": args.steps,
            "seconds": seconds,
            "env_steps_per_second": args.steps / seconds,
        }
    )
)
