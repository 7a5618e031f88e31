"""Gymnasium's MuJoCo envs, made with MuJoCo's model-compile warnings issued as Python
warnings instead of printed to stderr and appended to MUJOCO_LOG.TXT in the working
directory."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import gymnasium as gym

_MUJOCO_WARNING_HOOK = threading.Lock()  # the hook is the process's: one make at a time sets it


def make_mujoco(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` for a MuJoCo env, with what MuJoCo warns while it compiles the model
    issued as Python warnings. MuJoCo's own handler prints each warning to stderr and appends
    it to MUJOCO_LOG.TXT in the working directory: Gymnasium's HalfCheetah model uses an XML
    attribute MuJoCo has deprecated (``settotalmass``), so every HalfCheetah env printed it and
    each run left that file wherever it was started. A deprecation there is for Gymnasium's
    model, not for the user (a DeprecationWarning: hidden unless asked for); any other warning
    is a UserWarning, shown once per process. The hook is MuJoCo's process-wide one, set only
    around the make and put back as it was."""
    import mujoco

    if not hasattr(mujoco, "get_mju_user_warning"):  # older bindings: MuJoCo's own handler
        return gym.make(env_id, **kwargs)
    said: list[str] = []
    with _MUJOCO_WARNING_HOOK:
        before = mujoco.get_mju_user_warning()
        mujoco.set_mju_user_warning(said.append)
        try:
            env = gym.make(env_id, **kwargs)
        finally:
            mujoco.set_mju_user_warning(before)
    for message in said:
        category = DeprecationWarning if "deprecated" in message else UserWarning
        warnings.warn(f"MuJoCo ({env_id}): {message}", category, stacklevel=3)
    return env
