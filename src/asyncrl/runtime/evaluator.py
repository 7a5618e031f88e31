"""Evaluation during training (``--eval-every S --eval-episodes E``), off the learner's path.

Every S env steps the newest policy vector goes to an evaluator process at the lowest priority,
which runs E deterministic episodes on envs of its own seeds and sends back returns and
lengths; evaluations are skipped, never queued, and never slow training down. Each result is
logged at the env step of the weights it evaluated; a new best writes ``checkpoint-best.pt``
(docs: Internals; Guides: evaluation)."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asyncrl.core import Algorithm, NonFiniteError
from asyncrl.envs import EnvSpec, eval_seeds
from asyncrl.rundir import (
    BEST_CHECKPOINT,
    CheckpointWriteError,
    load_best_checkpoint,
    save_best_checkpoint,
)
from asyncrl.runtime.processes import (
    POLL,
    ChildProcesses,
    Stopped,
    die_with_parent,
    report_failure,
    wait_for,
)
from asyncrl.runtime.transport import StopFlag
from asyncrl.settings import TrainConfig

NICE = 19  # the lowest priority: evaluations take only CPU time nothing else wants
FINISH_TIMEOUT = 120.0  # seconds the end of a run waits for the evaluation in progress


def evaluator_main(
    outbox: Connection,
    cfg: TrainConfig,
    spec: EnvSpec,
    algo: Algorithm,
    requests: Any,
    stop: Any,
    parent: int,
) -> None:
    """Entry point of the evaluator process: evaluate each policy it is sent until told to
    stop (or its parent is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how the run ends
    die_with_parent()
    torch.set_num_threads(1)
    from asyncrl.envs import make_env
    from asyncrl.policy import Policy, run_episodes

    env = None
    try:
        policy = Policy.build(cfg, spec, algo)
        env = make_env(cfg.env, atari_preprocessing=cfg.atari_preprocessing)
        seeds = eval_seeds(cfg.seed, cfg.eval_episodes)
        while True:
            env_steps, vector = wait_for(requests.get, stop, parent)
            t0 = time.perf_counter()
            policy.load_vector(vector)
            result = run_episodes(policy, env, seeds, deterministic=True, stop=stop.is_set)
            if stop.is_set():
                break
            outbox.send((env_steps, result.returns, result.lengths, time.perf_counter() - t0))
    except Stopped:
        pass
    except BaseException:
        report_failure(outbox, fatal=True)
        os._exit(1)  # the sentinel tells the parent at once
    finally:
        if env is not None:
            env.close()


class Evaluations:
    """The training loop's side of evaluation during training: owns the evaluator process
    (started here, stopped and joined by :meth:`close`, also on errors and Ctrl+C), hands it
    policies, logs what comes back and keeps the best checkpoint.

    With ``cfg.eval_every == 0`` it does nothing and starts nothing.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        spec: EnvSpec,
        algo: Algorithm,
        run_dir: Path,
        log: Any,
        env_steps: int,
        resume: bool,
    ):
        self.cfg, self.spec, self.algo, self.run_dir, self.log = cfg, spec, algo, run_dir, log
        self.every = cfg.eval_every
        self.enabled = self.every > 0
        self.pending: tuple[int, np.ndarray] | None = None  # (env steps, vector) in evaluation
        self.evaluations = 0
        self.best = -math.inf
        self.best_env_steps: int | None = None
        self.last: dict[str, float] = {}
        self.failure: str | None = None
        self.children: ChildProcesses | None = None
        self.template: Any = None  # a policy that turns an evaluated vector into a state dict
        if not self.enabled:
            return
        self.next_due = (env_steps // self.every + 1) * self.every
        if resume and (run_dir / BEST_CHECKPOINT).is_file():  # a resumed run's best stands
            try:
                previous = load_best_checkpoint(run_dir).get("eval") or {}
                self.best = float(previous.get("mean_return", -math.inf))
                self.best_env_steps = previous.get("env_steps")
            except Exception as e:  # a damaged best is replaced by the next evaluation
                print(f"asyncrl: warning: {e}; the next evaluation replaces it", file=sys.stderr)
        ctx = mp.get_context("spawn")
        self.requests = ctx.Queue()
        self.stop = StopFlag(ctx)
        self.children = ChildProcesses(ctx, "evaluator", cfg)
        args = (cfg, spec, algo, self.requests, self.stop, os.getpid())
        self.children.start(evaluator_main, args, 0)
        try:  # from here, before the child has imported torch: that start-up is background too
            os.setpriority(os.PRIO_PROCESS, self.children.pid(0), NICE)
        except (OSError, AttributeError):  # not permitted, or not Linux: the same priority
            pass

    # ------------------------------------------------------------ the loop's calls
    def step(self, env_steps: int, policy_vector: Callable[[], np.ndarray]) -> dict[str, float]:
        """After a training iteration: hand over the newest policy if an evaluation is due
        and none is running; returns the row of an evaluation that finished since ({} if
        none). Never waits."""
        if not self.enabled:
            return {}
        row = self._poll()
        if self.pending is None and env_steps >= self.next_due and self.enabled:
            vector = policy_vector()
            self.requests.put((env_steps, vector))
            self.pending = (env_steps, vector)
            self.next_due = (env_steps // self.every + 1) * self.every
        return row

    def finish(self, wait: bool) -> dict[str, float]:
        """At the end of a run: with ``wait``, take the result of the evaluation in progress
        (at most ``FINISH_TIMEOUT`` seconds); returns its row ({} if none)."""
        if not (self.enabled and self.pending is not None and wait):
            return {}
        deadline = time.perf_counter() + FINISH_TIMEOUT
        while self.enabled and self.pending is not None:
            if time.perf_counter() >= deadline:
                print(
                    f"asyncrl: warning: the evaluation of the policy at "
                    f"{self.pending[0]:,} env steps took over {FINISH_TIMEOUT:g} s to finish; "
                    "left out",
                    file=sys.stderr,
                )
                return {}
            row = self._poll(timeout=POLL)
            if row:
                return row
        return {}

    def summary(self) -> dict[str, Any]:
        """Figures for summary.json (none when evaluation is off)."""
        if self.every == 0:
            return {}
        out: dict[str, Any] = {
            "evaluations": self.evaluations,
            "eval_best_return": self.best if math.isfinite(self.best) else math.nan,
            "eval_best_env_steps": self.best_env_steps,
            "eval_last_return": self.last.get("eval/mean_return", math.nan),
        }
        if self.failure:
            out["eval_failure"] = self.failure
        return out

    def close(self) -> None:
        """Stop and join the evaluator; safe to call twice and on error paths."""
        if self.children is None:
            return
        self.stop.set()
        self.children.close((self.requests,))
        self.children = None
        self.enabled = False

    # ------------------------------------------------------------ internals
    def _poll(self, timeout: float = 0.0) -> dict[str, float]:
        if self.pending is None:
            return {}
        try:
            _, result = self.children.receive(timeout)
        except queue.Empty:
            self._check_alive()
            return {}
        return self._record(*result)

    def _check_alive(self) -> None:
        for _, cause, tb, _ in self.children.dead():
            last = [line for line in tb.strip().splitlines() if line.strip()]
            why = last[-1].strip() if last else cause
            self.failure = f"evaluator {cause}: {why}"
            print(
                f"asyncrl: warning: {self.failure}; no more evaluations in this run",
                file=sys.stderr,
                flush=True,
            )
            self.enabled = False
            self.pending = None

    def _record(
        self, env_steps: int, returns: list[float], lengths: list[int], seconds: float
    ) -> dict[str, float]:
        vector = self.pending[1] if self.pending is not None else None
        self.pending = None
        row = {
            "eval/mean_return": float(np.mean(returns)),
            "eval/std_return": float(np.std(returns)),
            "eval/mean_length": float(np.mean(lengths)),
            "eval/std_length": float(np.std(lengths)),
            "eval/episodes": len(returns),
            "eval/seconds": seconds,
        }
        self.log.write(env_steps, row)
        self.evaluations += 1
        self.last = row
        if row["eval/mean_return"] > self.best and vector is not None:
            self._save_best(env_steps, vector, row)
        return {**row, "eval/env_steps": env_steps}

    def _save_best(self, env_steps: int, vector: np.ndarray, row: dict[str, float]) -> None:
        if self.template is None:  # made when a best is first saved, not at start-up
            from asyncrl.policy import Policy  # (Policy.build leaves torch's RNG as it was)

            self.template = Policy.build(self.cfg, self.spec, self.algo)
        self.template.load_vector(vector)
        evaluation = {k.removeprefix("eval/"): v for k, v in row.items()}
        state = {
            "policy": self.template.module.state_dict(),
            "config": self.cfg.to_dict(),
            "env_steps": env_steps,
            "eval": {**evaluation, "env_steps": env_steps},
        }
        try:
            save_best_checkpoint(self.run_dir, state)
        except (CheckpointWriteError, NonFiniteError) as e:  # the earlier best stands
            print(f"asyncrl: warning: {e}", file=sys.stderr, flush=True)
            return
        self.best = row["eval/mean_return"]
        self.best_env_steps = env_steps
