"""Evaluate a saved policy: mean and standard deviation of episode returns."""

from __future__ import annotations

import numpy as np
import torch

from asyncrl.envs import check_env, make_vector_env
from asyncrl.nets import build_acting_policy
from asyncrl.rundir import load_checkpoint, load_run_config


@torch.no_grad()
def evaluate(
    run_dir: str, episodes: int = 10, deterministic: bool = True, seed: int = 10_000, envs: int = 1
) -> dict[str, float]:
    cfg = load_run_config(run_dir)
    spec = check_env(cfg.env, cfg.algo)
    policy = build_acting_policy(cfg, spec)
    learner_state = load_checkpoint(run_dir)["learner"]
    if cfg.algo == "sac":
        policy.load_state_dict(learner_state["sac"]["actor"])
    else:
        policy.load_state_dict(learner_state["policy"])
    policy.eval()
    vec = make_vector_env(cfg.env, min(envs, episodes))
    obs, _ = vec.reset(seed=[seed + i for i in range(vec.num_envs)])
    gen = torch.Generator().manual_seed(seed)
    returns: list[float] = []
    running = np.zeros(vec.num_envs)
    # Each env contributes only the episodes it started while fewer than `episodes` were
    # started, so the result does not favour short episodes.
    started = vec.num_envs
    active = np.ones(vec.num_envs, dtype=bool)
    while active.any():
        action, _ = policy.act(torch.as_tensor(np.asarray(obs, np.float32)), deterministic, gen)
        a = action.numpy()
        if not spec.discrete:
            a = np.clip(a, spec.action_low, spec.action_high)
        obs, reward, terminated, truncated, _ = vec.step(a)
        running += reward
        for i in np.flatnonzero((terminated | truncated) & active):
            returns.append(float(running[i]))
            running[i] = 0.0
            if started < episodes:
                started += 1
            else:
                active[i] = False
    vec.close()
    arr = np.asarray(returns)
    return {"episodes": len(arr), "mean_return": float(arr.mean()), "std_return": float(arr.std())}
