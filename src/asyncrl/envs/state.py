"""An env's episode so far as plain data, and putting it back: what lets a resumed run
continue exactly where it stopped."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

_PLAIN = (type(None), bool, int, float, str)
# attributes that are configuration or bookkeeping of gym itself, not an episode's state
_NOT_STATE = {"_saved_kwargs", "spec", "metadata", "render_mode", "_cached_spec"}


def env_state(env: gym.Env) -> list[dict[str, Any]]:
    """What an env's episode so far consists of, as plain data (numbers, strings, arrays): one
    dict per layer of its wrapper chain, outermost first, of the attributes that are plain
    values or arrays, with each random generator's state (``np_random``), and for a MuJoCo env
    its simulation state. Enough to continue the episode exactly in a fresh env of the same id
    (:func:`set_env_state`) for envs that keep their state in such attributes -- classic
    control, MuJoCo, and most simple envs; an env whose state lives elsewhere continues from
    what was captured. Nothing here is pickled: a checkpoint stays tensors and plain data."""
    layers = []
    layer: Any = env
    while layer is not None:
        state: dict[str, Any] = {}
        for key, value in vars(layer).items():
            if key in _NOT_STATE:
                continue
            if isinstance(value, _PLAIN) or (
                isinstance(value, np.ndarray) and value.dtype.kind in "biuf"
            ):
                state[key] = value.copy() if isinstance(value, np.ndarray) else value
            elif isinstance(value, np.random.Generator):
                state[key] = {"bit_generator_state": value.bit_generator.state}
        data = getattr(layer, "data", None)
        if data is not None and hasattr(data, "qpos") and hasattr(data, "qvel"):
            state["mujoco_data"] = {
                k: np.array(getattr(data, k))
                for k in ("qpos", "qvel", "act", "qacc_warmstart", "ctrl")
                if hasattr(data, k)
            } | {"time": float(data.time)}
        layers.append(state)
        layer = getattr(layer, "env", None) if isinstance(layer, gym.Wrapper) else None
    return layers


def set_env_state(env: gym.Env, layers: list[dict[str, Any]]) -> None:
    """Put back what :func:`env_state` captured, into an env made with the same id."""
    layer: Any = env
    for state in layers:
        if layer is None:
            break
        for key, value in state.items():
            if key == "mujoco_data":
                for name, arr in value.items():
                    if name == "time":
                        layer.data.time = arr
                    else:
                        getattr(layer.data, name)[...] = np.asarray(arr)
                continue
            current = getattr(layer, key, None)
            if isinstance(value, dict) and "bit_generator_state" in value:
                if isinstance(current, np.random.Generator):
                    current.bit_generator.state = value["bit_generator_state"]
            elif hasattr(value, "numpy"):  # arrays come back from a checkpoint as tensors
                setattr(layer, key, value.numpy().copy())
            elif isinstance(value, np.ndarray):
                setattr(layer, key, value.copy())
            else:
                setattr(layer, key, value)
        layer = getattr(layer, "env", None) if isinstance(layer, gym.Wrapper) else None
