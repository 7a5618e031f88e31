"""DQN's network: action values from the observation encoder (flattened vectors through ReLU
layers, or the Nature CNN for images), and the exploration probability the learner publishes
with every version."""

from __future__ import annotations

import torch
from torch import nn

from asyncrl.envs import EnvSpec
from asyncrl.nets import FlatEncoder, ImageEncoder


class QNetwork(nn.Module):
    """Q(s, .) for every discrete action. ``epsilon`` is a buffer: it travels with each
    published version, so an actor explores with the probability of the version it acts with
    and every sample records it through the version."""

    def __init__(self, spec: EnvSpec, hidden: list[int], encoder: str):
        super().__init__()
        if encoder == "cnn":  # the convolutions, then ``hidden`` linear layers
            self.encoder: nn.Module = ImageEncoder(spec.obs_shape, hidden)
            last = self.encoder.out_dim
            layers: list[nn.Module] = []
        else:
            self.encoder = FlatEncoder(spec.obs_shape)
            last, layers = self.encoder.out_dim, []
            for size in hidden:
                layers += [nn.Linear(last, size), nn.ReLU()]
                last = size
        self.head = nn.Sequential(*layers, nn.Linear(last, spec.n_actions))
        self.register_buffer("epsilon", torch.ones(()))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(obs))

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, deterministic: bool = False, generator: torch.Generator = None
    ) -> tuple[torch.Tensor, None]:
        """The greedy action, or with probability ``epsilon`` a uniformly random one."""
        q = self.forward(obs)
        greedy = q.argmax(-1)
        if deterministic:
            return greedy, None
        n = obs.shape[0]
        explore = torch.rand(n, generator=generator) < self.epsilon
        random = torch.randint(q.shape[-1], (n,), generator=generator)
        return torch.where(explore, random, greedy), None
