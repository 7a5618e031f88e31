"""DQN's gradient step with its gradients written out, for an MLP Q-network (the mlp encoder):
one forward of the online network over obs and next_obs together (double DQN picks the next
actions with it), the target network's forward, the TD loss and its backward as a few tensor
ops, then the global-norm clip and Adam on packed flat vectors (learning/fused.py, as PPO's
fused step); with ``compile``, one inductor graph. The same numbers as ``DQN``'s autograd step
up to float rounding. An action mask changes only the target (the next action picked among the
legal ones), not the backward. Why and how fast: docs/benchmarks/learner-floor.md.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from asyncrl.algos.dqn.networks import legal_actions
from asyncrl.learning.fused import PackedAdam, compile_step, flat_span, lies_in, move_into_one
from asyncrl.nets import FlatEncoder

threshold_backward = torch.ops.aten.threshold_backward.grad_input  # ReLU's backward, out=


def supports(q: nn.Module) -> bool:
    """Whether :class:`QStep` can train ``q``: flat observations through Linear layers with a
    ReLU between each two (``QNetwork`` with the mlp encoder)."""
    head = getattr(q, "head", None)
    if not isinstance(getattr(q, "encoder", None), FlatEncoder) or head is None:
        return False
    kinds = [type(m) for m in head]
    want = [nn.Linear, nn.ReLU] * (len(kinds) // 2) + [nn.Linear]
    return kinds == want


class QStep(PackedAdam):
    """``DQN``'s autograd step for an MLP ``QNetwork``, its gradients derived by hand.

    Called as ``step(lr, obs, action, reward, next_obs, discount)`` with ``lr`` a tensor (a
    compiled step does not recompile when the schedule or PBT moves it); returns [TD loss, mean
    Q, clipped gradient norm, 1 if the step was not applied (NaN or inf gradient), its norm].
    """

    def __init__(
        self,
        q: nn.Module,
        q_target: nn.Module,
        cfg,
        optimizer: torch.optim.Adam,
        compile: bool = False,
    ):
        if not supports(q):
            raise ValueError("QStep: a QNetwork with the mlp encoder")
        self.encoder = q.encoder
        self.n_mask = q.n_mask  # an action mask's entries at the observation's end (0: none)
        linears = [m for m in q.head if isinstance(m, nn.Linear)]
        self.layers = len(linears)
        keys = {}
        for i, m in enumerate(linears):
            keys[id(m.weight)], keys[id(m.bias)] = (i, 0), (i, 1)
        super().__init__(cfg, optimizer, keys, compile)
        # Adam's kernel per tensor, as the autograd step's optimizer: the same bits, so that a
        # run does not drift from the autograd step's path (a few us a step)
        self.adam_per_tensor = True
        # the target network's tensors in the optimizer's order (a deep copy: the same order)
        self.target = [p for p in q_target.parameters()]
        self._target_flat: torch.Tensor | None = None
        self._kept: dict[str, tuple] = {}  # _layers', per network, with the vector they view
        self._plan_kept: _Plan | None = None  # the eager step's buffers and calls (_plan)
        self._zero_kept: torch.Tensor | None = None
        self._fn = compile_step(self, type(self)._body) if compile else self._eager

    # ------------------------------------------------------------------ entry points
    def pack(self) -> None:
        """As :meth:`PackedAdam.pack`, and the target network's tensors as views of one flat
        vector (where Hogwild! shares them already; else moved there, values kept)."""
        super().pack()
        t = self._target_flat
        if t is not None and lies_in(t, self.target[0], self.target[-1]):
            return
        flat = flat_span(self.target)
        self._target_flat = move_into_one(self.target) if flat is None else flat

    def __call__(self, lr: torch.Tensor, *batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self._fn(*self._flat, self._target_flat, lr, *batch)

    # ------------------------------------------------------------------ the eager step
    def _plan(self, x: torch.Tensor, nx: torch.Tensor, flat_p, flat_t) -> _Plan:
        """The eager step's kept buffers and per-layer calls for this batch's sizes and these
        packed vectors (made anew when either changes)."""
        plan, grad, double = self._plan_kept, self.grad_buffer(), bool(self.cfg.double)
        if (
            plan is None
            or plan.vectors[0] is not flat_p
            or plan.vectors[1] is not flat_t
            or plan.vectors[2] is not grad[0]
            or plan.key != (x.shape, nx.shape, double)
        ):
            w, tw = self._layers("online", flat_p), self._layers("target", flat_t)
            order = [(self.index[i, 0], self.index[i, 1]) for i in range(self.layers)]
            plan = _Plan((x.shape, nx.shape, double), x, w, tw, grad[1], order)
            plan.vectors = (flat_p, flat_t, grad[0])  # the views' vectors, by identity
            self._plan_kept = plan
        return plan

    def _eager(
        self, flat_p, flat_m, flat_v, steps, flat_t, lr, obs, action, reward, next_obs, disc
    ):
        """:meth:`_body`'s computation, eager, with the same kernels on the same operands (the
        autograd step's bits), its per-step cost cut: activations, the one-hot output gradient,
        the backward's intermediate gradients and the picks are written (``out=``) into
        buffers kept between steps, whose slices and transposes are kept too, and each hidden
        layer's addmm and ReLU are one call. Per-op overhead, not arithmetic, bounds this step
        at a preset's sizes: docs/benchmarks/learner-floor.md."""
        cfg, B = self.cfg, obs.shape[0]
        x, nx, illegal = self._inputs(obs, next_obs)
        k = self._plan(x, nx, flat_p, flat_t)
        if cfg.double:  # the online network's forward over obs and next_obs at once
            x = torch.cat([x, nx], out=k.x)
        for (fn, bias, weight_t, out), inp in zip(k.online, [x, *k.h[:-1]], strict=True):
            fn(bias, inp, weight_t, out=out)
        for (fn, bias, weight_t, out), inp in zip(k.target, [nx, *k.t[:-1]], strict=True):
            fn(bias, inp, weight_t, out=out)
        t = k.t[-1]
        if cfg.double:  # the online network picks the action, the target one values it
            pick = k.next_pick
            if illegal is not None:  # among the legal next actions only
                pick = pick.masked_fill(illegal, float("-inf"))
            torch.gather(t, -1, torch.argmax(pick, -1, keepdim=True, out=k.arg), out=k.next_v)
            next_v = k.next_v_flat
        elif illegal is not None:
            next_v = t.masked_fill(illegal, float("-inf")).max(-1).values
        else:
            next_v = t.max(-1).values
        target = reward + disc * next_v
        a = action.long().unsqueeze(-1)
        torch.gather(k.q_all, -1, a, out=k.q)
        diff = k.q_flat - target
        # the loss's gradient at each sample's action value, into k.dq ([B, 1])
        if cfg.td_loss == "huber":  # smooth_l1_loss, beta 1
            small = diff.abs() < 1
            loss = torch.where(small, 0.5 * diff.square(), diff.abs() - 0.5).mean()
            torch.div(diff.clamp(-1.0, 1.0), B, out=k.dq_flat)  # as its backward: NaN stays
        else:
            loss = diff.square().mean()
            torch.mul(diff, 2.0 / B, out=k.dq_flat)
        # backward: the loss reads one action value per sample, of the obs rows only
        k.d[-1].zero_().scatter_(1, a, k.dq)
        for d, d_t, inp, grad_w, grad_b, weight, below in k.backward:
            torch.mm(d_t, x if inp is None else inp, out=grad_w)
            torch.sum(d, 0, out=grad_b)
            if below is not None:  # through the ReLU, in place: 0 where it gave 0
                torch.mm(d, weight, out=below)
                threshold_backward(below, inp, 0, grad_input=below)
        grads, grad = self._grad[1], self._grad[0]
        if flat_p.device.type == "cpu" and self.fused_adam and self.adam_per_tensor:
            grad_norm, flags = self._descend_on_host(flat_p, flat_m, flat_v, steps, grads, grad)
        else:
            grad_norm, ok, norm = self.descend(flat_p, flat_m, flat_v, steps, grads, lr, grad)
            bad = (~ok).to(norm.dtype)
            flags = (bad, norm * bad)  # applied: 0, 0; not: 1 and its norm (inf or NaN)
        return torch.stack([loss, k.q_flat.mean(), grad_norm, *flags])

    def _descend_on_host(self, flat_p, flat_m, flat_v, steps, grads, grad) -> tuple:
        """:meth:`descend` (the clip, Adam's kernel per tensor, the non-finite guard) with the
        norm read on the host, for tensors on the CPU, where reading it waits for nothing:
        the clip factor and the guard's flags, a dozen ops on 0-d tensors at ~2 us each, are
        then float arithmetic, in float32 as those ops compute it (the same bits). Returns
        the clipped norm and the statistics' [not applied, its norm] pair."""
        norm = self._norm(grads, grad)
        value = norm.item()
        clipping = self.cfg.max_grad_norm > 0
        grad_norm = norm if clipping else self._zero(norm)
        if not math.isfinite(value):  # not applied: parameters, moments, step counts kept
            return grad_norm, (torch.ones_like(norm), norm)
        if clipping:  # clip_grad_norm_'s max_norm / (norm + 1e-6), at most 1, in float32
            f32 = np.float32
            factor = f32(1) / (f32(value) + f32(1e-6)) * f32(self.cfg.max_grad_norm)
            grad.mul_(float(min(factor, f32(1))))
        steps.add_(1)
        (beta1, beta2), eps = self.betas, self.eps
        ps, ms, vs, ss = self._per_tensor(flat_p, flat_m, flat_v, steps)
        torch._fused_adam_(
            ps, grads, ms, vs, [], ss,
            lr=self.optimizer.param_groups[0]["lr"], beta1=beta1, beta2=beta2,
            weight_decay=0.0, eps=eps, amsgrad=False, maximize=False,
        )  # fmt: skip
        zero = self._zero(norm)
        return grad_norm, (zero, zero)

    def _zero(self, like: torch.Tensor) -> torch.Tensor:
        """A kept 0-d zero (a statistic of a step: stacked, so never written)."""
        if self._zero_kept is None or self._zero_kept.device != like.device:
            self._zero_kept = torch.zeros((), dtype=like.dtype, device=like.device)
        return self._zero_kept

    # ------------------------------------------------------------------ the step
    def _norm(self, grads: list[torch.Tensor], grad: torch.Tensor) -> torch.Tensor:
        """As clip_grad_norm_(foreach=True) computes it (each tensor's norm, then theirs)."""
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))

    def _layers(self, net: str, flat: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
        """Each linear layer's (bias, weight, weight transposed) as views of the packed vector
        ``flat`` of the network ``net``; eager, kept from step to step while the vector is the
        same one (a view and a transpose per layer and network, each step, otherwise)."""
        kept = self._kept.get(net)
        if kept is not None and kept[0] is flat:
            return kept[1]
        v = self._views(flat)
        layers = [
            (v[self.index[i, 1]], v[self.index[i, 0]], v[self.index[i, 0]].T)
            for i in range(self.layers)
        ]
        if not self.compiled:  # a graph makes them from its inputs at each call
            self._kept[net] = (flat, layers)
        return layers

    def _forward(self, layers, x: torch.Tensor) -> list[torch.Tensor]:
        """The MLP over x [N, F]: each linear layer's input, then the action values [N, A]."""
        h = [x]
        for i, (bias, _, weight_t) in enumerate(layers):
            a = torch.addmm(bias, h[-1], weight_t)
            h.append(a.relu_() if i < self.layers - 1 else a)
        return h

    def _inputs(self, obs: torch.Tensor, next_obs: torch.Tensor) -> tuple:
        """The layers' inputs (the observations encoded, without an action mask: the layers
        read none, QNetwork.legal) and the illegal next actions (None without a mask)."""
        x, nx = self.encoder(obs), self.encoder(next_obs)
        if not self.n_mask:
            return x, nx, None
        illegal = ~legal_actions(nx[:, -self.n_mask :])
        return x[:, : -self.n_mask], nx[:, : -self.n_mask], illegal

    def _body(self, flat_p, flat_m, flat_v, steps, flat_t, lr, obs, action, reward, next_obs, disc):
        # the networks as views of the packed vectors (compiled, of the graph's inputs)
        w, tw = self._layers("online", flat_p), self._layers("target", flat_t)
        cfg, B = self.cfg, obs.shape[0]
        x, nx, illegal = self._inputs(obs, next_obs)
        # double DQN: the online network's forward over obs and next_obs at once
        h = self._forward(w, torch.cat([x, nx]) if cfg.double else x)
        next_q = self._forward(tw, nx)[-1]
        if cfg.double:  # the online network picks the action, the target one values it
            pick = h[-1][B:]
            if illegal is not None:  # among the legal next actions only
                pick = pick.masked_fill(illegal, float("-inf"))
            next_v = next_q.gather(-1, pick.argmax(-1, keepdim=True)).squeeze(-1)
        elif illegal is not None:
            next_v = next_q.masked_fill(illegal, float("-inf")).max(-1).values
        else:
            next_v = next_q.max(-1).values
        target = reward + disc * next_v
        a = action.long().unsqueeze(-1)
        q = h[-1][:B].gather(-1, a).squeeze(-1)
        diff = q - target
        if cfg.td_loss == "huber":  # smooth_l1_loss, beta 1
            small = diff.abs() < 1
            loss = torch.where(small, 0.5 * diff.square(), diff.abs() - 0.5).mean()
            d = diff.clamp(-1.0, 1.0) / B  # as its backward: a NaN stays one
        else:
            loss = diff.square().mean()
            d = diff * (2.0 / B)
        # backward: the loss reads one action value per sample, of the obs rows only
        d = torch.zeros_like(h[-1][:B]).scatter_(1, a, d.unsqueeze(1))
        # eager, the gradients go straight into one flat vector (out=); a graph allocates
        grad, grads = (None, [None] * len(self.params)) if self.compiled else self.grad_buffer()
        for i in range(self.layers - 1, -1, -1):
            inp, wi, bi = h[i][:B], self.index[i, 0], self.index[i, 1]
            if grad is None:
                grads[wi], grads[bi] = torch.mm(d.T, inp), d.sum(0)
            else:
                torch.mm(d.T, inp, out=grads[wi])
                torch.sum(d, 0, out=grads[bi])
            if i:
                d = torch.ops.aten.threshold_backward(torch.mm(d, w[i][1]), inp, 0)
        grad_norm, ok, norm = self.descend(flat_p, flat_m, flat_v, steps, grads, lr, grad)
        bad = (~ok).to(grad_norm.dtype)
        return torch.stack([loss, q.mean(), grad_norm, bad, torch.where(ok, 0.0, norm)])


class _Plan:
    """The eager step's outputs for one batch size, kept from step to step with their views,
    and its calls per layer: ``h`` the online network's layers' outputs (over obs and next_obs
    stacked for double DQN), ``t`` the target network's over next_obs, ``d`` each layer's
    output gradient (obs rows); ``online`` and ``target`` each layer's (addmm, with the ReLU
    but for the last layer; bias; weight transposed; output), ``backward`` each layer's, last
    first (output gradient, transposed; input, obs rows (None: the step's x); weight and bias
    gradients; weight; the gradient below, None for the first layer)."""

    def __init__(self, key: tuple, x: torch.Tensor, w, tw, grads, order):
        self.key, self.vectors = key, ()
        double, B = key[2], x.shape[0]
        rows, new, units = (2 if double else 1) * B, x.new_empty, [m[1].shape[0] for m in w]
        self.x = new(rows, x.shape[1]) if double else None
        self.h = [new(rows, u) for u in units]
        self.t = [new(B, u) for u in units]
        self.d = [new(B, u) for u in units]
        self.q_all = self.h[-1][:B]  # the obs rows' action values
        self.next_pick = self.h[-1][B:]  # the next_obs rows' (double DQN's pick)
        self.arg = new(B, 1, dtype=torch.long)
        self.next_v, self.q, self.dq = new(B, 1), new(B, 1), new(B, 1)
        self.next_v_flat, self.q_flat, self.dq_flat = (
            t.view(B) for t in (self.next_v, self.q, self.dq)
        )
        fns = [torch._addmm_activation] * (len(units) - 1) + [torch.addmm]
        self.online = [(f, b, wt, h) for f, (b, _, wt), h in zip(fns, w, self.h, strict=True)]
        self.target = [(f, b, wt, t) for f, (b, _, wt), t in zip(fns, tw, self.t, strict=True)]
        inputs = [self.x[:B] if double else None, *(h[:B] for h in self.h[:-1])]
        self.backward = [
            (self.d[i], self.d[i].T, inputs[i], grads[order[i][0]], grads[order[i][1]], w[i][1],
             self.d[i - 1] if i else None)
            for i in reversed(range(len(units)))
        ]  # fmt: skip
