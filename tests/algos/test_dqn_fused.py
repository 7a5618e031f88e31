"""DQN's fused step (algos/dqn/fused.py) against the autograd step it replaces: the same losses,
gradients (Adam's first moments), parameters, target network and optimizer state up to float
rounding; and what it must keep: checkpoints' format, training parameters whose storage moved,
a NaN gradient not applied and counted."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from asyncrl.algos.dqn.config import DQNConfig
from asyncrl.algos.dqn.fused import supports
from asyncrl.algos.dqn.networks import QNetwork
from asyncrl.algos.dqn.update import DQN
from asyncrl.envs import EnvSpec
from asyncrl.learning.fused import flat_span
from conftest import move_parameters

OBS, ACTIONS, B = 4, 3, 64
TOL = {"rtol": 1e-5, "atol": 1e-6}
SPEC = EnvSpec("toy", (OBS,), True, (), ACTIONS, None, None)


def _pair(compile: bool = False, every: int = 2, **cfg) -> tuple[DQN, DQN]:
    torch.manual_seed(0)
    q = QNetwork(SPEC, [32, 24], "mlp")
    hp = DQNConfig(**{"lr": 3e-3, "tau": 0.5, **cfg})
    ref = DQN(copy.deepcopy(q), hp, every, fused=False)
    new = DQN(copy.deepcopy(q), hp, every, compile=compile)
    assert ref.fused is None and new.fused is not None
    return ref, new


def _batch(g: torch.Generator, nan: bool = False) -> dict[str, torch.Tensor]:
    """Rewards large enough that some TD errors fall each side of the Huber loss's bend."""
    reward = 3 * torch.randn(B, generator=g)
    return {
        "obs": torch.randn(B, OBS, generator=g),
        "action": torch.randint(ACTIONS, (B,), generator=g),
        "reward": reward.fill_(float("nan")) if nan else reward,
        "next_obs": torch.randn(B, OBS, generator=g),
        "discount": 0.99 * (torch.rand(B, generator=g) > 0.2).float(),
    }


def _assert_same_state(ref: DQN, new: DQN) -> None:
    for a, b in zip(ref.params, new.params, strict=True):
        torch.testing.assert_close(b.detach(), a.detach(), **TOL)
    for a, b in zip(ref.q_target.parameters(), new.q_target.parameters(), strict=True):
        torch.testing.assert_close(b, a, **TOL)
    for a, b in zip(ref.params, new.params, strict=True):
        sa, sb = ref.optimizer.state[a], new.optimizer.state[b]
        assert sorted(sa) == sorted(sb)
        for k in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(sb[k], sa[k], **TOL)
        assert torch.equal(sb["step"], sa["step"]) and sb["step"].dtype == sa["step"].dtype


def _assert_same_training(ref: DQN, new: DQN, steps: int, seed: int = 1) -> None:
    g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    for i in range(steps):
        for rule in (ref, new):  # a schedule moves the rate between steps
            rule.optimizer.param_groups[0]["lr"] = 3e-3 / (1 + i)
        s1, s2 = ref.update(_batch(g1)), new.update(_batch(g2))
        torch.testing.assert_close(s2, s1, **TOL)
        _assert_same_state(ref, new)


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("td_loss", ["huber", "mse"])
@pytest.mark.parametrize("max_grad_norm", [0.5, 0.0])
def test_fused_step_trains_as_the_autograd_step(double, td_loss, max_grad_norm):
    """Five steps from one initial network (the target network updated every second one):
    statistics, parameters, target parameters and Adam's state (its first moments after the
    first step are the gradients) within float32 rounding. A clip of 0.5 binds at every step."""
    ref, new = _pair(double=double, td_loss=td_loss, max_grad_norm=max_grad_norm)
    _assert_same_training(ref, new, steps=5)


@pytest.mark.parametrize("td_loss", ["huber", "mse"])
@pytest.mark.parametrize(
    "double, max_grad_norm", [(True, 0.5), (False, 0.5), (True, 0.0), (True, 100.0)]
)
def test_eager_step_equals_the_autograd_step_to_the_last_bit(td_loss, double, max_grad_norm):
    """The eager step (activations and gradients written into kept buffers, Adam's kernel per
    tensor, on the CPU the clip factor computed on the host) keeps autograd's bits step after
    step, so a run does not drift from the autograd step's path. A clip of 0.5 binds at every
    step, one of 100 at none."""
    ref, new = _pair(td_loss=td_loss, max_grad_norm=max_grad_norm, double=double)
    g = torch.Generator().manual_seed(6)
    for _ in range(40):
        b = _batch(g)
        assert torch.equal(new.update(b), ref.update(b))
    for a, b in zip(ref.state_tensors(), new.state_tensors(), strict=True):
        assert torch.equal(a, b)


def test_the_first_steps_moments_are_the_autograd_gradients():
    ref, new = _pair(max_grad_norm=0.0)
    b = _batch(torch.Generator().manual_seed(4))
    ref.update(b)
    new.update(b)
    beta1 = ref.optimizer.param_groups[0]["betas"][0]
    for p, p_new in zip(ref.params, new.params, strict=True):  # autograd's left its gradients
        m = new.optimizer.state[p_new]["exp_avg"]
        torch.testing.assert_close(m / (1 - beta1), p.grad, **TOL)


