"""PPO (Schulman et al. 2017): the update rule alone, tensors in and statistics out.

Read top to bottom: targets for a batch of rollouts (GAE, or V-trace when the behaviour policy
lags), then epochs x minibatches of the clipped surrogate. No processes, no logging: statistics
come back as one tensor so that no minibatch forces a host sync.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from asyncrl.algos.ppo.config import PPOConfig
from asyncrl.algos.ppo.fused import MLPStep, supports
from asyncrl.algos.ppo.networks import ActorCritic
from asyncrl.algos.ppo.returns import gae, seat_gae, vtrace
from asyncrl.compiling import compiled
from asyncrl.nets import autocast

STATS = (
    "loss/policy",
    "loss/value",
    "loss/entropy",
    "loss/approx_kl",
    "loss/clipfrac",
    "grad_norm",
)


class PPO:
    def __init__(
        self,
        policy: ActorCritic,
        cfg: PPOConfig,
        lr: float,
        compile: bool = False,
        fused: bool = True,
        precision: str = "fp32",
    ):
        """``fused``: MLP policies take the fused step of fused.py (False: the autograd step
        for every network, the reference the fused step is tested and benchmarked against).
        ``precision`` bf16: each step's forward (and the fused step's written-out backward)
        under a bfloat16 autocast; losses, gradients, weights and Adam's state float32."""
        self.policy, self.cfg, self.precision = policy, cfg, precision
        params = [p for p in policy.parameters() if p.requires_grad]
        self.device = params[0].device
        self.params = params
        self.optimizer = torch.optim.Adam(params, lr=lr, eps=1e-5, **_fast_adam())
        # MLP policies: the step with its gradients written out (fused.py), the same numbers
        # as _minibatch_step up to rounding; other networks: autograd
        fused = fused and supports(policy)
        self.fused = MLPStep(policy, cfg, self.optimizer, compile, precision) if fused else None
        # the step an update takes: the fused one, else autograd's (its loss compiled with
        # --compile; the optimizer's step is not, as it reads the lr as a float, which would be
        # a guard of the graph, failed whenever the schedule or PBT moves it)
        self._step = self.fused or self._minibatch_step
        self._loss = self._minibatch_loss
        if compile and self.fused is None:
            self._loss = compiled(self._minibatch_loss)
        # Called around every gradient step; Hogwild! workers sync parameters there.
        self.before_step = self.after_step = _nothing
        # The fused step does not apply a step whose gradient has a NaN or inf; the update then
        # calls this with their count and a norm (the autograd step's are caught by the
        # optimizer's step hook instead).
        self.on_nonfinite: Callable[[int, float], None] = _raise_nonfinite

    # ---------------------------------------------------------------- targets
    @torch.no_grad()
    def targets(self, r: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Advantages and value targets for time-major rollouts ``r`` ([T, B] fields, obs
        [T+1, B, ...]); returns the flat training batch."""
        cfg, policy = self.cfg, self.policy
        T, B = r["rewards"].shape
        flat_obs = r["obs"].flatten(0, 1)
        values = policy.value(flat_obs).view(T + 1, B)
        target_logp = None
        if cfg.correction != "none":
            target_logp, _, _ = policy.log_prob_entropy(
                flat_obs[: T * B], r["actions"].flatten(0, 1)
            )
            target_logp = target_logp.view(T, B)
        adv, ret, clip_from, weight = estimate(cfg, r, values, target_logp)
        return {
            "features": policy.features(flat_obs[: T * B]),
            "actions": r["actions"].flatten(0, 1),
            "logp": clip_from.flatten(),
            "weight": weight.flatten(),
            "adv": adv.flatten(),
            "returns": ret.flatten(),
            "values": values[:-1].flatten(),
        }

    # ---------------------------------------------------------------- the update
    def _minibatch_loss(
        self, hp, features, actions, old_logp, weight, adv, returns, old_values
    ) -> tuple[torch.Tensor, ...]:
        logp, entropy, value = self.policy.evaluate_features(features, actions)
        return ppo_loss(
            self.cfg, hp[0], hp[2], logp, entropy, value, old_logp, weight, adv, returns,
            old_values,
        )  # fmt: skip

    def _minibatch_step(self, hp, *minibatch) -> torch.Tensor:
        """One step on a minibatch; ``hp``: :func:`step_hyperparameters`."""
        with autocast(self.precision, self.device):  # the backward outside, as autocast asks
            loss, pg_loss, v_loss, ent, log_ratio = self._loss(hp, *minibatch)
        return descend(
            self.optimizer,
            self.params,
            self.cfg.max_grad_norm,
            loss,
            hp[0],
            log_ratio,
            pg_loss,
            v_loss,
            ent,
        )

    def update(
        self,
        batch: dict[str, torch.Tensor],
        lr: float,
        generator: torch.Generator,
        clip_scale: float = 1.0,
    ) -> dict[str, float]:
        """``epochs`` passes of shuffled minibatches over ``batch``; mean statistics.

        ``lr`` and ``clip_scale`` (a factor on ``clip_coef``) carry the schedules; what they
        and PBT move enters the step as a tensor (:func:`step_hyperparameters`), so that a
        compiled step does not recompile when it moves."""
        keys = ("features", "actions", "logp", "weight", "adv", "returns", "values")
        return run_epochs(
            self,
            batch,
            batch["adv"].shape[0],
            self.cfg.minibatch_size,
            lambda perm: [batch[k][perm] for k in keys],
            lambda shuffled, a, b: [x[a:b] for x in shuffled],
            lr,
            generator,
            clip_scale,
        )


def run_epochs(algo, batch, n, size, shuffle, take, lr, generator, clip_scale) -> dict[str, float]:
    """The update loop of PPO and RecurrentPPO: ``epochs`` passes over ``n`` items (samples or
    sequences), each shuffled once per epoch (``shuffle(perm)``: one gather per field), then
    minibatches of ``size`` items, ``take(shuffled, start, stop)``, each one ``algo._step`` between
    the Hogwild! hooks. Mean statistics, the explained variance, and the fused step's count of
    steps not applied handed to ``algo.on_nonfinite``."""
    cfg, fused = algo.cfg, algo.fused
    for group in algo.optimizer.param_groups:
        group["lr"] = lr
    hp = step_hyperparameters(cfg, lr, clip_scale, algo.device)
    if fused is not None:
        fused.pack()
    hooked = algo.before_step is not _nothing
    stats = []
    for _ in range(cfg.epochs):
        shuffled = shuffle(torch.randperm(n, generator=generator).to(algo.device))
        for start in range(0, n - size + 1, size):  # a ragged tail minibatch would be noisier
            algo.before_step()
            if hooked and fused is not None:
                fused.check()  # a hook may have moved the parameters
            stats.append(algo._step(hp, *take(shuffled, start, start + size)))
            algo.after_step()
    mean = torch.stack(stats).mean(0).tolist()  # the one host sync of the update
    if fused is not None:  # its two more: the share of steps not applied, and their norm
        *mean, bad, bad_norm = mean
        if bad > 0:
            algo.on_nonfinite(round(bad * len(stats)), bad_norm)
    out = dict(zip(STATS, mean, strict=True))
    ret, val = batch["returns"], batch["values"]
    out["loss/explained_variance"] = float(1 - (ret - val).var() / (ret.var() + 1e-8))
    return out


def step_hyperparameters(
    cfg: PPOConfig, lr: float, clip_scale: float = 1.0, device: torch.device | None = None
) -> torch.Tensor:
    """``[clip, lr, ent_coef]``, what a minibatch step reads of the settings that the schedules
    or PBT move (an autograd step its lr from the optimizer), as one tensor: a compiled step
    guards on every Python number it reads, and would compile again (tens of seconds, then
    fail past torch's limit) for each new value."""
    return torch.tensor([cfg.clip_coef * clip_scale, lr, cfg.ent_coef], device=device)


def estimate(
    cfg: PPOConfig,
    r: dict[str, torch.Tensor],
    values: torch.Tensor,
    target_logp: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Advantages, value targets, the log-probs the clip is around and the sample weights, all
    [T, B], from the values [T + 1, B] and (with a correction) the current policy's log-probs
    of the actions taken."""
    ends = (r["terminated"], r["truncated"], r["trunc_values"])
    behaviour_logp = r["logp"]
    clip_from, weight = behaviour_logp, torch.ones_like(behaviour_logp)
    if cfg.correction == "decoupled":
        # Hilton et al. 2022 ("Batch size-invariance for policy optimization"): the clip holds
        # the step near the policy as it is now (the proximal policy), not the one that acted
        # some versions ago; the lagged samples are importance-weighted from the acting policy
        # to the proximal one (truncated at vtrace_rho_bar, as V-trace truncates). With no lag
        # both policies are one: PPO's own objective.
        clip_from = target_logp
        weight = (target_logp - behaviour_logp).exp().clamp(max=cfg.vtrace_rho_bar)
    if cfg.correction == "vtrace":
        adv, ret = vtrace(
            behaviour_logp,
            target_logp,
            r["rewards"],
            values,
            *ends,
            cfg.gamma,
            cfg.vtrace_rho_bar,
            cfg.vtrace_c_bar,
            cfg.gae_lambda,
        )
    elif "seats" in r:  # a multi-agent env's seats: GAE over each seat's own steps
        adv, ret = seat_gae(r["rewards"], values, *ends, r["seats"], cfg.gamma, cfg.gae_lambda)
    else:
        adv, ret = gae(r["rewards"], values, *ends, cfg.gamma, cfg.gae_lambda)
    return adv, ret, clip_from, weight


def descend(optimizer, params, max_grad_norm, loss, clip, log_ratio, *losses) -> torch.Tensor:
    """One gradient step on ``loss`` (its gradient clipped to ``max_grad_norm`` if > 0) and the
    step's statistics in STATS order: ``losses``, approx-KL (the k3 estimator), the clip
    fraction and the gradient norm. The feed-forward and the recurrent autograd steps share it."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if max_grad_norm > 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True).detach()
    else:
        grad_norm = torch.zeros((), device=loss.device)
    optimizer.step()
    with torch.no_grad():
        ratio = log_ratio.exp()
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > clip).float().mean()
    return torch.stack([*(x.detach() for x in losses), approx_kl, clipfrac, grad_norm])


def ppo_loss(cfg, clip, ent_coef, logp, entropy, value, old_logp, weight, adv, returns, old_values):
    """PPO's clipped surrogate, (clipped) value loss and entropy bonus for one minibatch of
    flat samples: (loss, policy, value and entropy terms, log-ratio)."""
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    if cfg.norm_adv and adv.numel() > 1:  # one sample has no std (NaN), as SB3 skips it
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip))
    pg_loss = (weight * pg_loss).mean()  # weight: 1 but with the decoupled correction
    if cfg.value_clip > 0:
        v_clipped = old_values + (value - old_values).clamp(-cfg.value_clip, cfg.value_clip)
        v_loss = 0.5 * torch.max((value - returns).square(), (v_clipped - returns).square())
        v_loss = v_loss.mean()
    else:
        v_loss = 0.5 * (value - returns).square().mean()
    ent = entropy.mean()
    loss = pg_loss + cfg.vf_coef * v_loss - ent_coef * ent
    return loss, pg_loss, v_loss, ent, log_ratio


def _nothing() -> None:
    pass


def _raise_nonfinite(count: int, norm: float) -> None:
    raise FloatingPointError(f"{count} gradient step(s) of norm {norm} were not applied")


def _fast_adam() -> dict[str, bool]:
    """One fused kernel for the whole Adam step where this torch has it on CPU."""
    try:
        torch.optim.Adam([torch.zeros(1, requires_grad=True)], fused=True)
        return {"fused": True}
    except (RuntimeError, TypeError):
        return {"foreach": True}
