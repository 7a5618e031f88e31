"""SAC's update rule: the ensemble, the targets, where gradients go, the squashing correction."""

from __future__ import annotations

import math

import torch
from torch import nn

from asyncrl.algos.sac.config import SACConfig
from asyncrl.algos.sac.networks import QEnsemble, SquashedGaussianActor
from asyncrl.algos.sac.update import SAC


def _batch(B=32, obs=3, act=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(B, obs, generator=g),
        "action": torch.rand(B, act, generator=g) * 2 - 1,
        "reward": torch.randn(B, generator=g),
        "next_obs": torch.randn(B, obs, generator=g),
        "terminated": torch.zeros(B),
    }


def test_ensemble_equals_two_separate_mlps():
    torch.manual_seed(0)
    q = QEnsemble(3, 2, (8, 8))
    obs, act = torch.randn(5, 3), torch.randn(5, 2)
    out = q(obs, act)
    for i in range(2):
        layers = []
        for j, (w, b) in enumerate(zip(q.weights, q.biases, strict=True)):
            lin = nn.Linear(*w.shape[1:])
            lin.weight.data = w[i].T.detach().clone()
            lin.bias.data = b[i, 0].detach().clone()
            layers += [lin] + ([nn.ReLU()] if j < len(q.weights) - 1 else [])
        ref = nn.Sequential(*layers)(torch.cat([obs, act], -1)).squeeze(-1)
        torch.testing.assert_close(out[i], ref)


def test_terminated_cuts_the_target_and_truncated_does_not():
    torch.manual_seed(0)
    sac = SAC(3, 2, [-1, -1], [1, 1], SACConfig(gamma=0.9))
    b = _batch()
    alpha = torch.tensor(0.3)
    torch.manual_seed(1)
    cont = sac.critic_target(b, alpha)  # not terminated (e.g. truncated): bootstraps
    torch.manual_seed(1)
    next_a, next_logp = sac.actor(b["next_obs"])
    next_q = sac.q_target(b["next_obs"], next_a).min(0).values - alpha * next_logp
    torch.testing.assert_close(cont, b["reward"] + 0.9 * next_q.detach())
    term = sac.critic_target(dict(b, terminated=torch.ones(32)), alpha)
    torch.testing.assert_close(term, b["reward"])


def test_actor_step_leaves_critic_gradients_untouched():
    torch.manual_seed(0)
    sac = SAC(3, 2, [-1, -1], [1, 1], SACConfig())
    b = _batch()
    q_before = [p.detach().clone() for p in sac.q.parameters()]
    # run only the actor part by hand, as update() does
    a, logp = sac.actor(b["obs"])
    loss = (logp - sac.q(b["obs"], a, frozen=True).min(0).values).mean()
    loss.backward()
    assert all(p.grad is None for p in sac.q.parameters())
    assert all(p.grad is not None for p in sac.actor.parameters())
    for p, before in zip(sac.q.parameters(), q_before, strict=True):
        assert torch.equal(p, before)


def test_squashed_log_prob_matches_change_of_variables_numerically():
    torch.manual_seed(0)
    low, high = torch.tensor([-2.0]), torch.tensor([3.0])
    actor = SquashedGaussianActor(1, 1, (4,), low, high)
    obs = torch.zeros(1, 1)
    with torch.no_grad():
        x = actor.trunk(obs)
        mu, log_std = actor.mu(x), actor.log_std(x).clamp(-5, 2)
    # density of a = bias + scale * tanh(u) on a grid must integrate to 1
    a = torch.linspace(-2 + 1e-4, 3 - 1e-4, 200_001).view(-1, 1)
    y = (a - actor.bias) / actor.scale
    u = torch.atanh(y)
    z = (u - mu) / log_std.exp()
    log_n = -0.5 * z.square() - log_std - 0.5 * math.log(2 * math.pi)
    log_density = log_n - torch.log(actor.scale * (1 - y.square()))
    total = torch.trapezoid(log_density.exp().squeeze(), a.squeeze())
    assert abs(total.item() - 1) < 1e-3
    # and the module's own log-prob of a sampled action is that of tanh(u) in [-1, 1]: the
    # formula's, plus log|scale|
    torch.manual_seed(3)
    act, logp = actor(obs)
    y = actor.unit(act)
    u = torch.atanh(y)
    z = (u - mu) / log_std.exp()
    want = (
        -0.5 * z.square()
        - log_std
        - 0.5 * math.log(2 * math.pi)
        - torch.log(actor.scale * (1 - y.square()))
    ).sum(-1)
    torch.testing.assert_close(logp, want + actor.log_scale(), rtol=1e-4, atol=1e-4)
    assert ((act >= low) & (act <= high)).all()


def test_updates_do_not_depend_on_the_envs_action_units():
    """The same task with actions in [-1, 1] and in [-3, 5] x [0, 0.1]: the same updates (the
    critics read, and the temperature weighs, actions in tanh's coordinates), so the default
    target entropy -|A| asks the same of both."""
    lows, highs = [-3.0, 0.0], [5.0, 0.1]
    unit_sac = SAC(3, 2, [-1, -1], [1, 1], SACConfig(), generator=torch.Generator())
    env_sac = SAC(3, 2, lows, highs, SACConfig(), generator=torch.Generator())
    env_sac.load_state_dict(unit_sac.state_dict())
    env_sac.actor.scale.copy_((torch.tensor(highs) - torch.tensor(lows)) / 2)
    env_sac.actor.bias.copy_((torch.tensor(highs) + torch.tensor(lows)) / 2)
    for step in range(5):
        b = _batch(seed=step)
        env_b = dict(b, action=env_sac.actor.bias + b["action"] * env_sac.actor.scale)
        unit_sac.generator.manual_seed(step)
        env_sac.generator.manual_seed(step)
        torch.testing.assert_close(env_sac.update(env_b), unit_sac.update(b))

    def learnt(sac):  # what updates change (not the bounds)
        return [*sac.actor.parameters(), *sac.q.parameters(), *sac.q_target.parameters()]

    for a, b in zip(learnt(env_sac), learnt(unit_sac), strict=True):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(env_sac.log_alpha, unit_sac.log_alpha)


