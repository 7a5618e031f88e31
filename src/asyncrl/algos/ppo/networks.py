"""PPO's network: separate policy and value MLPs over normalised observations, or one image
encoder shared by linear policy and value heads."""

from __future__ import annotations

import math

import torch
from torch import nn

from asyncrl.envs import EnvSpec
from asyncrl.nets import LOG_2PI, ImageEncoder, RunningNorm, as_float, choose_encoder


def mlp(sizes: list[int], activation: str, out_gain: float) -> nn.Sequential:
    act = {"tanh": nn.Tanh, "relu": nn.ReLU}[activation]
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        nn.init.orthogonal_(lin.weight, out_gain if last else math.sqrt(2))
        nn.init.zeros_(lin.bias)
        layers.append(lin)
        if not last:
            layers.append(act())
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Separate policy and value MLPs over normalised observations (``encoder`` mlp), or one
    image encoder shared by a linear policy head and a linear value head (``encoder`` cnn, as
    CleanRL's Atari agent; ``hidden`` are then the encoder's linear layers after its
    convolutions).

    Discrete actions: a categorical over logits. Continuous actions: a diagonal Gaussian with a
    state-independent log-std; the sampled (unclipped) action is what log-probs refer to, and the
    env receives it clipped to its bounds.
    """

    recurrent = False  # a feed-forward policy: no state between steps

    def __init__(
        self,
        spec: EnvSpec,
        hidden: list[int],
        activation: str,
        norm_obs: bool,
        encoder: str = "auto",
    ):
        super().__init__()
        self.discrete = spec.discrete
        self.encoder_kind = choose_encoder(encoder, spec)
        if self.encoder_kind == "cnn":
            if norm_obs:
                raise ValueError("norm_obs: images are scaled by 1/255, not normalised")
            self.obs_norm = None
            self.encoder = ImageEncoder(spec.obs_shape, hidden)
            sizes = [self.encoder.out_dim]
        else:
            self.obs_norm = RunningNorm(spec.obs_shape)
            self.obs_norm.enabled = norm_obs
            self.encoder = None
            sizes = [spec.obs_dim, *hidden]
        self.pi = mlp([*sizes, spec.n_actions], activation, 0.01)
        self.v = mlp([*sizes, 1], activation, 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(spec.n_actions))

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """What the trainable layers read, computed once per update by the learner (it does not
        change during one) instead of per minibatch: normalised, flattened observations for the
        MLPs; the observations themselves, in their own dtype, for the image encoder (which
        trains, so it runs per minibatch)."""
        if self.encoder is not None:
            return obs
        return self.obs_norm(as_float(obs)).flatten(1)

    def _trunk(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.encoder is None else self.encoder(x)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(self._trunk(self.features(obs))).squeeze(-1)

    def dist_params(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(self._trunk(self.features(obs)))

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-prob and entropy of ``actions`` under the current policy, and the values."""
        return self.evaluate_features(self.features(obs), actions)

    def evaluate_features(
        self, x: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self._trunk(x)
        out = self.pi(x)
        value = self.v(x).squeeze(-1)
        if self.discrete:
            logits = out.log_softmax(-1)
            logp = logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logits.exp() * logits).sum(-1)
        else:
            log_std = self.log_std.expand_as(out)
            z = (actions - out) * torch.exp(-log_std)
            logp = (-0.5 * z.square() - log_std - 0.5 * LOG_2PI).sum(-1)
            entropy = (log_std + 0.5 * (1.0 + LOG_2PI)).sum(-1)
        return logp, entropy, value

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample actions and their log-probs (no value: actors do not need it per step)."""
        out = self.dist_params(obs)
        if self.discrete:
            logits = out.log_softmax(-1)
            if deterministic:
                a = logits.argmax(-1)
            else:
                a = torch.multinomial(logits.exp(), 1, generator=generator).squeeze(-1)
            return a, logits.gather(-1, a.unsqueeze(-1)).squeeze(-1)
        log_std = self.log_std.expand_as(out)
        if deterministic:
            return out, (-log_std - 0.5 * LOG_2PI).sum(-1)
        noise = torch.randn(out.shape, generator=generator, device=out.device)
        a = out + noise * log_std.exp()
        return a, (-0.5 * noise.square() - log_std - 0.5 * LOG_2PI).sum(-1)


def build_policy(
    spec: EnvSpec,
    hidden: list[int],
    activation: str,
    norm_obs: bool,
    encoder: str = "auto",
    recurrent: str = "none",
    rnn_size: int = 128,
) -> ActorCritic:
    if recurrent != "none":
        from asyncrl.algos.ppo.rnn import RecurrentActorCritic

        return RecurrentActorCritic(
            spec, list(hidden), activation, norm_obs, encoder, recurrent, rnn_size
        )
    return ActorCritic(spec, list(hidden), activation, norm_obs, encoder)
