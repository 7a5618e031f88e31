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


def _data(value: Any) -> bool:
    """Plain data a checkpoint holds as it is: numbers, strings, numeric arrays, and lists,
    tuples and string-keyed dicts of them."""
    if isinstance(value, (*_PLAIN, np.generic)):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "biuf"
    if isinstance(value, list | tuple):
        return all(_data(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _data(v) for k, v in value.items())
    return False


def object_state(obj: Any, _seen: set[int] | None = None) -> dict[str, Any]:
    """The state of a game object as plain data (a PettingZoo env and its wrappers, which keep
    their state in attributes of lists and dicts): its attributes that are data (copied), each
    random generator's state, and the same of the plain objects it holds (an agent selector, a
    wrapped env), under ``objects``. Spaces, renderers and other non-data are left out: they
    are configuration a fresh env of the same id has already."""
    import copy

    seen = _seen if _seen is not None else set()
    seen.add(id(obj))  # an object held twice (or a cycle) is captured once
    state: dict[str, Any] = {"attrs": {}, "objects": {}}
    for key, value in vars(obj).items():
        if key in _NOT_STATE or key == "metadata":
            continue
        if _data(value):
            state["attrs"][key] = copy.deepcopy(value)
        elif isinstance(value, np.random.Generator):
            state["attrs"][key] = {"bit_generator_state": value.bit_generator.state}
        elif (
            hasattr(value, "__dict__")
            and not isinstance(value, gym.Space | type)
            and id(value) not in seen
        ):
            state["objects"][key] = object_state(value, seen)
    return state


def _plain(value: Any, like: Any) -> Any:
    """A value back from a checkpoint as it was saved: tensors as arrays of the old dtype."""
    if hasattr(value, "numpy"):
        dtype = like.dtype if isinstance(like, np.ndarray) else None
        return value.numpy().astype(dtype, copy=True) if dtype else value.numpy().copy()
    if isinstance(value, dict):
        like = like if isinstance(like, dict) else {}
        return {k: _plain(v, like.get(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        like = like if isinstance(like, list | tuple) and len(like) == len(value) else []
        out = [_plain(v, like[i] if like else None) for i, v in enumerate(value)]
        return type(value)(out)
    return value


def set_object_state(obj: Any, state: dict[str, Any]) -> None:
    """Put back what :func:`object_state` captured, into an object made the same way."""
    for key, value in state["attrs"].items():
        current = getattr(obj, key, None)
        if isinstance(value, dict) and "bit_generator_state" in value:
            if isinstance(current, np.random.Generator):
                current.bit_generator.state = value["bit_generator_state"]
            continue
        setattr(obj, key, _plain(value, current))
    for key, inner in state["objects"].items():
        held = getattr(obj, key, None)
        if held is not None:
            set_object_state(held, inner)
