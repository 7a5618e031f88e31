"""SB3-contrib's RecurrentPPO ("MlpLstmPolicy") at the library's own defaults on one of the
position-only tasks of the recurrent rows of benchmarks/defaults_generality.py: what a user of
SB3-contrib gets with no setting but the env and the budget. Prints one JSON line with the mean
return of the last 20 training episodes (asyncrl's "final") and of the last 100 (SB3's
``Monitor``, the env's own returns).

Runs in its own venv (benchmarks/baselines/setup.sh sb3), without asyncrl: the two tasks are
built here as benchmarks/position_only.py builds them (the same env, the same kept entries).
RecurrentPPO's defaults: one env, n_steps 128, batch 128 (one sequence), 10 epochs, Adam 3e-4,
gamma 0.99, lambda 0.95, clip 0.2, entropy 0, separate 256-unit LSTMs for actor and critic
then 64x64 tanh, no normalisation. CPU, one torch thread.
"""

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor

# position_only.py's tasks: the env's id and the observation entries kept
TASKS = {
    "position_only:PositionCartPole-v0": ("CartPole-v1", (0, 2)),  # [x, theta]
    "position_only:PositionPendulum-v0": ("Pendulum-v1", (0, 1)),  # [cos, sin], no speed
}


def make(task: str) -> gym.Env:
    env_id, keep = TASKS[task]
    env = gym.make(env_id)
    idx = np.asarray(keep)
    box = env.observation_space
    space = gym.spaces.Box(box.low[idx], box.high[idx], dtype=box.dtype)
    return gym.wrappers.TransformObservation(env, lambda obs: obs[idx], space)


p = argparse.ArgumentParser()
p.add_argument("--env", choices=sorted(TASKS), default="position_only:PositionCartPole-v0")
p.add_argument("--steps", type=int, default=300_000)
p.add_argument("--seed", type=int, default=1)
p.add_argument("--monitor", default=None, help="also write each episode to this CSV as it ends")
args = p.parse_args()
torch.set_num_threads(1)
monitor = Monitor(make(args.env), filename=args.monitor)  # a run's curve, read while it runs
model = RecurrentPPO("MlpLstmPolicy", monitor, device="cpu", seed=args.seed, verbose=0)
model.set_logger(Logger(None, []))  # SB3 would leave an empty /tmp/SB3-<time> folder
t0 = time.perf_counter()
model.learn(total_timesteps=args.steps)
seconds = time.perf_counter() - t0
returns = monitor.get_episode_rewards()  # every finished episode, in order
print(
    json.dumps(
        {
            "impl": "sb3",
            "settings": "library defaults",
            "algo": "ppo+lstm",
            "sb3_algo": "RecurrentPPO MlpLstmPolicy",
            "env": args.env,
            "seed": args.seed,
            "env_steps": model.num_timesteps,
            "seconds": seconds,
            "final_return": float(np.mean(returns[-20:])) if returns else float("nan"),
            "last100_return": float(np.mean(returns[-100:])) if returns else float("nan"),
            "episodes": len(returns),
        }
    )
)
