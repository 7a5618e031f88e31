"""Recurrent PPO on a hand-made batch with episode ends inside chunks: its sequence targets,
loss, gradients and update equal a straightforward step-by-step unroll of every env's episodes
written here, a minibatch is whole sequences, and the fused step (fused.SequenceStep, which
runs take) trains as the autograd step."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from asyncrl.algos.ppo.config import PPOConfig
from asyncrl.algos.ppo.masked_rnn import (
    gru_backward,
    gru_forward,
    lstm_backward,
    lstm_forward,
    masked_gru,
    tanh,
)
from asyncrl.algos.ppo.networks import build_policy, unroll_core, unroll_segments
from asyncrl.algos.ppo.recurrent import RecurrentPPO, from_sequences, to_sequences
from asyncrl.algos.ppo.returns import gae, vtrace
from asyncrl.algos.ppo.update import step_hyperparameters
from asyncrl.envs import EnvSpec
from conftest import move_parameters

T, B, L, OBS, N_ACT = 16, 3, 8, 3, 2  # two chunks of 8 steps per env
C = T // L
SPEC = EnvSpec("toy", (OBS,), True, (), N_ACT, None, None)
# (step, env) of episode ends: inside a chunk, on a chunk's last step, two in one chunk
TERMINATED = [(3, 0), (10, 1)]
TRUNCATED = [(7, 0), (12, 1)]


def _policy(kind: str):
    torch.manual_seed(0)
    return build_policy(SPEC, [16], "tanh", norm_obs=False, recurrent=kind, rnn_size=8)


def _rollout(kind: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    terminated = torch.zeros(T, B, dtype=torch.bool)
    truncated = torch.zeros(T, B, dtype=torch.bool)
    for t, b in TERMINATED:
        terminated[t, b] = True
    for t, b in TRUNCATED:
        truncated[t, b] = True
    S = 2 if kind == "lstm" else 1
    states = torch.randn(C, B, S, 8, generator=g)  # as carried over from earlier rollouts
    states[1, 0] = 0.0  # env 0's episode ended on chunk 0's last step: chunk 1 starts afresh
    return {
        "obs": torch.randn(T + 1, B, OBS, generator=g),
        "actions": torch.randint(0, N_ACT, (T, B), generator=g),
        "logp": -torch.rand(T, B, generator=g) - 0.3,  # an acting policy a few versions back
        "rewards": torch.randn(T, B, generator=g),
        "terminated": terminated,
        "truncated": truncated,
        "trunc_values": torch.where(truncated, torch.randn(T, B, generator=g), 0.0),
        "rnn_states": states,
    }


def _hx(kind, h):
    return (h[0][None, None], h[1][None, None]) if kind == "lstm" else h[0][None, None]


def _flat(kind, hx):
    return torch.stack([hx[0][0, 0], hx[1][0, 0]]) if kind == "lstm" else hx[0, 0][None]


def _reference(policy, r, kind):
    """Every env stepped one observation at a time from its chunks' stored states, the state
    zeroed where an episode starts inside a chunk: log-probs, entropies, values [T, B] and the
    bootstrap value of obs[T]."""
    done = r["terminated"] | r["truncated"]
    logp, entropy, value = (torch.zeros(T, B) for _ in range(3))
    tail = torch.zeros(B)
    for b in range(B):
        for t in range(T):
            if t % L == 0:
                h = r["rnn_states"][t // L, b]
            elif done[t - 1, b]:
                h = torch.zeros_like(h)
            z = policy.torso(r["obs"][t, b][None])
            out, hx = policy.core(z[None], _hx(kind, h))
            h = _flat(kind, hx)
            dist = torch.distributions.Categorical(logits=policy.pi(out[0, 0]))
            logp[t, b] = dist.log_prob(r["actions"][t, b])
            entropy[t, b] = dist.entropy()
            value[t, b] = policy.v(out[0, 0])[0]
        if done[T - 1, b]:
            h = torch.zeros_like(h)
        out, _ = policy.core(policy.torso(r["obs"][T, b][None])[None], _hx(kind, h))
        tail[b] = policy.v(out[0, 0])[0]
    return logp, entropy, value, tail


def _reference_loss(policy, r, kind, hp, old_logp, adv, returns, old_values):
    """PPO's clipped loss over all samples, as written in the paper's order."""
    logp, entropy, value, _ = _reference(policy, r, kind)
    ratio = (logp - old_logp).exp()
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - hp.clip_coef, 1 + hp.clip_coef)).mean()
    v = 0.5 * (value - returns).square().mean()
    return pg + hp.vf_coef * v - hp.ent_coef * entropy.mean()


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize(
    ("correction", "compile"),
    [
        ("none", False),
        ("vtrace", False),
        ("decoupled", False),
        pytest.param("vtrace", True, marks=pytest.mark.slow),  # the compiled step's forward
    ],
)
def test_sequence_targets_equal_a_step_by_step_unroll(kind, correction, compile):
    policy = _policy(kind)
    r = _rollout(kind)
    hp = PPOConfig(correction=correction, minibatch_size=2 * L, gamma=0.9, gae_lambda=0.8)
    ppo = RecurrentPPO(policy, hp, 1e-3, L, compile=compile)
    assert ppo.fused.compiled == compile
    batch = ppo.targets(r)
    with torch.no_grad():
        logp, _, value, tail = _reference(policy, r, kind)
    values = torch.cat([value, tail[None]])
    ends = (r["terminated"], r["truncated"], r["trunc_values"])
    if correction == "vtrace":
        args = (r["logp"], logp, r["rewards"], values, *ends, hp.gamma)
        adv, ret = vtrace(*args, hp.vtrace_rho_bar, hp.vtrace_c_bar, hp.gae_lambda)
    else:
        adv, ret = gae(r["rewards"], values, *ends, hp.gamma, hp.gae_lambda)
    clip_from = logp if correction == "decoupled" else r["logp"]
    got = {k: from_sequences(batch[k], B) for k in ("values", "adv", "returns", "logp")}
    torch.testing.assert_close(got["values"], value)
    torch.testing.assert_close(got["adv"], adv)
    torch.testing.assert_close(got["returns"], ret)
    torch.testing.assert_close(got["logp"], clip_from)
    assert batch["states"].shape[0] == C * B  # one stored state per sequence
    torch.testing.assert_close(batch["states"], r["rnn_states"].flatten(0, 1))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_sequence_loss_and_gradients_equal_a_step_by_step_unroll(kind):
    policy = _policy(kind)
    r = _rollout(kind)
    hp = PPOConfig(minibatch_size=C * B * L, ent_coef=0.01, value_clip=0.0)
    ppo = RecurrentPPO(policy, hp, 1e-3, L)
    batch = ppo.targets(r)
    g = torch.Generator().manual_seed(5)
    old_logp = r["logp"] + 0.2 * torch.randn(T, B, generator=g)  # some ratios clip
    batch["logp"] = to_sequences(old_logp, L)
    mb = [batch[k] for k in ("features", "actions", "logp", "weight", "adv", "returns")]
    mb += [batch["values"], batch["first"], batch["states"]]
    loss = ppo.loss(step_hyperparameters(hp, 1e-3), *mb)[0]
    grads = torch.autograd.grad(loss, ppo.params)

    reference = copy.deepcopy(policy)
    adv, ret, val = (from_sequences(batch[k], B) for k in ("adv", "returns", "values"))
    expected = _reference_loss(reference, r, kind, hp, old_logp, adv, ret, val)
    expected_grads = torch.autograd.grad(expected, list(reference.parameters()))
    torch.testing.assert_close(loss, expected)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert any(float(x.abs().sum()) > 0 for x in grads[:4])  # the core and torso are trained


def test_an_update_of_one_minibatch_is_one_adam_step_on_the_reference_loss():
    policy = _policy("lstm")
    r = _rollout("lstm")
    hp = PPOConfig(minibatch_size=C * B * L, epochs=1, value_clip=0.0, max_grad_norm=0.0)
    reference = copy.deepcopy(policy)
    ppo = RecurrentPPO(policy, hp, 1e-3, L)
    batch = ppo.targets(r)
    adv, ret, val = (from_sequences(batch[k], B) for k in ("adv", "returns", "values"))
    ppo.update(batch, 1e-3, torch.Generator().manual_seed(0))

    opt = torch.optim.Adam(reference.parameters(), lr=1e-3, eps=1e-5)
    _reference_loss(reference, r, "lstm", hp, r["logp"], adv, ret, val).backward()
    opt.step()
    for got, want in zip(policy.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_minibatches_are_whole_sequences_each_from_its_stored_state(monkeypatch):
    policy = _policy("gru")
    hp = PPOConfig(minibatch_size=2 * L, epochs=2)
    ppo = RecurrentPPO(policy, hp, 1e-3, L)
    batch = ppo.targets(_rollout("gru"))
    seen = []
    step = ppo._step

    def record(clip, features, actions, *rest):
        seen.append((features.shape, rest[-1].shape, features.sum().item()))
        return step(clip, features, actions, *rest)

    monkeypatch.setattr(ppo, "_step", record)
    ppo.update(batch, 1e-3, torch.Generator().manual_seed(0))
    assert len(seen) == hp.epochs * (C * B // 2)  # 6 sequences, 2 per minibatch
    assert all(f == (L, 2, OBS) and s == (2, 1, 8) for f, s, _ in seen)
    per_epoch = [sum(x for *_, x in seen[i : i + 3]) for i in (0, 3)]
    total = batch["features"].sum().item()
    assert per_epoch == pytest.approx([total, total])  # every sequence once per epoch


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_packed_unroll_equals_one_call_where_no_episode_starts(kind):
    core = _policy(kind).core
    g = torch.Generator().manual_seed(1)
    z = torch.randn(L, 4, 16, generator=g)
    state = torch.randn(4, 2 if kind == "lstm" else 1, 8, generator=g)
    first = torch.zeros(L, 4, dtype=torch.bool)
    plain, plain_final = unroll_core(core, kind, z, state, first)
    first[3, 1] = first[5, 1] = first[7, 2] = True  # resets: compare with a zeroed restart
    packed, final = unroll_core(core, kind, z, state, first)
    for b in (0, 3):  # sequences without resets are the same
        torch.testing.assert_close(packed[:, b], plain[:, b])
        torch.testing.assert_close(final[b], plain_final[b])
    zero = torch.zeros_like(state[:1])
    tail, tail_final = unroll_core(core, kind, z[5:, 1:2], zero, first[5:, 1:2] & False)
    torch.testing.assert_close(packed[5:, 1:2], tail)
    torch.testing.assert_close(final[1:2], tail_final)
    assert not torch.allclose(packed[5:, 1], plain[5:, 1])


class _Spy(torch.nn.Module):
    """A core that records torch's thread count in its forward and at its backward's end."""

    def __init__(self, core: torch.nn.Module):
        super().__init__()
        self.core, self.seen = core, []

    def forward(self, x, hx):
        self.seen.append(("forward", torch.get_num_threads()))
        return self.core(_Seen.apply(x, self.seen), hx)


class _Seen(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, seen):
        ctx.seen = seen
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.seen.append(("backward", torch.get_num_threads()))
        return grad, None


def test_torchs_lstm_runs_on_one_thread_with_the_bits_of_all_threads(monkeypatch):
    """oneDNN's LSTM splits each time step across threads (slow on shared cores): run_core
    runs it, forward and backward, on one thread, and the learner's count comes back after
    each. Atari's sizes (512 in, 128 units), where oneDNN splits the steps."""
    import asyncrl.algos.ppo.networks as networks

    torch.manual_seed(0)
    core = _Spy(torch.nn.LSTM(512, 128))
    g = torch.Generator().manual_seed(1)
    z0 = torch.randn(24, 4, 512, generator=g)
    state = torch.randn(4, 2, 128, generator=g)
    first = torch.zeros(24, 4, dtype=torch.bool)
    first[5, 0] = first[17, 2] = True

    def run():
        z = z0.clone().requires_grad_()
        core.zero_grad()
        out, _ = unroll_segments(core, "lstm", z, state, first, final_state=False)
        (out.square().sum() + out[:, 1].sum()).backward()
        return [out.detach(), z.grad, *(p.grad for p in core.parameters())]

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        one = run()
        assert core.seen == [("forward", 1), ("backward", 1)]
        assert torch.get_num_threads() == 2
        with torch.no_grad():  # targets: no marks, the count back after the forward
            unroll_segments(core, "lstm", z0, state, first, final_state=False)
        assert core.seen[-1] == ("forward", 1) and torch.get_num_threads() == 2
        monkeypatch.setattr(networks, "run_core", lambda core, x, hx: core(x, hx))
        core.seen.clear()
        both = run()
        assert core.seen == [("forward", 2), ("backward", 2)]
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, both, strict=True):
        assert torch.equal(a, b)


