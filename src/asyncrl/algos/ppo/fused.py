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

import types

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
from asyncrl.compiling import compiled
from asyncrl.nets import LOG_2PI, autocast

# inductor's per-call checks of every input's size and alignment cost more than this graph's
# elementwise work; the inputs are checked once, in MLPStep.pack
_INDUCTOR_OPTIONS = {
    "size_asserts": False,
    "alignment_asserts": False,
    "scalar_asserts": False,
    "cpp_wrapper": True,
}


def supports(policy: nn.Module) -> bool:
    """Whether :class:`MLPStep` can train ``policy``: separate policy and value MLPs
    (``ActorCritic`` with the mlp encoder)."""
    if getattr(policy, "recurrent", False):
        return False  # its heads read a core unrolled over sequences: the autograd step
    pi = getattr(policy, "pi", None)
    return getattr(policy, "encoder", None) is None and isinstance(pi, nn.Sequential)


def supports_sequences(policy: nn.Module) -> bool:
    """Whether :class:`SequenceStep` can train ``policy``: a recurrent policy whose core reads
    an MLP torso."""
    return getattr(policy, "recurrent", False) and getattr(policy, "torso", None) is not None


def _linears(seq: nn.Sequential) -> list[nn.Linear]:
    return [m for m in seq if isinstance(m, nn.Linear)]


