"""ReplayBuffer: ring order under wrap-around, uniform sampling, dtypes, sizes, checkpointing."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from asyncrl.replay.buffer import FIELDS, ReplayBuffer


def make_batch(start: int, b: int, obs_shape=(3,), obs_dtype=np.float32, act_dim: int = 2):
    """Transitions numbered start..start+b-1; every field encodes the number, to check order."""
    ids = np.arange(start, start + b)
    obs = np.broadcast_to(ids.reshape(-1, *([1] * len(obs_shape))), (b, *obs_shape))
    return dict(
        obs=(obs % 256).astype(obs_dtype),
        action=np.repeat(ids[:, None], act_dim, 1).astype(np.float32),
        reward=ids.astype(np.float32),
        next_obs=((obs + 1) % 256).astype(obs_dtype),
        terminated=ids % 3 == 0,
        truncated=ids % 5 == 0,
    )


def stored_ids_in_ring_order(buf: ReplayBuffer) -> np.ndarray:
    n = len(buf)
    start = buf.position if n == buf.capacity else 0
    return buf.reward[(start + np.arange(n)) % buf.capacity].astype(np.int64)


def test_wraparound_keeps_exactly_the_newest_in_ring_order():
    cap = 20
    buf = ReplayBuffer(cap, (3,), np.float32, (2,), seed=0)
    sizes = [7, 3, 9, 1, 5, 11, 3, 7, 4]  # odd-sized batches, 50 = 2.5 x capacity
    assert sum(sizes) == int(2.5 * cap)
    inserted = 0
    for b in sizes:
        buf.add_batch(**make_batch(inserted, b))
        inserted += b
        assert buf.total_inserted == inserted
        assert len(buf) == min(inserted, cap)
        assert buf.position == inserted % cap
        expected = np.arange(max(0, inserted - cap), inserted)
        np.testing.assert_array_equal(stored_ids_in_ring_order(buf), expected)
    # every field of a slot belongs to the same transition
    for slot in range(cap):
        i = int(buf.reward[slot])
        assert (buf.obs[slot] == i).all() and (buf.next_obs[slot] == i + 1).all()
        assert (buf.action[slot] == i).all()
        assert buf.terminated[slot] == (i % 3 == 0) and buf.truncated[slot] == (i % 5 == 0)


def test_batch_larger_than_capacity_keeps_last_capacity():
    cap = 8
    for head in [0, 3, 7]:  # start from different ring positions
        buf = ReplayBuffer(cap, (3,), np.float32, (2,))
        seq = ReplayBuffer(cap, (3,), np.float32, (2,))
        buf.add_batch(**make_batch(0, head))
        for i in range(head):
            seq.add_batch(**make_batch(i, 1))
        buf.add_batch(**make_batch(head, 27))
        for i in range(head, head + 27):  # sequential insertion as the reference
            seq.add_batch(**make_batch(i, 1))
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(buf, f), getattr(seq, f))
        assert buf.position == seq.position == (head + 27) % cap
        np.testing.assert_array_equal(
            stored_ids_in_ring_order(buf), np.arange(head + 19, head + 27)
        )


def test_empty_batch_is_a_no_op():
    buf = ReplayBuffer(4, (3,), np.float32, (2,))
    buf.add_batch(**make_batch(0, 0))
    assert len(buf) == 0 and buf.total_inserted == 0


def test_sample_returns_only_stored_items_and_is_roughly_uniform():
    cap = 50
    buf = ReplayBuffer(cap, (3,), np.float32, (2,), seed=1)
    buf.add_batch(**make_batch(0, 30))
    s = buf.sample(6000)
    ids = s["reward"].astype(int)
    assert set(ids) <= set(range(30))
    assert all(s[f].shape[0] == 6000 for f in FIELDS)
    np.testing.assert_array_equal(s["obs"][:, 0], ids)  # fields stay aligned
    counts = np.bincount(ids, minlength=30)
    # expected 200 per item; a chi-square test at a generous level
    chi2 = ((counts - 200.0) ** 2 / 200.0).sum()
    assert chi2 < 70, chi2  # df=29: P(chi2 > 70) ~ 3e-5
    # after wrapping, only the newest `cap` items can come out
    buf.add_batch(**make_batch(30, 45))
    ids = buf.sample(4000)["reward"].astype(int)
    assert ids.min() >= 25 and ids.max() <= 74
    assert len(set(ids)) == cap  # and all of them do


def test_sample_is_reproducible_from_seed():
    a = ReplayBuffer(10, (3,), np.float32, (2,), seed=7)
    b = ReplayBuffer(10, (3,), np.float32, (2,), seed=7)
    for buf in (a, b):
        buf.add_batch(**make_batch(0, 10))
    np.testing.assert_array_equal(a.sample(32)["reward"], b.sample(32)["reward"])


@pytest.mark.parametrize("cap", [50, 23])  # 23: the upcoming batches wrap and overwrite
def test_indices_drawn_before_an_insert_are_those_sample_draws_after_it(cap):
    """What lets a sync learner start an update before the step's transitions arrive: same
    draws, and it knows exactly which drawn slots the coming insert writes."""
    ahead = ReplayBuffer(cap, (3,), np.float32, (2,), seed=7)
    after = ReplayBuffer(cap, (3,), np.float32, (2,), seed=7)
    inserted, hits = 0, 0
    for b in [5, 9, 4, 8, 7, 9, 3, 6]:
        if inserted:  # nothing to draw from before the first insert
            idx = ahead.draw_indices(4, upcoming=b)
            # the slots the insert writes: new items, or the oldest ones they replace
            written = (ahead.position + np.arange(b)) % cap
            hit = ahead.hits_upcoming(idx, b)
            assert hit == bool(np.isin(idx, written).any())
            hits += hit
        batch = make_batch(inserted, b)
        ahead.add_batch(**batch)
        after.add_batch(**batch)
        inserted += b
        if inserted > b:
            expected = after.sample(4)
            got = ahead.take(idx)
            for f in FIELDS:
                np.testing.assert_array_equal(got[f], expected[f])
    assert 0 < hits < 7  # both cases happened


def test_dtypes_kept():
    buf = ReplayBuffer(16, (4, 4), np.uint8, (), action_dtype=np.int64)
    batch = make_batch(250, 10, obs_shape=(4, 4), obs_dtype=np.uint8, act_dim=1)
    batch["action"] = np.arange(10, dtype=np.int64)
    buf.add_batch(**batch)
    s = buf.sample(5)
    assert s["obs"].dtype == np.uint8 and s["next_obs"].dtype == np.uint8
    assert s["action"].dtype == np.int64 and s["action"].shape == (5,)
    assert s["reward"].dtype == np.float32
    assert s["terminated"].dtype == np.bool_ and s["truncated"].dtype == np.bool_
    assert buf.obs.dtype == np.uint8  # storage too
    # float64 obs stay float64 by default; float32 only when asked for
    f64 = ReplayBuffer(4, (3,), np.float64, (2,))
    f64.add_batch(**make_batch(0, 2, obs_dtype=np.float64))
    assert f64.sample(2)["obs"].dtype == np.float64
    f32 = ReplayBuffer(4, (3,), np.float32, (2,))
    f32.add_batch(**make_batch(0, 2, obs_dtype=np.float64))
    assert f32.obs.dtype == np.float32
    # a lossy cross-kind cast is refused rather than silently wrapped
    lossy = make_batch(0, 2, obs_shape=(4, 4), obs_dtype=np.float32, act_dim=1)
    lossy["action"] = lossy["action"][:, 0].astype(np.int64)
    with pytest.raises(TypeError, match="obs"):
        buf.add_batch(**lossy)


def test_bytes_per_transition_exact():
    buf = ReplayBuffer(100, (84, 84, 4), np.uint8, (6,))
    assert buf.bytes_per_transition == 2 * 84 * 84 * 4 + 6 * 4 + 4 + 1 + 1
    assert buf.nbytes == 100 * buf.bytes_per_transition
    buf = ReplayBuffer(10, (17,), np.float64, (6,), action_dtype=np.float32)
    assert buf.bytes_per_transition == 2 * 17 * 8 + 6 * 4 + 4 + 2
    assert buf.nbytes == sum(getattr(buf, f).nbytes for f in FIELDS) == 10 * (2 * 136 + 30)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(0, (3,), np.float32, (2,))
    buf = ReplayBuffer(4, (3,), np.float32, (2,))
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1)
    buf.add_batch(**make_batch(0, 2))
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(0)
    bad = make_batch(0, 2)
    bad["reward"] = bad["reward"][:1]
    with pytest.raises(ValueError, match="shape"):
        buf.add_batch(**bad)


def test_state_round_trip_continues_identically():
    buf = ReplayBuffer(12, (3,), np.float32, (2,), seed=3)
    buf.add_batch(**make_batch(0, 17))  # wrapped
    buf.sample(5)  # advance the rng
    blob = pickle.dumps(buf.state_dict())  # a serialised copy, as a checkpoint would hold
    clone = ReplayBuffer(12, (3,), np.float32, (2,), seed=999)
    clone.load_state_dict(pickle.loads(blob))
    assert len(clone) == len(buf) and clone.total_inserted == 17 and clone.position == 5
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(clone, f), getattr(buf, f))
    for _ in range(3):  # same samples, same evolution
        a, b = buf.sample(8), clone.sample(8)
        for f in FIELDS:
            np.testing.assert_array_equal(a[f], b[f])
    buf.add_batch(**make_batch(17, 5))
    clone.add_batch(**make_batch(17, 5))
    np.testing.assert_array_equal(stored_ids_in_ring_order(clone), np.arange(10, 22))


def test_partial_state_round_trip_and_layout_mismatch():
    buf = ReplayBuffer(12, (3,), np.float32, (2,), seed=3)
    buf.add_batch(**make_batch(0, 5))
    state = buf.state_dict()
    assert state["obs"].shape == (5, 3)  # only the used slots are saved
    clone = ReplayBuffer(12, (3,), np.float32, (2,))
    clone.load_state_dict(state)
    np.testing.assert_array_equal(stored_ids_in_ring_order(clone), np.arange(5))
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(13, (3,), np.float32, (2,)).load_state_dict(state)
    with pytest.raises(ValueError, match="obs_dtype"):
        ReplayBuffer(12, (3,), np.float64, (2,)).load_state_dict(state)


def test_n_step_transitions_sum_discounted_rewards_within_the_rollout_and_the_episode():
    """Each transition spans up to n steps, fewer where its episode or the rollout ends first;
    its next observation is the one after its last step (the final one at an episode's end)."""
    from types import SimpleNamespace

    from asyncrl.replay.buffer import rollout_transitions

    rng = np.random.default_rng(0)
    T, K, n, gamma = 7, 3, 3, 0.9
    slot = SimpleNamespace(
        obs=rng.standard_normal((T + 1, K, 2)).astype(np.float32),
        final_obs=rng.standard_normal((T, K, 2)).astype(np.float32),
        actions=rng.integers(0, 4, (T, K)),
        rewards=rng.standard_normal((T, K)).astype(np.float32),
        terminated=rng.random((T, K)) < 0.15,
        truncated=rng.random((T, K)) < 0.1,
    )
    tr = rollout_transitions(slot, n, gamma)
    buf = ReplayBuffer(100, (2,), np.float32, (), np.int64, n_step=n, gamma=gamma)
    buf.add_slots([slot])
    assert len(buf) == T * K and buf.fields[-1] == "steps"
    for t in range(T):
        for k in range(K):
            i = t * K + k
            total, j = 0.0, t
            while True:  # the reference: step by step
                total += gamma ** (j - t) * slot.rewards[j, k]
                ended = slot.terminated[j, k] or slot.truncated[j, k]
                if ended or j - t + 1 == n or j == T - 1:
                    break
                j += 1
            assert tr["steps"][i] == j - t + 1
            assert tr["reward"][i] == pytest.approx(total, rel=1e-5)
            nxt = slot.final_obs[j, k] if ended else slot.obs[j + 1, k]
            assert np.array_equal(tr["next_obs"][i], nxt)
            assert tr["terminated"][i] == slot.terminated[j, k]
    assert np.array_equal(buf.steps[: T * K], tr["steps"])
