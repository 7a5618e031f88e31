"""PPO's minibatch step with its gradients written out: for the MLP actor-critic
(:class:`MLPStep`) forward, losses, backward, gradient clip and Adam step as a few dozen tensor
ops, no autograd (with ``compile``, one inductor graph); for a recurrent policy with an MLP
torso (:class:`SequenceStep`) the same but for the core, which autograd differentiates (with
``compile``, the core written out too: ``masked_rnn``).

The policy and value MLPs run as one batched network (their first layers as one matmul, their
hidden layers as one batched matmul), derived from the module's own parameters at every step,
so the parameter layout (state dict, published vector, checkpoints) is unchanged. Adam's state
lives in the ``torch.optim.Adam`` it is given, in that optimizer's own format. Why and how fast:
docs/benchmarks/learner-floor.md and docs/benchmarks/recurrent-lag.md.
"""

from __future__ import annotations

import torch
from torch import nn

from asyncrl.algos.ppo.config import PPOConfig
from asyncrl.algos.ppo.masked_rnn import (
    gru_backward,
    gru_forward,
    lstm_backward,
    lstm_forward,
    tanh,
)
from asyncrl.algos.ppo.networks import unroll_core
from asyncrl.learning.fused import PackedAdam, compile_step, flat_span
from asyncrl.nets import LOG_2PI, autocast

# flat_span stays importable from here (its home is learning/fused.py)
__all__ = ["MLPStep", "SequenceStep", "flat_span", "supports", "supports_sequences"]


def supports(policy: nn.Module) -> bool:
    """Whether :class:`MLPStep` can train ``policy``: separate policy and value MLPs
    (``ActorCritic`` with the mlp encoder)."""
    if getattr(policy, "recurrent", False):
        return False  # its heads read a core unrolled over sequences: the autograd step
    if getattr(policy, "n_mask", 0):
        return False  # masked logits: the autograd step
    pi = getattr(policy, "pi", None)
    return getattr(policy, "encoder", None) is None and isinstance(pi, nn.Sequential)


def supports_sequences(policy: nn.Module) -> bool:
    """Whether :class:`SequenceStep` can train ``policy``: a recurrent policy whose core reads
    an MLP torso."""
    return getattr(policy, "recurrent", False) and getattr(policy, "torso", None) is not None


def _linears(seq: nn.Sequential) -> list[nn.Linear]:
    return [m for m in seq if isinstance(m, nn.Linear)]


