"""PPO's networks: separate policy and value MLPs over normalised observations, or one image
encoder shared by linear policy and value heads; and the recurrent one, the same encoders with
an LSTM or GRU core under linear policy and value heads (CleanRL's ``ppo_atari_lstm``, Sample
Factory's default layout).

A recurrent hidden state is one float32 tensor ``[batch, S, rnn_size]`` (S = 2 for an LSTM: h
and c; 1 for a GRU), in the same layout wherever it is kept: an actor's envs, a slot's chunk
starts, the Python API. Zeros are the state at an episode's start.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from asyncrl.algos.ppo.config import state_rows
from asyncrl.algos.ppo.masked_rnn import masked_gru
from asyncrl.envs import EnvSpec
from asyncrl.nets import LOG_2PI, ImageEncoder, RunningNorm, as_float, choose_encoder

MASKED_LOGIT = -1e9  # an illegal action's logit: probability 0, and 0 x logit = 0 in entropies


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

    With an action mask (``spec.action_mask``: the observation's last ``n_actions`` entries,
    1 where legal), the MLPs read the observation without it and illegal actions' logits are
    set to MASKED_LOGIT, when acting and in the loss alike.
    """

    recurrent = False  # a feed-forward policy: no state between steps
    n_mask = 0  # the mask's entries at the end of each observation (0: none)

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
            self.n_mask = spec.n_actions if getattr(spec, "action_mask", False) else 0
            sizes = [spec.obs_dim - self.n_mask, *hidden]
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
        raw = as_float(obs)
        x = self.obs_norm(raw).flatten(1)
        if self.n_mask:  # the mask as it came, not normalised
            x = torch.cat([x[:, : -self.n_mask], raw.flatten(1)[:, -self.n_mask :]], 1)
        return x

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Features as the layers read them, and the legal actions (None: no mask)."""
        if not self.n_mask:
            return x, None
        return x[:, : -self.n_mask], x[:, -self.n_mask :] > 0

    def _trunk(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.encoder is None else self.encoder(x)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(self._trunk(self._split(self.features(obs))[0])).squeeze(-1)

    def dist_params(self, obs: torch.Tensor) -> torch.Tensor:
        x, legal = self._split(self.features(obs))
        return _masked(self.pi(self._trunk(x)), legal)

    def log_prob_entropy(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-prob and entropy of ``actions`` under the current policy, and the values."""
        return self.evaluate_features(self.features(obs), actions)

    def evaluate_features(
        self, x: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, legal = self._split(x)
        x = self._trunk(x)
        # the heads' outputs in float32 (bf16 autocast: the layers ran in bfloat16), so that
        # log-probs, ratios and losses are float32 reductions
        out = _masked(self.pi(x).float(), legal)
        value = self.v(x).squeeze(-1).float()
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


def _masked(logits: torch.Tensor, legal: torch.Tensor | None) -> torch.Tensor:
    return logits if legal is None else logits.masked_fill(~legal, MASKED_LOGIT)


def build_policy(
    spec: EnvSpec,
    hidden: list[int],
    activation: str,
    norm_obs: bool,
    encoder: str = "auto",
    recurrent: str = "none",
    rnn_size: int = 128,
    norm_obs_min_std: float = 0.0,
    norm_obs_keep_sparse: bool = False,
) -> ActorCritic:
    if recurrent != "none":
        policy: ActorCritic = RecurrentActorCritic(
            spec, list(hidden), activation, norm_obs, encoder, recurrent, rnn_size
        )
    else:
        policy = ActorCritic(spec, list(hidden), activation, norm_obs, encoder)
    if policy.obs_norm is not None:
        policy.obs_norm.min_std = norm_obs_min_std
        policy.obs_norm.keep_sparse = norm_obs_keep_sparse
    return policy


# ---------------------------------------------------------------- recurrent
CORES = {"lstm": nn.LSTM, "gru": nn.GRU}
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class RecurrentActorCritic(ActorCritic):
    """An :class:`ActorCritic` whose heads read a recurrent core's output. It keeps the parent's
    ``features`` (normalised observations, or images as they are) and its distribution math
    (``evaluate_features`` and ``act`` run on the core's output: ``_trunk`` is the identity)."""

    recurrent = True

    def __init__(
        self,
        spec: EnvSpec,
        hidden: list[int],
        activation: str,
        norm_obs: bool,
        encoder: str,
        kind: str,
        size: int,
    ):
        nn.Module.__init__(self)
        self.discrete = spec.discrete
        self.kind, self.size = kind, size
        self.state_shape = (state_rows(kind), size)
        self.encoder_kind = choose_encoder(encoder, spec)
        if self.encoder_kind == "cnn":
            if norm_obs:
                raise ValueError("norm_obs: images are scaled by 1/255, not normalised")
            self.obs_norm = None
            self.encoder = ImageEncoder(spec.obs_shape, hidden)  # features() keeps images
            self.torso = None
            width = self.encoder.out_dim
        else:
            self.obs_norm = RunningNorm(spec.obs_shape)
            self.obs_norm.enabled = norm_obs
            self.encoder = None  # features() normalises and flattens
            self.torso = nn.Sequential(
                mlp([spec.obs_dim, *hidden], activation, math.sqrt(2)), ACTIVATIONS[activation]()
            )
            width = hidden[-1]
        self.core = CORES[kind](width, size)
        for name, p in self.core.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(p, 1.0)
            else:
                nn.init.zeros_(p)
        self.pi = mlp([size, spec.n_actions], activation, 0.01)
        self.v = mlp([size, 1], activation, 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(spec.n_actions))

    def initial_state(self, n: int) -> torch.Tensor:
        return torch.zeros(n, *self.state_shape)

    def _trunk(self, x: torch.Tensor) -> torch.Tensor:
        return x  # the heads read the core's output

    def dist_params(self, x: torch.Tensor) -> torch.Tensor:
        return self.pi(x)  # as the parent's act calls it: on the core's output

    def log_prob_entropy(self, obs, actions):  # type: ignore[override]
        raise TypeError("a recurrent policy evaluates sequences: evaluate_sequences")

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Features (``features(obs)``) of a flat batch to the core's input."""
        return self.encoder(x) if self.encoder is not None else self.torso(x)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of B envs: features [B, ...] and states [B, S, H] to the core's output
        [B, H] and the next states."""
        out, hx = run_core(self.core, self.encode(x)[None], _hx(state, self.kind))
        return out[0], _state(hx, self.kind)

    @torch.no_grad()
    def act(  # type: ignore[override]
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
        state: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Actions, their log-probs and the next states of a batch of envs in ``state`` (None:
        all at an episode's start)."""
        if state is None:
            state = self.initial_state(obs.shape[0])
        out, state = self.step(self.features(obs), state)
        action, logp = super().act(out, deterministic, generator)
        return action, logp, state

    @torch.no_grad()
    def value(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """V(obs) of envs whose core is in ``state`` before reading obs."""
        out, _ = self.step(self.features(obs), state)
        return self.v(out).squeeze(-1)

    def unroll(
        self, x: torch.Tensor, state: torch.Tensor, first: torch.Tensor, final_state: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The core over sequences: features [L, B, ...] from states [B, S, H], the state set to
        zeros before every step where ``first`` [L, B] is true (an episode starts there; row 0
        is not read: a stored state is already reset). Returns the outputs [L, B, H] and the
        final states (None unless ``final_state``)."""
        L, B = first.shape
        z = self.encode(x.flatten(0, 1)).view(L, B, -1)
        return unroll_core(self.core, self.kind, z, state, first, final_state)

    def evaluate_sequences(
        self, x: torch.Tensor, actions: torch.Tensor, state: torch.Tensor, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probs and entropies of ``actions`` [L, B, ...] and the values, each [L, B]."""
        out, _ = self.unroll(x, state, first, final_state=False)
        flat = actions.flatten(0, 1)
        logp, entropy, value = self.evaluate_features(out.flatten(0, 1), flat)
        L, B = first.shape
        return logp.view(L, B), entropy.view(L, B), value.view(L, B)


def unroll_core(
    core: nn.Module,
    kind: str,
    z: torch.Tensor,
    state: torch.Tensor,
    first: torch.Tensor,
    final_state: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``core`` over inputs z [L, B, E] with resets where ``first`` (see ``unroll``). A GRU on
    the CPU: :func:`~asyncrl.algos.ppo.masked_rnn.masked_gru` (torch's CPU GRU is a cell of ~20
    autograd ops a step; this one cost a recurrent update ~25% less). Else
    :func:`unroll_segments`."""
    if kind == "gru" and z.device.type == "cpu":
        out, final = masked_gru(core, z, state, first)
        return out, final if final_state else None
    return unroll_segments(core, kind, z, state, first, final_state)


def unroll_segments(
    core: nn.Module,
    kind: str,
    z: torch.Tensor,
    state: torch.Tensor,
    first: torch.Tensor,
    final_state: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`unroll_core` with torch's own core. Where no episode starts inside the sequences:
    one call. Else each sequence is cut at its episode starts into segments, run as one call
    over the segments side by side, padded at their ends: packed (as Sample Factory does) where
    the final states are needed, else as they are (the padding after a segment cannot change
    its outputs; packing cost the update 1.6 ms per minibatch of 16 x 16 steps on the CPU)."""
    L, B = first.shape
    starts = first.clone()
    starts[0] = True
    if not bool(first[1:].any()):
        out, hx = run_core(core, z, _hx(state, kind))
        return out, _state(hx, kind) if final_state else None
    by_env = starts.t().reshape(-1)  # [B * L], env-major: segments in order
    seg_b, seg_t = by_env.view(B, L).nonzero(as_tuple=True)
    n = seg_b.shape[0]
    seg_of = by_env.long().cumsum(0).sub_(1).view(B, L)  # segment of each (b, t)
    nxt = torch.full_like(seg_t, L)
    same = seg_b[1:] == seg_b[:-1]
    nxt[:-1] = torch.where(same, seg_t[1:], nxt[:-1])
    lengths = nxt - seg_t
    longest = int(lengths.max())
    k = torch.arange(longest, device=z.device)
    rows = (seg_t[None, :] + k[:, None]).clamp_(max=L - 1)
    padded = z.reshape(L * B, -1)[rows * B + seg_b[None, :]]  # [longest, n, E]
    h0 = state[seg_b] * (seg_t == 0).to(state.dtype)[:, None, None]  # zeros after a reset
    if final_state:
        packed = pack_padded_sequence(padded, lengths.cpu(), enforce_sorted=False)
        # at the learner's threads: torch's packed CPU LSTM (not oneDNN's) rounds by their count
        out, hx = core(packed, _hx(h0, kind))
        out, _ = pad_packed_sequence(out, total_length=longest)  # [longest, n, H]
    else:  # padding follows each segment's steps, so it cannot reach their outputs
        out, hx = run_core(core, padded, _hx(h0, kind))
    t = torch.arange(L, device=z.device)
    pos = (t[None, :] - seg_t[seg_of]) * n + seg_of  # [B, L] into out's [longest * n] rows
    result = out.reshape(longest * n, -1)[pos.t().reshape(-1)].view(L, B, -1)
    if not final_state:
        return result, None
    return result, _state(hx, kind)[seg_of[:, -1]]


def run_core(core: nn.Module, x: torch.Tensor, hx):
    """``core(x, hx)`` on one torch thread, forward and backward (the learner's other layers
    keep theirs). oneDNN's CPU LSTM splits every time step's small matmuls across threads, one
    barrier per step: on 2 shared cores an LSTM(512, 128) over 128 x 2 steps took 3-30x the
    wall time it takes on one (docs/benchmarks/learner-floor.md). Same bits on any count (not
    so for packed sequences, which do not come here)."""
    threads = torch.get_num_threads()
    if threads == 1 or x.device.type != "cpu":
        return core(x, hx)
    # both marks or neither: one whose input needs no gradient would never run its backward
    grad = torch.is_grad_enabled() and x.requires_grad
    if grad:
        x = _SetThreads.apply(x, threads)  # its backward: after the core's, back to all
    torch.set_num_threads(1)
    try:
        out, hx = core(x, hx)
    finally:
        torch.set_num_threads(threads)
    if grad:
        out = _SetThreads.apply(out, 1)  # its backward: before the core's, one thread
    return out, hx


class _SetThreads(torch.autograd.Function):
    """The identity, whose backward sets torch's thread count to ``threads`` (the backward of
    what follows it in the forward runs before that, of what precedes it after)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, threads: int) -> torch.Tensor:
        ctx.threads = threads
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        torch.set_num_threads(ctx.threads)
        return grad, None


def _hx(state: torch.Tensor, kind: str):
    """[B, S, H] to what torch's cores take: (h, c) of [1, B, H] each, or h."""
    if kind == "lstm":
        return state[:, 0][None].contiguous(), state[:, 1][None].contiguous()
    return state[:, 0][None].contiguous()


def _state(hx, kind: str) -> torch.Tensor:
    """What torch's cores return, as [B, S, H]."""
    if kind == "lstm":
        return torch.stack([hx[0][0], hx[1][0]], 1)
    return hx[0][:, None]
