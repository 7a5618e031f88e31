"""Population-Based Training (Jaderberg et al. 2017, as Sample Factory runs it): every
``--pbt-period`` env steps of a policy, one that ranks in the bottom ``--pbt-fraction`` of the
population by its objective copies a policy of the top fraction -- weights, optimizer state,
normalisers and hyperparameters -- and perturbs the hyperparameters its algorithm declares
mutable. Every exploit is a line on stdout and a row of ``pbt.jsonl`` (docs: Guides,
populations)."""

from __future__ import annotations

import json
import math
import threading
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from asyncrl.core import Mutable
from asyncrl.learning.population import perturb
from asyncrl.rundir import EXPLOITS

if TYPE_CHECKING:
    from asyncrl.settings import TrainConfig

WINDOW = 20  # the objective: mean return of a policy's last 20 episodes since it last changed
SEED = 7_368_787  # the exploits' draws: the run's seed + this


class PBT:
    """The schedule and the decisions; thread-safe (a population's learner loops may run in
    threads of their own). ``values[p]``: policy p's current values of the mutable settings."""

    def __init__(
        self,
        cfg: TrainConfig,
        mutable: dict[str, Mutable],
        values: list[dict[str, float]],
        run_dir: Path,
        enabled: bool,
    ):
        self.period, self.fraction = cfg.pbt_period, cfg.pbt_fraction
        self.resample, self.mutable, self.enabled = cfg.pbt_resample, dict(mutable), enabled
        self.P = len(values)
        self.values = [dict(v) for v in values]
        self.path = run_dir / EXPLOITS
        self.rng = np.random.default_rng(cfg.seed + SEED)
        self.returns: list[deque[float]] = [deque(maxlen=WINDOW) for _ in range(self.P)]
        self.next_check = [self.period] * self.P
        self.exploits = [0] * self.P  # times each policy copied another
        self.lock = threading.Lock()

    def record(self, policy: int, slots: list[Any]) -> None:
        """The episodes a batch of ``policy`` finished (its objective's window)."""
        returns = [float(r) for s in slots for r in s.ep_returns[~np.isnan(s.ep_returns)]]
        if returns:
            with self.lock:
                self.returns[policy].extend(returns)

    def objective(self, policy: int) -> float:
        window = self.returns[policy]
        return float(np.mean(window)) if window else math.nan

    def due(self, policy: int, env_steps: int) -> bool:
        return self.enabled and env_steps >= self.next_check[policy]

    def decide(self, policy: int, env_steps: int) -> tuple[int, dict[str, float]] | None:
        """At a check of ``policy`` (at ``env_steps`` of its own): the policy it copies and the
        values it takes (a perturbation of that policy's), or None if it stays as it is -- it
        is not in the bottom fraction, or not every policy has an objective yet."""
        with self.lock:
            self.next_check[policy] = (env_steps // self.period + 1) * self.period
            scores = [self.objective(p) for p in range(self.P)]
            if any(math.isnan(s) for s in scores):
                return None
            n = max(1, int(self.fraction * self.P))
            order = sorted(range(self.P), key=lambda p: (scores[p], p))
            bottom, top = order[:n], order[-n:]
            if policy not in bottom or policy in top:
                return None
            source = int(top[int(self.rng.integers(len(top)))])
            if scores[source] <= scores[policy]:
                return None
            values = perturb(self.values[source], self.mutable, self.rng, self.resample)
            return source, values

    def exploited(
        self, policy: int, source: int, values: dict[str, float], env_steps: int, total: int
    ) -> dict[str, Any]:
        """Record that ``policy`` took ``source``'s state and ``values``: the log line's row."""
        with self.lock:
            row = {
                "env_steps": total,
                "policy_env_steps": env_steps,
                "policy": policy,
                "copied": source,
                "objective": self.objective(policy),
                "source_objective": self.objective(source),
                "old": self.values[policy],
                "new": values,
            }
            self.values[policy] = dict(values)
            self.returns[policy].clear()  # its objective is its new weights' from now on
            self.exploits[policy] += 1
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
        changes = ", ".join(
            f"{name} {row['old'][name]:.4g} -> {value:.4g}" for name, value in values.items()
        )
        print(
            f"asyncrl: pbt: policy {policy} (return {row['objective']:.1f}) copies policy "
            f"{source} (return {row['source_objective']:.1f}) at {env_steps:,} of its env steps "
            f"({total:,} in all): {changes}",
            flush=True,
        )
        return row

    def leader(self, finals: list[float]) -> int:
        """The best policy by the final returns given (NaN last; the lowest index on ties)."""
        return min(range(self.P), key=lambda p: (math.isnan(finals[p]), -_num(finals[p]), p))

    def state_dict(self) -> dict[str, Any]:
        with self.lock:
            return {
                "values": [dict(v) for v in self.values],
                "returns": [list(r) for r in self.returns],
                "next_check": list(self.next_check),
                "exploits": list(self.exploits),
                "rng": json.dumps(self.rng.bit_generator.state),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.values = [dict(v) for v in state["values"]]
        for window, saved in zip(self.returns, state["returns"], strict=True):
            window.clear()
            window.extend(saved)
        self.next_check = list(state["next_check"])
        self.exploits = list(state["exploits"])
        self.rng.bit_generator.state = json.loads(state["rng"])


def _num(x: float) -> float:
    return 0.0 if math.isnan(x) else x