def test_a_checkpoint_from_before_the_unit_coordinates_goes_on_in_the_envs_units():
    sac = SAC(3, 2, [-3, 0], [5, 0.1], SACConfig())
    old = {k: v for k, v in sac.state_dict().items() if k != "action_units"}
    resumed = SAC(3, 2, [-3, 0], [5, 0.1], SACConfig())
    resumed.load_state_dict(old)
    assert resumed.env_units and resumed.state_dict()["action_units"] == "env"
    b = _batch()
    torch.manual_seed(0)
    a, logp = resumed._sample(b["obs"])
    torch.manual_seed(0)
    env_a, unit_logp = resumed.actor(b["obs"])
    torch.testing.assert_close(a, env_a)  # the critics read the env's actions, as they learnt
    torch.testing.assert_close(logp, unit_logp - resumed.actor.log_scale())
    assert not SAC(3, 2, [-3, 0], [5, 0.1], SACConfig()).env_units


def test_polyak_update_and_learning_on_a_fixed_batch():
    torch.manual_seed(0)
    sac = SAC(3, 2, [-1, -1], [1, 1], SACConfig(tau=0.1))
    b = dict(_batch(B=64), terminated=torch.ones(64))  # fixed targets: the critic must fit them
    target_before = [p.clone() for p in sac.q_target.parameters()]
    stats = sac.update(b)
    for t, before, q in zip(
        sac.q_target.parameters(), target_before, sac.q.parameters(), strict=True
    ):
        torch.testing.assert_close(t, 0.9 * before + 0.1 * q.detach())
    first = stats[0].item()
    for _ in range(300):
        stats = sac.update(b)
    assert stats[0].item() < 0.1 * first


def test_loading_a_live_state_dict_does_not_share_optimizer_state(tmp_path):
    """A live state passes from one SAC to another only in PBT's exploit (``adopt``), which
    copies it once for every algorithm (tests/runtime/test_pbt_adoption.py for all three)."""
    # sync: an async learner's state_dict copies its live state already (its optimizer thread)
    a = _pendulum_learner(tmp_path, seed=1, mode="sync")
    a.sac.update(_batch(obs=3, act=1))
    b = _pendulum_learner(tmp_path, seed=2, mode="sync")
    b.adopt(a.state_dict(), {})
    moments = [s["exp_avg"].clone() for s in b.sac.q_opt.state.values()]
    a.sac.update(_batch(obs=3, act=1, seed=1))
    for m, s in zip(moments, b.sac.q_opt.state.values(), strict=True):
        assert torch.equal(m, s["exp_avg"])


def test_acting_draws_the_same_action_as_the_training_forward():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, (8,), torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 4.0]))
    obs = torch.randn(5, 3)
    for deterministic in (False, True):
        a, none = actor.act(obs, deterministic, torch.Generator().manual_seed(7))
        b, logp = actor(obs, deterministic, torch.Generator().manual_seed(7))
        assert none is None and logp.shape == (5,)
        torch.testing.assert_close(a, b.detach())


def _pendulum_learner(tmp_path, **kw):
    from asyncrl.algos.sac.learner import SACLearner
    from asyncrl.envs import check_env
    from asyncrl.settings import TrainConfig, resolve

    cfg = resolve(
        TrainConfig(algo="sac", env="Pendulum-v1", hidden=[8], run_dir=str(tmp_path), **kw),
        "classic",
    )
    return SACLearner(cfg, check_env(cfg.env))


def test_a_target_entropy_of_zero_from_pbt_means_minus_the_action_dimensions(tmp_path):
    """PBT's values replace the learner's own, 0 too: a policy that copies one at 0 (-|A|)
    trains towards -|A|, as pbt.jsonl and the summary say, not towards its own old value."""
    learner = _pendulum_learner(tmp_path, target_entropy=-3.0)
    assert learner.sac.target_entropy == -3.0
    learner.set_hyperparameters({"target_entropy": 0.0})
    assert learner.sac.target_entropy == -1.0  # Pendulum: one action dimension
    learner.set_hyperparameters({"target_entropy": -2.5})
    assert learner.sac.target_entropy == -2.5
    source = _pendulum_learner(tmp_path, target_entropy=0.0)
    assert source.sac.target_entropy == -1.0
    learner.adopt(source.state_dict(), {"target_entropy": 0.0})
    assert learner.sac.target_entropy == -1.0


def test_per_policy_target_entropies_of_zero_are_saved_resolved():
    """Each policy's 0 is resolved to -|A| as the run's is: PBT's values, pbt.jsonl and the
    summary then hold the target the policy trains with (PBT's factors leave 0 at 0)."""
    from asyncrl.envs import check_env
    from asyncrl.settings import for_env, from_dict, policy_config, resolve, validate

    cfg = resolve(
        from_dict({"algo": "sac", "env": "Pendulum-v1", "policies": 2, "envs_per_actor": 2,
                   "target_entropy": [0.0, -3.0]}),
        "classic",
    )  # fmt: skip
    validate(cfg)
    cfg, _ = for_env(cfg, check_env(cfg.env))
    assert cfg.population["target_entropy"] == [-1.0, -3.0]
    assert [policy_config(cfg, p).target_entropy for p in range(2)] == [-1.0, -3.0]
