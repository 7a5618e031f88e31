"""SAC's fused step (algos/sac/fused.py) against the autograd step it replaces: the same
statistics, parameters, target critics, temperature and Adam state, to the last bit, over
hundreds of steps, in float32 and in bf16 (against the autocast step); and what it must keep:
checkpoints' format, training tensors whose storage moved (Hogwild!), a NaN gradient not
applied and counted."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from asyncrl.algos.sac.config import SACConfig
from asyncrl.algos.sac.update import SAC
from asyncrl.learning.fused import flat_span
from asyncrl.nets import ImageEncoder
from asyncrl.system import bf16_support
from conftest import move_parameters

B = 256
PENDULUM = (3, 1, (64, 64))  # the learning tests' sizes
HALFCHEETAH = (17, 6, (256, 256))  # the preset's


def _sac(sizes, fused: bool, **kw) -> SAC:
    obs, act, hidden = sizes
    torch.manual_seed(0)
    low, high = [-2.0] * act, [1.0] * act  # not [-1, 1]: the critics read rescaled actions
    return SAC(
        obs, act, low, high, SACConfig(), generator=torch.Generator().manual_seed(7),
        hidden=hidden, fused=fused, **kw,
    )  # fmt: skip


def _pair(sizes=PENDULUM, precision: str = "fp32") -> tuple[SAC, SAC]:
    ref = _sac(sizes, fused=False, precision=precision)
    new = _sac(sizes, fused=True, precision=precision)
    assert ref.fused is None and new.fused is not None
    return ref, new


def _batch(g: torch.Generator, sizes, nan: bool = False) -> dict[str, torch.Tensor]:
    obs, act, _ = sizes
    reward = 3 * torch.randn(B, generator=g)
    return {
        "obs": torch.randn(B, obs, generator=g),
        "action": torch.rand(B, act, generator=g) * 3 - 2,
        "reward": reward.fill_(float("nan")) if nan else reward,
        "next_obs": torch.randn(B, obs, generator=g),
        "terminated": (torch.rand(B, generator=g) < 0.1).float(),
    }


def _optimizer_state(sac: SAC) -> list[torch.Tensor]:
    return [
        t
        for opt in sac.optimizers().values()
        for p in opt.param_groups[0]["params"]
        for t in (opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"], opt.state[p]["step"])
    ]


def _assert_identical(ref: SAC, new: SAC) -> None:
    """Every float an update changes, and Adam's state, bit for bit."""
    for a, b in zip(ref.state_tensors(), new.state_tensors(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(_optimizer_state(ref), _optimizer_state(new), strict=True):
        assert torch.equal(a, b) and a.dtype == b.dtype and a.shape == b.shape


def _assert_same_training(ref: SAC, new: SAC, steps: int, sizes=PENDULUM, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        b = _batch(g, sizes)
        assert torch.equal(new.update(b), ref.update(b))
    _assert_identical(ref, new)


def test_fused_step_trains_as_the_autograd_step_to_the_last_bit():
    """300 steps at the learning tests' sizes (Pendulum, 64x64): losses and statistics at each
    step, then networks, target critics, temperature and Adam's moments and step counts."""
    ref, new = _pair()
    _assert_same_training(ref, new, steps=300)
    assert new.take_nonfinite() == {n: (0, 0.0) for n in ("critic", "actor", "temperature")}


@pytest.mark.slow  # ~25 s on a loaded 2-core machine
def test_fused_step_at_the_presets_sizes():
    """200 steps at the preset's sizes (HalfCheetah: 256x256 actor and twin critics)."""
    ref, new = _pair(HALFCHEETAH)
    _assert_same_training(ref, new, steps=200, sizes=HALFCHEETAH)


# bf16 where the CPU multiplies it natively (elsewhere a run refuses --precision bf16)
native_bf16 = pytest.mark.skipif(
    not bf16_support("cpu")[0], reason="no native bfloat16 on this CPU"
)


@native_bf16
def test_fused_step_in_bf16_trains_as_the_autocast_step_to_the_last_bit():
    """--precision bf16: the fused step's matrix products and activations in bfloat16, cast
    where the autograd step's autocast casts, equal that step bit for bit over 300 steps
    (Pendulum's 64x64), weights and Adam's state float32."""
    ref, new = _pair(precision="bf16")
    _assert_same_training(ref, new, steps=300)
    assert all(t.dtype == torch.float32 for t in [*new.state_tensors(), *_optimizer_state(new)])


@native_bf16
@pytest.mark.slow  # ~10 s on a loaded 2-core machine
def test_fused_step_in_bf16_at_the_presets_sizes():
    """200 bf16 steps at the preset's sizes (HalfCheetah: 256x256 actor and twin critics)."""
    ref, new = _pair(HALFCHEETAH, precision="bf16")
    _assert_same_training(ref, new, steps=200, sizes=HALFCHEETAH)


def test_only_flat_sac_takes_it():
    """Images (an encoder of their own) keep the autograd step, in either precision."""
    encoder = lambda: ImageEncoder((3, 36, 36), [16])  # noqa: E731
    for precision in ("fp32", "bf16"):
        image = SAC(
            3 * 36 * 36, 2, [-1, -1], [1, 1], SACConfig(), encoder=encoder, precision=precision
        )
        assert image.fused is None
    assert _sac(PENDULUM, fused=True, precision="bf16").fused is not None


def test_checkpoints_keep_their_format_and_load_across_steps():
    """The state dict (its keys, the optimizers' state in torch.optim.Adam's format) is the
    autograd step's: a checkpoint of either loads into the other and both train on alike."""
    ref, new = _pair()
    _assert_same_training(ref, new, steps=3)
    s_ref, s_new = ref.state_dict(), new.state_dict()
    assert s_ref.keys() == s_new.keys()
    for key in ("q_opt", "actor_opt", "alpha_opt"):
        assert s_ref[key]["param_groups"] == s_new[key]["param_groups"]
        assert {k: sorted(v) for k, v in s_ref[key]["state"].items()} == {
            k: sorted(v) for k, v in s_new[key]["state"].items()
        }
    ref2, new2 = _pair()  # fresh ones, each loading the other's checkpoint
    ref2.load_state_dict(copy.deepcopy(s_new))
    new2.load_state_dict(copy.deepcopy(s_ref))
    _assert_identical(ref2, new2)
    _assert_same_training(ref2, new2, steps=3, seed=2)


def test_tensors_moved_between_steps_are_trained_where_they_are():
    """Hogwild! lays state_tensors() (actor, critics, target critics, temperature) into shared
    memory between steps: the next steps train them there."""
    ref, new = _pair()
    _assert_same_training(ref, new, steps=1)
    vector = move_parameters(new.state_tensors())
    _assert_same_training(ref, new, steps=2, seed=3)
    shared = torch.from_numpy(vector)
    storage = shared.untyped_storage().data_ptr()
    assert all(t.untyped_storage().data_ptr() == storage for t in new.state_tensors())
    assert flat_span(list(new.q.parameters())) is not None  # trained in place, not moved out
    assert torch.equal(shared, torch.cat([t.detach().reshape(-1) for t in new.state_tensors()]))


def test_a_nan_gradient_step_is_not_applied_and_is_counted():
    """NaN rewards give the critics a NaN gradient: their step leaves parameters, Adam's
    moments and step counts as they were and is counted (no host sync in the step); the actor
    and temperature, whose gradients stay finite, step; the next clean steps train on."""
    _, new = _pair()
    g = torch.Generator().manual_seed(5)
    new.update(_batch(g, PENDULUM))
    params = list(new.q.parameters())
    before = [p.detach().clone() for p in params]
    moments = [t.clone() for t in _optimizer_state(new)[: 3 * len(params)]]
    actor_before = [p.detach().clone() for p in new.actor.parameters()]
    new.update(_batch(g, PENDULUM, nan=True))
    new.update(_batch(g, PENDULUM, nan=True))
    counts = new.take_nonfinite()
    assert counts["critic"][0] == 2 and not np.isfinite(counts["critic"][1])
    assert counts["actor"] == counts["temperature"] == (0, 0.0)
    assert new.take_nonfinite()["critic"] == (0, 0.0)  # taken: counted once
    for p, b in zip(params, before, strict=True):
        assert torch.equal(p.detach(), b)
    for t, old in zip(_optimizer_state(new), moments, strict=False):
        assert torch.equal(t, old)
    moved = zip(new.actor.parameters(), actor_before, strict=True)
    assert all(not torch.equal(p, b) for p, b in moved)
    stats = new.update(_batch(g, PENDULUM))
    assert torch.isfinite(stats).all() and new.take_nonfinite()["critic"] == (0, 0.0)
    assert all(not torch.equal(p.detach(), b) for p, b in zip(params, before, strict=True))
