"""DQN (double DQN, target network, Huber loss, linear epsilon, optional n-step returns):
what the runtime asks of it. Light to import; the networks, the learner and torch come with the
first call that needs them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asyncrl.algos.dqn import config
from asyncrl.learning import offpolicy

if TYPE_CHECKING:
    from asyncrl.config import Settings


class DQNAlgorithm(offpolicy.ReplayAlgorithm):
    name = "dqn"
    hyperparameters = config.DQNConfig
    presets = config.PRESETS
    tuned = config.TUNED
    mutable = {"lr": (1e-5, 1e-2, "log")}

    def accepts(self, spec: Any) -> str | None:
        if not spec.discrete:
            return (
                f"dqn needs a discrete action space; {spec.env_id} has "
                f"{spec.n_actions}-dimensional continuous actions"
            )
        if getattr(spec, "seats", ()):  # agents of different spaces (envs.pettingzoo)
            return (
                f"dqn trains one policy on a multi-agent env, and the agents of {spec.env_id} "
                "have different spaces, which need a policy each"
            )
        return None  # a multi-agent env's seats and action masks included

    def validate(self, cfg: Settings) -> None:
        config.validate(cfg)

    def agree(self, cfg: Settings, filled: frozenset[str]) -> dict[str, Any]:
        return config.agree(cfg, filled)

    def acting_module(self, cfg: Settings, spec: Any) -> Any:
        from asyncrl.algos.dqn.networks import QNetwork
        from asyncrl.nets import choose_encoder, encoder_of

        return QNetwork(spec, cfg.hidden, choose_encoder(encoder_of(cfg), spec))

    def acting(self, cfg: Settings, spec: Any, module: Any, generator: Any) -> Any:
        from asyncrl.algos.dqn.acting import DQNActing

        return DQNActing(module, generator)

    def joint_acting(self, actings: list[Any]) -> None:
        return None  # a population's policies act in turn

    def learner(self, cfg: Settings, spec: Any) -> Any:
        from asyncrl.algos.dqn.learner import DQNLearner

        return DQNLearner(cfg, spec)

    def acting_state(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        if "policy" in checkpoint:
            return checkpoint["policy"]
        return checkpoint["learner"]["dqn"]["q"]  # the online network, epsilon included


ALGORITHM = DQNAlgorithm()
