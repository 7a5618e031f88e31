"""A population's policies acting in one forward (JointPPOActing) against each policy's own
PPOActing in turn: the same actions and recorded log-probs up to float rounding, each policy
drawing from its own generator, with uneven and empty groups of envs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from asyncrl.algos.ppo.acting import JointPPOActing, PPOActing
from asyncrl.algos.ppo.networks import build_policy
from asyncrl.envs import EnvSpec

OBS, K = 5, 7
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _spec(discrete: bool) -> EnvSpec:
    if discrete:
        return EnvSpec("toy", (OBS,), True, (), 3, None, None)
    return EnvSpec("toy", (OBS,), False, (2,), 2, np.full(2, -1.0, np.float32), np.ones(2))


def _actings(discrete: bool, P: int, activation: str, min_std: float) -> list[PPOActing]:
    out = []
    for p in range(P):
        torch.manual_seed(p)  # every policy its own weights, normaliser and log-std
        policy = build_policy(
            _spec(discrete), [16, 16], activation, norm_obs=True, norm_obs_min_std=min_std
        )
        policy.requires_grad_(False)
        policy.obs_norm.update(torch.randn(50, OBS) * (p + 1) + p)
        if not discrete:
            policy.log_std.add_(0.1 * p)
        out.append(PPOActing(policy, torch.Generator().manual_seed(10 + p), np.dtype("float32")))
    return out


@pytest.mark.parametrize("discrete", [True, False])
@pytest.mark.parametrize(
    "groups,activation,min_std",
    [
        ([[0, 3, 6], [1, 4], [2, 5]], "tanh", 0.0),  # the fixed mapping's k mod P: uneven
        ([[0, 1, 2, 3, 4, 5, 6], [], [2]], "relu", 0.0),  # a random mapping's draw: one empty
        ([[0, 3, 6], [1, 4], [2, 5]], "tanh", 1.5),  # the normaliser's std floor: policy 0's
    ],
)
def test_one_forward_acts_as_each_policy_in_turn(discrete, groups, activation, min_std):
    P = len(groups)
    joint_side = _actings(discrete, P, activation, min_std)
    own_side = _actings(discrete, P, activation, min_std)
    joint = JointPPOActing.of(joint_side)
    assert joint is not None
    obs = torch.randn(K, OBS) * 3
    for t in range(3):  # the generators move on alike
        joint.refresh()
        rows_joint = [SimpleNamespace(logp=np.zeros((3, len(g)), np.float32)) for g in groups]
        rows_own = [SimpleNamespace(logp=np.zeros((3, len(g)), np.float32)) for g in groups]
        envs = [np.asarray(g, dtype=np.int64) for g in groups]
        acted = joint.act(obs, [(e, r, t) for e, r in zip(envs, rows_joint, strict=True)])
        for p, e in enumerate(envs):
            if not e.size:
                assert acted[p] is None
                continue
            expected = own_side[p].act(obs[e], t, rows_own[p])
            if discrete:
                assert torch.equal(acted[p], expected)
            else:
                torch.testing.assert_close(acted[p], expected, **TOL)
            np.testing.assert_allclose(rows_joint[p].logp[t], rows_own[p].logp[t], **TOL)


def test_recurrent_and_image_policies_act_in_turn():
    spec = _spec(True)
    lstm = build_policy(spec, [16], "tanh", False, "auto", "lstm", 8)
    acting = PPOActing(lstm, torch.Generator(), np.dtype("float32"), recurrence=4)
    assert JointPPOActing.of([acting, acting]) is None
    pixels = EnvSpec("toy", (4, 84, 84), True, (), 3, None, None, obs_dtype="uint8")
    cnn = build_policy(pixels, [512], "relu", False, "cnn")
    acting = PPOActing(cnn, torch.Generator(), np.dtype("uint8"))
    assert JointPPOActing.of([acting, acting]) is None


def test_one_policy_acts_alone():
    """Nothing to join: one policy's own forward is the exact one (a one-policy run's actions
    stay bit for bit those of ActorCritic.act)."""
    assert JointPPOActing.of(_actings(True, 1, "tanh", 0.0)) is None
    assert JointPPOActing.of(_actings(True, 2, "tanh", 0.0)) is not None
