"""Stable-Baselines3 PPO on Breakout with SB3's Atari wrappers and rl-zoo's Atari settings; prints
one JSON line. Runs in its own venv (benchmarks/baselines/setup.sh).

Env: ``make_atari_env("BreakoutNoFrameskip-v4", n_envs=8)`` (SB3's ``AtariWrapper``: 30 no-op
starts, frame skip 4 with max-pooling, episodic life, FIRE on reset, 84x84 grayscale, reward
clipping) in a ``DummyVecEnv`` (rl-zoo's default: all envs in the learner's process), then
``VecFrameStack(4)``. PPO as rl-zoo's ``ppo.yml`` for atari (CleanRL's too): n_steps 128,
batch 256, 4 epochs, lr 2.5e-4 and clip 0.1 both annealed linearly, ent 0.01, vf 0.5,
``CnnPolicy`` (Nature-DQN torso), CPU, torch's default thread count.

Trains for ``--seconds`` after the first rollout-and-update cycle (warm-up), then stops.
``frames_per_second`` is agent steps x 4 from the start of the second rollout to the start of
the last one: whole collect-and-learn cycles, start-up and the first cycle left out.

``--curve FILE`` also writes one JSON line per finished game (the game's score from SB3's
``Monitor``, which sits under the episodic-life and reward-clipping wrappers): agent steps,
frames, seconds since the script started, return, length. ``--total-steps`` is the budget the
learning rate and clip range anneal over (CleanRL's 10M for a learning curve; the default, 1e9,
keeps them practically constant for a throughput run).
"""

import argparse
import json
import time

import ale_py
import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import VecFrameStack

FRAME_SKIP = 4

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=60.0)
p.add_argument("--envs", type=int, default=8)
p.add_argument("--total-steps", type=int, default=10**9)
p.add_argument("--curve", default=None, help="write one JSON line per finished game here")
args = p.parse_args()
gym.register_envs(ale_py)


def linear(start: float):
    return lambda progress_remaining: progress_remaining * start


class StopAfter(BaseCallback):
    """Records (time, agent steps) at the start of every rollout; stops ``seconds`` after the
    second one (the first collect-and-update cycle is warm-up)."""

    def __init__(self, seconds: float, curve_file=None):
        super().__init__()
        self.seconds = seconds
        self.marks: list[tuple[float, int]] = []
        self.curve_file = curve_file

    def _on_rollout_start(self) -> None:
        self.marks.append((time.perf_counter(), self.num_timesteps))

    def _on_step(self) -> bool:
        if self.curve_file is not None:
            for info in self.locals["infos"]:
                if "episode" in info:
                    row = {
                        "agent_steps": self.num_timesteps,
                        "frames": FRAME_SKIP * self.num_timesteps,
                        "seconds": time.perf_counter() - t_start,
                        "return": float(info["episode"]["r"]),
                        "length": int(info["episode"]["l"]),
                    }
                    self.curve_file.write(json.dumps(row) + "\n")
                    self.curve_file.flush()
        return len(self.marks) < 2 or time.perf_counter() - self.marks[1][0] < self.seconds


t_start = time.perf_counter()
env = VecFrameStack(make_atari_env("BreakoutNoFrameskip-v4", n_envs=args.envs, seed=0), n_stack=4)
model = PPO(
    "CnnPolicy",
    env,
    n_steps=128,
    batch_size=256,
    n_epochs=4,
    learning_rate=linear(2.5e-4),
    clip_range=linear(0.1),
    ent_coef=0.01,
    vf_coef=0.5,
    device="cpu",
    seed=0,
    verbose=0,
)
curve_file = open(args.curve, "w") if args.curve else None
stop = StopAfter(args.seconds, curve_file)
model.set_logger(Logger(None, []))  # SB3 would leave an empty /tmp/SB3-<time> folder
model.learn(total_timesteps=args.total_steps, callback=stop)
if curve_file is not None:
    curve_file.close()
wall = time.perf_counter() - t_start
(t1, s1), (t2, s2) = stop.marks[1], stop.marks[-1]
print(
    json.dumps(
        {
            "system": "sb3 ppo",
            "envs": args.envs,
            "agent_steps": model.num_timesteps,
            "frames_per_second": FRAME_SKIP * (s2 - s1) / (t2 - t1),
            "frames_per_second_overall": FRAME_SKIP * model.num_timesteps / wall,
            "torch_threads": torch.get_num_threads(),
            "wall_seconds": wall,
        }
    )
)
