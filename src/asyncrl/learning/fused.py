"""What the steps with their gradients written out share (PPO's ``algos/ppo/fused.py``, DQN's
``algos/dqn/fused.py``): an Adam optimizer's parameters and state packed as flat vectors, so that
the global-norm clip and Adam are a few ops on whole vectors, with the non-finite guard (a NaN or
inf gradient is not applied, and counted, with no host sync); and compiling such a step as one
inductor graph. Adam's state stays in the ``torch.optim.Adam`` it is given, in that optimizer's
own format, so checkpoints keep it. Why and how fast: docs/benchmarks/learner-floor.md.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch

from asyncrl.compiling import compiled

# inductor's per-call checks of every input's size and alignment cost more than this graph's
# elementwise work; the inputs are checked once, in PackedAdam.pack
INDUCTOR_OPTIONS = {
    "size_asserts": False,
    "alignment_asserts": False,
    "scalar_asserts": False,
    "cpp_wrapper": True,
}


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


def lies_in(flat: torch.Tensor, first: torch.Tensor, last: torch.Tensor) -> bool:
    """Whether ``first`` starts ``flat`` and ``last`` ends it (what any swap of the tensors
    packed there moves: a cheap test that they are still its views)."""
    end = flat.data_ptr() + flat.element_size() * (flat.numel() - last.numel())
    return first.data_ptr() == flat.data_ptr() and last.data_ptr() == end


def own_code(obj: object, fn: types.FunctionType) -> types.MethodType:
    """``fn`` bound to ``obj`` with a code object of its own. Dynamo keeps its compiled graphs
    and their guards per code object: with the class's one, every step object of a process (two
    learners, a test session) would share them, recompile for each other's sizes and settings,
    and fail once past torch's limit of recompilations."""
    code = fn.__code__.replace()
    own = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    return types.MethodType(own, obj)


def compile_step(obj: object, fn: types.FunctionType) -> Callable:
    """``fn`` bound to ``obj`` (:func:`own_code`), compiled as one graph for fixed sizes."""
    return compiled(own_code(obj, fn), fullgraph=True, dynamic=False, options=INDUCTOR_OPTIONS)


