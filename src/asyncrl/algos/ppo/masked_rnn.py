"""Torch's one-layer GRU over sequences with resets, written out for the CPU: the input
projection as one matmul for all steps, a loop over steps for the recurrence with the state
zeroed before a step where an episode starts, and a backward written by hand (the weight
gradients one matmul each over all steps).

The same parameters and math as ``nn.GRU`` (gates r, z, n). Torch's CPU GRU runs its cell as
~20 autograd ops a step and needs the sequences cut into segments at episode starts; this
needs neither. (An LSTM written the same way was slower than torch's oneDNN LSTM here.)

Below, both cores as plain functions for the compiled step (fused.SequenceStep), where the
loops unroll into one graph, and the tanh that the compiled steps use (the MLP step's too).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import once_differentiable


def masked_gru(
    core: nn.GRU, z: torch.Tensor, state: torch.Tensor, first: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``core`` over z [L, B, E] from state [B, 1, H], zeroed before each step where ``first``
    [L, B] is true (row 0 not read). Returns the outputs [L, B, H] and final states [B, 1, H]."""
    keep = (~first).to(z.dtype)[:, :, None]
    keep[0] = 1.0
    resets = [False, *first[1:].any(1).tolist()]  # the steps where some sequence resets
    w = (core.weight_ih_l0, core.weight_hh_l0, core.bias_ih_l0, core.bias_hh_l0)
    out, h = _GRU.apply(z, state[:, 0], keep, resets, *w)
    return out, h[:, None]


class _GRU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, h0, keep, resets, w_ih, w_hh, b_ih, b_hh):
        L, B, E = z.shape
        H = w_hh.shape[1]
        xp = torch.addmm(b_ih, z.reshape(L * B, E), w_ih.t()).view(L, B, 3 * H)
        # one addmm a step gives r's and u's pre-activations and W_hn h + b_hn: its input is
        # the input side's r, u plus b_hh's, then b_hn
        base = torch.cat([xp[..., : 2 * H] + b_hh[: 2 * H], b_hh[2 * H :].expand(L, B, H)], -1)
        gh = torch.empty_like(xp)  # the addmm's results
        rz, ns, out = z.new_empty(L, B, 2 * H), z.new_empty(L, B, H), z.new_empty(L, B, H)
        w_hh_t = w_hh.t()
        r, u = rz[..., :H], rz[..., H:]  # u: the update gate (torch's z)
        parts = (base, xp[..., 2 * H :], gh, gh[..., : 2 * H], gh[..., 2 * H :], rz, r, u, ns, out)
        steps = zip(*(v.unbind(0) for v in parts), strict=True)
        h = h0
        for t, (c, xn, g, grz, gn, s, r_t, u_t, n_out, h_out) in enumerate(steps):
            if resets[t]:
                h = h * keep[t]
            torch.addmm(c, h, w_hh_t, out=g)
            torch.sigmoid(grz, out=s)
            n = torch.tanh(torch.addcmul(xn, r_t, gn), out=n_out)
            h = torch.addcmul(n, u_t, h - n, out=h_out)
        ctx.resets = resets
        ctx.save_for_backward(z, h0, keep, w_ih, w_hh, gh, rz, ns, out)
        return out, out[-1].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_h):
        z, h0, keep, w_ih, w_hh, gh, rz, ns, out = ctx.saved_tensors
        L, B, E = z.shape
        H = w_hh.shape[1]
        h_in = torch.cat([h0[None], out[:-1]]) * keep
        r, u = rz.split(H, -1)
        # for all steps at once: d pre-activation of n and u / d h_t, of r and W_hn h / d n's
        to_nu = torch.stack([(1 - u) * (1 - ns.square()), (h_in - ns) * u * (1 - u)], 2)
        to_rh = torch.stack([gh[..., 2 * H :] * r * (1 - r), r], 2)
        # per step [B, 4, H]: n's input side, u, r, W_hn h; [:, 1:] is the recurrent side's
        dg = z.new_empty(L, B, 4, H)
        w_rec = _rows(w_hh, H, (1, 0, 2))  # rows as u, r, n
        dh = d_out[-1] + d_h  # (autograd passes zeros for an output not used)
        flat = dg.view(L, B, 4 * H)
        parts = (dg[:, :, :2], dg[:, :, :1], dg[:, :, 2:], flat[..., H:], to_nu, to_rh, u)
        steps = list(zip(*(v.unbind(0) for v in parts), [None, *d_out[:-1].unbind(0)], strict=True))
        resets = ctx.resets
        for t in range(L - 1, -1, -1):
            d_nu, d_n, d_rh, rec, k_nu, k_rh, u_t, d_prev = steps[t]
            torch.mul(dh.unsqueeze(1), k_nu, out=d_nu)
            torch.mul(d_n, k_rh, out=d_rh)
            if resets[t]:
                dh = torch.addmm(dh * u_t, rec, w_rec).mul_(keep[t])
                if t:
                    dh += d_prev
            elif t:
                dh = torch.addmm(torch.addcmul(d_prev, dh, u_t), rec, w_rec)
            else:
                dh = torch.addmm(dh * u_t, rec, w_rec)
        # the gradients in dg's row orders (n, u, r on the input side; u, r, n recurrent), then
        # in torch's (r, z, n): reordering the weights' rows is cheaper than dg's columns
        flat = dg.view(L * B, 4 * H)
        dgi, dgh = flat[:, : 3 * H], flat[:, H:]
        dz = None
        if ctx.needs_input_grad[0]:
            dz = (dgi @ _rows(w_ih, H, (2, 1, 0))).view(L, B, E)
        d_w_ih = _rows(dgi.t() @ z.reshape(L * B, E), H, (2, 1, 0))
        d_w_hh = _rows(dgh.t() @ h_in.view(L * B, H), H, (1, 0, 2))
        db_ih, db_hh = _rows(dgi.sum(0), H, (2, 1, 0)), _rows(dgh.sum(0), H, (1, 0, 2))
        return dz, dh, None, None, d_w_ih, d_w_hh, db_ih, db_hh


