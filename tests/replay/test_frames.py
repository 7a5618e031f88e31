"""The frame-once replay gives back exactly the transitions the whole-observation layout
stores: stacked observations and next observations rebuilt from the streams' rows, across
rollouts, episode ends with and without resets, and restarts that break a stream; and the same
for unstacked images (RGB frames, as CarRacing's), where a row is the whole observation."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from asyncrl.replay.buffer import ReplayBuffer, rollout_transitions
from asyncrl.replay.frames import FrameReplay

RGB = 3  # channels of an unstacked image


def _shape(stack: int, side: int) -> tuple[int, ...]:
    """A stack of ``stack`` grey frames, or (stack 1) one RGB image, channels last."""
    return (stack, side, side) if stack > 1 else (side, side, RGB)


class FakeSlot:
    """A rollout slot's fields, as an actor writes them."""

    def __init__(self, T: int, K: int, stack: int, side: int, actor: int):
        self.obs = np.zeros((T + 1, K, *_shape(stack, side)), np.uint8)
        self.final_obs = np.zeros((T, K, *_shape(stack, side)), np.uint8)
        self.actions = np.zeros((T, K), np.int64)
        self.rewards = np.zeros((T, K), np.float32)
        self.terminated = np.zeros((T, K), bool)
        self.truncated = np.zeros((T, K), bool)
        self.actor = np.array([actor])


class StackedEnv:
    """Frames of a stacked-frame env: a reset pads the stack with its first frame repeated (or
    zeros); a life loss ends a training episode without a reset; truncations reset. Stack 1:
    each observation is one RGB image, as an env that stacks nothing gives it."""

    def __init__(self, rng, stack: int, side: int, zero_pad: bool = False):
        self.rng, self.stack, self.side, self.zero_pad = rng, stack, side, zero_pad
        self.reset()

    def frame(self):
        shape = (self.side, self.side) if self.stack > 1 else _shape(1, self.side)
        return self.rng.integers(0, 256, shape, dtype=np.uint8)

    def reset(self):
        first = self.frame()
        if self.stack == 1:
            return first
        pad = np.zeros_like(first) if self.zero_pad else first
        self.frames = [pad] * (self.stack - 1) + [first]
        return np.stack(self.frames)

    def step(self):
        if self.stack == 1:
            return self.frame()
        self.frames = self.frames[1:] + [self.frame()]
        return np.stack(self.frames)


def _replay(capacity: int, stack: int, side: int, streams: int, **kw) -> FrameReplay:
    return FrameReplay(capacity, _shape(stack, side), np.uint8, (), np.int64, streams=streams,
                       stack=stack, **kw)  # fmt: skip


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


STACKS = [(4, False), (4, True), (1, False)]  # (frames stacked, zero padding)


def _counts(tr) -> Counter:
    return Counter(_key(tr, i) for i in range(len(tr["reward"])))


@pytest.mark.parametrize("stack,zero_pad", STACKS)
@pytest.mark.parametrize("n_step", [1, 3])
def test_frames_stored_once_give_back_every_transition_exactly(stack, zero_pad, n_step):
    """Two actors of three envs, five rollouts each: the rings hold exactly the transitions the
    whole-observation buffer holds for the same inserts (as a multiset), each drawable as soon
    as it is inserted, and draws give back only those."""
    rng = np.random.default_rng(0)
    T, K, side = 6, 3, 5
    envs = {a: [StackedEnv(rng, stack, side, zero_pad) for _ in range(K)] for a in (0, 1)}
    obs = {a: [env.reset() for env in envs[a]] for a in (0, 1)}
    slots = []
    for _ in range(5):
        for a in (0, 1):
            slots.append(FakeSlot(T, K, stack, side, actor=a))
            obs[a] = _fill(slots[-1:], envs[a], obs[a], rng)
    buf = _replay(10_000, stack, side, 2 * K, seed=1, n_step=n_step, gamma=0.9)
    whole = ReplayBuffer(10_000, _shape(stack, side), np.uint8, (), np.int64, n_step=n_step,
                         gamma=0.9)  # fmt: skip
    for slot in slots:
        buf.add_slots([slot])
        whole.add_slots([slot])
        assert _counts(buf.take(_all_rows(buf))) == _counts(whole.take(np.arange(len(whole))))
    assert len(buf) == len(whole) == len(slots) * T * K
    if stack == 1:  # a row is the observation, as it came
        assert buf.frames.shape[2:] == (side, side, RGB)
    # sampling draws from those only
    sampled = buf.take(buf.draw_indices(256))
    assert set(_counts(sampled)) <= set(_counts(whole.take(np.arange(len(whole)))))


