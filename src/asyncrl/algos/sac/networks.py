"""SAC's networks: the squashed Gaussian actor, and the twin critics as one batched ensemble."""

from __future__ import annotations

import math

import torch
from torch import nn

from asyncrl.nets import FlatEncoder

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class SquashedGaussianActor(nn.Module):
    """a = low + (tanh(u) + 1) / 2 * (high - low), u ~ N(mu(s), sigma(s)). Log-probs are those
    of the squashed action tanh(u) in [-1, 1] (the tanh's change of variables, not the
    rescaling's): the SAC paper's and SB3's, so that a target entropy of -|A| means the same
    whatever the env's action units (:meth:`unit` gives actions in those coordinates).

    ``encoder`` turns observations into the ``obs_dim`` features the hidden layers read: by
    default they are flattened (as floats); an image encoder (nets.ImageEncoder) for pixels."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        low,
        high,
        encoder: nn.Module | None = None,
    ):
        super().__init__()
        self.encoder = encoder if encoder is not None else FlatEncoder((obs_dim,))
        obs_dim = self.encoder.out_dim
        layers: list[nn.Module] = []
        last = obs_dim
        for h in hidden:
            layers += [nn.Linear(last, h), nn.ReLU()]
            last = h
        self.trunk = nn.Sequential(*layers)
        self.mu = nn.Linear(last, act_dim)
        self.log_std = nn.Linear(last, act_dim)
        # copies: the bounds may be read-only arrays (an env spec Ray deserialised), which
        # torch warns about sharing
        low_t, high_t = (
            torch.tensor(low, dtype=torch.float32),
            torch.tensor(high, dtype=torch.float32),
        )
        self.register_buffer("scale", (high_t - low_t) / 2)
        self.register_buffer("bias", (high_t + low_t) / 2)
        self._log_norm = 0.5 * math.log(2 * math.pi) * act_dim  # Gaussian normaliser

    def forward(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
        with_logp: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = self.trunk(self.encoder(obs))
        # float32 from here (bf16 autocast: only the layers above ran in bfloat16)
        mu = self.mu(x).float()
        log_std = torch.clamp(self.log_std(x).float(), LOG_STD_MIN, LOG_STD_MAX)
        if deterministic:
            u, log_n = mu, -log_std
        else:
            # u = mu + std * eps: the standardised (u - mu) / std is eps itself, a constant
            # (its derivative in mu and std is zero), so take it as it is
            eps = torch.randn(mu.shape, generator=generator, device=mu.device)
            u = mu + eps * log_std.exp()
            log_n = -0.5 * eps.square() - log_std
        if not with_logp:
            return torch.tanh(u) * self.scale + self.bias, None
        # log N(u; mu, std) - log|d a / d u|, with d a / d u = scale * (1 - tanh(u)^2), and
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), numerically stable
        log_det = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
        logp = (log_n - log_det).sum(-1) - self._log_norm
        return torch.tanh(u) * self.scale + self.bias, logp

    def unit(self, a: torch.Tensor) -> torch.Tensor:
        """Actions of the env's space in the [-1, 1] coordinates of tanh(u)."""
        return (a - self.bias) / self.scale

    def log_scale(self) -> torch.Tensor:
        """log|d a / d tanh(u)|: what a log-prob in the env's units has less."""
        return torch.log(self.scale).sum()

    @torch.no_grad()
    def act(self, obs, deterministic: bool = False, generator=None):
        """(action, None): actors and evaluation only need the action, not its log-prob."""
        return self.forward(obs, deterministic, generator, with_logp=False)


class QEnsemble(nn.Module):
    """``n`` Q networks over (obs, action) evaluated as one: weights [n, in, out]. An
    ``encoder`` (for pixels: nets.ImageEncoder) is shared by the ``n`` members; by default
    observations are flattened."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        n: int = 2,
        encoder: nn.Module | None = None,
    ):
        super().__init__()
        self.encoder = encoder if encoder is not None else FlatEncoder((obs_dim,))
        sizes = [self.encoder.out_dim + act_dim, *hidden, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            # nn.Linear's default init, per member
            bound = 1 / math.sqrt(fan_in)
            self.weights.append(
                nn.Parameter(torch.empty(n, fan_in, fan_out).uniform_(-bound, bound))
            )
            self.biases.append(nn.Parameter(torch.empty(n, 1, fan_out).uniform_(-bound, bound)))

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor, frozen: bool = False
    ) -> torch.Tensor:
        """Q values [n, B]. ``frozen``: with detached weights, so that gradients reach the
        inputs (the action) but never the critic.

        Computed feature-major, activations [n, h, B] = W^T x^T, which suits the one-unit
        output layer and the small input layer: whole updates ran ~2% faster than with
        [n, B, h] activations (A/B on HalfCheetah sizes, same values; the critic's passes alone,
        in a hot loop, 15-30%). The weights are stored [n, in, out] all the same.
        """
        if frozen:  # nor to the encoder: its features do not depend on the action
            with torch.no_grad():
                features = self.encoder(obs)
        else:
            features = self.encoder(obs)
        x = torch.cat([features, action], -1).T
        x = x.unsqueeze(0).expand(self.weights[0].shape[0], -1, -1)  # [n, in, B]
        layers = list(zip(self.weights, self.biases, strict=True))
        if frozen:
            layers = [(w.detach(), b.detach()) for w, b in layers]
        last = len(layers) - 1
        for i, (w, b) in enumerate(layers):
            x = torch.baddbmm(b.mT, w.mT, x)
            if i < last:
                x = torch.relu(x)
        return x.squeeze(1).float()  # float32 Q values under a bf16 autocast too