class PackedAdam:
    """The parameters of a ``torch.optim.Adam`` (one plain group) and its state as views of one
    flat vector each, and the gradient clip and Adam step on them (:meth:`descend`). A subclass
    writes the step that computes the gradients; ``cfg.max_grad_norm`` is its clip (0: off).

    Before the steps of an update, :meth:`pack` must have been called, and after anything that
    may have swapped the parameters' storage, :meth:`check`.
    """

    def __init__(self, cfg, optimizer: torch.optim.Adam, keys: dict[int, tuple], compile: bool):
        """``keys``: each parameter's key (by ``id``) in ``self.index``."""
        self.cfg = cfg
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
        self.adam_per_tensor = False  # eager fused Adam: one call on the packed vectors
        self.compiled = compile
        self._flat: tuple[torch.Tensor, ...] | None = None
        self._ends: tuple[int, ...] = ()  # _ends() when last packed
        self._grad: tuple[torch.Tensor, list[torch.Tensor]] | None = None  # grad_buffer
        self._per_tensor_views: tuple | None = None  # _per_tensor's, and the vectors they view

    def _norm(self, grads: list[torch.Tensor], grad: torch.Tensor) -> torch.Tensor:
        """The global norm of the gradients ``grads``, ``grad`` their concatenation."""
        return torch.linalg.vector_norm(grad)

    def _clip(self, grad_norm: torch.Tensor) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_'s factor on all gradients."""
        # max_norm / (norm + 1e-6) as Tensor.__rdiv__ computes it (a reciprocal, then a
        # product), without its Python wrapper's few us; in place on the sum, a new tensor
        return torch.add(grad_norm, 1e-6).reciprocal_().mul_(self.cfg.max_grad_norm).clamp_(max=1.0)

    def pack(self) -> None:
        """Parameters, Adam's moments and step counters as views of one flat vector each, so
        that the clip and Adam are a few ops on whole vectors: kept as they are where they
        already are (as FlatParams.view_into lays parameters out), else moved there, values
        kept. Called at the start of every update (a loaded checkpoint brings new state
        tensors), and by :meth:`check`."""
        if self._still_packed():
            return
        state = self.optimizer.state
        missing = [p for p in self.params if "exp_avg" not in state.get(p, ())]
        if missing:  # none stepped yet (or a state loaded from a learner that had not)
            self._init_state(missing)
        flat_p = flat_span(self.params)
        if flat_p is None:
            flat_p = move_into_one(self.params)
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
        self._ends = self._pointers()

    def _still_packed(self) -> bool:
        """Whether the parameters and Adam's state are the views :meth:`pack` made last: any
        swap of parameters (FlatParams.view_into) or of state tensors (a loaded checkpoint)
        moves the first and the last of each."""
        state = self.optimizer.state
        if self._flat is None or self.params[0] not in state or self.params[-1] not in state:
            return False  # (looked up, not indexed: the defaultdict would add empty entries)
        try:
            return self._pointers() == self._ends
        except KeyError:  # the optimizer's state was cleared
            return False

    def _pointers(self) -> tuple[int, ...]:
        """Where the first and last parameter, and their moments and step counts, lie (as
        :meth:`pack` left them, the ends of the packed vectors): a few integers to compare at
        each step, where testing each vector's ends took ~5 us."""
        state, first, last = self.optimizer.state, self.params[0], self.params[-1]
        s, t = state[first], state[last]
        return (
            first.data_ptr(), last.data_ptr(),
            s["exp_avg"].data_ptr(), t["exp_avg"].data_ptr(),
            s["exp_avg_sq"].data_ptr(), t["exp_avg_sq"].data_ptr(),
            s["step"].data_ptr(), t["step"].data_ptr(),
        )  # fmt: skip

    def check(self) -> None:
        """:meth:`pack` again if the parameters no longer lie in the packed vector (their
        ``.data`` was swapped, as FlatParams.view_into does). Cheap: it looks at the first and
        last parameter, which any such swap moves."""
        if self._flat is not None and not lies_in(self._flat[0], self.params[0], self.params[-1]):
            self.pack()

    def _init_state(self, params: list[torch.Tensor]) -> None:
        """Adam's state of ``params`` as ``torch.optim.Adam`` makes it on its first step (fused
        or not: a float32 step counter per parameter), so that checkpoints keep its format."""
        for p in params:
            self.optimizer.state[p] = {
                "step": torch.zeros((), dtype=torch.float32, device=p.device),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }

    def grad_buffer(self) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """A flat vector for the gradients, laid out as the parameters, and its per-tensor
        views: an eager step writes its gradients there (``out=``), sparing a ``cat`` and an
        allocation per tensor each step. Made once, apart from the parameters' storage."""
        flat_p = self._flat[0]
        if self._grad is None or self._grad[0].shape != flat_p.shape:
            grad = torch.empty_like(flat_p)
            self._grad = (grad, self._views(grad))
        return self._grad

    def _per_tensor(self, *flats: torch.Tensor) -> tuple[list[torch.Tensor], ...]:
        """Per-tensor views of ``flats`` (parameters, moments; the step counts last), kept
        while the same vectors come back (the packed ones, from step to step): slicing them
        anew cost ~25 small ops a step."""
        kept = self._per_tensor_views
        if kept is None or any(a is not b for a, b in zip(kept[0], flats, strict=True)):
            views = tuple(self._views(x) for x in flats[:-1]) + (list(flats[-1]),)
            self._per_tensor_views = kept = (flats, views)
        return kept[1]

    def _views(self, flat_p: torch.Tensor) -> list[torch.Tensor]:
        """The parameters as views of the packed vector, in the optimizer's order."""
        views, at = [], 0
        for n, shape in zip(self.sizes, self.shapes, strict=True):
            views.append(flat_p[at : at + n].view(shape))
            at += n
        return views

    def descend(
        self, flat_p, flat_m, flat_v, steps, grads, lr, grad=None
    ) -> tuple[torch.Tensor, ...]:
        """The clip and Adam on the packed vectors with ``grads`` (the optimizer's order) and
        ``lr`` (a tensor). A NaN or inf gradient is not applied (parameters, moments and step
        counts stay as they were): no host sync here. Returns the clipped norm (0 without a
        clip, as before), whether the step was applied, and the gradient's norm. ``grad``: the
        gradients' flat vector if ``grads`` are its views already (:meth:`grad_buffer`, eager
        steps); the clip scales it in place."""
        if grad is None:
            grad = torch.cat([g.reshape(-1) for g in grads])
        norm = self._norm(grads, grad)
        ok = norm < float("inf")  # finite: a norm is >= 0 or NaN (one op; isfinite takes four)
        if self.cfg.max_grad_norm > 0:
            # as torch.nn.utils.clip_grad_norm_: the norm of all gradients, clipped by scaling
            grad_norm = norm
            clip = self._clip(grad_norm)
        else:
            grad_norm, clip = torch.zeros((), device=lr.device), None  # no norm, as before
        steps.add_(ok)  # 1 where applied (a bool added to the float counts)
        (beta1, beta2), eps = self.betas, self.eps
        if self.fused_adam and not self.compiled:
            # lr as a float, as torch.optim.Adam passes it (the tensor is for the compiled
            # step, which must not recompile when it moves); found_inf makes the kernel skip
            # the step, as for AMP's GradScaler
            if clip is not None:
                grad.mul_(clip)  # the cat's output or the step's buffer: ours to scale
            if self.adam_per_tensor:  # as torch.optim.Adam calls it, to the last bit
                ps, ms, vs, ss = self._per_tensor(flat_p, flat_m, flat_v, steps)
                mine = self._grad
                gs = mine[1] if mine is not None and grad is mine[0] else self._views(grad)
            else:
                ps, gs, ms, vs, ss = [flat_p], [grad], [flat_m], [flat_v], [steps[0]]
            torch._fused_adam_(
                ps, gs, ms, vs, [], ss,
                lr=self.optimizer.param_groups[0]["lr"], beta1=beta1, beta2=beta2,
                weight_decay=0.0, eps=eps, amsgrad=False, maximize=False,
                found_inf=(~ok).to(torch.float32),
            )  # fmt: skip
        else:
            adam(flat_p, grad, flat_m, flat_v, steps[0], lr, beta1, beta2, eps, ok, clip)
        return grad_norm, ok, norm


def adam(p, g, m, s, step, lr, beta1: float, beta2: float, eps: float, ok, clip=None) -> None:
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
def move_into_one(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Make ``tensors`` views of one new flat vector, back to back, values kept; returns it."""
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    at = 0
    for t in tensors:
        n = t.numel()
        t.data = flat[at : at + n].view(t.shape)
        at += n
    return flat
