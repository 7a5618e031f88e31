"""ALE envs: the standard preprocessing (Machado et al. 2018, as CleanRL, SB3, Sample Factory
and EnvPool apply it), and what training adds over a whole vector env (:class:`AtariTraining`)."""

from __future__ import annotations

import importlib.util
from typing import Any

import gymnasium as gym
import numpy as np

from asyncrl.config import ConfigError

ATARI_FRAME_SKIP = 4
ATARI_NOOP_MAX = 30
ATARI_SCREEN = 84
ATARI_STACK = 4


def _need_cv2(env_id: str) -> None:
    if importlib.util.find_spec("cv2") is None:
        raise ConfigError(
            f"env: the Atari preprocessing of {env_id} resizes frames with OpenCV, which is not "
            'installed: pip install "asyncrl[atari]" (or --no-atari-preprocessing)'
        )


def _final_values(info: dict, key: str, done: np.ndarray, now: np.ndarray) -> np.ndarray:
    """Per env, ``info[key]`` as the step left it: for an env whose episode ended (and was
    reset in the same step) from ``info["final_info"]``, else the value now."""
    out = np.array(now, copy=True)
    final = info.get("final_info")
    if final is not None and key in final:
        mask = np.asarray(final.get(f"_{key}", done)) & done
        out[mask] = np.asarray(final[key])[mask]
    return out


class AtariTraining:
    """What training adds to preprocessed Atari envs, over a whole same-step vector env (so
    both vectorisers share it): *episodic life*, a lost life ends the training episode
    (``terminated``: no value is bootstrapped across it) while the game goes on, without a reset;
    and *reward clipping* to its sign. The game's own score is what gets logged: when a game
    ends (game over, or the time limit) ``info["episode_score"]`` holds its unclipped return
    over all lives and ``info["episode_steps"]`` its length in agent steps (NaN and 0 for envs
    whose game goes on), and actors log those instead of summing the rewards they see.

    The wrapped env must report ``info["lives"]`` (ALE envs do); ``inner`` is the wrapped env.
    """

    def __init__(self, envs: Any):
        self.inner = envs
        self.num_envs = envs.num_envs
        self.lives = np.zeros(self.num_envs, np.int64)
        self.score = np.zeros(self.num_envs, np.float64)
        self.steps = np.zeros(self.num_envs, np.int64)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict]:
        obs, info = self.inner.reset(seed=seed, options=options)
        self.lives[:] = info["lives"]
        self.score[:] = 0.0
        self.steps[:] = 0
        return obs, info

    def step(self, actions: np.ndarray) -> tuple:
        obs, reward, terminated, truncated, info = self.inner.step(actions)
        reward = np.asarray(reward, np.float64)
        game_over = np.asarray(terminated) | np.asarray(truncated)
        lives_now = np.asarray(info["lives"])  # of the next game, where one ended
        lives = _final_values(info, "lives", game_over, lives_now)
        life_lost = (lives < self.lives) & ~game_over
        self.lives[:] = lives_now
        self.score += reward
        self.steps += 1
        info = dict(info)
        info["episode_score"] = np.where(game_over, self.score, np.nan)
        info["episode_steps"] = np.where(game_over, self.steps, 0)
        self.score[game_over] = 0.0
        self.steps[game_over] = 0
        if life_lost.any():  # the training episode ends here, its last obs is this one
            final = np.empty(self.num_envs, dtype=object)
            if "final_obs" in info:
                final[:] = list(info["final_obs"])
            for i in np.flatnonzero(life_lost):
                final[i] = obs[i]
            info["final_obs"] = final
            info["_final_obs"] = game_over | life_lost
        return obs, np.sign(reward).astype(np.float32), terminated | life_lost, truncated, info

    def close(self) -> None:
        self.inner.close()


# ------------------------------------------------------------------------------- EnvPool
# EnvPool's defaults that differ from the Gymnasium ids of the same name, set here to
# Gymnasium's: Atari v5 ids have sticky actions (repeat_action_probability 0.25, which EnvPool
# leaves at 0), and Gymnasium's AtariPreprocessing presses no FIRE on reset (EnvPool does for
# games that have it). Episodic life and reward clipping stay off: AtariTraining does them for


def make_atari(env_id: str, **kwargs: Any) -> gym.Env:
    """An ALE id with the standard preprocessing: no-op starts up to 30, frame skip 4 with the
    max of the last two frames, 84x84 grayscale, 4 stacked frames; uint8 (4, 84, 84)."""
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    _need_cv2(env_id)
    env = gym.make(env_id, frameskip=1, **kwargs)  # the wrapper skips frames
    env = AtariPreprocessing(
        env,
        noop_max=ATARI_NOOP_MAX,
        frame_skip=ATARI_FRAME_SKIP,
        screen_size=ATARI_SCREEN,
        terminal_on_life_loss=False,  # AtariTraining does it without resetting the game
        grayscale_obs=True,
        scale_obs=False,  # uint8; the network scales
    )
    return FrameStackObservation(env, ATARI_STACK)
