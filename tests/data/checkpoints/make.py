"""Write the golden run directories that tests/test_checkpoint_format.py loads, evaluates and
resumes: tiny inline sync runs (PPO, PPO-LSTM, SAC, DQN, a PBT population of 2) with the
smallest networks and budgets, kept with only what loading, evaluating and resuming read:
config.yaml, the marker and the numbered checkpoints, and checkpoint-best.pt where a run has one
(no checkpoint.pt: the numbered file is the same one; no metrics, summary or logs).

The committed ones were written by b12beae, before checkpoints held a format (format 0), and
stay so: they prove that every later version still reads what that one wrote. To add fixtures
of a later format, run this with that version's asyncrl into a new directory; never rewrite
these::

    git archive b12beae src | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old/src python tests/data/checkpoints/make.py tests/data/checkpoints
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import asyncrl

COMMON = dict(
    backend="inline",
    mode="sync",
    actors=1,
    envs_per_actor=2,
    progress=False,
    tensorboard=False,
    seed=1,
)
PPO = dict(COMMON, env="CartPole-v1", rollout=8, minibatch_size=16, epochs=1, hidden=[8])
RUNS = {
    # with both normalisations: their statistics are checkpoint state too
    "ppo": dict(PPO, total_steps=16, norm_obs=True, norm_reward=True),
    "ppo-lstm": dict(PPO, total_steps=16, recurrent="lstm", rnn_size=8),
    "sac": dict(
        COMMON,
        env="Pendulum-v1",
        algo="sac",
        rollout=1,
        hidden=[8, 8],
        learning_starts=8,
        batch_size=8,
        buffer_size=64,
        save_replay=True,
        total_steps=16,
    ),
    "dqn": dict(
        COMMON,
        env="CartPole-v1",
        algo="dqn",
        rollout=1,
        hidden=[8],
        learning_starts=8,
        batch_size=8,
        buffer_size=64,
        save_replay=True,
        total_steps=16,
    ),
    # 2 policies, each with its own checkpoints; an exploit check every 16 of a policy's steps
    "pbt": dict(PPO, actors=2, policies=2, pbt=True, pbt_period=16, total_steps=64),
}
KEEP = ("config.yaml", ".asyncrl-run", "checkpoint-*.pt", "policy_*/checkpoint-*.pt")


def make(out: Path) -> None:
    for name, settings in RUNS.items():
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / name
            asyncrl.train(run_dir=str(run), **settings)
            dest = out / name
            shutil.rmtree(dest, ignore_errors=True)
            for pattern in KEEP:
                for path in sorted(run.glob(pattern)):
                    target = dest / path.relative_to(run)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
