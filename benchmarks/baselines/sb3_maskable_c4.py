"""SB3-contrib's MaskablePPO on PettingZoo's connect four, at the settings of PettingZoo's own
SB3 tutorial (tutorials/SB3/connect_four/sb3_connect_four_action_mask.py): one model plays both
seats; MaskablePPO(MaskableActorCriticPolicy, env) with SB3's defaults (one env, n_steps 2048,
batch 64, 10 epochs, lr 3e-4, gamma 0.99, 64-64 tanh MLP); 20,480 steps; each step is one move
and its reward is the mover's (+1 for a winning move, 0 otherwise, as the tutorial's wrapper
gives it). Prints one JSON line per checkpoint: steps, wall s, win/draw/loss of the greedy
policy in --games games against the random and the look-ahead player.

Runs in the SB3 venv (benchmarks/baselines/setup.sh sb3) with asyncrl's source on the path, so
the games are asyncrl's own (:func:`asyncrl.envs.pettingzoo.play_vs`, the code that judges
asyncrl's policies in benchmarks/selfplay.py: half first, half second, game i seeded 10,000 + i)::

    PYTHONPATH=src nice -n 5 benchmarks/.venvs/sb3/bin/python \\
        benchmarks/baselines/sb3_maskable_c4.py --seed 1 [--steps 200000]

A long run can train with ``--games 0 --out DIR`` while another process plays the checkpoints
saved so far (``--evaluate --out DIR --seed 1``), each timed in training wall seconds.

Departures from the tutorial, each for a fair, repeatable measurement: the seed also goes to
the constructor (the tutorial seeds after building the network, so its initial weights are
unseeded); torch uses one thread and the CPU, as the other SB3 baselines here; the tutorial's
wrapper is rewritten as a gymnasium.Env (gymnasium >= 1.0's wrappers require one; the tutorial
pins gymnasium <= 0.29.1) with the same observation, reward and termination.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from pettingzoo.classic import connect_four_v3
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger

from asyncrl.envs.pettingzoo import play_vs

ENV = "pettingzoo:pettingzoo.classic.connect_four_v3"


class BothSeats(gym.Env):
    """Connect four as one env whose single agent makes every move, as the tutorial's wrapper:
    the observation is the board of the player to move next (its pieces, then the other's), the
    reward, termination and truncation are those of the player who just moved."""

    def __init__(self) -> None:
        self.game = connect_four_v3.env()
        self.game.reset()
        first = self.game.possible_agents[0]
        self.observation_space = self.game.observation_space(first)["observation"]
        self.action_space = self.game.action_space(first)

    def _observe(self, key: str) -> np.ndarray:
        return self.game.observe(self.game.agent_selection)[key]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.game.reset(seed=seed, options=options)
        return self._observe("observation"), {}

    def step(self, action):
        mover = self.game.agent_selection
        self.game.step(int(action))
        return (
            self._observe("observation"),
            float(self.game._cumulative_rewards[mover]),
            bool(self.game.terminations[mover]),
            bool(self.game.truncations[mover]),
            {},
        )

    def action_mask(self) -> np.ndarray:
        return self._observe("action_mask").astype(bool)


class Checkpoints(BaseCallback):
    """Saves the model at the first update boundary at or past every ``every`` steps, with
    the training wall time so far (the games are played afterwards, outside the timing)."""

    def __init__(self, out: Path, every: int, t0: list[float]) -> None:
        super().__init__()
        self.out, self.every, self.t0, self.next = out, every, t0, every
        self.saved: list[tuple[int, float, Path]] = []

    def save(self) -> None:
        path = self.out / f"model-{self.num_timesteps}.zip"
        wall = time.perf_counter() - self.t0[0]
        self.model.save(path)
        with open(self.out / "marks.jsonl", "a") as f:  # for --evaluate while training goes on
            f.write(json.dumps({"steps": self.num_timesteps, "wall_s": round(wall, 1)}) + "\n")
        self.saved.append((self.num_timesteps, wall, path))

    def _on_rollout_start(self) -> None:  # the policy as the last update left it
        if self.num_timesteps >= self.next:
            self.save()
            while self.next <= self.num_timesteps:
                self.next += self.every

    def _on_step(self) -> bool:
        return True


def play(out: Path, steps: int, wall: float, seed: int, games: int) -> None:
    """One JSON line: the rates of checkpoint ``steps``'s greedy policy against each player."""
    policy = MaskablePPO.load(out / f"model-{steps}.zip", device="cpu")

    def choose(row: np.ndarray) -> int:
        board = row[:-7].reshape(6, 7, 2).astype(np.int8)
        action, _ = policy.predict(board, action_masks=row[-7:] > 0, deterministic=True)
        return int(action)

    line = {"impl": "sb3-contrib MaskablePPO", "seed": seed, "steps": steps, "wall_s": wall}
    for opponent in ("random", "lookahead"):
        line[opponent] = play_vs(ENV, choose, opponent, games, 10_000)
    print(json.dumps(line), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20_480, help="the tutorial's budget")
    ap.add_argument("--seed", type=int, default=0, help="the tutorial's seed")
    ap.add_argument("--every", type=int, default=10_000, help="checkpoint mark spacing (steps)")
    ap.add_argument("--games", type=int, default=200, help="per player; 0: train only")
    ap.add_argument("--out", default=None, help="checkpoints here (default: a temp dir)")
    ap.add_argument("--evaluate", action="store_true", help="only play the --out dir's marks")
    ap.add_argument("--after", type=int, default=0, help="with --evaluate: marks past this only")
    args = ap.parse_args()
    if args.evaluate and not args.out:
        ap.error("--evaluate: give the run's --out DIR")
    torch.set_num_threads(1)
    if args.evaluate:  # a run's checkpoints so far, in another process, while it trains on
        for mark in map(json.loads, (Path(args.out) / "marks.jsonl").read_text().splitlines()):
            if mark["steps"] > args.after:
                play(Path(args.out), mark["steps"], mark["wall_s"], args.seed, args.games)
        return
    out = Path(args.out or tempfile.mkdtemp(prefix="sb3-maskable-c4-"))
    out.mkdir(parents=True, exist_ok=True)
    env = BothSeats()
    env.reset(seed=args.seed)
    env = ActionMasker(env, lambda e: e.action_mask())
    model = MaskablePPO(MaskableActorCriticPolicy, env, seed=args.seed, device="cpu", verbose=0)
    model.set_random_seed(args.seed)
    model.set_logger(Logger(None, []))  # SB3 would leave an empty /tmp/SB3-<time> folder
    t0 = [0.0]
    marks = Checkpoints(out, args.every, t0)
    t0[0] = time.perf_counter()
    model.learn(total_timesteps=args.steps, callback=marks)
    marks.save()
    if args.games:
        for steps, wall, _ in marks.saved:
            play(out, steps, round(wall, 1), args.seed, args.games)


if __name__ == "__main__":
    main()
