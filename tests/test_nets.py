"""The observation normaliser shared by the policies' networks."""

from __future__ import annotations

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
