"""The network an actor acts with, per algorithm: what the learner publishes and an actor (or a
loaded policy) rebuilds to read it. Here rather than in nets.py, which holds the building blocks
and knows no algorithm."""

from __future__ import annotations

from torch import nn

from asyncrl.algos.sac import SquashedGaussianActor
from asyncrl.envs import EnvSpec
from asyncrl.nets import build_policy, choose_encoder, encoder_of, make_encoder


def build_acting_policy(cfg, spec: EnvSpec) -> nn.Module:
    """The module an actor acts with and the learner publishes: PPO's actor-critic (actors also
    need its value head, for truncation bootstraps), or SAC's squashed Gaussian actor."""
    if cfg.algo == "sac":
        return SquashedGaussianActor(
            spec.obs_dim,
            spec.n_actions,
            tuple(cfg.hidden),
            spec.action_low,
            spec.action_high,
            encoder=make_encoder(choose_encoder(encoder_of(cfg), spec), spec, ()),
        )
    return build_policy(spec, cfg.hidden, cfg.activation, cfg.norm_obs, encoder_of(cfg))