def test_the_written_out_gru_equals_torchs_in_outputs_and_gradients():
    """masked_gru (what unroll_core runs for a GRU on the CPU) against torch's nn.GRU cut into
    segments at the episode starts: outputs, final states and every gradient."""
    core = _policy("gru").core
    g = torch.Generator().manual_seed(2)
    z = torch.randn(L, 5, 16, generator=g, requires_grad=True)
    state = torch.randn(5, 1, 8, generator=g, requires_grad=True)
    first = torch.zeros(L, 5, dtype=torch.bool)
    first[0, 0] = True  # row 0 is not read
    first[3, 1] = first[4, 1] = first[6, 1] = True  # a one-step episode, then another
    first[2, 3] = first[7, 4] = True  # on the last step; steps 1 and 5 have no reset
    w_out = torch.randn(L, 5, 8, generator=g)
    w_final = torch.randn(5, 1, 8, generator=g)
    results = []
    for unroll in (masked_gru, lambda *a: unroll_segments(*a[:1], "gru", *a[1:])):
        z.grad = state.grad = None
        core.zero_grad()
        out, final = unroll(core, z, state, first)
        ((out * w_out).sum() + (final * w_final).sum()).backward()
        grads = [z.grad, state.grad, *(p.grad for p in core.parameters())]
        results.append([out.detach(), final.detach(), *grads])
    for mine, torchs in zip(*results, strict=True):
        torch.testing.assert_close(mine, torchs, rtol=1e-5, atol=1e-6)


