"""A multi-agent env's seats as replay transitions: one per move a seat makes.

A seat of a turn-based game waits between its moves, so its transition spans from one of its
moves to its next: the observation it moved at, its action, every reward it received until it
moves again (a loss arrives at the opponent's move), and as next observation the one it moves
at next -- or, where its episode ends first, the final observation, terminated or truncated
there. The next move may lie in a later rollout (sync DQN's rollouts are one step), so each
actor's seats keep their open transition between slots -- of one actor process: a replacement
(the actor killed and restarted, its envs made anew; the slot's ``generation`` says which) drops
the open transitions its predecessor left, and counts them (``broken``), as a dropped rollout
does (:meth:`SeatTransitions.forget`). Open transitions are checkpointed with the replay
(``--save-replay``), so that a resumed run completes them as an unbroken one does; a run
resumed without its replay starts them anew (docs: Guides, multi-agent).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncrl.replay.buffer import FIELDS


class SeatTransitions:
    """Per actor, each seat's open transition; :meth:`add` turns a slot (its steps marked
    ``own`` where the seat moved) into the transitions it completes, in the order they end."""

    def __init__(self) -> None:
        self.open: dict[int, dict[str, Any]] = {}  # actor -> its generation, per-seat arrays
        self.broken = 0  # open transitions dropped where an actor was replaced

    def _seats(self, slot: Any) -> dict[str, Any]:
        actor, K = int(slot.actor[0]), slot.rewards.shape[1]
        generation = int(slot.generation[0])
        p = self.open.get(actor)
        if p is not None and p["generation"] != generation:  # a replacement's first slot
            self.broken += int(p["open"].sum())
            p = None
        if p is None or p["open"].shape[0] != K:
            p = self.open[actor] = {
                "generation": generation,
                "open": np.zeros(K, bool),
                "obs": np.zeros((K, *slot.obs.shape[2:]), slot.obs.dtype),
                "action": np.zeros((K, *slot.actions.shape[2:]), slot.actions.dtype),
                "reward": np.zeros(K, np.float32),
            }
        return p

    def state_dict(self) -> dict[str, Any]:
        """The open transitions of every actor's seats (a checkpoint's), and the count."""
        return {"broken": self.broken, "actors": [{"actor": a, **p} for a, p in self.open.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.broken = int(state["broken"])
        self.open = {
            int(p["actor"]): {
                "generation": int(p["generation"]),
                **{k: np.asarray(p[k]) for k in ("open", "obs", "action", "reward")},
            }
            for p in state["actors"]
        }

    def forget(self, actor: int) -> None:
        """Drop ``actor``'s open transitions: a rollout of it was dropped (a NaN or inf), so
        what its seats received meanwhile is not known."""
        self.open.pop(actor, None)

    def add(self, slot: Any) -> dict[str, np.ndarray]:
        """The transitions ``slot`` completes (the replay buffer's fields, leading axis the
        transitions); what it opens stays open until the seat moves again or its episode ends."""
        p = self._seats(slot)
        out: list[dict[str, np.ndarray]] = []

        def emit(rows: np.ndarray, next_obs: np.ndarray, term: np.ndarray, trunc: np.ndarray):
            if rows.any():
                out.append(
                    {
                        "obs": p["obs"][rows],
                        "action": p["action"][rows],
                        "reward": p["reward"][rows],
                        "next_obs": next_obs,
                        "terminated": term,
                        "truncated": trunc,
                    }
                )

        for t in range(slot.rewards.shape[0]):
            own = slot.own[t]
            # a seat that moves ends its open transition: it moves again at this observation
            ends = own & p["open"]
            none = np.zeros(int(ends.sum()), bool)
            emit(ends, slot.obs[t, ends], none, none)
            p["obs"][own], p["action"][own] = slot.obs[t, own], slot.actions[t, own]
            p["reward"][own] = 0.0
            p["open"] |= own
            p["reward"][p["open"]] += slot.rewards[t, p["open"]]
            term, trunc = slot.terminated[t], slot.truncated[t] & ~slot.terminated[t]
            done = term | trunc
            ends = done & p["open"]
            emit(ends, slot.final_obs[t, ends], term[ends], trunc[ends])
            p["open"] &= ~done
        if not out:
            return _empty(p)
        return {f: np.concatenate([o[f] for o in out]) for f in FIELDS}


def _empty(p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """No transitions, in the fields' shapes and dtypes."""
    return {
        "obs": p["obs"][:0],
        "action": p["action"][:0],
        "reward": p["reward"][:0],
        "next_obs": p["obs"][:0],
        "terminated": np.zeros(0, bool),
        "truncated": np.zeros(0, bool),
    }
