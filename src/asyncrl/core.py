"""The roles a run is made of, as small protocols (after Acme's ``core.py``).

An :class:`Algorithm` is what the runtime asks about an update rule: its settings and presets,
what an actor records per step, how it acts, and its :class:`Learner`. Actors, transport,
backends, the training loop, Hogwild! and evaluation hold these and never an algorithm's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from asyncrl.config import Settings

# (name, shape, dtype) of one field of a rollout slot
SlotField = tuple[str, tuple[int, ...], str]
# (low, high, scale) of a hyperparameter PBT may perturb: scale "log" (perturbed and drawn on a
# log scale), "linear", or "complement" (1 - value on a log scale: discounts, lambdas)
Mutable = tuple[float, float, str]


class NonFiniteError(ArithmeticError):
    """A NaN or inf where training needs finite numbers; the message says where (a run ends
    with ``ended: nonfinite``)."""


class Saveable(Protocol):
    """Anything a checkpoint holds: its state as tensors and plain data, and back."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class PolicySink(Protocol):
    """Where a learner publishes policy versions (a backend, or a policy store)."""

    @property
    def version(self) -> int: ...

    def publish(self, version: int, write: Callable[[np.ndarray], None]) -> None: ...


class ActingModule(Protocol):
    """The network a policy version holds (its floating-point state is what is published):
    ``act`` gives actions for a batch of observations, and a second output the algorithm's
    own (PPO: log-probs; others: None)."""

    def act(self, obs: Any, deterministic: bool = False, generator: Any = None) -> tuple: ...


class Acting(Protocol):
    """An algorithm's side of an actor: how it acts and what it records in the slot beside
    observations, actions and rewards (its :meth:`Algorithm.slot_fields`)."""

    module: Any  # the ActingModule whose parameters the actor loads each version into

    def start_rollout(self, slot: Any, version: int) -> None:
        """Before the first step of a rollout acted with policy ``version``."""

    def act(self, obs: Any, t: int, slot: Any) -> Any:
        """The actions for step ``t`` (a tensor); writes this algorithm's fields of row ``t``."""

    def episodes_ended(
        self, slot: Any, t: int, ended: np.ndarray, truncated: np.ndarray, final_obs: Any
    ) -> None:
        """Envs ``ended`` (indices) finished an episode at step ``t``; ``truncated`` (bool per
        env) says which by a time limit; ``final_obs[i]`` is env ``i``'s last observation."""

    def state_dict(self) -> dict[str, Any]:
        """What it carries from one rollout to the next (a recurrent policy's hidden states;
        often nothing): part of an actor's exact-resume state."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class JointActing(Protocol):
    """A population's policies acting in one forward where their networks allow it (P small
    forwards cost P times one: per-call overhead dominates small networks)."""

    def refresh(self) -> None:
        """Take the policies' current parameters (before each rollout: none change during one)."""

    def act(self, obs: Any, groups: Sequence[tuple[np.ndarray, Any, int]]) -> list[Any]:
        """Per policy, in order, the actions for its envs ``groups[p][0]`` (indices into
        ``obs``); writes what its :meth:`Acting.act` would into row ``t`` of its ``slot``
        (``groups[p] = (envs, slot, t)``), drawing from its own generator."""


class Learner(Saveable, Protocol):
    """What the training loop holds of a learner: the runtime's host of an algorithm's update
    (:class:`asyncrl.learning.base.LearnerBase`). ``train`` is one iteration on a batch of
    slots -- the algorithm's update between the bookkeeping every learner shares (version, env
    steps, lag, timings, the non-finite guard, the row's figures); ``publish`` hands the
    current parameters to the actors as ``version``. Hogwild! and PBT ask for more by
    capability: :class:`SharesParameters`, :class:`Adoptable`."""

    policy: Any  # the acting module a published version holds
    version: int
    env_steps: int
    iterations: int
    learn_seconds: float
    schedule_from: tuple[int, float]  # the linear schedules' current leg (learning.schedule)
    episode_stats: Any  # returns and lengths of the episodes its batches finished

    @property
    def numel(self) -> int:
        """Floats in a published policy version."""

    def work_ahead(self) -> None:
        """What can be done before the next batch arrives (sync off-policy updates)."""

    def train(self, batch: Sequence[Any]) -> dict[str, float]: ...

    def publish(self, store: PolicySink) -> None: ...

    def policy_vector(self) -> np.ndarray:
        """A copy of the policy as a published version holds it (for evaluations)."""

    def summary_fields(self, wall: float) -> dict[str, Any]:
        """Its figures for summary.json, the non-finite guard's counters among them."""

    def close(self) -> None: ...


