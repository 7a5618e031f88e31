"""The observation normaliser shared by the policies' networks."""

from __future__ import annotations

import numpy as np
import torch

from asyncrl.nets import RunningNorm


def test_the_std_floor_only_centres_narrower_dimensions():
    norm = RunningNorm((3,), min_std=1.0)
    norm.update(torch.tensor([[0.0, 0.0, 0.0], [0.2, 4.0, 0.0], [0.0, 8.0, 0.0], [0.2, 0.0, 0.0]]))
    x = torch.tensor([[0.3, 6.0, 0.5]])
    # dimension 0 (std 0.1) and 2 (std 0) centred only; dimension 1 (std ~3.3) to unit variance
    std1 = float(norm.var[1].sqrt())
    expected = torch.tensor([[0.3 - 0.1, (6.0 - 3.0) / (std1 + 1e-8), 0.5]])
    torch.testing.assert_close(norm(x), expected)
    norm.min_std = 0.0  # the plain normaliser: the sparse dimension is blown up to the clip
    assert float(norm(x)[0, 2]) == 10.0


def test_sparse_dimensions_are_decided_by_the_first_update_and_never_scaled_up():
    norm = RunningNorm((3,), keep_sparse=True)
    # dimension 0 exactly 0 in 3 of 4 rows (sparse), 1 never 0, 2 always 0 (sparse)
    norm.update(torch.tensor([[0.0, 1.0, 0.0], [0.4, 2.0, 0.0], [0.0, 3.0, 0.0], [0.0, 4.0, 0.0]]))
    assert norm.sparse.tolist() == [1.0, 0.0, 1.0]
    std0, std1 = float(norm.var[0].sqrt()), float(norm.var[1].sqrt())
    assert std0 < 1 < std1
    x = torch.tensor([[0.4, 3.0, 0.5]])
    # sparse dimensions centred and divided by max(std, 1); the dense one to unit variance
    expected = torch.tensor([[0.4 - 0.1, (3.0 - 2.5) / (std1 + 1e-8), 0.5]])
    torch.testing.assert_close(norm(x), expected)
    # later updates move the statistics, not the decision (dense now: it stays sparse)
    norm.update(torch.full((100, 3), 0.7))
    assert norm.sparse.tolist() == [1.0, 0.0, 1.0]
    plain = RunningNorm((3,))  # the plain normaliser blows a contact up to many stds
    plain.update(torch.tensor([[0.0, 1.0, 0.0], [0.4, 2.0, 0.0], [0.0, 3.0, 0.0], [0.0, 4.0, 0.0]]))
    assert float(plain(x)[0, 0]) > 1.7 and float(plain(x)[0, 2]) == 10.0


def test_the_sparse_marking_travels_with_the_published_parameters_and_old_checkpoints_load():
    from asyncrl.nets import FlatParams

    learner_side, actor_side = (
        RunningNorm((2,), keep_sparse=True),
        RunningNorm((2,), keep_sparse=True),
    )
    learner_side.update(torch.tensor([[0.0, 1.0], [0.0, 2.0], [3.0, 3.0]]))
    vector = np.empty(FlatParams(learner_side).numel, np.float32)
    FlatParams(learner_side).write_to(vector)
    FlatParams(actor_side).read_from(vector)
    assert actor_side.sparse.tolist() == [1.0, 0.0]
    x = torch.tensor([[3.0, 2.0]])
    torch.testing.assert_close(actor_side(x), learner_side(x))
    # a state dict saved before the buffer existed: loads, nothing marked, as that run ran
    old = {k: v for k, v in learner_side.state_dict().items() if k != "sparse"}
    restored = RunningNorm((2,), keep_sparse=True)
    restored.load_state_dict(old)
    assert restored.sparse.tolist() == [0.0, 0.0]
    torch.testing.assert_close(restored.mean, learner_side.mean)


def test_an_update_with_no_rows_leaves_the_statistics_as_they_were():
    """A population's policy that the random mapping gave no step this batch updates its
    observation normaliser with zero rows: that must change nothing (it made every statistic
    NaN, and the next action draw raised)."""
    norm = RunningNorm((3,))
    norm.update(torch.randn(64, 3, generator=torch.Generator().manual_seed(0)))
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    norm.update(torch.zeros(0, 3))
    assert all(torch.equal(before[k], v) for k, v in norm.state_dict().items())
