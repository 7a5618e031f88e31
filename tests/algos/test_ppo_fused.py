"""The fused PPO step (algos/ppo/fused.py) against the autograd step it replaces: the same
losses, gradients and updated parameters up to float rounding, for every kind of policy and
loss it covers; and what it must keep: the optimizer's and the module's formats, training
parameters whose storage moved, no recompilation when the schedules move."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from asyncrl.algos.ppo.config import PPOConfig
from asyncrl.algos.ppo.fused import MLPStep, flat_span
from asyncrl.algos.ppo.networks import build_policy
from asyncrl.algos.ppo.update import PPO, step_hyperparameters
from asyncrl.envs import EnvSpec
from asyncrl.nets import FlatParams
from conftest import move_parameters

T, B, OBS = 16, 8, 5
TOL = {"rtol": 1e-5, "atol": 1e-6}


def _spec(discrete: bool, n: int = 3) -> EnvSpec:
    if discrete:
        return EnvSpec("toy", (OBS,), True, (), n, None, None)
    return EnvSpec("toy", (OBS,), False, (n,), n, np.full(n, -1.0, np.float32), np.ones(n))


def _policy(discrete: bool, hidden=(16, 16), activation="tanh"):
    torch.manual_seed(0)
    return build_policy(_spec(discrete), list(hidden), activation, norm_obs=False)


def _rollout(policy) -> dict[str, torch.Tensor]:
    """T x B steps acted by a perturbed copy of ``policy`` (an actor some versions behind),
    with episode ends of both kinds."""
    g = torch.Generator().manual_seed(3)
    obs = torch.randn(T + 1, B, OBS, generator=g)
    actor = copy.deepcopy(policy)
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    actions, logp = actor.act(obs[:T].flatten(0, 1), generator=g)
    terminated = torch.rand(T, B, generator=g) < 0.05
    truncated = ~terminated & (torch.rand(T, B, generator=g) < 0.05)
    return {
        "obs": obs,
        "actions": actions.view(T, B, *actions.shape[1:]),
        "logp": logp.view(T, B),
        "rewards": torch.randn(T, B, generator=g),
        "terminated": terminated,
        "truncated": truncated,
        "trunc_values": torch.where(truncated, torch.randn(T, B, generator=g), 0.0),
    }


def _pair(discrete, compile=False, hidden=(16, 16), activation="tanh", **cfg):
    """Two PPOs on copies of one policy: the autograd reference and the fused step."""
    hp = PPOConfig(epochs=2, minibatch_size=32, **cfg)
    policy = _policy(discrete, hidden, activation)
    ref = PPO(copy.deepcopy(policy), hp, lr=3e-3, fused=False)
    new = PPO(copy.deepcopy(policy), hp, lr=3e-3, compile=compile)
    assert ref.fused is None and isinstance(new.fused, MLPStep)
    return ref, new


def _assert_same_training(ref: PPO, new: PPO, updates: int = 2) -> None:
    """Updates on one rollout, the lr and clip moving between them: the statistics, the
    parameters and Adam's moments agree up to rounding."""
    batch = ref.targets(_rollout(ref.policy))
    torch.testing.assert_close(new.targets(_rollout(new.policy)), batch)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for i in range(updates):
        lr, clip_scale = 3e-3 * (1 - 0.3 * i), 1 - 0.2 * i
        s_ref = ref.update(batch, lr, g1, clip_scale)
        s_new = new.update(batch, lr, g2, clip_scale)
        assert s_new.keys() == s_ref.keys()
        for k in s_ref:
            assert s_new[k] == pytest.approx(s_ref[k], rel=1e-4, abs=1e-6), k
    theirs = new.policy.state_dict()
    for name, a in ref.policy.state_dict().items():
        torch.testing.assert_close(theirs[name], a, **TOL, msg=name)
    s_ref, s_new = ref.optimizer.state_dict(), new.optimizer.state_dict()
    assert s_new["param_groups"] == s_ref["param_groups"]
    for i, st in s_ref["state"].items():
        assert s_new["state"][i].keys() == st.keys()
        for k in st:
            torch.testing.assert_close(s_new["state"][i][k], st[k], **TOL, msg=f"{i} {k}")


