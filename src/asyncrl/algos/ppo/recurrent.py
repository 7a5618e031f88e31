"""PPO with a recurrent policy: sequence targets and truncated BPTT, tensors in and statistics
out (the feed-forward update is :mod:`asyncrl.algos.ppo.update`).

A rollout of T steps is cut into chunks of L = ``recurrence`` steps; each chunk of each env is a
sequence that starts from the hidden state the actor stored for it (that of the policy version
that acted: states are not recomputed), with the state set to zeros where an episode starts
inside it. Targets and minibatches use the same sequences; a minibatch is whole sequences, and
gradients flow through each sequence, not beyond (truncated backpropagation through time).
"""

from __future__ import annotations

import torch

from asyncrl.algos.ppo.config import PPOConfig
from asyncrl.algos.ppo.fused import SequenceStep, supports_sequences
from asyncrl.algos.ppo.networks import RecurrentActorCritic
from asyncrl.algos.ppo.update import (
    _fast_adam,
    _nothing,
    _raise_nonfinite,
    descend,
    estimate,
    ppo_loss,
    run_epochs,
)

# the batch's fields that are [L, N, ...] sequences; "states" [N, S, H] start them
SEQUENCE_KEYS = ("features", "actions", "logp", "weight", "adv", "returns", "values", "first")


def to_sequences(x: torch.Tensor, chunk: int) -> torch.Tensor:
    """Time-major [T, B, ...] to sequences [L, C * B, ...]: sequence ``c * B + b`` is chunk c
    of env b (the order of the slots' stored states, [C, B, ...] flattened)."""
    T, B = x.shape[:2]
    C = T // chunk
    return x.reshape(C, chunk, B, *x.shape[2:]).transpose(0, 1).reshape(chunk, C * B, *x.shape[2:])


def from_sequences(x: torch.Tensor, envs: int) -> torch.Tensor:
    """The inverse of :func:`to_sequences`: [L, C * B, ...] to [T, B, ...]."""
    L, N = x.shape[:2]
    C = N // envs
    return x.reshape(L, C, envs, *x.shape[2:]).transpose(0, 1).reshape(C * L, envs, *x.shape[2:])


def episode_starts(r: dict[str, torch.Tensor]) -> torch.Tensor:
    """[T, B]: true where a step is the first of an episode that began inside the rollout."""
    done = r["terminated"] | r["truncated"]
    first = torch.zeros_like(done)
    first[1:] = done[:-1]
    return first


class RecurrentPPO:
    def __init__(
        self,
        policy: RecurrentActorCritic,
        cfg: PPOConfig,
        lr: float,
        chunk: int,
        fused: bool = True,
        compile: bool = False,
    ):
        """``fused``: a policy with an MLP torso takes fused.SequenceStep (False: the autograd
        step, its reference); ``compile``: that step compiled."""
        self.policy, self.cfg, self.chunk = policy, cfg, chunk
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.device = self.params[0].device
        self.optimizer = torch.optim.Adam(self.params, lr=lr, eps=1e-5, **_fast_adam())
        fused = fused and supports_sequences(policy)
        self.fused = SequenceStep(policy, cfg, self.optimizer, compile) if fused else None
        self._step = self.fused or self._autograd_step  # the step an update takes
        # Called around every gradient step; Hogwild! workers sync parameters there.
        self.before_step = self.after_step = _nothing
        # the fused step's NaN or inf gradients, as PPO's (the autograd step's: the optimizer)
        self.on_nonfinite = _raise_nonfinite

    # ---------------------------------------------------------------- targets
    @torch.no_grad()
    def targets(self, r: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Values and log-probs by unrolling every chunk from its stored state, then GAE or
        V-trace as for a feed-forward policy; returns the batch as sequences."""
        policy, L = self.policy, self.chunk
        T, B = r["rewards"].shape
        feats = policy.features(r["obs"].flatten(0, 1))
        feats = feats.view(T + 1, B, *feats.shape[1:])
        first = episode_starts(r)
        states = r["rnn_states"].flatten(0, 1)  # [C * B, S, H]
        x = to_sequences(feats[:T], L)
        actions = to_sequences(r["actions"], L)
        seq_first = to_sequences(first, L)
        # the bootstrap: the observation after the rollout, read on from the last chunk's end
        keep = (~(r["terminated"][-1] | r["truncated"][-1])).to(states.dtype)
        if self.fused is not None and self.fused.compiled:
            out, tail = self.fused.unroll(x, states, seq_first, feats[T], keep)
        else:
            out, final = policy.unroll(x, states, seq_first)
            tail, _ = policy.step(feats[T], final[-B:] * keep[:, None, None])
        logp, _, value = policy.evaluate_features(out.flatten(0, 1), actions.flatten(0, 1))
        values = torch.cat([from_sequences(value.view(L, -1), B), policy.v(tail).view(1, B)])
        target_logp = None
        if self.cfg.correction != "none":
            target_logp = from_sequences(logp.view(L, -1), B)
        adv, ret, clip_from, weight = estimate(self.cfg, r, values, target_logp)
        return {
            "features": x,
            "actions": actions,
            "logp": to_sequences(clip_from, L),
            "weight": to_sequences(weight, L),
            "adv": to_sequences(adv, L),
            "returns": to_sequences(ret, L),
            "values": to_sequences(values[:-1], L),
            "first": seq_first,
            "states": states,
        }

    # ---------------------------------------------------------------- the update
    def loss(
        self, hp, features, actions, old_logp, weight, adv, returns, old_values, first, states
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """PPO's clipped surrogate (as ``update.PPO``) over sequences [L, M, ...] unrolled from
        ``states`` [M, S, H]: (loss, policy, value and entropy terms, log-ratio) of the
        minibatch, the samples flattened. ``hp``: ``update.step_hyperparameters``."""
        cfg = self.cfg
        logp, entropy, value = self.policy.evaluate_sequences(features, actions, states, first)
        logp, entropy, value = logp.flatten(), entropy.flatten(), value.flatten()
        old_logp, weight, adv = old_logp.flatten(), weight.flatten(), adv.flatten()
        returns, old_values = returns.flatten(), old_values.flatten()
        return ppo_loss(
            cfg, hp[0], hp[2], logp, entropy, value, old_logp, weight, adv, returns, old_values
        )

    def _autograd_step(self, hp, *minibatch) -> torch.Tensor:
        loss, pg_loss, v_loss, ent, log_ratio = self.loss(hp, *minibatch)
        return descend(
            self.optimizer, self.params, self.cfg.max_grad_norm, loss, hp[0], log_ratio,
            pg_loss, v_loss, ent,
        )  # fmt: skip

    def update(
        self,
        batch: dict[str, torch.Tensor],
        lr: float,
        generator: torch.Generator,
        clip_scale: float = 1.0,
    ) -> dict[str, float]:
        """``epochs`` passes of shuffled minibatches of whole sequences; mean statistics."""
        return run_epochs(
            self,
            batch,
            batch["states"].shape[0],
            max(1, self.cfg.minibatch_size // self.chunk),  # sequences per minibatch
            lambda perm: [batch[k][:, perm] for k in SEQUENCE_KEYS] + [batch["states"][perm]],
            lambda shuffled, a, b: [x[:, a:b] for x in shuffled[:-1]] + [shuffled[-1][a:b]],
            lr,
            generator,
            clip_scale,
        )
