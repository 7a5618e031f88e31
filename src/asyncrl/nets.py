"""Policy and value networks, the image encoder they put in front of pixels, and the running
observation normaliser they carry.

Observations reach a network in the env's own dtype: uint8 frames travel and rest as uint8 (a
quarter of float32's bytes in every slot and replay buffer) and become floats in [0, 1] only in
the network's first layer (:func:`as_float`).

The normaliser's statistics are buffers of the policy module, so they travel with every
published policy version and every checkpoint: an actor always normalises with exactly the
statistics of the version it acts with, and the learner recomputes log-probs with the same ones.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from asyncrl.envs import EnvSpec
from asyncrl.envs.spec import is_image

LOG_2PI = math.log(2 * math.pi)

# The Nature-DQN torso (Mnih et al. 2015), as CleanRL's and Sample Factory's Atari agents have
# it: (out channels, kernel, stride). It needs images of at least 36 x 36 pixels.
NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
# Images smaller than that (test tasks, small grid worlds): two 3x3 stride-1 layers, which keep
# the detail a few pixels carry.
SMALL_CONVS = ((16, 3, 1), (32, 3, 1))
NATURE_MIN_SIDE = 36


def autocast(precision: str, device: torch.device | str) -> Any:
    """Where an update's matrix products run in ``precision`` (``--precision``): bf16, a
    bfloat16 autocast (weights, gradients' accumulation in the optimizer and everything but
    the matmuls and convolutions stay float32); fp32, nothing changes."""
    if precision == "bf16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def choose_encoder(name: str, spec: EnvSpec) -> str:
    """The encoder ``--encoder`` names: ``auto`` is ``cnn`` for image observations (uint8,
    rank 3), ``mlp`` for anything else."""
    if name == "auto":
        return "cnn" if is_image(spec) else "mlp"
    return name


def channels_last(shape: tuple[int, ...]) -> bool:
    """Whether a rank-3 image is height x width x channels (HWC, as RGB frames come) rather than
    channels x height x width (CHW, as stacked frames come: the stack is the channel axis). An
    image has fewer channels than pixels on a side, so the smaller end axis holds the channels;
    a tie is read as CHW."""
    return shape[-1] < shape[0]


def as_float(obs: torch.Tensor) -> torch.Tensor:
    """The network's view of observations: uint8 pixels scaled to [0, 1], floats as they are.
    This is where uint8 observations stop being uint8."""
    if obs.dtype == torch.uint8:
        return obs.float().mul_(1.0 / 255.0)
    return obs.float() if obs.dtype != torch.float32 else obs


class FlatEncoder(nn.Module):
    """Observations flattened to vectors (as floats): the MLP path. No parameters."""

    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        self.out_dim = int(np.prod(obs_shape))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return as_float(obs).flatten(1)


class ImageEncoder(nn.Module):
    """Images to a feature vector: convolutions (the Nature-DQN torso, or :data:`SMALL_CONVS`
    for images under 36 pixels a side), flattened, then the ``hidden`` linear layers, all with
    ReLU. With ``hidden = [512]`` this is CleanRL's Atari network without its heads.

    Channel-first inside: an HWC image is permuted here, so an env's layout never needs a
    wrapper. Weights are orthogonal with gain sqrt(2), biases zero (CleanRL's ``layer_init``).
    """

    def __init__(self, obs_shape: tuple[int, ...], hidden: list[int] | tuple[int, ...]):
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"encoder: cnn needs rank-3 image observations, got {obs_shape}")
        self.hwc = channels_last(obs_shape)
        c, h, w = (obs_shape[2], *obs_shape[:2]) if self.hwc else obs_shape
        convs = NATURE_CONVS if min(h, w) >= NATURE_MIN_SIDE else SMALL_CONVS
        layers: list[nn.Module] = []
        for out, kernel, stride in convs:
            if min(h, w) < kernel:
                raise ValueError(f"encoder: images of {h} x {w} pixels are too small for a CNN")
            layers += [_orthogonal(nn.Conv2d(c, out, kernel, stride)), nn.ReLU()]
            c, h, w = out, (h - kernel) // stride + 1, (w - kernel) // stride + 1
        layers.append(nn.Flatten())
        last = c * h * w
        for size in hidden:
            layers += [_orthogonal(nn.Linear(last, size)), nn.ReLU()]
            last = size
        self.net = nn.Sequential(*layers)
        self.out_dim = last

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.hwc:
            obs = obs.permute(0, 3, 1, 2)  # NCHW sizes over NHWC memory: no copy
        return self.net(_float_nhwc(obs))


def _float_nhwc(images: torch.Tensor) -> torch.Tensor:
    """``as_float(images)`` for a batch of NCHW-sized images, laid out in memory as NHWC
    (``torch.channels_last``), in one copy. Convolutions on CPU (oneDNN) run faster on that
    layout: the Nature-CNN forward and backward pass of a 256-frame Atari minibatch took
    214-225 ms instead of 274 ms on one core here (benchmarks/atari_throughput.py has the
    training figures). The weights keep their layout, so the flat parameter vector is
    unchanged."""
    out = torch.empty(
        images.shape, dtype=torch.float32, device=images.device, memory_format=torch.channels_last
    )
    out.copy_(images)
    return out.mul_(1.0 / 255.0) if images.dtype == torch.uint8 else out


def _orthogonal(layer: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def make_encoder(kind: str, spec: EnvSpec, hidden: list[int] | tuple[int, ...]) -> nn.Module:
    """The encoder of ``kind`` (mlp or cnn; resolve auto with :func:`choose_encoder` first):
    ``FlatEncoder`` or ``ImageEncoder(spec.obs_shape, hidden)``."""
    if kind == "cnn":
        return ImageEncoder(spec.obs_shape, hidden)
    return FlatEncoder(spec.obs_shape)


class RunningNorm(nn.Module):
    """Running mean/variance of observations (parallel-merge formula of Chan et al.).
    ``min_std``: the smallest std it divides by; a dimension narrower than that is only
    centred (0: every dimension to unit variance). ``keep_sparse``: a *sparse* dimension, one
    that was exactly 0 in at least half the rows of the first update (an event such as a
    contact force), is never scaled up (divided by at least 1)."""

    def __init__(
        self,
        shape: tuple[int, ...],
        clip: float = 10.0,
        eps: float = 1e-8,
        min_std: float = 0.0,
        keep_sparse: bool = False,
    ):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(eps, dtype=torch.float64))
        # 1 on sparse dimensions, decided once by the first update: state, as actors and
        # checkpoints need it (Hogwild! may add two workers' 1s: read as > 0.5)
        self.register_buffer("sparse", torch.zeros(shape, dtype=torch.float64))
        self.clip = clip
        self.min_std = min_std  # settings of the run, not state: not buffers
        self.keep_sparse = keep_sparse
        self.enabled = True

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a checkpoint from before ``sparse`` existed: no dimension marked, as it ran
        state_dict.setdefault(prefix + "sparse", torch.zeros_like(self.sparse))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        if x.shape[0] == 0:  # no rows (a policy the random mapping gave no step): 0/0 is NaN
            return
        if self.count < 1:
            self.sparse.copy_((x == 0).to(torch.float64).mean(0) >= 0.5)
        (b_var, b_mean), b_count = torch.var_mean(x, 0, correction=0), x.shape[0]
        delta = b_mean - self.mean
        total = self.count + b_count
        self.mean += delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta.square() * self.count * b_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        mean, std = self.mean.to(x.dtype), self.scale().to(x.dtype) + 1e-8
        return torch.clamp((x - mean) / std, -self.clip, self.clip)

    def scale(self) -> torch.Tensor:
        """The std ``forward`` divides by (before its 1e-8): at least ``min_std``, and at
        least 1 on sparse dimensions with ``keep_sparse``."""
        std = self.var.sqrt()
        if self.min_std > 0:
            std = std.clamp(min=self.min_std)
        if self.keep_sparse:
            std = torch.where(self.sparse > 0.5, std.clamp(min=1.0), std)
        return std


def encoder_of(cfg) -> str:
    """``cfg.encoder``; ``auto`` for a config saved before there was the setting."""
    return getattr(cfg, "encoder", "auto")


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
