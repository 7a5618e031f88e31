"""Soft Actor-Critic: what the runtime asks of it. Light to import; the networks, the learner
and torch come with the first call that needs them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from asyncrl.algos.sac import config
from asyncrl.learning import offpolicy

if TYPE_CHECKING:
    from asyncrl.config import Settings


class SACAlgorithm(offpolicy.ReplayAlgorithm):
    name = "sac"
    hyperparameters = config.SACConfig
    presets = config.PRESETS
    precisions = ("fp32", "bf16")  # --precision: its update autocasts to bfloat16
    tuned = config.TUNED
    mutable = {
        "policy_lr": (1e-5, 1e-2, "log"),
        "q_lr": (1e-5, 1e-2, "log"),
        "target_entropy": (-20.0, 0.0, "linear"),
    }

    def accepts(self, spec: Any) -> str | None:
        if spec.agents > 1:
            return f"sac does not train multi-agent envs yet ({spec.env_id})"
        if spec.discrete:
            return (
                f"sac needs a continuous (Box) action space; {spec.env_id} has "
                f"{spec.n_actions} discrete actions"
            )
        if not (np.isfinite(spec.action_low).all() and np.isfinite(spec.action_high).all()):
            # its tanh squashes into [low, high]: an infinite bound gives inf and NaN actions
            return (
                f"sac squashes actions into the action space's bounds; {spec.env_id} has "
                f"infinite ones (low {spec.action_low.tolist()}, high {spec.action_high.tolist()})"
            )
        return None

    def validate(self, cfg: Settings) -> None:
        config.validate(cfg)

    def agree(self, cfg: Settings, filled: frozenset[str]) -> dict[str, Any]:
        return {}  # its presets agree with every run-level setting as they are

    def for_env(
        self, cfg: Settings, spec: Any, given: Settings | None
    ) -> tuple[dict[str, Any], list[str]]:
        changes, lines = super().for_env(cfg, spec, given)
        # saved resolved, each policy's too: PBT perturbs by a factor, which leaves 0 at 0
        if cfg.target_entropy == 0:
            changes["target_entropy"] = config.target_entropy(0.0, spec.n_actions)
        if "target_entropy" in cfg.population:
            own = [
                config.target_entropy(v, spec.n_actions) for v in cfg.population["target_entropy"]
            ]
            changes["population"] = {**cfg.population, "target_entropy": own}
        return changes, lines

    def acting_module(self, cfg: Settings, spec: Any) -> Any:
        from asyncrl.algos.sac.networks import SquashedGaussianActor
        from asyncrl.nets import choose_encoder, encoder_of, make_encoder

        return SquashedGaussianActor(
            spec.obs_dim,
            spec.n_actions,
            tuple(cfg.hidden),
            spec.action_low,
            spec.action_high,
            encoder=make_encoder(choose_encoder(encoder_of(cfg), spec), spec, ()),
        )

    def acting(self, cfg: Settings, spec: Any, module: Any, generator: Any) -> Any:
        from asyncrl.algos.sac.acting import SACActing

        return SACActing(module, generator, spec.action_low, spec.action_high)

    def joint_acting(self, actings: list[Any]) -> None:
        return None  # a population's policies act in turn

    def learner(self, cfg: Settings, spec: Any) -> Any:
        from asyncrl.algos.sac.learner import SACLearner

        return SACLearner(cfg, spec)

    def acting_state(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        # a checkpoint from before checkpoints held "policy": the learner's actor
        if "policy" in checkpoint:
            return checkpoint["policy"]
        return checkpoint["learner"]["sac"]["actor"]


ALGORITHM = SACAlgorithm()
