"""Stable-Baselines3 PPO with CleanRL's ``ppo_continuous_action`` settings on a MuJoCo env, for
the learning reference measured here (issue 15): the mean return of the last 100 training
episodes after --steps env steps, CleanRL's metric. Prints one JSON line.

Runs in its own venv (benchmarks/baselines/setup.sh). The settings CleanRL's script and SB3
share: one env, 2,048 steps per rollout (``--envs`` and ``--rollout`` change the layout), 10
epochs of minibatch 64, Adam 3e-4 (annealed linearly to 0, as CleanRL does) with epsilon 1e-5,
gamma 0.99, lambda 0.95, clip 0.2, entropy 0, value coefficient 0.5, gradient norm 0.5, separate
64x64 tanh actor and critic with orthogonal initialisation, a state-independent log-std starting
at 0, observation and return normalisation with clipping at 10 (SB3's VecNormalize), and value
clipping at 0.2. Where they differ: SB3 bootstraps time-limit truncations (CleanRL treats them
as terminal; asyncrl bootstraps); SB3's value loss is vf_coef x the squared error of the clipped
prediction, CleanRL's (and asyncrl's) vf_coef x 0.5 x the larger of the clipped and unclipped
squared errors, so SB3's value gradient is up to twice as large against the same global
gradient-norm clip. Returns come from SB3's ``Monitor`` below the normalisation, so they are the
env's own. One torch thread; only ``model.learn`` is timed.
"""

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

p = argparse.ArgumentParser()
p.add_argument("--env", default="Hopper-v5")
p.add_argument("--steps", type=int, default=1_000_000)
p.add_argument("--seed", type=int, default=1)
# CleanRL's layout by default; --envs 16 --rollout 128 is asyncrl's (2 actors x 8 envs x 128
# steps: the same 2,048 samples per update)
p.add_argument("--envs", type=int, default=1)
p.add_argument("--rollout", type=int, default=2048)
args = p.parse_args()
torch.set_num_threads(1)


def make() -> gym.Env:
    # no ClipAction (CleanRL's first wrapper): SB3 clips the sampled action to the bounds itself
    return Monitor(gym.make(args.env))


env = VecNormalize(DummyVecEnv([make] * args.envs), gamma=0.99, clip_obs=10.0, clip_reward=10.0)
model = PPO(
    "MlpPolicy",
    env,
    learning_rate=lambda remaining: 3e-4 * remaining,
    n_steps=args.rollout,
    batch_size=64,
    n_epochs=10,
    gamma=0.99,
    gae_lambda=0.95,
    clip_range=0.2,
    clip_range_vf=0.2,
    ent_coef=0.0,
    vf_coef=0.5,
    max_grad_norm=0.5,
    policy_kwargs={"optimizer_kwargs": {"eps": 1e-5}},
    device="cpu",
    seed=args.seed,
    verbose=0,
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
            "algo": "ppo",
            "settings": "cleanrl",
            "env": args.env,
            "seed": args.seed,
            "envs": args.envs,
            "rollout": args.rollout,
            "env_steps": model.num_timesteps,
            "seconds": seconds,
            "last100_return": float(np.mean(last)),
            "episodes_in_mean": len(last),
        }
    )
)