class FusedStep(PackedAdam):
    """A PPO minibatch step with its gradients written out, on an optimizer's packed vectors
    (:class:`~asyncrl.learning.fused.PackedAdam`: the gradient clip and Adam), the statistics
    here, a network's gradients in ``_grads`` (:class:`MLPStep`, :class:`SequenceStep`).

    Called as ``step(hp, *minibatch)`` with ``hp = [clip, lr, ent_coef]`` as a tensor (a
    compiled step then never recompiles when the schedules or PBT move them); returns the
    autograd step's statistics and two more (the share of steps not applied and their norm).
    """

    def __init__(
        self,
        cfg: PPOConfig,
        optimizer: torch.optim.Adam,
        keys: dict[int, tuple],
        compile: bool = False,
        precision: str = "fp32",
    ):
        """``keys``: each parameter's key (by ``id``) in ``self.index``. ``precision`` bf16:
        ``_grads`` under a bfloat16 autocast, its gradients then float32 for the clip and
        Adam."""
        super().__init__(cfg, optimizer, keys, compile)
        self.precision = precision
        self._fn = compile_step(self, type(self)._body) if compile else self._body

    def _grads(
        self, params, clip, ent_coef, *batch
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The loss's gradients (the optimizer's order) and statistics but the gradient norm."""
        raise NotImplementedError

    def _act(self, a: torch.Tensor) -> torch.Tensor:
        if not self.tanh:
            return a.relu()
        return tanh(a) if self.compiled else a.tanh()  # compiled: masked_rnn's, ~1.7x faster

    def _act_backward(self, d: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if self.tanh:
            return torch.ops.aten.tanh_backward(d, out)
        return torch.ops.aten.threshold_backward(d, out, 0)

    def _wb(self, w, net: str, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return w[self.index[net, i, 0]], w[self.index[net, i, 1]]

    # ------------------------------------------------------------------ entry points
    def __call__(self, hp: torch.Tensor, *batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self._fn(*self._flat, hp, *batch)

    # ------------------------------------------------------------------ the step
    def _body(self, flat_p, flat_m, flat_v, steps, hp, *batch) -> torch.Tensor:
        """One step on the packed vectors: gradients, their clip, Adam; the statistics."""
        # compiled, the graph reads the parameters as views of its input; else they are such
        # views already (pack)
        params = self._views(flat_p) if self.compiled else self.params
        # eager, ent_coef 0 leaves the entropy's gradient out (a few small ops a step); not
        # compiled, where a test of the value would be a guard, failed whenever PBT moves it
        ent_coef = hp[2] if self.compiled or self.cfg.ent_coef else None
        with autocast(self.precision, flat_p.device):
            grads, stats = self._grads(params, hp[0], ent_coef, *batch)
        grads = [g.float() for g in grads]  # float32 for the clip and Adam (fp32: no copy)
        grad_norm, ok, norm = self.descend(flat_p, flat_m, flat_v, steps, grads, hp[1])
        bad = (~ok).to(grad_norm.dtype)
        return torch.stack([*stats, grad_norm, bad, torch.where(ok, 0.0, norm)])


class MLPStep(FusedStep):
    """``PPO._minibatch_step`` for an MLP ``ActorCritic``, its gradients derived by hand."""

    def __init__(
        self,
        policy: nn.Module,
        cfg: PPOConfig,
        optimizer: torch.optim.Adam,
        compile: bool = False,
        precision: str = "fp32",
    ):
        self.discrete = policy.discrete
        pi, v = _linears(policy.pi), _linears(policy.v)
        self.layers = len(pi)
        acts = {type(m) for m in [*policy.pi, *policy.v] if not isinstance(m, nn.Linear)}
        if acts - {nn.Tanh} and acts - {nn.ReLU} or len(v) != self.layers:
            raise ValueError("MLPStep: policy and value MLPs of one activation and depth")
        self.tanh = acts != {nn.ReLU}
        keys = {}
        for name, layers in (("pi", pi), ("v", v)):
            for i, m in enumerate(layers):
                keys[id(m.weight)], keys[id(m.bias)] = (name, i, 0), (name, i, 1)
        if not self.discrete:
            keys[id(policy.log_std)] = ("log_std", 0, 0)
        super().__init__(cfg, optimizer, keys, compile, precision)

    # ------------------------------------------------------------------ forward and backward
    def _grads(self, w, clip, ent_coef, x, actions, old_logp, weight, adv, returns, old_values):
        """Gradients of the PPO loss for the network ``w`` (its tensors in the optimizer's
        order) and the statistics but the gradient norm. Activations are feature-major,
        [units, B]."""
        pi_out, value, acts, hidden_w = self._forward(w, x)
        pi_out, value = pi_out.float(), value.float()  # the loss in float32 (bf16: autocast)
        log_std = None if self.discrete else w[self.index["log_std", 0, 0]]
        d_out, d_value, d_log_std, stats = loss_grads(
            self.cfg, clip, ent_coef, pi_out, value, log_std, actions, old_logp, weight, adv,
            returns, old_values,
        )  # fmt: skip
        grads = self._backward(w, d_out, d_value.unsqueeze(0), acts, hidden_w, x)
        if d_log_std is not None:
            grads[self.index["log_std", 0, 0]] = d_log_std
        return grads, stats

    def _forward(self, w, x: torch.Tensor):
        """Both MLPs, batched: [W_pi; W_v] x for the first layer, one batched matmul for each
        hidden layer, then each output layer. Returns the policy's output [A, B], the values
        [B], the hidden activations ([2, h, B] each) and the stacked hidden weights."""
        L, xt = self.layers, x.T
        (wp, bp), (wv, bv) = self._wb(w, "pi", 0), self._wb(w, "v", 0)
        if L == 1:  # no hidden layer: two linear maps of the input
            out = torch.addmm(bp.unsqueeze(1), wp, xt)
            value = torch.addmm(bv.unsqueeze(1), wv, xt).squeeze(0)
            return out, value, [], []
        h = self._act(torch.addmm(torch.cat([bp, bv]).unsqueeze(1), torch.cat([wp, wv]), xt))
        acts, hidden_w = [h.view(2, -1, h.shape[1])], [None]
        for i in range(1, L - 1):
            (wp, bp), (wv, bv) = self._wb(w, "pi", i), self._wb(w, "v", i)
            stacked = torch.stack([wp, wv])
            b = torch.stack([bp, bv]).unsqueeze(2)
            acts.append(self._act(torch.baddbmm(b, stacked, acts[-1])))
            hidden_w.append(stacked)
        (wp, bp), (wv, bv) = self._wb(w, "pi", L - 1), self._wb(w, "v", L - 1)
        out = torch.addmm(bp.unsqueeze(1), wp, acts[-1][0])
        value = torch.addmm(bv.unsqueeze(1), wv, acts[-1][1]).squeeze(0)
        return out, value, acts, hidden_w

    def _backward(self, w, d_pi, d_v, acts, hidden_w, x) -> list[torch.Tensor]:
        """Weight and bias gradients of both MLPs, in the optimizer's order (log-std's left
        None), from the derivatives of their outputs (``d_pi`` [A, B], ``d_v`` [1, B])."""
        g: list[torch.Tensor | None] = [None] * len(self.params)
        idx, L = self.index, self.layers

        def put(i: int, gw_pi, gb_pi, gw_v, gb_v) -> None:
            g[idx["pi", i, 0]], g[idx["pi", i, 1]] = gw_pi, gb_pi
            g[idx["v", i, 0]], g[idx["v", i, 1]] = gw_v, gb_v

        if L == 1:
            put(0, torch.mm(d_pi, x), d_pi.sum(1), torch.mm(d_v, x), d_v.sum(1))
            return g
        last = acts[-1]
        put(
            L - 1,
            torch.mm(d_pi, last[0].T),
            d_pi.sum(1),
            torch.mm(d_v, last[1].T),
            d_v.sum(1),
        )
        w_pi, w_v = w[idx["pi", L - 1, 0]], w[idx["v", L - 1, 0]]
        d_h = torch.stack([torch.mm(w_pi.T, d_pi), torch.mm(w_v.T, d_v)])
        for i in range(L - 2, 0, -1):
            d_a = self._act_backward(d_h, acts[i])
            gw, gb = torch.bmm(d_a, acts[i - 1].transpose(1, 2)), d_a.sum(2)
            put(i, gw[0], gb[0], gw[1], gb[1])
            d_h = torch.bmm(hidden_w[i].transpose(1, 2), d_a)
        d_a = self._act_backward(d_h, acts[0]).flatten(0, 1)  # [2h, B]
        gw, gb = torch.mm(d_a, x), d_a.sum(1)
        h = gw.shape[0] // 2
        put(0, gw[:h], gb[:h], gw[h:], gb[h:])
        return g


class SequenceStep(FusedStep):
    """``RecurrentPPO``'s minibatch step for an MLP torso, a recurrent core and linear heads:
    the torso, the heads and the loss with their gradients written out, the core through
    autograd (``unroll_core``: torch's LSTM, the written-out GRU), or with ``compile`` written
    out as well (``masked_rnn``'s functions), the whole step one inductor graph. Called with the
    recurrent step's minibatch: sequences [L, M, ...] and their stored states [M, S, H]."""

    def __init__(
        self,
        policy: nn.Module,
        cfg: PPOConfig,
        optimizer: torch.optim.Adam,
        compile: bool = False,
    ):
        if not supports_sequences(policy):
            raise ValueError("SequenceStep: a recurrent policy with an mlp torso")
        self.discrete = policy.discrete
        self.core, self.kind = policy.core, policy.kind
        torso = [m for m in policy.torso.modules() if isinstance(m, nn.Linear)]
        self.torso_layers = len(torso)
        self.tanh = not any(isinstance(m, nn.ReLU) for m in policy.torso.modules())
        keys = {}
        for i, m in enumerate(torso):
            keys[id(m.weight)], keys[id(m.bias)] = ("torso", i, 0), ("torso", i, 1)
        self.core_keys = []
        for name, p in self.core.named_parameters():
            keys[id(p)] = ("core", name, 0)
            self.core_keys.append(("core", name, 0))
        for name, head in (("pi", policy.pi), ("v", policy.v)):
            (m,) = _linears(head)
            keys[id(m.weight)], keys[id(m.bias)] = (name, 0, 0), (name, 0, 1)
        if not self.discrete:
            keys[id(policy.log_std)] = ("log_std", 0, 0)
        if compile and (self.core.num_layers != 1 or not self.core.bias):
            raise ValueError("SequenceStep: compiled for a one-layer core with biases")
        super().__init__(cfg, optimizer, keys, compile)
        self.core_index = [self.index[k] for k in self.core_keys]  # in the optimizer's order
        if compile:  # the targets' forward: a graph of its own
            self._unroll = compile_step(self, type(self)._unroll_body)

    def _core_forward(self, z, h0, first, core_w):
        """The written-out core over z [L, M, E] from h0 [M, S, H] with resets where ``first``
        (row 0 not read): outputs, final states [M, S, H] and what the backward reads."""
        keep = torch.cat([torch.ones_like(first[:1]), ~first[1:]]).to(z.dtype)[:, :, None]
        if self.kind == "lstm":
            out, saved = lstm_forward(z, h0[:, 0], h0[:, 1], keep, *core_w)
            return out, torch.stack([out[-1], saved[-1]], 1), saved
        out, saved = gru_forward(z, h0[:, 0], keep, *core_w)
        return out, out[-1][:, None], saved

    def _torso(self, w, x: torch.Tensor) -> list[torch.Tensor]:
        """The torso over x [N, F]: each layer's input, then its output (the last item)."""
        inputs = [x]
        for i in range(self.torso_layers):
            wt, b = self._wb(w, "torso", i)
            inputs.append(self._act(torch.addmm(b, inputs[-1], wt.T)))
        return inputs

    def _unroll_body(self, flat_p, x, h0, first, x_tail, keep_tail):
        w = self._views(flat_p)
        core_w = [w[i] for i in self.core_index]
        L, M = first.shape
        z = self._torso(w, x.reshape(L * M, -1))[-1].view(L, M, -1)
        out, final, _ = self._core_forward(z, h0, first, core_w)
        # the step after the last chunk, from its final states (reset where an episode ended)
        B = x_tail.shape[0]
        h_tail = final[M - B :] * keep_tail[:, None, None]
        z_tail = self._torso(w, x_tail)[-1][None]
        no_reset = torch.zeros((1, B), dtype=torch.bool, device=x.device)
        tail, _, _ = self._core_forward(z_tail, h_tail, no_reset, core_w)
        return out, tail[0]

    def unroll(self, x, h0, first, x_tail, keep_tail) -> tuple[torch.Tensor, torch.Tensor]:
        """For the targets, compiled, no gradients: the torso and the core over features
        x [L, M, F] from h0 [M, S, H], reset where ``first``, then one more step for the B
        envs of the last M - B.. M sequences on x_tail [B, F] from their final states times
        ``keep_tail`` [B]. Returns the core's outputs [L, M, H] and the tail's [B, H]."""
        self.pack()
        with torch.no_grad():
            return self._unroll(self._flat[0], x, h0, first, x_tail, keep_tail)

    def _grads(
        self, w, clip, ent_coef, x, actions, old_logp, weight, adv, returns, old_values, first, h0
    ):
        """As MLPStep's, for sequences: the torso and heads batch-major over the L x M steps,
        the core's gradients from autograd given the heads' gradient in its output."""
        L, M = first.shape
        N = L * M
        inputs = self._torso(w, x.reshape(N, -1))  # batch-major [N, units]
        core_w = [w[i] for i in self.core_index]
        z = inputs[-1].view(L, M, -1)
        if self.compiled:  # the core written out: no autograd in the graph
            out, _, saved = self._core_forward(z, h0, first, core_w)
        else:
            with torch.enable_grad():
                z = z.detach().requires_grad_()
                out, _ = unroll_core(self.core, self.kind, z, h0, first, final_state=False)
        y = out.detach().reshape(N, -1)
        (wp, bp), (wv, bv) = self._wb(w, "pi", 0), self._wb(w, "v", 0)
        pi_out = torch.addmm(bp.unsqueeze(1), wp, y.T)  # [A, N]
        value = torch.addmm(bv.unsqueeze(1), wv, y.T).squeeze(0)
        log_std = None if self.discrete else w[self.index["log_std", 0, 0]]
        d_pi, d_value, d_log_std, stats = loss_grads(
            self.cfg, clip, ent_coef, pi_out, value, log_std,
            actions.reshape(N, *actions.shape[2:]), old_logp.reshape(N), weight.reshape(N),
            adv.reshape(N), returns.reshape(N), old_values.reshape(N),
        )  # fmt: skip
        g: list[torch.Tensor | None] = [None] * len(self.params)
        idx = self.index
        g[idx["pi", 0, 0]], g[idx["pi", 0, 1]] = torch.mm(d_pi, y), d_pi.sum(1)
        g[idx["v", 0, 0]], g[idx["v", 0, 1]] = torch.mm(d_value[None], y), d_value.sum().view(1)
        if d_log_std is not None:
            g[idx["log_std", 0, 0]] = d_log_std
        d_y = torch.addmm(d_value[:, None] * wv, d_pi.T, wp)  # [N, H]
        if not self.compiled:
            dz, *d_core = torch.autograd.grad(out, [z, *core_w], d_y.view_as(out))
        elif self.kind == "lstm":
            dz, d_ih, d_hh, d_b = lstm_backward(saved, d_y.view_as(out), *core_w[:2])
            d_core = [d_ih, d_hh, d_b, d_b]
        else:
            dz, *d_core = gru_backward(saved, d_y.view_as(out), *core_w[:2])
        for k, d in zip(self.core_keys, d_core, strict=True):
            g[idx[k]] = d
        d = dz.reshape(N, -1)
        for i in range(self.torso_layers - 1, -1, -1):
            d_a = self._act_backward(d, inputs[i + 1])
            g[idx["torso", i, 0]], g[idx["torso", i, 1]] = torch.mm(d_a.T, inputs[i]), d_a.sum(0)
            if i:
                d = torch.mm(d_a, self._wb(w, "torso", i)[0])
        return g, stats


def loss_grads(
    cfg, clip, ent_coef, pi_out, value, log_std, actions, old_logp, weight, adv, returns, old_values
):
    """PPO's loss (as ``update.ppo_loss``) over B samples from the policy's output ``pi_out``
    [A, B] (logits, or the Gaussian's mean with ``log_std``; None: discrete) and the values [B]:
    its derivatives in ``pi_out``, in the values and in ``log_std`` (None if discrete), and the
    statistics [policy, value, entropy terms, approx-KL, clip fraction]. ``clip`` and
    ``ent_coef`` are tensors (a compiled step's inputs); ``ent_coef`` None: no entropy term."""
    B = value.shape[0]
    discrete = log_std is None
    # ---- the policy's log-probs and entropy, and their derivatives in the policy's output
    if discrete:
        logits = pi_out.log_softmax(0)
        probs = logits.exp()
        a = actions.long().unsqueeze(0)
        logp = logits.gather(0, a).squeeze(0)
        entropy = -(probs * logits).sum(0)
        ent = entropy.mean()
    else:
        inv_std = torch.exp(-log_std).unsqueeze(1)
        z = (actions.T - pi_out) * inv_std
        logp = -0.5 * z.square().sum(0) - (log_std.sum() + 0.5 * LOG_2PI * log_std.numel())
        ent = log_std.sum() + 0.5 * (1.0 + LOG_2PI) * log_std.numel()
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    if cfg.norm_adv and adv.numel() > 1:  # one sample has no std (NaN), as SB3 skips it
        std, mean = torch.std_mean(adv)
        adv = (adv - mean) / (std + 1e-8)
    # ---- clipped surrogate: max(-A r, -A clip(r)), weighted
    lo, hi = 1 - clip, 1 + clip
    unclipped, clipped = -adv * ratio, -adv * ratio.clamp(lo, hi)
    pg_loss = (weight * torch.max(unclipped, clipped)).mean()
    # d/d ratio: -A where the unclipped term is the max or the ratio is inside the clip
    # (where both are equal torch.max splits the gradient; clip's is then 1: the same)
    inside = (ratio >= lo) & (ratio <= hi)
    d_ratio = torch.where((unclipped > clipped) | inside, -adv, 0.0) * (weight / B)
    d_logp = d_ratio * ratio
    # ---- value loss
    diff = value - returns
    if cfg.value_clip > 0:
        delta = value - old_values
        vc = cfg.value_clip
        diff_c = old_values + delta.clamp(-vc, vc) - returns
        sq, sq_c = diff.square(), diff_c.square()
        v_loss = 0.5 * torch.max(sq, sq_c).mean()
        d_c = torch.where((delta >= -vc) & (delta <= vc), diff_c, 0.0)
        d_value = torch.where(sq > sq_c, diff, torch.where(sq < sq_c, d_c, 0.5 * (diff + d_c)))
    else:
        v_loss = 0.5 * diff.square().mean()
        d_value = diff
    d_value = d_value * (cfg.vf_coef / B)
    # ---- back to the policy's output (and log-std)
    if discrete:
        onehot = torch.zeros_like(probs).scatter_(0, a, 1.0)
        d_out = d_logp * (onehot - probs)
        if ent_coef is not None:
            # d H / d logit_k = -p_k (log p_k + H); the loss has -ent_coef * mean(H)
            d_out = d_out + (ent_coef / B) * probs * (logits + entropy)
        d_log_std = None
    else:
        dz = d_logp * z  # d logp / d mu = z / std; d logp / d log_std = z^2 - 1
        d_out = dz * inv_std
        d_log_std = (dz * z).sum(1) - d_logp.sum()
        if ent_coef is not None:
            d_log_std = d_log_std - ent_coef
    approx_kl = ((ratio - 1) - log_ratio).mean()  # the k3 estimator
    clipfrac = ((ratio - 1).abs() > clip).float().mean()
    return d_out, d_value, d_log_std, [pg_loss, v_loss, ent, approx_kl, clipfrac]
