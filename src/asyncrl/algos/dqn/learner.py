"""DQN's learner: the shared replay learner with DQN's network, update and exploration
schedule (set before every update, published with the network)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from asyncrl.algos.dqn.config import DQNConfig, epsilon
from asyncrl.algos.dqn.networks import QNetwork
from asyncrl.algos.dqn.update import DQN
from asyncrl.envs import EnvSpec
from asyncrl.learning.replay_learner import ReplayLearner
from asyncrl.nets import FlatParams, choose_encoder, encoder_of, learner_device
from asyncrl.replay import make_replay

if TYPE_CHECKING:
    from asyncrl.config import Settings


class DQNLearner(ReplayLearner):
    name = "dqn"

    def __init__(self, cfg: Settings, spec: EnvSpec):
        self.cfg, self.spec = cfg, spec
        self.hp = DQNConfig.of(cfg)
        self.device = learner_device(cfg.device)
        # initial weights drawn from cfg.seed; the global random state is put back at once
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(cfg.seed)
            q = QNetwork(spec, cfg.hidden, choose_encoder(encoder_of(cfg), spec))
        self.policy = q.to(self.device)
        # target_every counts env steps (as CleanRL does); updates come replay_ratio per step
        every = max(1, round(cfg.target_every * cfg.replay_ratio))
        self.rule = DQN(self.policy, self.hp, every)
        self.flat = FlatParams(self.policy)
        if self.device.type == "cpu":
            self.flat.make_contiguous()  # publishing a version is then one copy
        self.replay = make_replay(cfg, spec, seed=cfg.seed, n_step=cfg.n_step, gamma=cfg.gamma)
        self._start()
        self.before_update()  # version 0 explores with epsilon_start

    def before_update(self) -> None:
        self.policy.epsilon.fill_(epsilon(self.cfg, self.schedule_steps))
        if self.cfg.lr_schedule == "linear":
            for group in self.rule.optimizer.param_groups:
                group["lr"] = self.cfg.lr * self.remaining("linear", self.schedule_steps)

    def hyperparameters_changed(self) -> None:
        self.hp = self.rule.cfg = DQNConfig.of(self.cfg)
        for group in self.rule.optimizer.param_groups:
            group["lr"] = self.cfg.lr * self.remaining(self.cfg.lr_schedule)

    def update_batch(self, b: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        steps = b["steps"] if "steps" in b else 1
        discount = (self.cfg.gamma**steps) * (1.0 - b["terminated"])
        return {
            "obs": torch.from_numpy(b["obs"]).to(self.device),
            "action": torch.from_numpy(b["action"]).to(self.device),
            "reward": torch.from_numpy(b["reward"]).to(self.device),
            "next_obs": torch.from_numpy(b["next_obs"]).to(self.device),
            "discount": torch.as_tensor(discount, dtype=torch.float32).to(self.device),
        }

    def fused_nonfinite(self) -> dict[str, tuple[int, float]]:
        return {} if self.rule.fused is None else {"q": self.rule.take_nonfinite()}

    def own_summary(self, wall: float) -> dict:
        return {**super().own_summary(wall), "epsilon": float(self.policy.epsilon)}
