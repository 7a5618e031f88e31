"""The frame-once replay gives back exactly the transitions the whole-observation layout
stores: stacked observations and next observations rebuilt from the streams' rows, across
rollouts, episode ends with and without resets, and restarts that break a stream."""

from __future__ import annotations

import numpy as np
import pytest

from asyncrl.replay.buffer import nstep_window, rollout_transitions
from asyncrl.replay.frames import FrameReplay


class FakeSlot:
    """A rollout slot's fields, as an actor writes them."""

    def __init__(self, T: int, K: int, stack: int, side: int, actor: int):
        self.obs = np.zeros((T + 1, K, stack, side, side), np.uint8)
        self.final_obs = np.zeros((T, K, stack, side, side), np.uint8)
        self.actions = np.zeros((T, K), np.int64)
        self.rewards = np.zeros((T, K), np.float32)
        self.terminated = np.zeros((T, K), bool)
        self.truncated = np.zeros((T, K), bool)
        self.actor = np.array([actor])


class StackedEnv:
    """Frames of a stacked-frame env: a reset pads the stack with its first frame repeated (or
    zeros); a life loss ends a training episode without a reset; truncations reset."""

    def __init__(self, rng, stack: int, side: int, zero_pad: bool):
        self.rng, self.stack, self.side, self.zero_pad = rng, stack, side, zero_pad
        self.reset()

    def frame(self):
        return self.rng.integers(0, 256, (self.side, self.side), dtype=np.uint8)

    def reset(self):
        first = self.frame()
        pad = np.zeros_like(first) if self.zero_pad else first
        self.frames = [pad] * (self.stack - 1) + [first]
        return np.stack(self.frames)

    def step(self):
        self.frames = self.frames[1:] + [self.frame()]
        return np.stack(self.frames)


def _fill(slots, envs, obs, rng, p_end: float = 0.08):
    """Step every env through each slot in turn; returns the observation after the last."""
    for slot in slots:
        T, K = slot.rewards.shape
        for k in range(K):
            slot.obs[0, k] = obs[k]
        for t in range(T):
            for k, env in enumerate(envs):
                slot.actions[t, k] = rng.integers(4)
                slot.rewards[t, k] = rng.standard_normal()
                nxt = env.step()
                u = rng.random()
                if u < p_end / 2:  # a life lost: the episode ends, the game goes on
                    slot.terminated[t, k] = True
                    slot.final_obs[t, k] = nxt
                elif u < p_end:  # game over or time limit: the env resets
                    slot.terminated[t, k] = u < 0.75 * p_end
                    slot.truncated[t, k] = not slot.terminated[t, k]
                    slot.final_obs[t, k] = nxt
                    nxt = env.reset()
                slot.obs[t + 1, k] = nxt
                obs[k] = nxt
    return obs


def _key(tr, i):
    return (
        tr["obs"][i].tobytes(),
        int(tr["action"][i]),
        float(tr["reward"][i]),
        tr["next_obs"][i].tobytes(),
        bool(tr["terminated"][i]),
        bool(tr["truncated"][i]),
    )


def _all_rows(buf: FrameReplay) -> np.ndarray:
    """Every transition the rings can give back now."""
    out = []
    for s in range(buf.streams):
        lo = max(int(buf.written[s]) - buf.rows, 0)
        for r in range(lo, int(buf.written[s])):
            p = r % buf.rows
            if (
                buf.valid[s, p]
                and r + buf.ahead[s, p] < buf.written[s]
                and r - buf.depth[s, p] >= lo
            ):
                out.append((s, r))
    return np.array(out, np.int64)


@pytest.mark.parametrize("zero_pad", [False, True])
@pytest.mark.parametrize("n_step", [1, 3])
def test_frames_stored_once_give_back_every_transition_exactly(zero_pad, n_step):
    rng = np.random.default_rng(0)
    T, K, stack, side = 6, 3, 4, 5
    envs = [StackedEnv(rng, stack, side, zero_pad) for _ in range(K)]
    obs = [env.reset() for env in envs]
    slots = [FakeSlot(T, K, stack, side, actor=0) for _ in range(5)]
    _fill(slots, envs, obs, rng)
    buf = FrameReplay(10_000, (stack, side, side), np.uint8, (), np.int64, streams=K,
                      stack=stack, seed=1, n_step=n_step, gamma=0.9)  # fmt: skip
    buf.add_slots(slots)
    naive = {}
    for slot in slots:
        tr = rollout_transitions(slot, n_step, 0.9)
        for i in range(len(tr["reward"])):
            key = _key(tr, i)
            naive[key] = naive.get(key, 0) + 1
    got = buf.take(_all_rows(buf))
    seen = {}
    for i in range(len(got["reward"])):
        key = _key(got, i)
        seen[key] = seen.get(key, 0) + 1
    # all but those whose next observation comes with the next rollout
    _, _, last = nstep_window(slots[-1].rewards, slots[-1].terminated, slots[-1].truncated,
                              n_step, 0.9)  # fmt: skip
    ends = slots[-1].terminated | slots[-1].truncated
    waiting = sum(int((last[:, k] == T - 1).sum()) for k in range(K) if not ends[T - 1, k])
    assert waiting >= K
    assert sum(seen.values()) == len(slots) * T * K - waiting
    for key, count in seen.items():
        assert naive.get(key, 0) >= count
    assert len(buf) == len(slots) * T * K
    # sampling draws from those only
    idx = buf.draw_indices(256)
    sampled = buf.take(idx)
    assert all(_key(sampled, i) in seen for i in range(256))


