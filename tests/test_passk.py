"""Pass@k: the unbiased estimator against brute-force enumeration and the binomial formula."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from acerl.passk import mean_pass_at_k, pass_at_k, pass_at_k_array


def brute_force(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of n samples (the first c correct) that contain a correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def comb_formula(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@pytest.mark.parametrize("n", range(1, 9))
def test_matches_enumeration_of_all_k_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force(n, c, k), abs=1e-12), (n, c, k)


@pytest.mark.parametrize("n", [16, 32, 64, 200])
def test_matches_exact_binomial_formula(n):
    for c in range(0, n + 1, max(1, n // 16)):
        for k in (1, 2, 4, 8, 16):
            if k > n:
                continue
            exact = float(comb_formula(n, c, k))
            assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12, abs=1e-14), (n, c, k)


def test_pass_at_1_is_the_fraction_correct():
    for n, c in [(1, 0), (1, 1), (32, 7), (1000, 1), (5000, 4999)]:
        assert pass_at_k(n, c, 1) == pytest.approx(c / n, rel=1e-12, abs=1e-15)


def test_edge_values_are_exact():
    assert pass_at_k(32, 0, 32) == 0.0
    assert pass_at_k(32, 0, 1) == 0.0
    assert pass_at_k(32, 1, 32) == 1.0  # every 32-subset holds the correct sample
    assert pass_at_k(10, 4, 7) == 1.0  # n - c = 6 < k = 7
    assert pass_at_k(10, 4, 6) < 1.0
    assert pass_at_k(np.int64(8), np.int32(2), np.int16(4)) == pytest.approx(brute_force(8, 2, 4))


def test_large_n_stays_finite_and_exact():
    # C(10000, 100) overflows float64; the product form does not
    value = pass_at_k(10_000, 3, 100)
    assert value == pytest.approx(float(comb_formula(10_000, 3, 100)), rel=1e-10)


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (4, 1, 5, "exceeds the number of samples"),
        (4, 5, 1, "more correct samples than samples"),
        (-1, 0, 1, "non-negative"),
        (4, -1, 1, "non-negative"),
        (4, 1, -2, "non-negative"),
        (4, 1, 0, "at least 1"),
        (0, 0, 1, "k=1 exceeds the number of samples n=0"),  # no samples: the budget is what is wrong
    ],
)
def test_invalid_arguments_raise_clear_errors(n, c, k, message):
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)


@pytest.mark.parametrize("name", ["n", "c", "k"])
def test_float_arguments_are_rejected_by_name(name):
    args = {"n": 4, "c": 1, "k": 1, name: 3.0}
    with pytest.raises(TypeError, match=rf"^pass@k: {name} must be an integer, got float 3\.0$"):
        pass_at_k(**args)
    if name == "k":
        with pytest.raises(TypeError, match=r"^pass@k: k must be an integer, got float 3\.0$"):
            pass_at_k_array(4, np.array([1]), 3.0)


def test_array_matches_scalar_loop():
    rng = np.random.default_rng(0)
    n = rng.integers(32, 40, size=300)
    c = rng.integers(0, 33, size=300)
    for k in (1, 2, 4, 8, 16, 32):
        got = pass_at_k_array(n, c, k)
        want = np.array([pass_at_k(int(a), int(b), k) for a, b in zip(n, c, strict=True)])
        assert got.shape == (300,)
        np.testing.assert_array_equal(got, want)


def test_array_with_scalar_n():
    c = np.array([0, 1, 5, 16])
    np.testing.assert_array_equal(pass_at_k_array(16, c, 4), [pass_at_k(16, int(x), 4) for x in c])
    assert pass_at_k_array(16, np.zeros(0, dtype=int), 4).shape == (0,)


def test_array_of_one_problem_and_all_correct_problems():
    """One problem is an array of one value (not the empty case), and ``c == n`` is valid (Pass@k = 1)."""
    np.testing.assert_array_equal(pass_at_k_array(4, np.array([1]), 2), [0.5])
    np.testing.assert_array_equal(pass_at_k_array(np.array([4, 4]), np.array([4, 0]), 2), [1.0, 0.0])


def test_array_errors_name_the_problem():
    with pytest.raises(ValueError, match="problem index 2: .*c=9 > n=8"):
        pass_at_k_array(8, np.array([0, 1, 9]), 1)
    with pytest.raises(ValueError, match="problem index 1: .*k=8 exceeds"):
        pass_at_k_array(np.array([8, 4]), np.array([0, 1]), 8)
    with pytest.raises(ValueError, match=r"problem index 1: .*non-negative"):  # a negative count alone
        pass_at_k_array(8, np.array([0, -1]), 1)
    with pytest.raises(ValueError, match=r"problem index 0: .*non-negative"):
        pass_at_k_array(np.array([-1, 8]), np.array([0, 0]), 1)
    with pytest.raises(ValueError, match=r"^pass@k: n has shape \(2,\) but c has shape \(3,\)$"):
        pass_at_k_array(np.array([8, 8]), np.array([0, 1, 2]), 1)
    with pytest.raises(
        ValueError, match=r"^pass@k: c must be a 1-D array over problems, got shape \(1, 2\)$"
    ):
        pass_at_k_array(8, np.array([[0, 1]]), 1)
    with pytest.raises(TypeError, match=r"^pass@k: c must hold integers, got dtype float64$"):
        pass_at_k_array(8, np.array([0.5, 1.0]), 1)
    with pytest.raises(TypeError, match=r"^pass@k: n must hold integers, got dtype float64$"):
        pass_at_k_array(np.array([8.0, 8.0]), np.array([0, 1]), 1)


def test_mean_pass_at_k_is_the_mean_over_problems():
    n, c = 4, np.array([0, 1, 2, 4])
    got = mean_pass_at_k(n, c, [1, 2, 4])
    assert list(got) == [1, 2, 4]
    assert got[1] == pytest.approx((0 + 0.25 + 0.5 + 1) / 4)
    assert got[2] == pytest.approx((0 + 0.5 + 5 / 6 + 1) / 4)
    assert got[4] == pytest.approx(0.75)
    with pytest.raises(ValueError, match=r"^pass@k: no problems \(c is empty\); a mean over zero problems"):
        mean_pass_at_k(4, np.zeros(0, dtype=int), [1])


def test_pass_at_k_is_monotone_in_k_and_c():
    for n in (8, 32):
        for c in range(n + 1):
            vals = [pass_at_k(n, c, k) for k in range(1, n + 1)]
            assert all(a <= b + 1e-15 for a, b in itertools.pairwise(vals))
        for k in (1, 4):
            vals = [pass_at_k(n, c, k) for c in range(n + 1)]
            assert all(a <= b + 1e-15 for a, b in itertools.pairwise(vals))