def _rows(x: torch.Tensor, size: int, order: tuple[int, ...]) -> torch.Tensor:
    """The blocks of ``size`` rows of x in ``order``."""
    return torch.cat([x[i * size : (i + 1) * size] for i in order])


# ---------------------------------------------------------------------- for a compiled step
# The same cores with the same resets as plain functions of tensors, forward and backward
# apart, every step's reset applied as a multiplication (no host sync, no branch on data): what
# fused.SequenceStep runs inside one inductor graph, where the loops are unrolled and each
# step's elementwise work is one kernel.


# tanh's Taylor series to x^13: within 1e-9 (relative) of tanh for |x| < 0.25
_TANH_SERIES = (1.0, -1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925, 21844 / 6081075)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh within 2 ulp (float32) for compiled graphs, where inductor's vectorized tanh on the
    CPU (SLEEF's, within 1 ulp) takes ~1.7x as long: from one exp for |x| >= 0.25 (clamped to
    +-10, where float32's tanh is +-1 already: expm1 stays finite, a NaN stays NaN), from the
    series below it (inductor writes expm1 as exp - 1, which loses the digits near zero)."""
    y = torch.expm1(2 * x.clamp(-10.0, 10.0))
    x2, series = x * x, _TANH_SERIES[-1]
    for c in reversed(_TANH_SERIES[:-1]):
        series = series * x2 + c
    return torch.where(x.abs() < 0.25, x * series, y / (y + 2))


def lstm_forward(z, h0, c0, keep, w_ih, w_hh, b_ih, b_hh):
    """``nn.LSTM``'s one layer (gates i, f, g, o) over z [L, B, E] from h0, c0 [B, H], both
    multiplied by ``keep`` [L, B, 1] before each step. Returns the outputs [L, B, H] and what
    :func:`lstm_backward` reads (its last item: the final cell state)."""
    L, B, E = z.shape
    H = w_hh.shape[1]
    xp = torch.addmm(b_ih + b_hh, z.reshape(L * B, E), w_ih.t()).view(L, B, 4 * H)
    w_hh_t = w_hh.t()
    h, c = h0, c0
    h_in, c_in, gates, tanh_c, out = [], [], [], [], []
    for t in range(L):
        h, c = h * keep[t], c * keep[t]
        h_in.append(h)
        c_in.append(c)
        pre = torch.addmm(xp[t], h, w_hh_t)
        i, f, o = pre[:, :H].sigmoid(), pre[:, H : 2 * H].sigmoid(), pre[:, 3 * H :].sigmoid()
        g = tanh(pre[:, 2 * H : 3 * H])
        c = f * c + i * g
        tc = tanh(c)
        h = o * tc
        gates.append(torch.cat([i, f, g, o], 1))
        tanh_c.append(tc)
        out.append(h)
    out = torch.stack(out)
    saved = (z, keep, torch.stack(h_in), torch.stack(c_in), torch.stack(gates), torch.stack(tanh_c))
    return out, (*saved, c)


def lstm_backward(saved, d_out, w_ih, w_hh):
    """The gradients of :func:`lstm_forward`'s outputs' loss, given ``d_out`` [L, B, H]: in z,
    w_ih, w_hh and in either bias (the two are equal)."""
    z, keep, h_in, c_in, gates, tanh_c, _ = saved
    L, B, E = z.shape
    H = w_hh.shape[1]
    dh = torch.zeros_like(d_out[0])
    dc = torch.zeros_like(dh)
    d_pre = []
    for t in range(L - 1, -1, -1):
        dh = dh + d_out[t]
        gt = gates[t]
        i, f, g, o = gt[:, :H], gt[:, H : 2 * H], gt[:, 2 * H : 3 * H], gt[:, 3 * H :]
        tc = tanh_c[t]
        dc = dc + dh * o * (1 - tc * tc)
        d = torch.cat(
            [dc * g * i * (1 - i), dc * c_in[t] * f * (1 - f), dc * i * (1 - g * g),
             dh * tc * o * (1 - o)],
            1,
        )  # fmt: skip
        d_pre.append(d)
        dh = torch.mm(d, w_hh) * keep[t]
        dc = dc * f * keep[t]
    d_pre = torch.stack(d_pre[::-1]).view(L * B, 4 * H)
    dz = torch.mm(d_pre, w_ih).view(L, B, E)
    d_w_ih = torch.mm(d_pre.t(), z.reshape(L * B, E))
    d_w_hh = torch.mm(d_pre.t(), h_in.view(L * B, H))
    return dz, d_w_ih, d_w_hh, d_pre.sum(0)


def gru_forward(z, h0, keep, w_ih, w_hh, b_ih, b_hh):
    """``nn.GRU``'s one layer (gates r, z, n) as :func:`lstm_forward` (h0 [B, H])."""
    L, B, E = z.shape
    H = w_hh.shape[1]
    xp = torch.addmm(b_ih, z.reshape(L * B, E), w_ih.t()).view(L, B, 3 * H)
    w_hh_t = w_hh.t()
    h = h0
    h_in, rz, gn, n_out, out = [], [], [], [], []
    for t in range(L):
        h = h * keep[t]
        h_in.append(h)
        gh = torch.addmm(b_hh, h, w_hh_t)
        s = (xp[t, :, : 2 * H] + gh[:, : 2 * H]).sigmoid()
        r, u = s[:, :H], s[:, H:]
        n = tanh(xp[t, :, 2 * H :] + r * gh[:, 2 * H :])
        h = n + u * (h - n)
        rz.append(s)
        gn.append(gh[:, 2 * H :])
        n_out.append(n)
        out.append(h)
    out = torch.stack(out)
    saved = (z, keep, torch.stack(h_in), torch.stack(rz), torch.stack(gn), torch.stack(n_out))
    return out, saved


def gru_backward(saved, d_out, w_ih, w_hh):
    """As :func:`lstm_backward` for :func:`gru_forward`: the gradients in z, w_ih, w_hh, b_ih,
    b_hh."""
    z, keep, h_in, rz, gn, n_out = saved
    L, B, E = z.shape
    H = w_hh.shape[1]
    dh = torch.zeros_like(d_out[0])
    d_x, d_h = [], []  # d pre-activations: the input side's (r, z, n), the recurrent side's
    for t in range(L - 1, -1, -1):
        dh = dh + d_out[t]
        s, n, h = rz[t], n_out[t], h_in[t]
        r, u = s[:, :H], s[:, H:]
        dn = dh * (1 - u) * (1 - n * n)
        d_rz = torch.cat([dn * gn[t] * r * (1 - r), dh * (h - n) * u * (1 - u)], 1)
        dx = torch.cat([d_rz, dn], 1)
        dg = torch.cat([d_rz, dn * r], 1)
        d_x.append(dx)
        d_h.append(dg)
        dh = (dh * u + torch.mm(dg, w_hh)) * keep[t]
    d_x = torch.stack(d_x[::-1]).view(L * B, 3 * H)
    d_h = torch.stack(d_h[::-1]).view(L * B, 3 * H)
    dz = torch.mm(d_x, w_ih).view(L, B, E)
    d_w_ih = torch.mm(d_x.t(), z.reshape(L * B, E))
    d_w_hh = torch.mm(d_h.t(), h_in.view(L * B, H))
    return dz, d_w_ih, d_w_hh, d_x.sum(0), d_h.sum(0)