def test_a_broken_stream_completes_its_last_transition_and_starts_anew():
    """A replaced actor's envs start from new episodes: the stream's pending observation is
    written, so the previous rollout's last transition is whole, and nothing links across."""
    rng = np.random.default_rng(1)
    T, K, stack, side = 4, 1, 4, 3
    env = StackedEnv(rng, stack, side, zero_pad=False)
    first = FakeSlot(T, K, stack, side, actor=2)
    _fill([first], [env], [env.reset()], rng, p_end=0.0)
    fresh = StackedEnv(rng, stack, side, zero_pad=False)
    second = FakeSlot(T, K, stack, side, actor=2)
    _fill([second], [fresh], [fresh.reset()], rng, p_end=0.0)
    buf = FrameReplay(100, (stack, side, side), np.uint8, (), np.int64, streams=1, stack=stack)
    buf.add_slots([first, second])
    got = buf.take(_all_rows(buf))
    expected = {_key(rollout_transitions(s), i) for s in (first, second) for i in range(T)}
    keys = [_key(got, i) for i in range(len(got["reward"]))]
    assert len(keys) == 2 * T - 1 and set(keys) <= expected


def test_overwritten_rows_are_never_read_and_memory_is_a_frame_per_transition():
    rng = np.random.default_rng(2)
    T, K, stack, side = 8, 2, 4, 6
    envs = [StackedEnv(rng, stack, side, zero_pad=False) for _ in range(K)]
    slots = [FakeSlot(T, K, stack, side, actor=0) for _ in range(6)]
    _fill(slots, envs, [e.reset() for e in envs], rng)
    buf = FrameReplay(20, (stack, side, side), np.uint8, (), np.int64, streams=K, stack=stack)
    buf.add_slots(slots)  # 96 transitions into 10 rows per stream
    naive = {_key(rollout_transitions(s), i) for s in slots for i in range(T * K)}
    got = buf.take(buf.draw_indices(500))
    assert all(_key(got, i) in naive for i in range(500))
    assert len(buf) <= 20
    whole = 2 * stack * side * side + 8 + 4 + 2  # two stacks, action, reward, two flags
    assert buf.bytes_per_transition == side * side + 8 + 4 + 5 < whole / 5


def test_observations_that_are_not_frame_stacks_are_refused():
    buf = FrameReplay(10, (4, 2, 2), np.uint8, (), np.int64, streams=1, stack=4)
    slot = FakeSlot(1, 1, 4, 2, actor=0)
    slot.obs[:] = np.arange(16, dtype=np.uint8).reshape(4, 2, 2)  # no padding, no continuation
    with pytest.raises(ValueError, match="not stacked frames"):
        buf.add_slots([slot])


def test_the_rings_survive_a_checkpoint_and_go_on_drawing_the_same(tmp_path):
    from asyncrl.rundir import load_checkpoint, save_checkpoint

    rng = np.random.default_rng(3)
    T, K, stack, side = 5, 2, 4, 4
    envs = [StackedEnv(rng, stack, side, zero_pad=False) for _ in range(K)]
    slots = [FakeSlot(T, K, stack, side, actor=1) for _ in range(3)]
    _fill(slots, envs, [e.reset() for e in envs], rng)

    def made():
        return FrameReplay(64, (stack, side, side), np.uint8, (), np.int64, streams=K,
                           stack=stack, seed=4)  # fmt: skip

    buf = made()
    buf.add_slots(slots[:2])
    save_checkpoint(tmp_path, {"replay": buf.state_dict()})
    again = made()
    again.load_state_dict(load_checkpoint(tmp_path)["replay"])
    for b in (buf, again):
        b.add_slots(slots[2:])
    a, b = buf.take(buf.draw_indices(64)), again.take(again.draw_indices(64))
    assert all(np.array_equal(a[f], b[f]) for f in a)


def test_sac_on_pixels_trains_from_the_frame_layout(tmp_path):
    import asyncrl

    result = asyncrl.train(
        "fake_envs:DotSideContinuous-v0",
        algo="sac",
        replay_layout="frames",
        backend="inline",
        mode="sync",
        actors=1,
        envs_per_actor=2,
        hidden=[16],
        batch_size=8,
        learning_starts=16,
        buffer_size=64,
        total_steps=96,
        progress=False,
        tensorboard=False,
        run_dir=str(tmp_path / "run"),
    )
    assert result.summary["env_steps"] == 96 and result.summary["gradient_steps"] > 0