def test_sequences_round_trip():
    x = torch.arange(T * B * 2).view(T, B, 2)
    seq = to_sequences(x, L)
    assert seq.shape == (L, C * B, 2)
    assert torch.equal(seq[:, 1 * B + 2], x[L : 2 * L, 2])  # chunk 1 of env 2
    assert torch.equal(from_sequences(seq, B), x)


FUSED_CASES = {
    "discrete": dict(),
    "discrete, value clip, entropy, vtrace": dict(
        hp=dict(value_clip=0.2, ent_coef=0.01, correction="vtrace")
    ),
    "continuous, decoupled, no grad clip, no adv norm": dict(
        discrete=False, hp=dict(correction="decoupled", max_grad_norm=0.0, norm_adv=False)
    ),
    "two torso layers, relu": dict(hidden=[16, 12], activation="relu"),
}


def _fused_pair(kind, discrete=True, hidden=(16,), activation="tanh", hp=None, compile=False):
    """Recurrent PPOs on copies of one policy, the autograd reference and the fused step
    (compiled or not), and a batch with episode ends inside chunks (continuous: Gaussian
    actions)."""
    spec = SPEC
    if not discrete:
        spec = EnvSpec("toy", (OBS,), False, (2,), 2, np.full(2, -1.0, np.float32), np.ones(2))
    torch.manual_seed(0)
    policy = build_policy(spec, list(hidden), activation, False, recurrent=kind, rnn_size=8)
    cfg = PPOConfig(minibatch_size=2 * L, epochs=2, **(hp or {}))
    ref = RecurrentPPO(copy.deepcopy(policy), cfg, 1e-3, L, fused=False)
    new = RecurrentPPO(copy.deepcopy(policy), cfg, 1e-3, L, compile=compile)
    assert ref.fused is None and new.fused is not None and new.fused.compiled == compile
    r = _rollout(kind)
    if not discrete:
        r["actions"] = torch.randn(T, B, 2, generator=torch.Generator().manual_seed(4))
    return ref, new, ref.targets(r)