@runtime_checkable
class SharesParameters(Protocol):
    """An algorithm whose learner Hogwild! workers can share (asked for by capability)."""

    def shared_tensors(self) -> list[Any]:
        """Everything an update changes: what Hogwild! workers share."""

    def running_norms(self) -> list[Any]:
        """The running statistics among them (merged by Hogwild!, not added)."""

    def set_step_hooks(self, before: Callable[[], None], after: Callable[[], None]) -> None:
        """Call ``before()`` and ``after()`` around every gradient step (Hogwild!)."""

    @property
    def changes_outside_steps(self) -> bool:
        """Whether ``train`` also changes shared tensors outside its gradient steps."""


@runtime_checkable
class Adoptable(Protocol):
    """An algorithm whose learner PBT can perturb and copy (asked for by capability)."""

    def set_hyperparameters(self, values: dict[str, Any]) -> None:
        """Train on with these values of its settings from now on (PBT: its ``mutable``)."""

    def adopt(self, state: dict[str, Any], values: dict[str, Any]) -> None:
        """PBT's exploit: take a copy of another learner's networks, optimizer state and
        normalisers (its ``state_dict``) and ``values`` of its settings; keep its own counters,
        finished episodes and random streams, and move its version on so that actors take the
        new weights."""

    def adoptable_state(self) -> dict[str, Any]:
        """What another learner's ``adopt`` takes of this one: its ``state_dict`` without
        what each learner keeps of its own (a replay buffer, which is never copied)."""


class Algorithm(Protocol):
    """An update rule as the runtime sees it; registered by name in :mod:`asyncrl.algos`."""

    name: str
    hyperparameters: type  # a dataclass: its fields are the algorithm's settings (CLI flags)
    presets: Mapping[str, Mapping[str, Any]]  # env family -> values of settings left unset
    # env family -> (the one env they were tuned on, values that override the family's there)
    tuned: Mapping[str, tuple[str, Mapping[str, Any]]]
    fixed_on_resume: tuple[str, ...]  # settings a checkpoint's networks or data depend on
    derive_markers: Mapping[str, Any]  # its settings derived from others when at these values
    mutable: Mapping[str, Mutable]  # the settings PBT may perturb, with their bounds
    # whether its learner trains on slots that hold other policies' samples too, marked by an
    # ``own`` field (--policy-mapping random)
    masked_slots: bool

    def accepts(self, spec: Any) -> str | None:
        """None if it can train on an env of ``spec``, else why not (one line)."""

    def validate(self, cfg: Settings) -> None:
        """Raise ConfigError for settings it cannot run with (``cfg`` resolved)."""

    def agree(self, cfg: Settings, filled: frozenset[str]) -> dict[str, Any]:
        """New values for the settings in ``filled`` (those a preset or default filled, not
        the user) that would contradict others of ``cfg``, so that defaults never conflict."""

    def derived(self, cfg: Settings) -> dict[str, Any]:
        """Settings derived from others (its own, and ``log_every``'s default)."""

    def switch_values(self, cfg: Settings, filled: frozenset[str]) -> tuple[str, dict[str, Any]]:
        """What a switch of ``cfg`` (PPO's ``--recurrent``) gives the settings in ``filled`` in
        place of the preset's, and the switch as the start-up line names it ("", {}: none)."""

    def for_env(
        self, cfg: Settings, spec: Any, given: Settings | None
    ) -> tuple[dict[str, Any], list[str]]:
        """Settings that depend on the env's spec, and lines to print about them."""

    def slot_fields(
        self, spec: Any, rollout: int, num_envs: int, cfg: Settings | None = None
    ) -> tuple[SlotField, ...]:
        """What an actor records per step beside observations, actions and rewards (``cfg``:
        the run's settings, where its fields depend on them)."""

    def memory_note(self, cfg: Settings, spec: Any) -> str | None:
        """Its own part of the start-up memory line (a replay's size), if any."""

    def acting_module(self, cfg: Settings, spec: Any) -> ActingModule: ...

    def acting(self, cfg: Settings, spec: Any, module: Any, generator: Any) -> Acting: ...

    def joint_acting(self, actings: list[Any]) -> JointActing | None:
        """One forward for a population's ``actings``, or None (each acts in turn; one policy
        acts alone)."""

    def learner(self, cfg: Settings, spec: Any) -> Learner: ...

    def acting_state(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        """The acting module's state dict inside a checkpoint."""
