"""DQN's network: action values from the observation encoder (flattened vectors through ReLU
layers, or the Nature CNN for images), the exploration probability the learner publishes with
every version, and, where the env has an action mask, only legal actions chosen."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from asyncrl.envs import EnvSpec
from asyncrl.nets import FlatEncoder, ImageEncoder


class QNetwork(nn.Module):
    """Q(s, .) for every discrete action. ``epsilon`` is a buffer: it travels with each
    published version, so an actor explores with the probability of the version it acts with
    and every sample records it through the version.

    With an action mask (``spec.action_mask``: the observation's last ``n_actions`` entries, 1
    where legal; flat observations only), the layers read the observation without it, and
    greedy and random actions alike are drawn among the legal ones (:meth:`legal`)."""

    n_mask = 0  # the mask's entries at the end of each observation (0: none)

    def __init__(self, spec: EnvSpec, hidden: list[int], encoder: str):
        super().__init__()
        if getattr(spec, "action_mask", False):
            if encoder == "cnn":
                raise ValueError("encoder: an action mask comes with flat observations (mlp)")
            self.n_mask = spec.n_actions
        if encoder == "cnn":  # the convolutions, then ``hidden`` linear layers
            self.encoder: nn.Module = ImageEncoder(spec.obs_shape, hidden)
            last = self.encoder.out_dim
            layers: list[nn.Module] = []
        else:
            self.encoder = FlatEncoder(spec.obs_shape)
            last, layers = self.encoder.out_dim - self.n_mask, []
            for size in hidden:
                layers += [nn.Linear(last, size), nn.ReLU()]
                last = size
        self.head = nn.Sequential(*layers, nn.Linear(last, spec.n_actions))
        self.register_buffer("epsilon", torch.ones(()))
        # per layer of the head, a Linear's live parameter dict (None: a ReLU), for _values
        self._layers = [m._parameters if isinstance(m, nn.Linear) else None for m in self.head]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self._values(self.encoder(obs))

    def _values(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, : -self.n_mask] if self.n_mask else x
        # the layers' own ops (linear, relu) called directly, the parameters read from each
        # Linear's dict: the same ops and bits without nn.Module's call and attribute machinery
        # (no hooks are set here), half of an actor's act on one observation (docs: DQN)
        for params in self._layers:
            x = torch.relu(x) if params is None else F.linear(x, params["weight"], params["bias"])
        return x

    def legal(self, obs: torch.Tensor) -> torch.Tensor | None:
        """[N, A] True where an action is legal (None: no mask; see :func:`legal_actions`)."""
        return legal_actions(self.encoder(obs)[:, -self.n_mask :]) if self.n_mask else None

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, deterministic: bool = False, generator: torch.Generator = None
    ) -> tuple[torch.Tensor, None]:
        """The greedy action, or with probability ``epsilon`` a uniformly random one (with a
        mask: the greedy legal action, or one drawn uniformly among the legal ones)."""
        if not self.n_mask and not deterministic:
            return self._explore_first(obs, generator), None
        x = self.encoder.forward(obs)  # once: the values and the mask both read it
        q = self._values(x)
        legal = legal_actions(x[:, -self.n_mask :]) if self.n_mask else None
        greedy = masked_argmax(q, legal)
        if deterministic:
            return greedy, None
        # with a mask (else _explore_first): the k-th legal action, k uniform among the legal
        n = obs.shape[0]
        explore = torch.rand(n, generator=generator) < self.epsilon
        count = legal.sum(-1)
        k = (torch.rand(n, generator=generator) * count).long().clamp(max=count - 1)
        random = (legal.cumsum(-1) <= k[:, None]).sum(-1)
        return torch.where(explore, random, greedy), None

    def _explore_first(self, obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """:meth:`act` without a mask, the same draws in the same order and the same actions,
        the values computed only where a row does not explore (none while epsilon is 1)."""
        n = obs.shape[0]
        draw = torch.rand(n, generator=generator)
        random = torch.randint(self.head[-1].out_features, (n,), generator=generator)
        if n == 1:  # one env: Python's comparison of the two float32 values, not two more ops
            if draw.item() < self.epsilon.item():
                return random
            return self._values(self.encoder.forward(obs)).argmax(-1)
        explore = draw < self.epsilon
        if bool(explore.all()):
            return random
        return torch.where(explore, random, self._values(self.encoder.forward(obs)).argmax(-1))


def legal_actions(mask: torch.Tensor) -> torch.Tensor:
    """[N, A] True where an action is legal, from an observation's mask entries (1: legal). A
    row with no legal action (a seat that waits) allows every action: its value is then the
    unmasked one."""
    legal = mask > 0
    return legal | ~legal.any(-1, keepdim=True)


def masked_argmax(q: torch.Tensor, legal: torch.Tensor | None) -> torch.Tensor:
    """The action of the highest value among the legal ones (``legal`` None: all)."""
    if legal is None:
        return q.argmax(-1)
    return q.masked_fill(~legal, float("-inf")).argmax(-1)
