"""Train PPO on CartPole-v1 from Python, evaluating as it goes; stop once an evaluation scores
the maximum; then act with the best policy in an env of your own.

    python examples/train_cartpole.py

Processes are started with ``spawn``, so a script calls ``asyncrl.train`` under
``if __name__ == "__main__":`` (a notebook needs nothing).
"""

from __future__ import annotations

import gymnasium as gym

import asyncrl


def stop_when_solved(row: dict) -> bool | None:
    """Called after every training iteration; an evaluation's figures appear in the row of
    the iteration its result came back in. Returning False ends the run (final checkpoint,
    summary with stopped_by_callback); None goes on."""
    if row.get("eval/mean_return", 0.0) >= 500:
        print(f"evaluation at {row['eval/env_steps']:,} env steps scored 500: stopping")
        return False
    return None


def main() -> None:
    result = asyncrl.train(
        "CartPole-v1",
        total_steps=150_000,
        eval_every=10_000,
        eval_episodes=5,
        callback=stop_when_solved,
        progress=False,
    )
    s = result.summary
    print(
        f"trained {s['env_steps']:,} env steps in {s['wall_seconds']:.0f} s; last 20 training "
        f"episodes {s['final_return']:.1f}; best evaluation {s['eval_best_return']:.1f}; "
        f"run directory {result.run_dir}"
    )
    policy = result.load("best")  # or asyncrl.load(result.run_dir, "best") later
    evaluation = policy.evaluate(episodes=10, seed=0)
    print(f"best policy: {evaluation.mean_return:.1f} +/- {evaluation.std_return:.1f} over 10")

    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=123)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy.act(obs))  # one obs -> one action
        total += float(reward)
        done = terminated or truncated
    print(f"one more episode in our own env: return {total:.0f}")


if __name__ == "__main__":
    main()