def flat_span(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """One 1-D tensor over ``tensors`` if they lie back to back, in order, in one storage
    (contiguous each); None if not."""
    first = tensors[0]
    storage, start = first.untyped_storage().data_ptr(), first.storage_offset()
    at = start
    for t in tensors:
        if (
            not t.is_contiguous()
            or t.untyped_storage().data_ptr() != storage
            or t.storage_offset() != at
            or t.dtype != first.dtype
        ):
            return None
        at += t.numel()
    return first.new_empty(0).set_(first.untyped_storage(), start, (at - start,))


class FusedStep:
    """A PPO minibatch step with its gradients written out, on an optimizer's packed vectors:
    the gradient clip, Adam and the statistics here, a network's gradients in ``_grads``
    (:class:`MLPStep`, :class:`SequenceStep`).

    Called as ``step(hp, *minibatch)`` with ``hp = [clip, lr, ent_coef]`` as a tensor (a
    compiled step then never recompiles when the schedules or PBT move them); returns the
    autograd step's statistics and two more (the share of steps not applied and their norm).
    Before the steps of an update, :meth:`pack` must have been called (it makes the parameters
    and Adam's state views of one flat vector each), and after anything that may have swapped
    the parameters' storage, :meth:`check`.
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
        self.cfg, self.precision = cfg, precision
        self.optimizer = optimizer
        group = optimizer.param_groups[0]
        if len(optimizer.param_groups) != 1 or group["weight_decay"] or group["amsgrad"]:
            raise ValueError("fused step: one plain Adam parameter group")
        if group.get("maximize") or group.get("differentiable"):
            raise ValueError("fused step: one plain Adam parameter group")
        self.params: list[torch.Tensor] = list(group["params"])
        # read here, not in the compiled step: it would guard on the whole group, lr included,
        # and recompile whenever the schedule moves it
        self.betas, self.eps = tuple(group["betas"]), float(group["eps"])
        if sorted(keys) != sorted(id(p) for p in self.params):
            raise ValueError("fused step: the optimizer must hold exactly the policy's parameters")
        # where each tensor of the network sits in the optimizer's order
        self.index = {keys[id(p)]: i for i, p in enumerate(self.params)}
        self.shapes = [tuple(p.shape) for p in self.params]
        self.sizes = [p.numel() for p in self.params]
        self.fused_adam = bool(group.get("fused"))
        self.compiled = compile
        self._flat: tuple[torch.Tensor, ...] | None = None
        self._fn = self._body
        if compile:
            self._fn = compiled(
                _own_code(self, type(self)._body),
                fullgraph=True,
                dynamic=False,
                options=_INDUCTOR_OPTIONS,
            )

    def _grads(
        self, params, clip, ent_coef, *batch
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The loss's gradients (the optimizer's order) and statistics but the gradient norm."""
        raise NotImplementedError

    def _clip(self, grad_norm: torch.Tensor) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_'s factor on all gradients."""
        return (self.cfg.max_grad_norm / (grad_norm + 1e-6)).clamp(max=1.0)

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
    def pack(self) -> None:
        """Parameters, Adam's moments and step counters as views of one flat vector each, so
        that the clip and Adam are a few ops on whole vectors: kept as they are where they
        already are (as FlatParams.view_into lays parameters out), else moved there, values
        kept. Called at the start of every update (a loaded checkpoint brings new state
        tensors), and by :meth:`check`."""
        if self._still_packed():
            return
        state = self.optimizer.state
        if not state or self.params[0] not in state:
            self._init_state()
        flat_p = flat_span(self.params)
        if flat_p is None:
            flat_p = _move_into_one(self.params)
        moments = []
        for key in ("exp_avg", "exp_avg_sq", "step"):
            tensors = [state[p][key] for p in self.params]
            flat = flat_span(tensors)
            if flat is None:
                flat = torch.cat([t.reshape(-1) for t in tensors])
                at = 0
                for p, t in zip(self.params, tensors, strict=True):
                    state[p][key] = flat[at : at + t.numel()].view(t.shape)
                    at += t.numel()
            moments.append(flat)
        self._flat = (flat_p, *moments)

    def _still_packed(self) -> bool:
        """Whether the parameters and Adam's state are the views :meth:`pack` made last: any
        swap of parameters (FlatParams.view_into) or of state tensors (a loaded checkpoint)
        moves the first and the last of each."""
        if self._flat is None:
            return False
        state, first, last = self.optimizer.state, self.params[0], self.params[-1]
        if first not in state or last not in state:
            return False
        for flat, key in zip(self._flat, (None, "exp_avg", "exp_avg_sq", "step"), strict=True):
            a, b = (p if key is None else state[p][key] for p in (first, last))
            end = flat.data_ptr() + flat.element_size() * (flat.numel() - b.numel())
            if a.data_ptr() != flat.data_ptr() or b.data_ptr() != end:
                return False
        return True

    def check(self) -> None:
        """:meth:`pack` again if the parameters no longer lie in the packed vector (their
        ``.data`` was swapped, as FlatParams.view_into does). Cheap: it looks at the first and
        last parameter, which any such swap moves."""
        if self._flat is None:
            return
        flat, first, last = self._flat[0], self.params[0], self.params[-1]
        base = flat.data_ptr()
        end = base + flat.element_size() * (flat.numel() - last.numel())
        if first.data_ptr() != base or last.data_ptr() != end:
            self.pack()

    def __call__(self, hp: torch.Tensor, *batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self._fn(*self._flat, hp, *batch)

    def _init_state(self) -> None:
        """Adam's state as ``torch.optim.Adam`` makes it on its first step (fused or not: a
        float32 step counter per parameter), so that checkpoints keep its format."""
        for p in self.params:
            self.optimizer.state[p] = {
                "step": torch.zeros((), dtype=torch.float32, device=p.device),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }

    # ------------------------------------------------------------------ the step
    def _views(self, flat_p: torch.Tensor) -> list[torch.Tensor]:
        """The parameters as views of the packed vector, in the optimizer's order."""
        views, at = [], 0
        for n, shape in zip(self.sizes, self.shapes, strict=True):
            views.append(flat_p[at : at + n].view(shape))
            at += n
        return views

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
        grad = torch.cat([g.reshape(-1).float() for g in grads])  # float32 for clip and Adam
        norm = torch.linalg.vector_norm(grad)
        # A NaN or inf gradient is not applied (parameters, moments and step counts stay as
        # they were), and counted in the statistics: no host sync here.
        ok = torch.isfinite(norm)
        grad_norm = torch.zeros((), device=hp.device)  # no clip: no norm, as before
        clip = None
        if self.cfg.max_grad_norm > 0:
            # as torch.nn.utils.clip_grad_norm_: the norm of all gradients, clipped by scaling
            grad_norm = norm
            clip = self._clip(grad_norm)
        steps.add_(ok.to(steps.dtype))
        (beta1, beta2), eps = self.betas, self.eps
        if self.fused_adam and not self.compiled:
            # lr as a float, as torch.optim.Adam passes it (the tensor is for the compiled
            # step, which must not recompile when it moves); found_inf makes the kernel skip
            # the step, as for AMP's GradScaler
            if clip is not None:
                grad = grad * clip
            torch._fused_adam_(
                [flat_p], [grad], [flat_m], [flat_v], [], [steps[0]],
                lr=self.optimizer.param_groups[0]["lr"], beta1=beta1, beta2=beta2,
                weight_decay=0.0, eps=eps, amsgrad=False, maximize=False,
                found_inf=(~ok).to(torch.float32),
            )  # fmt: skip
        else:
            _adam(flat_p, grad, flat_m, flat_v, steps[0], hp[1], beta1, beta2, eps, ok, clip)
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
            self._unroll = compiled(
                _own_code(self, type(self)._unroll_body),
                fullgraph=True,
                dynamic=False,
                options=_INDUCTOR_OPTIONS,
            )

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
    if cfg.norm_adv:
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


def _own_code(obj: object, fn: types.FunctionType) -> types.MethodType:
    """``fn`` bound to ``obj`` with a code object of its own. Dynamo keeps its compiled graphs
    and their guards per code object: with the class's one, every MLPStep of a process (two
    learners, a test session) would share them, recompile for each other's sizes and settings,
    and fail once past torch's limit of recompilations."""
    code = fn.__code__.replace()
    own = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    return types.MethodType(own, obj)


def _adam(p, g, m, s, step, lr, beta1: float, beta2: float, eps: float, ok, clip=None) -> None:
    """One Adam step (Kingma and Ba 2015) as torch.optim.Adam computes it, on ``g`` times
    ``clip`` if given; ``step`` already counts this one. Where ``ok`` (a bool tensor) is false
    nothing changes."""
    step = step.clamp(min=1)  # a first step not applied leaves the count at 0
    # The step's scalars as one small tensor: compiled, they are computed once, where inlined
    # they were computed again (two pow among them) for every vector of the parameters.
    parts = [lr / (1 - beta1**step), (1 - beta2**step).sqrt(), ok.to(step.dtype)]
    scalars = torch.stack(parts if clip is None else [*parts, clip])
    step_size, bias2, ok = scalars[0], scalars[1], scalars[2] > 0
    if clip is not None:
        g = g * scalars[3]
    m.copy_(torch.where(ok, m.lerp(g, 1 - beta1), m))
    s.copy_(torch.where(ok, (s * beta2).addcmul_(g, g, value=1 - beta2), s))
    denom = (s.sqrt() / bias2).add_(eps)
    p.sub_(torch.where(ok, step_size * m / denom, 0.0))


@torch.no_grad()
def _move_into_one(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Make ``tensors`` views of one new flat vector, back to back, values kept; returns it."""
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    at = 0
    for t in tensors:
        n = t.numel()
        t.data = flat[at : at + n].view(t.shape)
        at += n
    return flat
