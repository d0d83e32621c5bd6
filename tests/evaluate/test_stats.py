"""Confidence intervals and significance tests against hand-computed values."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from acerl.evaluate.stats import (
    Comparison,
    bootstrap_ci,
    compare_seeds,
    half_width,
    holm,
    mean_ci,
    paired_test,
    t_half_width,
    welch_from_summary,
    welch_test,
)
from acerl.passk import pass_at_k_array

T_975_DF4 = 2.7764451051977987  # Student t quantile, 0.975, 4 degrees of freedom (tables: 2.776)


def test_mean_ci_known_values():
    m = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    assert m.mean == 3.0
    assert m.n == 5
    assert m.std == pytest.approx(math.sqrt(2.5))
    assert m.half_width == pytest.approx(T_975_DF4 * math.sqrt(2.5) / math.sqrt(5))
    assert m.half_width == pytest.approx(1.963243, abs=1e-6)
    assert (m.low, m.high) == pytest.approx((3.0 - 1.963243, 3.0 + 1.963243), abs=1e-6)


def test_mean_ci_other_levels_and_two_values():
    m = mean_ci([0.0, 1.0], level=0.9)  # t_{0.95, 1} = 6.313751514675041
    assert m.half_width == pytest.approx(6.313751514675041 * math.sqrt(0.5) / math.sqrt(2))


def test_one_seed_has_no_interval():
    m = mean_ci([0.7])
    assert m.mean == 0.7 and m.n == 1
    assert math.isnan(m.half_width) and math.isnan(m.std)
    assert math.isnan(t_half_width(0.1, 1))


def test_mean_ci_rejects_bad_input():
    with pytest.raises(ValueError, match="no values"):
        mean_ci([])
    with pytest.raises(ValueError, match="finite"):
        mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="level"):
        mean_ci([1.0, 2.0], level=1.5)


def test_bootstrap_is_seeded_and_brackets_the_mean():
    rng = np.random.default_rng(1)
    values = rng.random(200)
    a = bootstrap_ci(values, n_boot=2000, seed=3)
    b = bootstrap_ci(values, n_boot=2000, seed=3)
    c = bootstrap_ci(values, n_boot=2000, seed=4)
    assert a == b
    assert a != c
    assert a[0] < values.mean() < a[1]


def test_bootstrap_width_matches_the_normal_approximation():
    values = np.array([0.0, 1.0] * 200)  # P = 400 problems, mean 0.5, se = sqrt(0.25 / 400) = 0.025
    lo, hi = bootstrap_ci(values, n_boot=20_000, seed=0)
    assert (hi - lo) / 2 == pytest.approx(1.959964 * 0.025, rel=0.06)
    assert (lo + hi) / 2 == pytest.approx(0.5, abs=0.005)


def test_bootstrap_of_a_constant_and_of_one_problem():
    assert bootstrap_ci([0.3] * 10, n_boot=100) == pytest.approx((0.3, 0.3))
    assert bootstrap_ci([0.8], n_boot=50) == pytest.approx((0.8, 0.8))


def test_bootstrap_chunking_does_not_change_the_result():
    values = np.linspace(0, 1, 37)
    assert bootstrap_ci(values, n_boot=999, seed=5, chunk=1000) == bootstrap_ci(
        values, n_boot=999, seed=5, chunk=10**6
    )


def test_bootstrap_of_per_problem_pass_at_k():
    c = np.array([0, 3, 8, 8, 1, 0, 5, 2])
    per_problem = pass_at_k_array(8, c, 4)
    lo, hi = bootstrap_ci(per_problem, n_boot=500, seed=0)
    assert 0.0 <= lo <= per_problem.mean() <= hi <= 1.0


def test_welch_matches_hand_computation():
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 6.0, 8.0, 10.0]
    va, vb = 2.5 / 5, 10.0 / 5
    t = (3.0 - 6.0) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / 4 + vb**2 / 4)
    res = welch_test(a, b)
    assert res.statistic == pytest.approx(t)
    assert res.df == pytest.approx(df)
    assert res.df == pytest.approx(5.882353, abs=1e-6)
    assert res.pvalue == pytest.approx(2 * sps.t.sf(abs(t), df))


def test_paired_matches_hand_computation():
    a, b = [3.0, 5.0, 7.0], [2.0, 3.0, 4.0]  # differences 1, 2, 3: mean 2, sd 1
    t = 2.0 / (1.0 / math.sqrt(3))
    res = paired_test(a, b)
    assert res.statistic == pytest.approx(t)
    assert res.df == 2
    assert res.pvalue == pytest.approx(2 * sps.t.sf(t, 2))
    assert res.pvalue == pytest.approx(0.074180, abs=1e-6)


def test_tests_undefined_cases_give_nan():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # undefined, not computed from a variance of one value
        assert math.isnan(welch_test([1.0], [1.0, 2.0]).pvalue)
        assert math.isnan(welch_test([1.0, 2.0], [1.0]).pvalue)
    assert math.isnan(welch_test([1.0, 1.0], [2.0, 2.0]).pvalue)
    assert math.isnan(paired_test([1.0, 2.0], [0.0, 1.0]).pvalue)  # constant difference
    with pytest.raises(ValueError, match="equal lengths"):
        paired_test([1.0, 2.0], [1.0])


def test_compare_seeds_pairs_by_seed_only_when_matched():
    a = {0: 0.75, 1: 0.70, 2: 0.74}
    b = {2: 0.70, 0: 0.72, 1: 0.69}  # insertion order must not matter
    cmp = compare_seeds(a, b)
    assert cmp.p_paired == pytest.approx(paired_test([0.75, 0.70, 0.74], [0.72, 0.69, 0.70]).pvalue)
    assert cmp.p_welch == pytest.approx(welch_test(list(a.values()), list(b.values())).pvalue)
    assert cmp.delta == pytest.approx(np.mean([0.75, 0.70, 0.74]) - np.mean([0.72, 0.69, 0.70]))
    assert cmp.n_a == cmp.n_b == 3
    unmatched = compare_seeds(a, {0: 0.72, 1: 0.69, 5: 0.70})
    assert unmatched.p_paired is None
    with pytest.raises(ValueError, match="both methods"):
        compare_seeds(a, {})


def test_welch_from_summary_inverts_mean_ci():
    a = [0.74, 0.75, 0.73, 0.76, 0.742]
    b = [0.73, 0.735, 0.728, 0.74, 0.731]
    ma, mb = mean_ci(a), mean_ci(b)
    res = welch_from_summary(ma.mean, ma.half_width, 5, mb.mean, mb.half_width, 5)
    want = welch_test(a, b)
    assert res.pvalue == pytest.approx(want.pvalue, rel=1e-9)
    assert res.df == pytest.approx(want.df, rel=1e-9)
    assert math.isnan(welch_from_summary(0.7, float("nan"), 5, 0.6, 0.01, 5).pvalue)
    assert math.isnan(welch_from_summary(0.7, 0.01, 1, 0.6, 0.01, 5).pvalue)


def test_normal_ci_is_the_paper_style_interval():
    """``kind="normal"`` is 1.96 s / sqrt(n); with 5 seeds the t interval is 1.42x wider (report.ci)."""
    from acerl.evaluate.stats import half_width

    values = np.array([0.70, 0.72, 0.71, 0.74, 0.69])
    s = values.std(ddof=1)
    t_ci, z_ci = mean_ci(values), mean_ci(values, kind="normal")
    assert z_ci.half_width == pytest.approx(1.959964 * s / math.sqrt(5), rel=1e-6)
    assert t_ci.half_width / z_ci.half_width == pytest.approx(1.4166, abs=1e-3)
    assert math.isnan(half_width(0.1, 1, kind="normal"))
    with pytest.raises(ValueError, match="CI kind must be one of t, normal; got 'z'"):
        half_width(0.1, 5, kind="z")


def test_holm():
    p = np.array([0.01, 0.04, np.nan, 0.03, 0.5])
    # sorted 0.01, 0.03, 0.04, 0.5 (m = 4): 0.04, 0.09, max(0.09, 0.08), 0.5
    np.testing.assert_allclose(holm(p), [0.04, 0.09, np.nan, 0.09, 0.5])
    assert holm([0.9, 0.8]).tolist() == [1.0, 1.0] and np.isnan(holm([np.nan])).all()
    with pytest.raises(ValueError, match="1-D"):
        holm(np.zeros((2, 2)))


def test_primary_p_value_is_the_paired_one_where_the_seeds_match():
    def comparison(p_paired: float | None) -> Comparison:
        return Comparison(mean_a=0.6, mean_b=0.5, n_a=5, n_b=5, p_welch=0.30, p_paired=p_paired)

    assert comparison(0.01).p_primary == 0.01
    assert comparison(None).p_primary == 0.30


def test_levels_and_kinds_by_hand():
    """``level`` is strictly between 0 and 1 and is kept in the result; ``half_width`` defaults to Student t;
    the normal interval is defined from two seeds on."""
    for level in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"^confidence level must be in \(0, 1\), got {level}$"):
            mean_ci([1.0, 2.0, 3.0], level=level)
    assert mean_ci([1.0, 2.0, 3.0], level=0.9).level == 0.9
    assert half_width(2.0, 5) == t_half_width(2.0, 5) == pytest.approx(T_975_DF4 * 2.0 / math.sqrt(5))
    assert half_width(2.0, 2, kind="normal") == pytest.approx(1.959964 * 2.0 / math.sqrt(2), rel=1e-6)
    assert math.isnan(half_width(2.0, 1, kind="normal"))


def test_one_seed_gives_nan_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "degrees of freedom <= 0" from numpy
        ci = mean_ci([0.4])
    assert math.isnan(ci.std) and math.isnan(ci.half_width) and ci.mean == 0.4


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda v: mean_ci(v), "mean_ci"),
        (lambda v: bootstrap_ci(v), "bootstrap_ci"),
        (lambda v: welch_test(v, [1.0, 2.0]), "welch_test a"),
        (lambda v: welch_test([1.0, 2.0], v), "welch_test b"),
        (lambda v: paired_test(v, [1.0, 2.0]), "paired_test a"),
        (lambda v: paired_test([1.0, 2.0], v), "paired_test b"),
    ],
)
def test_shape_errors_name_the_function_and_argument(call, name):
    message = f"{name}: expected a 1-D sequence of values, got shape (2, 2)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call([[1.0, 2.0], [3.0, 4.0]])


def test_bootstrap_by_hand_in_chunks_defaults_one_replicate_and_a_statistic():
    """The percentile bootstrap written out: ``n_boot`` rows of ``P`` indices drawn by one generator seeded
    with ``seed`` (drawn in chunks, the stream is the same), each row's statistic, the 2.5th and 97.5th
    percentiles. Defaults: 10,000 replicates, seed 0 (checked on 40 distinct values, whose resampled means
    hardly tie, so one replicate more or another seed moves the percentiles)."""
    values = np.array([0.0, 0.1, 0.4, 0.4, 0.9, 1.0, 0.3])

    def by_hand(v: np.ndarray, n_boot: int, seed: int, statistic=lambda x: x.mean(axis=1)):
        idx = np.random.default_rng(seed).integers(0, v.size, size=(n_boot, v.size))
        low, high = np.percentile(statistic(v[idx]), [2.5, 97.5])
        return float(low), float(high)

    assert bootstrap_ci(values, n_boot=50, seed=2, chunk=7) == by_hand(values, 50, 2)
    spread = np.random.default_rng(7).random(40)
    assert bootstrap_ci(spread) == by_hand(spread, 10_000, 0)
    assert by_hand(spread, 10_000, 0) not in (by_hand(spread, 10_001, 0), by_hand(spread, 10_000, 1))
    assert bootstrap_ci(values, n_boot=1, seed=2) == by_hand(
        values, 1, 2
    )  # one replicate: both ends equal it
    median = lambda x: np.median(x, axis=1)  # noqa: E731
    assert bootstrap_ci(values, n_boot=300, seed=1, statistic=median) == by_hand(values, 300, 1, median)
    with pytest.raises(ValueError, match="^bootstrap_ci: n_boot must be >= 1, got 0$"):
        bootstrap_ci(values, n_boot=0)


def test_welch_with_two_seeds_a_side_by_hand():
    a, b = [1.0, 3.0], [4.0, 8.0]  # variances 2 and 8, so v = 2/2 + 8/2 = 5
    t = (2.0 - 6.0) / math.sqrt(5.0)
    df = 25.0 / (1.0**2 / 1 + 4.0**2 / 1)
    for x, y, sign in ((a, b, 1.0), (b, a, -1.0)):
        res = welch_test(x, y)
        assert res.statistic == pytest.approx(sign * t) and res.df == pytest.approx(df)
        assert res.pvalue == pytest.approx(2 * sps.t.sf(abs(t), df))


def test_paired_with_two_seeds_by_hand():
    a, b = [3.0, 5.0], [2.0, 3.0]  # differences 1 and 2: mean 1.5, sd 1/sqrt(2)
    t = 1.5 / ((1 / math.sqrt(2)) / math.sqrt(2))
    res = paired_test(a, b)
    assert res.statistic == pytest.approx(t) and res.df == 1
    assert res.pvalue == pytest.approx(2 * sps.t.sf(t, 1))


def test_welch_from_summary_edge_cases_by_hand():
    """Two seeds a side are enough; equal (non-zero) spreads are a test; zero spreads, one seed or a missing
    half-width are not (nan, without numerical warnings)."""
    a, b = [1.0, 3.0], [4.0, 6.0]
    ma, mb = mean_ci(a), mean_ci(b)
    res = welch_from_summary(ma.mean, ma.half_width, 2, mb.mean, mb.half_width, 2)
    want = welch_test(a, b)
    assert (res.statistic, res.pvalue, res.df) == pytest.approx((want.statistic, want.pvalue, want.df))
    assert res.statistic == pytest.approx(-3.0 / math.sqrt(2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for args in [
            (0.7, 0.0, 5, 0.6, 0.0, 5),
            (0.7, 0.01, 1, 0.6, 0.01, 5),
            (0.7, 0.01, 5, 0.6, 0.01, 1),
            (0.7, 0.01, 5, 0.6, float("inf"), 5),
            (0.7, float("nan"), 5, 0.6, 0.01, 5),
        ]:
            out = welch_from_summary(*args)
            assert math.isnan(out.statistic) and math.isnan(out.pvalue) and math.isnan(out.df), args


def test_holm_of_a_family_of_one():
    out = holm([float("nan"), 0.03])
    assert math.isnan(out[0]) and out[1] == 0.03
