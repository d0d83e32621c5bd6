"""Pure diagnostic metrics (paper Sec. 5.2-5.3) against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from acerl.algos.advantages import confidence_scores
from acerl.diagnostics.metrics import overconfidence_stats, pad_token_values, token_weighted_mean


def test_overconfidence_stats_hand_computed():
    c = [0.5, -0.2, 0.0, 1.5, 3.0, -1.0]
    incorrect = [True, True, True, True, False, False]
    # incorrect: c = 0.5, -0.2, 0.0, 1.5 -> c > 0 for 0.5 and 1.5 (0.0 is not overconfident)
    oef, mag = overconfidence_stats(c, incorrect)
    assert oef == pytest.approx(2 / 4)
    assert mag == pytest.approx((0.5 + 1.5) / 2)


def test_overconfidence_stats_accepts_tensors_and_matches_a_loop():
    g = torch.Generator().manual_seed(0)
    c = torch.randn(200, generator=g, dtype=torch.float64)
    wrong = torch.rand(200, generator=g) < 0.6
    oef, mag = overconfidence_stats(c, wrong)
    errs = [float(x) for x, w in zip(c, wrong, strict=True) if w]
    over = [x for x in errs if x > 0]
    assert oef == pytest.approx(len(over) / len(errs), abs=0)
    assert mag == pytest.approx(sum(over) / len(over), rel=1e-12)


def test_overconfidence_stats_empty_cases():
    assert overconfidence_stats([1.0, 2.0], [False, False]) == (None, None)  # no incorrect rollouts
    assert overconfidence_stats([0.0, -1.0], [True, True]) == (0.0, None)  # no overconfident errors
    assert overconfidence_stats([], []) == (None, None)


def test_overconfidence_stats_rejects_bad_input():
    with pytest.raises(ValueError, match="shape"):
        overconfidence_stats([1.0, 2.0], [True])
    with pytest.raises(ValueError, match="1-D"):
        overconfidence_stats([[1.0]], [[True]])
    with pytest.raises(ValueError, match="NaN"):
        overconfidence_stats([math.nan], [True])


def test_token_weighted_mean_is_the_mean_over_all_tokens():
    # rollout A: 2 tokens with entropies 1, 3 (mean 2); rollout B: 1 token with entropy 5 (mean 5)
    assert token_weighted_mean([2.0, 5.0], [2, 1]) == pytest.approx((1 + 3 + 5) / 3)
    assert token_weighted_mean([2.0, math.nan], [4, 0]) == pytest.approx(2.0)  # empty rollout skipped
    with pytest.raises(ValueError, match="no tokens"):
        token_weighted_mean([math.nan], [0])
    with pytest.raises(ValueError, match="matching"):
        token_weighted_mean([1.0, 2.0], [1])


def test_pad_token_values_and_confidence_scores_hand_computed():
    policy = [[-1.0, -2.0, -0.5], [-0.1]]
    ref = [[-1.5, -1.0, -0.5], [-0.4]]
    lp, mask = pad_token_values(policy)
    ref_lp, ref_mask = pad_token_values(ref)
    assert lp.shape == (2, 3) and lp.dtype == torch.float64
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]] and torch.equal(mask, ref_mask)
    assert lp[1, 1:].tolist() == [0.0, 0.0]
    c = confidence_scores(lp, ref_lp, mask, length_normalize=True)
    # row 0: (0.5 - 1.0 + 0) / 3; row 1: 0.3 / 1
    np.testing.assert_allclose(c.numpy(), [-0.5 / 3, 0.3], rtol=1e-12)
    empty, empty_mask = pad_token_values([])
    assert empty.shape == (0, 1) and empty_mask.shape == (0, 1)
