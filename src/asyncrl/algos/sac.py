"""Soft Actor-Critic (Haarnoja et al. 2018, with automatic temperature): the update rule alone.

Read top to bottom: the squashed Gaussian actor, the twin critics as one batched ensemble, then
one gradient step (critic, actor, temperature, Polyak). Tensors in, statistics out as tensors:
no processes, no logging, no host synchronisation inside an update.

Cost is what matters here (the update is the bottleneck of SAC on a CPU), so:
* both Q networks run as one ensemble: weights stacked [2, in, out], one batched matmul a layer,
  computed feature-major (see QEnsemble.forward);
* the actor loss reads Q with *detached* critic weights, so its backward pass never computes
  gradients for the critic;
* Adam steps are fused kernels; the Polyak update is one ``_foreach`` call; the temperature's
  gradient is written down (it is one mean), not back-propagated.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from asyncrl.nets import FlatEncoder, floating_state

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


@dataclass
class SACConfig:
    gamma: float = 0.99
    tau: float = 0.005
    policy_lr: float = 3e-4
    q_lr: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    target_entropy: float | None = None  # default: -action_dim


def _fused_adam(params, lr: float) -> torch.optim.Adam:
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, foreach=True)


class SquashedGaussianActor(nn.Module):
    """a = low + (tanh(u) + 1) / 2 * (high - low), u ~ N(mu(s), sigma(s)); log-probs carry the
    change-of-variables correction of both the tanh and the affine rescaling.

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
        mu = self.mu(x)
        log_std = torch.clamp(self.log_std(x), LOG_STD_MIN, LOG_STD_MAX)
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
        # minus the parts that do not depend on s: the normaliser and the affine rescaling's
        # log|scale| (read from the buffer, which a loaded state dict may change)
        logp = (log_n - log_det).sum(-1) - (self._log_norm + torch.log(self.scale).sum())
        return torch.tanh(u) * self.scale + self.bias, logp

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
        return x.squeeze(1)


class SAC:
    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        low,
        high,
        cfg: SACConfig,
        device: str | torch.device = "cpu",
        generator: torch.Generator | None = None,
        encoder: Callable[[], nn.Module] | None = None,
    ):
        """``encoder()`` makes a fresh observation encoder (one for the actor, one shared by the
        critics, one for the target critics); None: observations are flattened vectors of
        ``obs_dim``."""
        self.cfg = cfg
        # draws the policy's samples in updates (None: torch's global generator); a learner
        # passes its own, so that training leaves the global random state alone
        self.generator = generator
        # initialised on the CPU, then moved: the same initial networks on any device
        enc = encoder or (lambda: None)
        self.actor = SquashedGaussianActor(
            obs_dim, act_dim, cfg.hidden, low, high, encoder=enc()
        ).to(device)
        self.q = QEnsemble(obs_dim, act_dim, cfg.hidden, encoder=enc()).to(device)
        self.q_target = QEnsemble(obs_dim, act_dim, cfg.hidden, encoder=enc()).to(device)
        self.q_target.load_state_dict(self.q.state_dict())
        self.q_target.requires_grad_(False)
        self.log_alpha = torch.zeros((), device=device, requires_grad=True)
        self.target_entropy = -float(act_dim) if cfg.target_entropy is None else cfg.target_entropy
        self.q_opt = _fused_adam(self.q.parameters(), cfg.q_lr)
        self.actor_opt = _fused_adam(self.actor.parameters(), cfg.policy_lr)
        self.alpha_opt = _fused_adam([self.log_alpha], cfg.policy_lr)
        self._q_params = list(self.q.parameters())
        self._target_params = list(self.q_target.parameters())

    @torch.no_grad()
    def critic_target(self, b: dict[str, torch.Tensor], alpha: torch.Tensor) -> torch.Tensor:
        """r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s')."""
        next_a, next_logp = self.actor(b["next_obs"], generator=self.generator)
        next_q = self.q_target(b["next_obs"], next_a).min(0).values - alpha * next_logp
        return b["reward"] + self.cfg.gamma * (1.0 - b["terminated"]) * next_q

    def update(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        """One gradient step on a batch (obs, action, reward, next_obs, terminated).

        Returns [critic loss, actor loss, alpha, entropy estimate, mean Q] as one tensor.
        A truncated transition bootstraps like any other (its next_obs is the final obs);
        only ``terminated`` cuts the target.
        """
        cfg = self.cfg
        alpha = self.log_alpha.detach().exp()
        # --- critic
        target = self.critic_target(b, alpha)
        q = self.q(b["obs"], b["action"])
        q_loss = 0.5 * (q - target).square().mean(1).sum()
        self.q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        self.q_opt.step()
        # --- actor: alpha log pi(a|s) - min_i Q_i(s, a), critic weights detached
        a, logp = self.actor(b["obs"], generator=self.generator)
        q_pi = self.q(b["obs"], a, frozen=True).min(0).values
        actor_loss = (alpha * logp - q_pi).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        # --- temperature: keep the policy's entropy near target_entropy. The loss
        # -log_alpha * mean(log pi + target_entropy) has the gradient -mean(log pi + target_entropy)
        logp = logp.detach()
        self.log_alpha.grad = -(logp + self.target_entropy).mean()
        self.alpha_opt.step()
        # --- Polyak averaging of the target critics
        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._q_params, cfg.tau)
        return torch.stack(
            [q_loss.detach(), actor_loss.detach(), alpha, -logp.mean(), q.detach().mean()]
        )

    def state_tensors(self) -> list[torch.Tensor]:
        """Every float an update changes: actor, critics, target critics and log-temperature."""
        return [
            *floating_state(self.actor),
            *floating_state(self.q),
            *floating_state(self.q_target),
            self.log_alpha,
        ]

    STATS = ("loss/q", "loss/actor", "charts/alpha", "charts/entropy", "charts/q_mean")

    def state_dict(self) -> dict:
        extra = {} if self.generator is None else {"generator": self.generator.get_state()}
        return {
            **extra,
            "actor": self.actor.state_dict(),
            "q": self.q.state_dict(),
            "q_target": self.q_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "q_opt": self.q_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        if self.generator is not None and "generator" in state:  # older checkpoints: none
            self.generator.set_state(state["generator"])
        self.actor.load_state_dict(state["actor"])
        self.q.load_state_dict(state["q"])
        self.q_target.load_state_dict(state["q_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        # Optimizer.load_state_dict keeps tensors that already match in dtype and device: copy,
        # or loading a live state dict would make two SACs share their Adam moments.
        self.q_opt.load_state_dict(copy.deepcopy(state["q_opt"]))
        self.actor_opt.load_state_dict(copy.deepcopy(state["actor_opt"]))
        self.alpha_opt.load_state_dict(copy.deepcopy(state["alpha_opt"]))
