"""SAC's learner: the shared replay learner with SAC's networks and update."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from asyncrl.algos.sac.config import SACConfig, target_entropy
from asyncrl.algos.sac.update import SAC
from asyncrl.envs import EnvSpec
from asyncrl.learning.replay_learner import ReplayLearner
from asyncrl.nets import FlatParams, choose_encoder, encoder_of, learner_device, make_encoder
from asyncrl.replay import make_replay

if TYPE_CHECKING:
    from asyncrl.config import Settings


class SACLearner(ReplayLearner):
    name = "sac"

    def __init__(self, cfg: Settings, spec: EnvSpec):
        self.cfg, self.spec = cfg, spec
        self.hp = SACConfig.of(cfg)
        self.device = learner_device(cfg.device)
        # The networks start from cfg.seed as torch's global generator draws them; the global
        # state is put back at once, and the updates draw from the learner's own generator:
        # training never changes the caller's random state.
        kind = choose_encoder(encoder_of(cfg), spec)
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(cfg.seed)  # the CPU one: CUDA's untouched
            self.rule = self.sac = SAC(
                spec.obs_dim,
                spec.n_actions,
                spec.action_low,
                spec.action_high,
                self.hp,
                self.device,
                torch.Generator(self.device).manual_seed(cfg.seed + 7),
                encoder=lambda: make_encoder(kind, spec, ()),
                hidden=tuple(cfg.hidden),
                target_entropy=target_entropy(cfg.target_entropy, spec.n_actions),
                precision=cfg.precision,
            )
        self.policy = self.sac.actor  # what actors act with
        self.flat = FlatParams(self.sac.actor)
        self.flat.make_contiguous()  # publishing a version is then one copy (CPU only)
        self.replay = make_replay(cfg, spec, seed=cfg.seed)
        self._start()

    def update_batch(self, b: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """A replay sample as the tensors ``SAC.update`` reads (no copies on the CPU; one copy
        each to another device)."""
        return as_update_batch(b, self.device)

    def hyperparameters_changed(self) -> None:
        self.hp = self.sac.cfg = SACConfig.of(self.cfg)
        self._set_rates()
        # always set: a value of 0 (-|A|) replaces the one before as any other does
        self.sac.target_entropy = target_entropy(self.cfg.target_entropy, self.spec.n_actions)

    def random_streams(self) -> list[torch.Generator]:
        return [] if self.sac.generator is None else [self.sac.generator]

    def fused_nonfinite(self) -> dict[str, tuple[int, float]]:
        return self.sac.take_nonfinite()  # {} for the autograd step

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._set_rates()

    def _set_rates(self) -> None:
        # the optimizers' saved state holds the rates of the run before: the rates given now
        # (--q-lr, --policy-lr, which may change on resume) take effect
        for opt, lr in (
            (self.sac.q_opt, self.cfg.q_lr),
            (self.sac.actor_opt, self.cfg.policy_lr),
            (self.sac.alpha_opt, self.cfg.policy_lr),
        ):
            for group in opt.param_groups:
                group["lr"] = lr


def as_update_batch(
    b: dict[str, np.ndarray], device: torch.device | None = None
) -> dict[str, torch.Tensor]:
    return {
        "obs": torch.from_numpy(b["obs"]).to(device),
        "action": torch.from_numpy(b["action"]).to(device),
        "reward": torch.from_numpy(b["reward"]).to(device),
        "next_obs": torch.from_numpy(b["next_obs"]).to(device),
        "terminated": torch.from_numpy(b["terminated"]).to(device).float(),
    }
