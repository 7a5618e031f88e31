"""SAC's gradient step with its gradients written out, for MLP networks (flat observations):
the same ops as ``SAC``'s autograd step, forward and backward (each derivative as autograd's
formula computes it, in its order), then Adam's fused kernel per tensor on packed vectors
(learning/fused.py, as DQN's step): the same numbers as the autograd step, to the last bit. No
autograd graph, no ``zero_grad``, no optimizer hooks; a NaN or inf gradient is not applied, and
counted with no host sync. In bf16 (``--precision bf16``) the matrix products, and the layers'
activations between them, are bfloat16 where the autograd step's autocast makes them so, and
the casts sit where autocast puts them; the weights, their gradients, Adam and the losses stay
float32. Why and how fast: docs/benchmarks/learner-floor.md.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn

from asyncrl.learning.fused import PackedAdam
from asyncrl.nets import FlatEncoder

# SAC has no gradient clip: descend's clip off
NO_CLIP = SimpleNamespace(max_grad_norm=0.0)
NAMES = ("critic", "actor", "temperature")  # the optimizers, as SAC.optimizers() names them


MATMUL = {"fp32": torch.float32, "bf16": torch.bfloat16}  # the dtype of the matrix products


def supports(sac) -> bool:
    """Whether :class:`SACStep` can train ``sac``: flat observations (no image encoder)."""
    flat = isinstance(sac.actor.encoder, FlatEncoder) and isinstance(sac.q.encoder, FlatEncoder)
    return flat and sac.precision in MATMUL


def _packed(optimizer: torch.optim.Adam, params: list[torch.Tensor]) -> PackedAdam:
    """``optimizer`` packed, its parameters keyed by their place in ``params``."""
    packed = PackedAdam(NO_CLIP, optimizer, {id(p): i for i, p in enumerate(params)}, False)
    # Adam's kernel per tensor, as the autograd step's optimizer calls it: the same bits
    packed.adam_per_tensor = True
    return packed


class SACStep:
    """``SAC.update``'s step (critic, actor, temperature, Polyak) with the gradients written
    out. ``step(batch)`` returns the update's statistics; :attr:`nonfinite` counts, per
    optimizer (:data:`NAMES`), the steps not applied and the sum of their gradient norms."""

    def __init__(self, sac):
        if not supports(sac):
            raise ValueError("SACStep: flat observations, fp32 or bf16")
        self.sac = sac
        self.mm = MATMUL[sac.precision]  # fp32: every cast below is a no-op
        self.trunk = [m for m in sac.actor.trunk if isinstance(m, nn.Linear)]
        self.heads = (sac.actor.mu, sac.actor.log_std)
        actor = [p for m in (*self.trunk, *self.heads) for p in (m.weight, m.bias)]
        self.q_w, self.q_b = list(sac.q.weights), list(sac.q.biases)
        self.opts = (
            _packed(sac.q_opt, [*self.q_w, *self.q_b]),
            _packed(sac.actor_opt, actor),
            _packed(sac.alpha_opt, [sac.log_alpha]),
        )
        device = sac.log_alpha.device
        self.nonfinite = torch.zeros(len(NAMES), 2, device=device)
        self._lr = torch.zeros((), device=device)  # read by descend's unfused Adam only

    def __call__(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return self._step(b)

    def _step(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        sac, actor = self.sac, self.sac.actor
        for packed in self.opts:  # cheap when packed; a checkpoint or Hogwild! may move state
            packed.pack()
        critic_opt, actor_opt, alpha_opt = self.opts
        alpha = sac.log_alpha.exp()
        mm = self.mm
        # --- critic: 0.5 sum_i mean (Q_i(s, a) - target)^2
        # the actor's layers as the products read them: cast once, it does not change until
        # its own step (fp32: the tensors themselves)
        aw = [(m.weight.to(mm), m.bias.to(mm)) for m in (*self.trunk, *self.heads)]
        target = self._critic_target(b, alpha, aw)
        ws = [w.to(mm) for w in self.q_w]
        hs = self._q_forward(b["obs"], actor.unit(b["action"]), ws)
        q = hs[-1].squeeze(1).float()
        diff = q - target
        q_loss = 0.5 * diff.square().mean(1).sum()
        # backward: of 0.5 * (.), sum, mean over B, square (pow's 2 * x), as autograd's
        d = (torch.full((), 0.5, device=q.device).div(q.shape[1]) * (2.0 * diff)).unsqueeze(1)
        d = d.to(mm)
        n = len(self.q_w)
        grads: list[torch.Tensor] = [None] * (2 * n)  # type: ignore[list-item]
        for i in range(n - 1, -1, -1):
            # baddbmm(b.mT, w.mT, x)'s derivatives: grad @ x^T for w.mT, grad summed for b.mT
            grads[i] = d.bmm(hs[i].transpose(1, 2)).mT.float()
            grads[n + i] = d.sum(2, keepdim=True).mT.float()
            if i:
                d = torch.ops.aten.threshold_backward(ws[i].bmm(d), hs[i], 0)
        self._descend(0, critic_opt, grads)
        # --- actor: alpha log pi(a|s) - min_i Q_i(s, a), with the critics just updated
        acts, logp, parts = self._actor_forward(b["obs"], aw)
        a_unit = actor.unit(parts["a"])
        ws = [w.to(mm) for w in self.q_w]  # the critics just updated
        hs = self._q_forward(b["obs"], a_unit, ws)
        q_pi, pick = hs[-1].squeeze(1).float().min(0)
        actor_loss = (alpha * logp - q_pi).mean()
        g = torch.ones((), device=q.device).div(logp.shape[0]).expand(logp.shape[0])
        d_logp = g * alpha
        d = torch.zeros_like(q_pi).expand(len(ws[0]), -1).clone()
        d = d.scatter_(0, pick.unsqueeze(0), (-g).unsqueeze(0)).unsqueeze(1).to(mm)
        for i in range(len(self.q_w) - 1, -1, -1):  # to the action only: weights detached
            d = ws[i].bmm(d)
            if i:
                d = torch.ops.aten.threshold_backward(d, hs[i], 0)
        # the input's cast (bf16), the expand's and the cat's backward
        d_unit = d.float().sum(0).T[:, -a_unit.shape[1] :]
        self._descend(1, actor_opt, self._actor_backward(acts, parts, d_unit, d_logp, aw))
        # --- temperature: the gradient of -log_alpha * mean(log pi + target_entropy)
        self._descend(2, alpha_opt, [-(logp + sac.target_entropy).mean()])
        # --- Polyak averaging of the target critics
        torch._foreach_lerp_(sac._target_params, sac._q_params, sac.cfg.tau)
        return torch.stack([q_loss, actor_loss, alpha, -logp.mean(), q.mean()])

    def _descend(self, k: int, packed: PackedAdam, grads: list[torch.Tensor]) -> None:
        """Adam on ``grads`` (in the order of the parameters ``packed`` was keyed by); a step
        not applied is counted in row ``k`` of :attr:`nonfinite`."""
        ordered: list[torch.Tensor] = [None] * len(grads)  # type: ignore[list-item]
        for key, g in enumerate(grads):
            ordered[packed.index[key]] = g
        _, ok, norm = packed.descend(*packed._flat, ordered, self._lr)
        self.nonfinite[k] += torch.stack([(~ok).to(norm.dtype), torch.where(ok, 0.0, norm)])

    # ------------------------------------------------------------------ the networks
    def _critic_target(self, b: dict[str, torch.Tensor], alpha: torch.Tensor, aw) -> torch.Tensor:
        """``SAC.critic_target``'s ops (its autocast's casts in bf16) with no module calls:
        r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s')."""
        sac = self.sac
        _, next_logp, parts = self._actor_forward(b["next_obs"], aw)
        target = sac.q_target
        ws = [w.to(self.mm) for w in target.weights]
        hs = self._q_forward(b["next_obs"], sac.actor.unit(parts["a"]), ws, list(target.biases))
        next_q = hs[-1].squeeze(1).float().min(0).values - alpha * next_logp
        return b["reward"] + sac.cfg.gamma * (1.0 - b["terminated"]) * next_q

    def _q_forward(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        ws: list[torch.Tensor],
        biases: list[torch.Tensor] | None = None,
    ) -> list[torch.Tensor]:
        """QEnsemble.forward's ops (``ws``: the weights as the matrix products read them;
        ``biases``: the critics', unless given), keeping each layer's input [n, in, B], then Q
        [n, 1, B] (in the products' dtype)."""
        x = torch.cat([self.sac.q.encoder(obs), action], -1).T.to(self.mm)
        hs = [x.unsqueeze(0).expand(len(ws[0]), -1, -1)]
        last = len(ws) - 1
        for i, (w, bias) in enumerate(zip(ws, biases or self.q_b, strict=True)):
            y = torch.baddbmm(bias.to(self.mm).mT, w.mT, hs[-1])
            hs.append(y.relu_() if i < last else y)  # in place: the same values
        return hs

    def _actor_forward(self, obs: torch.Tensor, aw):
        """SquashedGaussianActor.forward's ops (a sample, with its log-prob), keeping what the
        backward reads: each trunk layer's input and output, and the sample's parts. ``aw``:
        the (weight, bias) of the trunk's layers and the two heads, as the products read them."""
        actor = self.sac.actor
        acts = [actor.encoder(obs).to(self.mm)]
        for w, bias in aw[:-2]:
            acts.append(torch.addmm(bias, acts[-1], w.T).relu_())
        (w_mu, b_mu), (w_ls, b_ls) = aw[-2:]
        mu = torch.addmm(b_mu, acts[-1], w_mu.T).float()
        raw = torch.addmm(b_ls, acts[-1], w_ls.T).float()
        log_std = torch.clamp(raw, -5.0, 2.0)
        eps = torch.randn(mu.shape, generator=self.sac.generator, device=mu.device)
        std = log_std.exp()
        u = mu + eps * std
        log_n = -0.5 * eps.square() - log_std
        m2u = -2.0 * u
        log_det = 2.0 * (math.log(2.0) - u - nn.functional.softplus(m2u))
        logp = (log_n - log_det).sum(-1) - actor._log_norm
        t = torch.tanh(u)
        a = t * actor.scale + actor.bias
        return acts, logp, {"raw": raw, "eps": eps, "std": std, "m2u": m2u, "t": t, "a": a}

    def _actor_backward(self, acts, parts, d_unit, d_logp, aw) -> list[torch.Tensor]:
        """The actor's gradients (the optimizer's order) from those of the critics' action
        ``d_unit`` and of the log-prob ``d_logp``: autograd's derivatives, summed where a
        tensor has several uses in the order its engine sums them."""
        scale = self.sac.actor.scale
        # a = tanh(u) * scale + bias, read as (a - bias) / scale
        d_u_tanh = torch.ops.aten.tanh_backward((d_unit / scale) * scale, parts["t"])
        # logp = sum(log_n - 2 (log 2 - u - softplus(-2u))) - const
        d_ln = d_logp.unsqueeze(-1).expand_as(parts["t"])
        d_inner = -d_ln * 2.0
        d_sp = torch.ops.aten.softplus_backward(-d_inner, parts["m2u"], 1, 20)
        d_u = (d_u_tanh + d_sp * -2.0) + -d_inner
        # u = mu + eps * exp(log_std); log_n = -eps^2 / 2 - log_std; log_std clamped
        raw = parts["raw"]
        d_ls = (d_u * parts["eps"]) * parts["std"] + -d_ln
        d_ls = torch.where((raw >= -5.0).logical_and_(raw <= 2.0), d_ls, 0.0)
        grads: list[torch.Tensor] = []
        d_h = None
        for (w, _), d in zip(aw[-2:], (d_u, d_ls), strict=True):
            d = d.to(self.mm)  # the head's output cast to float32 (bf16), backward
            grads += [d.t().mm(acts[-1]).float(), d.sum(0).float()]
            d_h = d.mm(w) if d_h is None else d_h + d.mm(w)
        trunk: list[torch.Tensor] = []
        for i in range(len(self.trunk) - 1, -1, -1):
            d = torch.ops.aten.threshold_backward(d_h, acts[i + 1], 0)
            trunk = [d.t().mm(acts[i]).float(), d.sum(0).float(), *trunk]
            if i:
                d_h = d.mm(aw[i][0])
        return [*trunk, *grads]