@pytest.mark.parametrize("stack", [4, 1])
def test_a_broken_stream_completes_its_last_transition_and_starts_anew(stack):
    """A replaced actor's envs start from new episodes: the stream's open row stays the end of
    the previous rollout's last transition, and nothing links across."""
    rng = np.random.default_rng(1)
    T, K, side = 4, 1, 3
    env = StackedEnv(rng, stack, side)
    first = FakeSlot(T, K, stack, side, actor=2)
    _fill([first], [env], [env.reset()], rng, p_end=0.0)
    fresh = StackedEnv(rng, stack, side)
    second = FakeSlot(T, K, stack, side, actor=2)
    _fill([second], [fresh], [fresh.reset()], rng, p_end=0.0)
    buf = _replay(100, stack, side, 1)
    buf.add_slots([first, second])
    got = buf.take(_all_rows(buf))
    expected = Counter(_key(rollout_transitions(s), i) for s in (first, second) for i in range(T))
    assert _counts(got) == expected and sum(expected.values()) == 2 * T


@pytest.mark.parametrize("stack", [4, 1])
def test_overwritten_rows_are_never_read_and_memory_is_a_frame_per_transition(stack):
    rng = np.random.default_rng(2)
    T, K, side = 8, 2, 6
    envs = [StackedEnv(rng, stack, side) for _ in range(K)]
    slots = [FakeSlot(T, K, stack, side, actor=0) for _ in range(6)]
    _fill(slots, envs, [e.reset() for e in envs], rng)
    buf = _replay(20, stack, side, K)
    buf.add_slots(slots)  # 96 transitions into 10 rows per stream
    naive = {_key(rollout_transitions(s), i) for s in slots for i in range(T * K)}
    got = buf.take(buf.draw_indices(500))
    assert all(_key(got, i) in naive for i in range(500))
    assert len(buf) <= 20
    frame = side * side * (1 if stack > 1 else RGB)  # the newest frame, or the whole image
    whole = 2 * stack * frame + 8 + 4 + 2  # two observations, action, reward, two flags
    assert buf.bytes_per_transition == frame + 8 + 4 + 5 and buf.frames.nbytes == 20 * frame
    if stack > 1:
        assert buf.bytes_per_transition < whole / 5


def test_observations_that_are_not_frame_stacks_are_refused():
    buf = FrameReplay(10, (4, 2, 2), np.uint8, (), np.int64, streams=1, stack=4)
    slot = FakeSlot(1, 1, 4, 2, actor=0)
    slot.obs[:] = np.arange(16, dtype=np.uint8).reshape(4, 2, 2)  # no padding, no continuation
    with pytest.raises(ValueError, match="not stacked frames"):
        buf.add_slots([slot])


@pytest.mark.parametrize("stack", [4, 1])
def test_the_rings_survive_a_checkpoint_and_go_on_drawing_the_same(tmp_path, stack):
    from asyncrl.rundir import load_checkpoint, save_checkpoint

    rng = np.random.default_rng(3)
    T, K, side = 5, 2, 4
    envs = [StackedEnv(rng, stack, side) for _ in range(K)]
    slots = [FakeSlot(T, K, stack, side, actor=1) for _ in range(3)]
    _fill(slots, envs, [e.reset() for e in envs], rng)

    def made():
        return _replay(64, stack, side, K, seed=4)

    buf = made()
    buf.add_slots(slots[:2])
    save_checkpoint(tmp_path, {"replay": buf.state_dict()})
    again = made()
    again.load_state_dict(load_checkpoint(tmp_path)["replay"])
    for b in (buf, again):
        b.add_slots(slots[2:])
    a, b = buf.take(buf.draw_indices(64)), again.take(again.draw_indices(64))
    assert all(np.array_equal(a[f], b[f]) for f in a)


def old_replay_inserts() -> tuple[FrameReplay, list[FakeSlot]]:
    """A stacked-frame replay after two of three rollouts (episode ends among them), and the
    three: what tests/data/replay/make.py saved with the code before open rows."""
    rng = np.random.default_rng(11)
    T, K, stack, side = 5, 2, 4, 4
    envs = [StackedEnv(rng, stack, side) for _ in range(K)]
    slots = [FakeSlot(T, K, stack, side, actor=0) for _ in range(3)]
    _fill(slots, envs, [e.reset() for e in envs], rng, p_end=0.2)
    buf = _replay(64, stack, side, K, seed=5)
    buf.add_slots(slots[:2])
    return buf, slots


def test_a_replay_saved_before_open_rows_loads_and_goes_on_as_one_saved_now():
    from asyncrl.rundir import load_checkpoint

    now, slots = old_replay_inserts()
    saved = Path(__file__).parents[1] / "data" / "replay" / "frames-63a1706"
    old = _replay(64, 4, 4, 2, seed=0)
    old.load_state_dict(load_checkpoint(saved)["replay"])
    for b in (now, old):
        b.add_slots(slots[2:])
    a, b = now.state_dict(), old.state_dict()
    assert sorted(a) == sorted(b)
    for key in a:
        if key == "rng_state":
            assert a[key] == b[key]
        elif key in ("last", "keys", "counts"):
            assert [np.asarray(x).tolist() for x in a[key]] == [
                np.asarray(x).tolist() for x in b[key]
            ], key
        else:
            assert np.array_equal(a[key], b[key]), key
    x, y = now.take(now.draw_indices(32)), old.take(old.draw_indices(32))
    assert all(np.array_equal(x[f], y[f]) for f in x)


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
