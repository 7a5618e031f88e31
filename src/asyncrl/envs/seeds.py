"""Every seed an env of a run is reset with, each from its own stream: no two envs share
one, and evaluation episodes never repeat a training env's."""

from __future__ import annotations

import numpy as np


def actor_seed(
    seed: int, actor_id: int, envs_per_actor: int, actors: int = 1, generation: int = 0
) -> int:
    """First env seed of an actor; its K envs take consecutive seeds, so no two envs share one.
    A replacement actor (generation g > 0) takes the seeds after every earlier generation's, so
    a restart never replays an env's episodes."""
    return seed * 1_000_003 + (generation * actors + actor_id) * envs_per_actor


def restart_seed(seed: int, actor_id: int, generation: int, index: int, restart: int) -> int:
    """Seed of env ``index`` of an actor when ``--on-env-error restart`` recreates it for the
    ``restart``-th time: drawn from its own stream, apart from the consecutive actor seeds."""
    entropy = [seed, 1, actor_id, generation, index, restart]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def eval_seeds(seed: int, episodes: int) -> list[int]:
    """Reset seeds of the episodes of every evaluation during training: the same episodes each
    time, so evaluations of successive policies compare like with like, drawn from their own
    stream, apart from the seeds of the training envs (:func:`actor_seed`)."""
    return [int(s) for s in np.random.SeedSequence([seed, 2]).generate_state(episodes)]
