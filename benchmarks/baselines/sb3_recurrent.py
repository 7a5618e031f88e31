"""SB3-contrib's RecurrentPPO ("MlpLstmPolicy") on one of the position-only tasks of the recurrent
rows of benchmarks/defaults_generality.py, at the library's own defaults (what a user of
SB3-contrib gets with no setting but the env and the budget) or, with ``--zoo``, at RL Zoo's
tuned settings for the same task. Prints one JSON line with the mean return of the last 20
training episodes (asyncrl's "final") and of the last 100, the env's own returns.

Runs in its own venv (benchmarks/baselines/setup.sh sb3), without asyncrl: the two tasks are
built here as benchmarks/position_only.py builds them (the same env, the same kept entries).
RecurrentPPO's defaults: one env, n_steps 128, batch 128 (one sequence), 10 epochs, Adam 3e-4,
gamma 0.99, lambda 0.95, clip 0.2, entropy 0, separate 256-unit LSTMs for actor and critic
then 64x64 tanh, no normalisation. ``--zoo``: rl-baselines3-zoo's hyperparams/ppo_lstm.yml
entries (ZOO below), with its env wrapping: ``n_envs`` envs in a DummyVecEnv, each seeded
seed + i, under VecNormalize (observations and returns, at the algorithm's gamma) where the
entry says ``normalize``, ``lin_X`` as its linear_schedule. CPU, one torch thread.
"""

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor, VecNormalize

# position_only.py's tasks: the env's id and the observation entries kept
TASKS = {
    "position_only:PositionCartPole-v0": ("CartPole-v1", (0, 2)),  # [x, theta]
    "position_only:PositionPendulum-v0": ("Pendulum-v1", (0, 1)),  # [cos, sin], no speed
}
# RL Zoo's ppo_lstm.yml for CartPoleNoVel-v1 and PendulumNoVel-v1 (the "# Tuned" entries of
# rl_zoo3 2.x; the sb3/ppo_lstm-*NoVel-v1 model cards list the same values)
_ZOO_NET = dict(
    ortho_init=False,
    activation_fn=torch.nn.ReLU,
    lstm_hidden_size=64,
    enable_critic_lstm=True,
    net_arch=dict(pi=[64], vf=[64]),
)
ZOO = {
    "position_only:PositionCartPole-v0": dict(
        n_envs=8,
        n_timesteps=100_000,
        normalize=True,
        hyper=dict(
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate="lin_0.001",
            clip_range="lin_0.2",
            policy_kwargs=_ZOO_NET,
        ),
    ),
    "position_only:PositionPendulum-v0": dict(
        n_envs=4,
        n_timesteps=100_000,
        normalize=True,
        hyper=dict(
            n_steps=1024,
            gae_lambda=0.95,
            gamma=0.9,
            n_epochs=10,
            ent_coef=0.0,
            learning_rate=1e-3,
            clip_range=0.2,
            use_sde=True,
            sde_sample_freq=4,
            policy_kwargs=_ZOO_NET,
        ),
    ),
}


def make(task: str) -> gym.Env:
    env_id, keep = TASKS[task]
    env = gym.make(env_id)
    idx = np.asarray(keep)
    box = env.observation_space
    space = gym.spaces.Box(box.low[idx], box.high[idx], dtype=box.dtype)
    return gym.wrappers.TransformObservation(env, lambda obs: obs[idx], space)


def linear(start: float):
    """RL Zoo's linear_schedule: from ``start`` down to 0 over the run (progress 1 -> 0)."""
    return lambda progress_remaining: progress_remaining * start


def schedules(hyper: dict) -> dict:
    return {
        k: linear(float(v.removeprefix("lin_"))) if isinstance(v, str) else v
        for k, v in hyper.items()
    }


class EpisodeLog(BaseCallback):
    """Every finished episode (VecMonitor's raw return and length) with the env steps of the run
    when it ended, to a CSV read while the run goes (defaults_generality.py --curves)."""

    def __init__(self, path: str | None):
        super().__init__()
        self.path, self.returns = path, []

    def _on_training_start(self) -> None:
        if self.path:
            with open(self.path, "w") as f:
                f.write("#{}\nr,l,steps\n")

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:
                r, n = info["episode"]["r"], info["episode"]["l"]
                self.returns.append(float(r))
                if self.path:
                    with open(self.path, "a") as f:
                        f.write(f"{r},{n},{self.num_timesteps}\n")
        return True


p = argparse.ArgumentParser()
p.add_argument("--env", choices=sorted(TASKS), default="position_only:PositionCartPole-v0")
p.add_argument("--steps", type=int, default=0, help="default: 300,000; RL Zoo's with --zoo")
p.add_argument("--seed", type=int, default=1)
p.add_argument("--zoo", action="store_true", help="RL Zoo's settings for the env (ZOO)")
p.add_argument("--monitor", default=None, help="also write each episode to this CSV as it ends")
args = p.parse_args()
torch.set_num_threads(1)
if args.zoo:
    zoo = ZOO[args.env]
    steps = args.steps or zoo["n_timesteps"]
    hyper = schedules(zoo["hyper"])
    env = DummyVecEnv([lambda: make(args.env)] * zoo["n_envs"])
    env.seed(args.seed)  # env i gets seed + i, as make_vec_env seeds them
    env = VecMonitor(env)  # the raw returns, under the normalisation
    if zoo["normalize"]:
        env = VecNormalize(env, gamma=hyper["gamma"])
    log = EpisodeLog(args.monitor)
    model = RecurrentPPO("MlpLstmPolicy", env, device="cpu", seed=args.seed, verbose=0, **hyper)
else:
    steps = args.steps or 300_000
    monitor = Monitor(make(args.env), filename=args.monitor)  # a run's curve, read while it runs
    log = None
    model = RecurrentPPO("MlpLstmPolicy", monitor, device="cpu", seed=args.seed, verbose=0)
model.set_logger(Logger(None, []))  # SB3 would leave an empty /tmp/SB3-<time> folder
t0 = time.perf_counter()
model.learn(total_timesteps=steps, callback=log)
seconds = time.perf_counter() - t0
returns = log.returns if log else monitor.get_episode_rewards()  # every finished episode
print(
    json.dumps(
        {
            "impl": "sb3-zoo" if args.zoo else "sb3",
            "settings": "RL Zoo ppo_lstm.yml" if args.zoo else "library defaults",
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
