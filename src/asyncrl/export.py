"""Export a run's policy to ONNX (``asyncrl export``): the acting path only, as ``asyncrl eval``
acts deterministically, checked against PyTorch with onnxruntime before the file is kept.

The graph takes a batch of raw observations (the env's dtype: uint8 frames stay uint8; the
observation normaliser's running statistics are folded in as constants) and gives the actions
the env receives. A recurrent policy also takes and gives its state. docs/guides/export.md has
the inputs and outputs, and the lines that act with the file with numpy and onnxruntime only.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from asyncrl.config import ConfigError
from asyncrl.envs import make_env
from asyncrl.nets import RunningNorm
from asyncrl.policy import Policy, load

PACKAGES = ("onnx", "onnxruntime", "onnxscript")  # the onnx extra
TOLERANCE = 1e-5  # the largest difference of continuous actions the check accepts
OBS, STATE, ACTION, NEXT_STATE = "obs", "state", "action", "next_state"  # the graph's names


class ExportError(Exception):
    """The exported graph does not act as PyTorch does; the message says how, in one line."""


def require_onnx() -> None:
    """A ConfigError naming the extra if a package export needs is not installed."""
    missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"onnx: export needs {', '.join(missing)}, not installed: pip install 'asyncrl[onnx]'"
        )


class _FoldedNorm(nn.Module):
    """A RunningNorm's forward with its statistics as float32 constants: the same numbers
    RunningNorm.forward computes from them, without its float64 bookkeeping in the graph."""

    def __init__(self, norm: RunningNorm):
        super().__init__()
        self.register_buffer("mean", norm.mean.float())
        self.register_buffer("std", norm.scale().float() + 1e-8)
        self.clip = norm.clip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp((x - self.mean) / self.std, -self.clip, self.clip)


class ActingGraph(nn.Module):
    """What :meth:`Policy.act` computes deterministically for a batch, as one module to trace:
    the policy's own ``act`` (a copy, its enabled normalisers folded), then what Policy.act does
    to its actions (continuous: clipped to the action space; discrete: the env's numbering)."""

    def __init__(self, policy: Policy):
        super().__init__()
        module = copy.deepcopy(policy.module)
        for name, sub in list(module.named_modules()):
            if isinstance(sub, RunningNorm) and sub.enabled:
                parent, _, attr = name.rpartition(".")
                setattr(module.get_submodule(parent), attr, _FoldedNorm(sub))
        self.module, self.recurrent = module, policy.recurrent
        spec = policy.spec
        self.discrete, self.start = spec.discrete, spec.action_start
        if not spec.discrete:
            self.register_buffer("low", torch.as_tensor(spec.action_low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(spec.action_high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> Any:
        if self.recurrent:
            action, _, state = self.module.act(obs, True, state=state)
        else:
            action, _ = self.module.act(obs, True)
        if not self.discrete:
            action = torch.clamp(action, self.low, self.high)  # as np.clip in Policy.act
        elif self.start:
            action = action + self.start
        return action if state is None else (action, state)


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The exporter's log lines and warnings (torchvision's ops it skips, deprecations inside
    torch) concern torch, not the user's file."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def write_onnx(policy: Policy, path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Write ``policy``'s acting graph to ``path`` (one file, weights inside): inputs ``obs``
    [batch, *obs_shape] (and ``state`` [batch, S, rnn_size]), outputs ``action`` (and
    ``next_state``), the batch dimension dynamic; ``metadata`` as the model's metadata."""
    graph = ActingGraph(policy).eval()
    spec = policy.spec
    # a batch of 2: torch.export would take a batch of 1 for a constant
    obs = torch.zeros((2, *spec.obs_shape), dtype=getattr(torch, spec.obs_dtype))
    args: tuple = (obs, policy.module.initial_state(2)) if policy.recurrent else (obs,)
    batch = torch.export.Dim("batch")
    with _quiet_exporter():
        program = torch.onnx.export(
            graph,
            args,
            dynamo=True,
            input_names=[OBS, STATE] if policy.recurrent else [OBS],
            output_names=[ACTION, NEXT_STATE] if policy.recurrent else [ACTION],
            dynamic_shapes=tuple({0: batch} for _ in args),
            verbose=False,
        )
    program.model.metadata_props.update(metadata or {})
    program.save(str(path), external_data=False)


def collect_observations(policy: Policy, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` observations of one env of the run (made as ``asyncrl eval`` makes it) stepped with
    random actions, reset with ``seed`` and its action space seeded ``seed``; and whether each
    is the first of an episode."""
    cfg = policy.config
    env = make_env(cfg.env, atari_preprocessing=cfg.atari_preprocessing)
    try:
        env.action_space.seed(seed)
        obs, _ = env.reset(seed=seed)
        seen, first, starts = [], [], True
        while len(seen) < n:
            seen.append(np.asarray(obs, dtype=policy.spec.obs_dtype))
            first.append(starts)
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            starts = bool(terminated or truncated)
            if starts:
                obs, _ = env.reset()
    finally:
        env.close()
    return np.stack(seen), np.array(first)


@dataclass(frozen=True)
class Agreement:
    """How the exported graph's actions compare with PyTorch's on the same observations."""

    observations: int
    discrete: bool
    differing: int  # actions not equal (discrete) or further apart than TOLERANCE
    max_difference: float  # the largest absolute difference of any action's component

    @property
    def agrees(self) -> bool:
        return self.differing == 0

    def line(self) -> str:
        n = self.observations
        if self.discrete:
            return f"{n - self.differing} of {n} actions identical"
        return (
            f"max |difference| of the actions {self.max_difference:.3g} over {n} observations "
            f"({self.differing} above {TOLERANCE:g})"
        )


def session(path: str | Path) -> Any:
    """An onnxruntime session of ``path`` on the CPU, on one thread (as actors act)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def compare(policy: Policy, path: str | Path, obs: np.ndarray, first: np.ndarray) -> Agreement:
    """Run the graph at ``path`` and ``policy.act`` (deterministic) on ``obs``: feed-forward, as
    one batch; recurrent, one step at a time, each carrying its own state from step to step and
    starting from zeros where ``first`` says an episode starts."""
    run = session(path)
    if not policy.recurrent:
        ours = policy.act(obs)
        theirs = run.run([ACTION], {OBS: obs})[0]
    else:
        ours, theirs = [], []
        for t in range(len(obs)):
            if first[t]:
                h = s = policy.initial_state(1)
            a, h = policy.act(obs[t : t + 1], h)
            b, s = run.run([ACTION, NEXT_STATE], {OBS: obs[t : t + 1], STATE: s})
            ours.append(a)
            theirs.append(b)
        ours, theirs = np.concatenate(ours), np.concatenate(theirs)
    if policy.spec.discrete:
        differing = int((ours != theirs).sum())
        return Agreement(len(obs), True, differing, float(differing > 0))
    diff = np.abs(ours.astype(np.float64) - theirs).reshape(len(obs), -1).max(1)
    return Agreement(len(obs), False, int((diff > TOLERANCE).sum()), float(diff.max()))


def export(
    run_dir: str | Path,
    onnx: str | Path,
    checkpoint: str = "latest",
    policy: int | None = None,
    observations: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Export the policy :func:`asyncrl.load` gives for ``run_dir``, ``checkpoint`` and
    ``policy`` to the ONNX file ``onnx``, checked on ``observations`` observations of the run's
    env (random actions, seeded ``seed``). The file is written only if onnxruntime's actions
    agree with PyTorch's (discrete: all identical; continuous: within :data:`TOLERANCE`); else
    :class:`ExportError`. Returns what was written and how it was checked."""
    if observations < 1:
        raise ConfigError(f"observations: must be >= 1, got {observations}")
    onnx = Path(onnx)
    if not onnx.parent.is_dir():
        raise ConfigError(f"onnx: the directory {onnx.parent} does not exist")
    require_onnx()
    loaded = load(run_dir, checkpoint, policy=policy)
    cfg, spec = loaded.config, loaded.spec
    # name: (shape, dtype, what it holds)
    norm = any(isinstance(m, RunningNorm) and m.enabled for m in loaded.module.modules())
    inputs = {
        OBS: (
            ["batch", *spec.obs_shape],
            spec.obs_dtype,
            "raw observations" + (", normalised inside" if norm else ""),
        )
    }
    outputs = {
        ACTION: (
            ["batch", *spec.action_shape],
            "int64" if spec.discrete else "float32",
            "the env's action" if spec.discrete else "actions, clipped to the action space",
        )
    }
    if loaded.recurrent:
        state = ["batch", *loaded.module.state_shape]
        inputs[STATE] = (state, "float32", "zeros at an episode's start")
        outputs[NEXT_STATE] = (state, "float32", "the state input of the next step")
    metadata = {
        "env": cfg.env,
        "algo": cfg.algo,
        "obs_dtype": spec.obs_dtype,
        "action": "int64, the env's action index" if spec.discrete else "float32, clipped",
        "recurrent": cfg.recurrent if loaded.recurrent else "none",
    }
    temp = onnx.with_name(f".{onnx.name}.{os.getpid()}.tmp")
    try:
        write_onnx(loaded, temp, metadata)
        obs, first = collect_observations(loaded, observations, seed)
        agreement = compare(loaded, temp, obs, first)
        if not agreement.agrees:
            raise ExportError(
                f"export: onnxruntime and PyTorch disagree on {cfg.env}: {agreement.line()}; "
                f"{onnx} was not written"
            )
        os.replace(temp, onnx)
    finally:
        temp.unlink(missing_ok=True)
    return {
        "onnx": str(onnx),
        "bytes": onnx.stat().st_size,
        "env": cfg.env,
        "algo": cfg.algo,
        "checkpoint": checkpoint,
        "policy": loaded.index,
        "env_steps": loaded.env_steps,
        "inputs": inputs,
        "outputs": outputs,
        "obs_dtype": spec.obs_dtype,
        "seed": seed,
        "agreement": agreement,
    }