CASES = {
    "discrete": dict(discrete=True),
    "discrete, value clip, entropy": dict(discrete=True, value_clip=0.2, ent_coef=0.01),
    "discrete, vtrace": dict(discrete=True, correction="vtrace"),
    "discrete, decoupled, no grad clip": dict(
        discrete=True, correction="decoupled", max_grad_norm=0.0
    ),
    "continuous": dict(discrete=False),
    "continuous, value clip": dict(discrete=False, value_clip=0.2),
    "continuous, decoupled, entropy": dict(
        discrete=False, correction="decoupled", vtrace_rho_bar=1.5, ent_coef=0.01
    ),
    "continuous, vtrace, no adv norm": dict(discrete=False, correction="vtrace", norm_adv=False),
    "relu, three hidden layers": dict(discrete=False, activation="relu", hidden=(16, 8, 8)),
    "one hidden layer": dict(discrete=True, hidden=(16,), value_clip=0.1),
    "no hidden layer": dict(discrete=False, hidden=()),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fused_step_trains_as_the_autograd_step(case):
    _assert_same_training(*_pair(**CASES[case]))


@pytest.mark.parametrize("discrete", [True, False])
def test_minibatches_of_one_sample_train_unnormalised_and_finite(discrete):
    """One env and a rollout of one step make batches of one sample (found by
    test_cli_property.py): the std of one advantage is NaN, so such a minibatch is not
    normalised, as SB3 does not; both steps train finite parameters, and alike."""
    hp = PPOConfig(epochs=1, minibatch_size=1)
    policy = _policy(discrete)
    ref = PPO(copy.deepcopy(policy), hp, lr=3e-3, fused=False)
    new = PPO(copy.deepcopy(policy), hp, lr=3e-3)
    assert isinstance(new.fused, MLPStep)
    for ppo in (ref, new):
        ppo.on_nonfinite = lambda count, norm: pytest.fail(f"{count} steps not applied: {norm}")
    before = [p.detach().clone() for p in ref.params]
    _assert_same_training(ref, new, updates=1)
    for p, b in zip(new.params, before, strict=True):
        assert torch.isfinite(p).all() and not torch.equal(p.detach(), b)


@pytest.mark.parametrize("discrete", [True, False])
def test_fused_gradients_equal_autograd_gradients(discrete):
    """On one fixed minibatch, before any step: the losses and each parameter's gradient
    (clipped as the reference clips it)."""
    ref, new = _pair(discrete, value_clip=0.2, ent_coef=0.01, max_grad_norm=0.1)
    batch = ref.targets(_rollout(ref.policy))
    keys = ("features", "actions", "logp", "weight", "adv", "returns", "values")
    mb = [batch[k][:32] for k in keys]
    for group in ref.optimizer.param_groups:
        group["lr"] = 0.0  # the reference steps Adam; its gradients stay in .grad
    hp = step_hyperparameters(ref.cfg, 0.0)  # its clip and ent_coef, as an update's
    stats = ref._minibatch_step(hp, *mb)
    grads, fused_stats = new.fused._grads(new.fused.params, hp[0], hp[2], *mb)
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    scale = new.fused._clip(norm)
    torch.testing.assert_close(torch.stack([*fused_stats, norm]), stats, **TOL)
    assert scale < 1  # the clip acted
    for p, g in zip(ref.params, grads, strict=True):
        torch.testing.assert_close(g * scale, p.grad, **TOL)


def test_formats_are_unchanged():
    """The module's parameters (names, order, shapes) and the optimizer's state dict are what
    the autograd step leaves: checkpoints and published vectors do not change."""
    ref, new = _pair(False, value_clip=0.2)
    _assert_same_training(ref, new, updates=1)
    assert [(k, v.shape) for k, v in new.policy.state_dict().items()] == [
        (k, v.shape) for k, v in ref.policy.state_dict().items()
    ]
    # a checkpoint of either loads into the other and trains on alike
    ref2, new2 = copy.deepcopy(ref), copy.deepcopy(new)
    ref2.optimizer.load_state_dict(copy.deepcopy(new.optimizer.state_dict()))
    ref2.policy.load_state_dict(new.policy.state_dict())
    new2.optimizer.load_state_dict(copy.deepcopy(ref.optimizer.state_dict()))
    new2.policy.load_state_dict(ref.policy.state_dict())
    _assert_same_training(ref2, new2, updates=1)


def test_parameters_moved_between_and_during_updates_are_trained_where_they_are():
    """FlatParams.view_into swaps the parameters' storage (Hogwild!, a policy store): the next
    steps train them there, whether it happens between updates or in a before-step hook."""
    ref, new = _pair(True)
    vectors = []

    def move() -> None:
        vectors.append(move_parameters(new.params))

    move()
    _assert_same_training(ref, new, updates=1)
    new.before_step = move  # now before every step
    ref.before_step = lambda: None
    _assert_same_training(ref, new, updates=1)
    last = torch.from_numpy(vectors[-1])
    assert flat_span(new.params).data_ptr() == last.data_ptr()


@pytest.mark.slow  # compiles: ~20 s with an empty compile cache, ~3 s with a warm one
@pytest.mark.parametrize("case", ["discrete, value clip, entropy", "continuous, value clip"])
def test_compiled_step_trains_as_the_autograd_step(case):
    ref, new = _pair(compile=True, **CASES[case])
    with torch._dynamo.config.patch(error_on_recompile=True):  # lr and clip move: no recompile
        _assert_same_training(ref, new, updates=3)


@pytest.mark.slow  # compiles
def test_compiled_step_after_a_checkpoint_and_moved_parameters():
    """Loading a checkpoint (new optimizer state tensors) and moving the parameters both make
    the compiled step repack; training goes on bit for bit as without either."""
    ref, new = _pair(False, compile=True, value_clip=0.2)
    _assert_same_training(ref, new, updates=1)
    resumed = PPO(copy.deepcopy(new.policy), new.cfg, lr=3e-3, compile=True)
    resumed.optimizer.load_state_dict(copy.deepcopy(new.optimizer.state_dict()))
    flat = FlatParams.of(resumed.params)
    vector = np.empty(flat.numel, np.float32)
    flat.write_to(vector)
    assert flat.view_into(vector)
    batch = new.targets(_rollout(new.policy))
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    s1, s2 = new.update(batch, 1e-3, g1), resumed.update(batch, 1e-3, g2)
    assert s1 == s2
    for a, b in zip(new.params, resumed.params, strict=True):
        assert torch.equal(a, b)
    assert torch.from_numpy(vector).data_ptr() == resumed.params[0].data_ptr()


@pytest.mark.parametrize(
    "variant", ["eager", "eager, own Adam", pytest.param("compiled", marks=pytest.mark.slow)]
)
def test_a_nan_gradient_step_is_not_applied_and_is_counted(variant):
    """A minibatch whose advantages hold a NaN gives a NaN gradient: the fused step leaves the
    parameters, Adam's moments and step counts as they were, the others train on, and the
    update reports how many steps were not applied (as the autograd step's optimizer hook
    does, but with no host sync per step)."""
    _, new = _pair(True, compile=variant == "compiled")
    if variant == "eager, own Adam":  # the compiled step's Adam, run eagerly
        new.fused.fused_adam = False
    seen: list[tuple[int, float]] = []
    new.on_nonfinite = lambda count, norm: seen.append((count, norm))
    batch = new.targets(_rollout(new.policy))
    n = batch["adv"].shape[0]
    clean = new.update(batch, 3e-3, torch.Generator().manual_seed(5))
    assert seen == [] and all(np.isfinite(v) for v in clean.values())
    before = [p.detach().clone() for p in new.params]
    moments = {
        k: [new.optimizer.state[p][k].clone() for p in new.params]
        for k in ("exp_avg", "exp_avg_sq", "step")
    }
    bad = dict(batch, adv=torch.full_like(batch["adv"], float("nan")))
    new.update(bad, 3e-3, torch.Generator().manual_seed(5))
    steps = new.cfg.epochs * (n // new.cfg.minibatch_size)
    assert len(seen) == 1 and seen[0][0] == steps and not np.isfinite(seen[0][1])
    for p, b in zip(new.params, before, strict=True):
        torch.testing.assert_close(p.detach(), b, rtol=0, atol=0)
    for k, old in moments.items():
        for p, o in zip(new.params, old, strict=True):
            torch.testing.assert_close(new.optimizer.state[p][k], o, rtol=0, atol=0)
    # the same update on a clean batch again trains as before: nothing was poisoned
    after = new.update(batch, 3e-3, torch.Generator().manual_seed(5))
    assert len(seen) == 1 and all(np.isfinite(v) for v in after.values())
    assert any(not torch.equal(p.detach(), b) for p, b in zip(new.params, before, strict=True))
