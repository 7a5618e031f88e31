"""What the learner must know about an env before anything starts: its spaces, as an
:class:`EnvSpec`, read off one env made for the purpose (:func:`check_env`)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from asyncrl.config import ConfigError
from asyncrl.envs.atari import ATARI_STACK
from asyncrl.envs.envpool import envpool_task
from asyncrl.envs.make import make_env
from asyncrl.envs.pettingzoo import SeatSpace, is_pettingzoo, seat_spaces, two_player_game
from asyncrl.envs.registry import GAME, PIXELS, is_atari, registered_family, resolve_id


@dataclass(frozen=True)
class EnvSpec:
    """The shapes the networks and the rollout buffers are built for."""

    env_id: str
    obs_shape: tuple[int, ...]
    discrete: bool
    action_shape: tuple[int, ...]  # () for discrete actions
    n_actions: int  # number of discrete actions, or the action dimension
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None
    # the dtype observations travel and rest in (slots, replay): uint8 for an env whose
    # observations are uint8 (pixels), float32 for every other
    obs_dtype: str = "float32"
    # frames stacked along the first axis of each observation (the Atari preprocessing's 4)
    frame_stack: int = 1
    # the env's first discrete action (Discrete(n, start)): networks pick 0..n-1, envs get +start
    action_start: int = 0
    # rows per env: a PettingZoo env's agents (envs.pettingzoo), each a seat of the actor's batch
    agents: int = 1
    # the observation ends with the n_actions entries of the legal actions' mask (1: legal)
    action_mask: bool = False
    # a multi-agent env whose agents' spaces differ: each seat's own (envs.pettingzoo.SeatSpace),
    # every row as wide as the widest, the spec's actions the most; () where every seat has these
    seats: tuple[SeatSpace, ...] = ()
    # each policy's spec where they differ (the mapping gives each its agents' spaces:
    # envs.pettingzoo.with_policy_specs); () where every policy has this one
    policies: tuple[EnvSpec, ...] = ()
    # a two-player turn-based game whose players share their spaces: a run's policy can play
    # either seat against an opponent (envs.pettingzoo.play_vs), and its summary says how it does
    games: bool = False

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))

    def for_policy(self, policy: int) -> EnvSpec:
        """The spec policy ``policy``'s networks, learner and slots are built for: its own
        where the run's policies have different spaces, else this one."""
        return self.policies[policy] if self.policies else self


def is_image(spec: EnvSpec) -> bool:
    """Image-shaped observations: uint8 of rank 3 (channels and two spatial axes), what the CNN
    encoder reads."""
    return spec.obs_dtype == "uint8" and len(spec.obs_shape) == 3


def env_family(env_id: str, spec: EnvSpec | None = None) -> str:
    """The family of ``env_id`` (a key of settings.PRESETS): from its registration alone, so no
    env is made; an id nothing registers is a ConfigError naming ``env``. With the env's
    ``spec`` (as check_env gives it), image observations outside ALE are the pixels family,
    and a PettingZoo two-player turn-based game with action masks (``spec.games``) the game
    family."""
    family = registered_family(env_id)
    if spec is not None and spec.games:
        return GAME
    if spec is not None and family != "atari" and is_image(spec):
        return PIXELS
    return family


def spec_from_spaces(env_id: str, obs_space: gym.Space, act_space: gym.Space) -> EnvSpec:
    if not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(
            f"env: {env_id} has observation space {obs_space}; PPO here needs a Box observation"
        )
    obs_dtype = "uint8" if obs_space.dtype == np.uint8 else "float32"
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvSpec(
            env_id,
            tuple(obs_space.shape),
            True,
            (),
            int(act_space.n),
            obs_dtype=obs_dtype,
            action_start=int(act_space.start),
        )
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        return EnvSpec(
            env_id,
            tuple(obs_space.shape),
            False,
            tuple(act_space.shape),
            int(act_space.shape[0]),
            act_space.low.astype(np.float32),
            act_space.high.astype(np.float32),
            obs_dtype,
        )
    raise ConfigError(
        f"env: {env_id} has action space {act_space}; PPO handles Discrete and 1-D Box actions"
    )


def check_env(
    env_id: str,
    atari_preprocessing: bool = True,
    vectorizer: str = "gymnasium",
) -> EnvSpec:
    """Make one env to learn its spaces (as an actor's env has them: preprocessed, for an ALE
    id); every env problem surfaces here as a ConfigError. ``vectorizer envpool``: also that
    EnvPool provides the id (:func:`envpool_task`). A PettingZoo env: one seat's spaces."""
    if is_pettingzoo(env_id):
        agents, box, act, masked, seats = seat_spaces(env_id)
        spec = spec_from_spaces(env_id, box, act)
        games = two_player_game(env_id, agents, masked, seats)
        return dataclasses.replace(
            spec, agents=agents, action_mask=masked, seats=seats, games=games
        )
    env_id = resolve_id(env_id)
    if vectorizer == "envpool":
        envpool_task(env_id, atari_preprocessing)
    try:
        env = make_env(env_id, atari_preprocessing=atari_preprocessing)
    except gym.error.DependencyNotInstalled as e:
        raise ConfigError(f"env: {env_id} needs a package that is not installed: {e}") from e
    except Exception as e:
        gl = os.environ.get("MUJOCO_GL")
        if gl is None or "mujoco" not in str(gym.spec(env_id).entry_point):
            raise
        # mujoco loads the OpenGL library MUJOCO_GL names when it is imported
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise ConfigError(
            f"env: {env_id} cannot be made with MUJOCO_GL={gl!r} ({type(e).__name__}: "
            f"{lines[0] if lines else 'no detail'}); egl needs libEGL, osmesa needs libOSMesa; "
            "training needs no MUJOCO_GL (unset it)"
        ) from e
    try:
        spec = spec_from_spaces(env_id, env.observation_space, env.action_space)
    finally:
        env.close()
    if atari_preprocessing and is_atari(env_id):
        spec = dataclasses.replace(spec, frame_stack=ATARI_STACK)
    return spec
