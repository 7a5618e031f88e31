"""Policy and value networks, and the running observation normaliser they carry.

The normaliser's statistics are buffers of the policy module, so they travel with every
published policy version and every checkpoint: an actor always normalises with exactly the
statistics of the version it acts with, and the learner recomputes log-probs with the same ones.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from asyncrl.envs import EnvSpec

LOG_2PI = math.log(2 * math.pi)


class RunningNorm(nn.Module):
    """Running mean/variance of observations (parallel-merge formula of Chan et al.)."""

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(eps, dtype=torch.float64))
        self.clip = clip
        self.enabled = True

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        b_mean, b_var, b_count = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta = b_mean - self.mean
        total = self.count + b_count
        self.mean += delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta.square() * self.count * b_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        mean, std = self.mean.to(x.dtype), self.var.sqrt().to(x.dtype) + 1e-8
        return torch.clamp((x - mean) / std, -self.clip, self.clip)


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
    """Separate policy and value MLPs over normalised observations.

    Discrete actions: a categorical over logits. Continuous actions: a diagonal Gaussian with a
    state-independent log-std; the sampled (unclipped) action is what log-probs refer to, and the
    env receives it clipped to its bounds.
    """

    def __init__(self, spec: EnvSpec, hidden: list[int], activation: str, norm_obs: bool):
        super().__init__()
        self.discrete = spec.discrete
        self.obs_norm = RunningNorm(spec.obs_shape)
        self.obs_norm.enabled = norm_obs
        sizes = [spec.obs_dim, *hidden]
        self.pi = mlp([*sizes, spec.n_actions], activation, 0.01)
        self.v = mlp([*sizes, 1], activation, 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(spec.n_actions))

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalised, flattened observations: what both MLPs read. The learner computes them
        once per update (the statistics do not move during one) instead of per minibatch."""
        return self.obs_norm(obs).flatten(1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(self.features(obs)).squeeze(-1)

    def dist_params(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(self.features(obs))

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-prob and entropy of ``actions`` under the current policy, and the values."""
        return self.evaluate_features(self.features(obs), actions)

    def evaluate_features(
        self, x: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


def build_policy(spec: EnvSpec, hidden: list[int], activation: str, norm_obs: bool) -> ActorCritic:
    return ActorCritic(spec, list(hidden), activation, norm_obs)


def build_acting_policy(cfg, spec: EnvSpec) -> nn.Module:
    """The module an actor acts with and the learner publishes: PPO's actor-critic (actors also
    need its value head, for truncation bootstraps), or SAC's squashed Gaussian actor."""
    if cfg.algo == "sac":
        from asyncrl.algos.sac import SquashedGaussianActor

        return SquashedGaussianActor(
            spec.obs_dim, spec.n_actions, tuple(cfg.hidden), spec.action_low, spec.action_high
        )
    return build_policy(spec, cfg.hidden, cfg.activation, cfg.norm_obs)


def learner_device(name: str) -> torch.device:
    """The device of ``--device``: ``auto`` is CUDA where torch sees it, else the CPU.
    (``config.validate`` has refused ``cuda`` on a machine without it.)"""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def floating_state(module: nn.Module) -> list[torch.Tensor]:
    """Every floating-point parameter and buffer of ``module``, in state-dict order."""
    return [t for t in module.state_dict(keep_vars=True).values() if t.is_floating_point()]


class FlatParams:
    """All floating-point state of a module (parameters and buffers) as one flat vector.

    This is the unit a policy version is published in: one contiguous float32 copy per version,
    whatever the transport (shared memory here, a network message later). The vector is always
    in CPU memory; a learner on a GPU copies its tensors there when it publishes.
    """

    def __init__(self, module: nn.Module):
        self.tensors = floating_state(module)
        self.numel = sum(t.numel() for t in self.tensors)
        self._vector: np.ndarray | None = None  # the one vector every tensor views, if any

    @classmethod
    def of(cls, tensors: list[torch.Tensor]) -> FlatParams:
        """A flat view over given tensors (state of several modules, as Hogwild! shares it)."""
        flat = cls.__new__(cls)
        flat.tensors = list(tensors)
        flat.numel = sum(t.numel() for t in flat.tensors)
        flat._vector = None
        return flat

    def make_contiguous(self) -> bool:
        """Move the state into one float32 vector of its own (values kept), so that
        ``write_to`` is a single copy; False, and nothing changed, if not all float32 CPU
        tensors."""
        vector = np.empty(self.numel, np.float32)
        self.write_to(vector)
        return self.view_into(vector)

    @torch.no_grad()
    def write_to(self, out: np.ndarray) -> None:
        if self._vector is not None:
            np.copyto(out, self._vector)
            return
        i = 0
        for t in self.tensors:
            n = t.numel()
            out[i : i + n] = t.detach().reshape(-1).to("cpu", torch.float32).numpy()
            i += n

    def view_into(self, flat: np.ndarray) -> bool:
        """Make every tensor a view of ``flat`` (float32 state only): whatever is written there
        is the module's state at once, with no copy. False, and nothing changed, if some tensor
        is not float32 or not in CPU memory."""
        if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in self.tensors):
            return False
        src = torch.from_numpy(flat)
        i = 0
        for t in self.tensors:
            n = t.numel()
            t.data = src[i : i + n].view(t.shape)
            i += n
        self._vector = flat
        return True

    @torch.no_grad()
    def read_from(self, flat: np.ndarray) -> None:
        src = torch.from_numpy(flat)
        i = 0
        for t in self.tensors:
            n = t.numel()
            t.copy_(src[i : i + n].view(t.shape).to(t.dtype))
            i += n