def test_only_mlp_q_networks_take_it():
    image = EnvSpec("toy", (4, 36, 36), True, (), ACTIONS, None, None, obs_dtype="uint8")
    assert supports(QNetwork(SPEC, [8], "mlp")) and supports(QNetwork(SPEC, [], "mlp"))
    assert not supports(QNetwork(image, [16], "cnn"))
    assert DQN(QNetwork(image, [16], "cnn"), DQNConfig(), 10).fused is None


def test_checkpoints_keep_their_format_and_load_across_steps():
    """The state dict (its keys, the optimizer's state in torch.optim.Adam's format) is the
    autograd step's: a checkpoint of either loads into the other and both train on alike."""
    ref, new = _pair()
    _assert_same_training(ref, new, steps=2)
    s_ref, s_new = ref.state_dict(), new.state_dict()
    assert s_ref.keys() == s_new.keys() and s_ref["q"].keys() == s_new["q"].keys()
    o_ref, o_new = s_ref["optimizer"], s_new["optimizer"]
    assert o_ref["param_groups"] == o_new["param_groups"]
    assert {k: sorted(v) for k, v in o_ref["state"].items()} == {
        k: sorted(v) for k, v in o_new["state"].items()
    }
    ref2, new2 = _pair()  # fresh ones, each loading the other's checkpoint
    ref2.load_state_dict(copy.deepcopy(s_new))
    new2.load_state_dict(copy.deepcopy(s_ref))
    _assert_same_state(ref2, new2)
    assert ref2.updates == new2.updates == 2
    _assert_same_training(ref2, new2, steps=3, seed=2)


def test_the_state_of_a_rule_that_never_stepped_loads_into_one_that_did():
    """PBT's exploit may copy a learner still warming up (Adam's state empty) into one that has
    stepped: the fused step then starts Adam anew, as the autograd step does. (Checking the
    packed views looked the first parameter up in the optimizer's defaultdict, which added an
    empty entry, and the next pack took that for a made state: KeyError 'exp_avg'.)"""
    ref, new = _pair()
    _assert_same_training(ref, new, steps=2)
    never_ref, never_new = _pair()
    assert not never_new.state_dict()["optimizer"]["state"]
    ref.load_state_dict(copy.deepcopy(never_ref.state_dict()))
    new.load_state_dict(copy.deepcopy(never_new.state_dict()))
    _assert_same_training(ref, new, steps=3, seed=2)


def test_tensors_moved_between_steps_are_trained_where_they_are():
    """Hogwild! lays state_tensors() (online and target networks) into shared memory between
    steps: the next steps train them there."""
    ref, new = _pair(every=1)
    _assert_same_training(ref, new, steps=1)
    vector = move_parameters(new.state_tensors())
    _assert_same_training(ref, new, steps=2, seed=3)
    shared = torch.from_numpy(vector)
    assert flat_span(new.params).data_ptr() == shared.data_ptr()
    assert new.state_tensors()[-1].data_ptr() > shared.data_ptr()  # the target's, there too
    assert torch.equal(shared, torch.cat([t.detach().reshape(-1) for t in new.state_tensors()]))


@pytest.mark.parametrize(
    "variant", ["eager", "eager, own Adam", pytest.param("compiled", marks=pytest.mark.slow)]
)
def test_a_nan_gradient_step_is_not_applied_and_is_counted(variant):
    """A batch of NaN rewards gives a NaN gradient: the step leaves the parameters, Adam's
    moments and step counts as they were, is counted (no host sync in the step), and the next
    clean steps train on."""
    _, new = _pair(compile=variant == "compiled", every=1000)
    if variant == "eager, own Adam":  # the compiled step's Adam, run eagerly
        new.fused.fused_adam = False
    g = torch.Generator().manual_seed(5)
    new.update(_batch(g))
    assert new.take_nonfinite() == (0, 0.0)
    before = [p.detach().clone() for p in new.params]
    moments = {
        k: [new.optimizer.state[p][k].clone() for p in new.params]
        for k in ("exp_avg", "exp_avg_sq", "step")
    }
    new.update(_batch(g, nan=True))
    new.update(_batch(g, nan=True))
    bad, norm = new.take_nonfinite()
    assert bad == 2 and not np.isfinite(norm)
    assert new.take_nonfinite() == (0, 0.0)  # taken: counted once
    for p, b in zip(new.params, before, strict=True):
        torch.testing.assert_close(p.detach(), b, rtol=0, atol=0)
    for k, old in moments.items():
        for p, o in zip(new.params, old, strict=True):
            torch.testing.assert_close(new.optimizer.state[p][k], o, rtol=0, atol=0)
    stats = new.update(_batch(g))
    assert torch.isfinite(stats).all() and new.take_nonfinite() == (0, 0.0)
    assert any(not torch.equal(p.detach(), b) for p, b in zip(new.params, before, strict=True))


@pytest.mark.slow  # compiles: ~15 s with an empty compile cache, a few with a warm one
@pytest.mark.parametrize("double", [True, False])
def test_compiled_step_trains_as_the_autograd_step(double):
    ref, new = _pair(compile=True, double=double, max_grad_norm=0.5)
    with torch._dynamo.config.patch(error_on_recompile=True):  # the lr moves: no recompile
        _assert_same_training(ref, new, steps=4)