def _assert_same_training(ref, new, batch, updates=2):
    """Updates with the lr and clip moving between them: the statistics, the parameters and
    Adam's moments agree up to rounding."""
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for i in range(updates):
        lr, clip_scale = 1e-3 * (1 - 0.3 * i), 1 - 0.2 * i
        s_ref, s_new = ref.update(batch, lr, g1, clip_scale), new.update(batch, lr, g2, clip_scale)
        assert s_new.keys() == s_ref.keys()
        for k in s_ref:
            assert s_new[k] == pytest.approx(s_ref[k], rel=1e-4, abs=1e-6), k
    theirs = new.policy.state_dict()
    for name, a in ref.policy.state_dict().items():
        torch.testing.assert_close(theirs[name], a, rtol=1e-5, atol=1e-6, msg=name)
    s_ref, s_new = ref.optimizer.state_dict(), new.optimizer.state_dict()
    for i, st in s_ref["state"].items():
        for k in st:
            torch.testing.assert_close(s_new["state"][i][k], st[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("case", list(FUSED_CASES))
def test_fused_sequence_step_trains_as_the_autograd_step(kind, case):
    _assert_same_training(*_fused_pair(kind, **FUSED_CASES[case]))


@pytest.mark.slow  # ~15-20 s to compile each
@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize(
    "case",
    ["discrete, value clip, entropy, vtrace", "continuous, decoupled, no grad clip, no adv norm"],
)
def test_compiled_sequence_step_trains_as_the_autograd_step(kind, case):
    """The step compiled (its core written out in masked_rnn, one inductor graph): as the
    autograd step, episode starts inside chunks included."""
    _assert_same_training(*_fused_pair(kind, **FUSED_CASES[case], compile=True))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_written_out_cores_of_the_compiled_step_equal_torchs(kind):
    """masked_rnn's lstm/gru forward and backward (what the compiled step runs, eager here)
    against torch's core cut into segments at the episode starts: outputs and every gradient;
    row 0 of ``first`` is not read, as in unroll_core."""
    core = _policy(kind).core
    g = torch.Generator().manual_seed(2)
    S = 2 if kind == "lstm" else 1
    z = torch.randn(L, 5, 16, generator=g, requires_grad=True)
    state = torch.randn(5, S, 8, generator=g)
    first = torch.zeros(L, 5, dtype=torch.bool)
    first[0, 0] = True
    first[3, 1] = first[4, 1] = first[6, 1] = True
    first[2, 3] = first[7, 4] = True
    d_out = torch.randn(L, 5, 8, generator=g)
    out, _ = unroll_segments(core, kind, z, state, first, final_state=False)
    ref = torch.autograd.grad(out, [z, *core.parameters()], d_out)
    w = [p.detach() for p in core.parameters()]
    keep = torch.cat([torch.ones_like(first[:1]), ~first[1:]]).float()[:, :, None]
    with torch.no_grad():
        if kind == "lstm":
            mine, saved = lstm_forward(z, state[:, 0], state[:, 1], keep, *w)
            dz, d_ih, d_hh, d_b = lstm_backward(saved, d_out, *w[:2])
            grads = [dz, d_ih, d_hh, d_b, d_b]
        else:
            mine, saved = gru_forward(z, state[:, 0], keep, *w)
            grads = list(gru_backward(saved, d_out, *w[:2]))
    torch.testing.assert_close(mine, out.detach(), rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_compiled_steps_tanh_is_torchs_within_a_few_ulp(compile):
    """masked_rnn.tanh (the compiled steps' activation) against float64 tanh: within 2 ulp of
    the result near zero, around the switch from series to exp at 0.25 and in the tails (where
    it is +-1); inf, -inf and NaN as torch's tanh gives them."""
    g = torch.Generator().manual_seed(0)
    x = [torch.randn(100_000, generator=g) * s for s in (1e-6, 1e-3, 0.1, 0.3, 1, 4, 30)]
    edges = torch.tensor([0.25, 9.0, 10.0, 11.0, 1e30, 0.0])
    x = torch.cat([*x, torch.linspace(0.24, 0.26, 10_001), edges, -edges])
    fn = torch.compile(tanh, fullgraph=True, dynamic=False) if compile else tanh
    y, ref = fn(x), torch.tanh(x.double())
    ulp = torch.finfo(torch.float32).eps * ref.abs().clamp(min=torch.finfo(torch.float32).tiny)
    assert ((y.double() - ref).abs() <= 2 * ulp).all()
    special = torch.tensor([float("inf"), float("-inf"), float("nan")])
    torch.testing.assert_close(fn(special), torch.tanh(special), equal_nan=True)


@pytest.mark.parametrize("compile", [False, True])
def test_fused_sequence_step_trains_parameters_moved_before_each_step(compile):
    """A Hogwild! hook swaps the parameters' storage (FlatParams.view_into) before every
    step: the fused step, compiled or not, trains them where they are now."""
    ref, new, batch = _fused_pair("lstm", compile=compile)
    vectors = []

    def move() -> None:
        vectors.append(move_parameters(new.params))

    new.before_step = move
    _assert_same_training(ref, new, batch, updates=1)
    assert new.params[0].data_ptr() == torch.from_numpy(vectors[-1]).data_ptr()


def test_a_nan_gradient_step_of_the_fused_sequence_step_is_not_applied_and_is_counted():
    _, new, batch = _fused_pair("gru")
    seen: list[tuple[int, float]] = []
    new.on_nonfinite = lambda count, norm: seen.append((count, norm))
    new.update(batch, 1e-3, torch.Generator().manual_seed(5))
    assert seen == []
    before = [p.detach().clone() for p in new.params]
    bad = dict(batch, adv=torch.full_like(batch["adv"], float("nan")))
    new.update(bad, 1e-3, torch.Generator().manual_seed(5))
    steps = new.cfg.epochs * (C * B // 2)  # 6 sequences, 2 per minibatch
    assert len(seen) == 1 and seen[0][0] == steps and not np.isfinite(seen[0][1])
    for p, b in zip(new.params, before, strict=True):
        assert torch.equal(p.detach(), b)
