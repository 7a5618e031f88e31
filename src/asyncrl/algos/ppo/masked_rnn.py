"""Torch's one-layer GRU over sequences with resets, written out for the CPU: the input
projection as one matmul for all steps, a loop over steps for the recurrence with the state
zeroed before a step where an episode starts, and a backward written by hand (the weight
gradients one matmul each over all steps).

The same parameters and math as ``nn.GRU`` (gates r, z, n). Torch's CPU GRU runs its cell as
~20 autograd ops a step and needs the sequences cut into segments at episode starts; this
needs neither. (An LSTM written the same way was slower than torch's oneDNN LSTM here.)
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
