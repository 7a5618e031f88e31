"""PPO (with V-trace and the decoupled clip as lag corrections): what the runtime asks of it.
Light to import; the networks, the learner and torch come with the first call that needs
them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asyncrl.algos.ppo import config

if TYPE_CHECKING:
    from asyncrl.config import Settings


class PPOAlgorithm:
    name = "ppo"
    hyperparameters = config.PPOConfig
    presets = config.PRESETS
    precisions = ("fp32", "bf16")  # --precision: its update autocasts to bfloat16
    tuned = config.TUNED
    fixed_on_resume = config.FIXED_ON_RESUME
    derive_markers: dict[str, Any] = {"compile": None, "recurrence": 0}
    # PBT's perturbations stay within these (docs: Guides, populations)
    mutable = {
        "lr": (1e-5, 1e-2, "log"),
        "ent_coef": (0.0, 0.05, "linear"),
        "clip_coef": (0.05, 0.5, "linear"),
        "gamma": (0.9, 0.9999, "complement"),
        "gae_lambda": (0.5, 0.999, "complement"),
    }
    masked_slots = True  # its learner keeps a slot's own samples (see PPOLearner.train)

    def accepts(self, spec: Any) -> str | None:
        return None  # Discrete and 1-D Box actions, as every spec is

    def validate(self, cfg: Settings) -> None:
        config.validate(cfg)

    def agree(self, cfg: Settings, filled: frozenset[str]) -> dict[str, Any]:
        return config.agree(cfg, filled)

    def derived(self, cfg: Settings) -> dict[str, Any]:
        return config.derived(cfg)

    def switch_values(self, cfg: Settings, filled: frozenset[str]) -> tuple[str, dict[str, Any]]:
        return config.switch_values(cfg, filled)

    def for_env(
        self, cfg: Settings, spec: Any, given: Settings | None
    ) -> tuple[dict[str, Any], list[str]]:
        return config.for_env(cfg, spec, given)

    def slot_fields(
        self, spec: Any, rollout: int, num_envs: int, cfg: Settings | None = None
    ) -> tuple:
        from asyncrl.algos.ppo.acting import slot_fields

        return slot_fields(spec, rollout, num_envs, cfg)

    def memory_note(self, cfg: Settings, spec: Any) -> str | None:
        return config.memory_note(cfg)

    def acting_module(self, cfg: Settings, spec: Any) -> Any:
        from asyncrl.algos.ppo.networks import build_policy
        from asyncrl.nets import encoder_of

        return build_policy(
            spec,
            cfg.hidden,
            cfg.activation,
            cfg.norm_obs,
            encoder_of(cfg),
            cfg.recurrent,
            cfg.rnn_size,
            cfg.norm_obs_min_std,
            cfg.norm_obs_keep_sparse,
        )

    def acting(self, cfg: Settings, spec: Any, module: Any, generator: Any) -> Any:
        import numpy as np

        from asyncrl.algos.ppo.acting import PPOActing

        chunk = config.recurrence(cfg) if cfg.recurrent != "none" else 0
        return PPOActing(module, generator, np.dtype(spec.obs_dtype), chunk)

    def joint_acting(self, actings: list[Any]) -> Any:
        from asyncrl.algos.ppo.acting import JointPPOActing

        return JointPPOActing.of(actings)

    def learner(self, cfg: Settings, spec: Any) -> Any:
        from asyncrl.algos.ppo.learner import PPOLearner

        return PPOLearner(cfg, spec)

    def acting_state(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        # a checkpoint from before checkpoints held "policy": the learner's own
        return checkpoint["policy"] if "policy" in checkpoint else checkpoint["learner"]["policy"]


ALGORITHM = PPOAlgorithm()
