"""The power machinery on small inputs, each value written out by hand from its formula.

``test_power.py`` checks the methods' statistical properties on simulated studies (coverage, power, recovery of
known variance components); properties that hold in aggregate leave room for a slipped clip, a swapped mean
square or a dropped argument. Here every quantity is recomputed independently -- plain loops over the cells,
``math`` and the textbook formulas -- on inputs chosen so that each branch (the clips of the Beta fit, the three
variance estimates of the crossed interval, the floors at zero of the components) is taken.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sps

from acerl.evaluate.power import (
    BetaPrior,
    Components,
    beta_passk,
    beta_sampling_variance,
    comparison_components,
    fit_beta_prior,
    fit_beta_to_passk,
    mde_paired,
    method_components,
    paired_effect,
    per_problem_floor_sd,
    power_paired,
    predicted_sd,
    sampling_variance,
    seeds_for_mde,
    seeds_problems_ci,
)
from acerl.passk import pass_at_k


# ------------------------------------------------------------------------------------------- the Beta prior
def _beta_by_hand(c: list[int], n: int) -> tuple[float, float]:
    """Method of moments on c / n, with the documented clips, in plain Python."""
    frac = [ci / n for ci in c]
    p = len(frac)
    m = min(max(sum(frac) / p, 0.5 / (n * p)), 1 - 0.5 / (n * p))
    spread = m * (1 - m)
    var_p = (statistics.variance(frac) if p > 1 else 0.0) - spread / n
    if n > 1:
        var_p /= 1 - 1 / n
    var_p = min(max(var_p, 1e-6 * spread), 0.99 * spread)
    total = spread / var_p - 1
    return m * total, (1 - m) * total


def test_beta_prior_mean():
    assert BetaPrior(1.0, 3.0).mean == 0.25
    assert BetaPrior(2.0, 2.0).mean == 0.5


@pytest.mark.parametrize(
    ("c", "n"),
    [
        ([0, 2, 5, 8, 3], 8),  # interior: no clip
        ([3, 3, 3, 3], 8),  # one fraction everywhere: the variance floor
        ([0, 0, 0], 8),  # nothing solved: the mean clipped up to 0.5 / (n P)
        ([8, 8, 8, 8], 8),  # everything solved: clipped down
        ([0, 8, 0, 8, 0, 8], 8),  # all or nothing: the variance capped at 0.99 m (1 - m)
        ([0, 1, 1, 0, 1], 1),  # one sample per problem: no (1 - 1/n) correction
        ([5], 8),  # one problem: no spread
        ([1, 2], 2),  # two problems of two samples: the smallest spread and the smallest correction
    ],
    ids=["interior", "floor", "none-solved", "all-solved", "cap", "n-1", "one-problem", "two-of-two"],
)
def test_fit_beta_prior_by_hand(c, n):
    fitted = fit_beta_prior(np.array(c), n)
    assert (fitted.a, fitted.b) == pytest.approx(_beta_by_hand(c, n), rel=1e-12)
    assert fitted.mean == pytest.approx(_beta_by_hand(c, n)[0] / sum(_beta_by_hand(c, n)), rel=1e-12)


def test_fit_beta_prior_refuses_a_table_or_nothing():
    for bad in (np.zeros((2, 3), dtype=int), np.array([], dtype=int)):
        with pytest.raises(ValueError, match=r"fit_beta_prior: expected counts of shape \(P,\)"):
            fit_beta_prior(bad, 8)


def test_beta_passk_is_one_minus_the_moment_by_hand():
    # E[(1-p)^k] for p ~ Beta(a, b) = prod_{i<k} (b + i) / (a + b + i)
    a, b = 0.7, 2.3
    for k in (1, 2, 5, 32):
        moment = math.prod((b + i) / (a + b + i) for i in range(k))
        assert beta_passk(BetaPrior(a, b), k) == pytest.approx(1 - moment, rel=1e-12)


def test_fit_beta_to_passk_recovers_a_prior_from_two_points_and_refuses_bad_curves():
    truth = BetaPrior(2.5, 0.6)
    ks = np.array([1, 4])
    fitted = fit_beta_to_passk(ks, np.array([beta_passk(truth, 1), beta_passk(truth, 4)]))
    assert (fitted.a, fitted.b) == pytest.approx((truth.a, truth.b), rel=1e-5)
    with pytest.raises(ValueError, match="fit_beta_to_passk: need >= 2 matching ks and values"):
        fit_beta_to_passk(np.array([1, 2]), np.array([0.5]))
    with pytest.raises(ValueError, match="fit_beta_to_passk: need >= 2 matching"):
        fit_beta_to_passk(np.array([1]), np.array([0.5]))


# ------------------------------------------------------------------------------------------ sampling noise
def _posterior_variance_by_quadrature(a: float, b: float, n: int, k: int) -> float:
    """E_p[Var(x_hat | p)] for p ~ Beta(a, b): the binomial sum over c integrated over p numerically."""
    xs = [pass_at_k(n, c, k) for c in range(n + 1)]

    def var_given_p(p: float) -> float:
        second = sum(math.comb(n, c) * p**c * (1 - p) ** (n - c) * xs[c] ** 2 for c in range(n + 1))
        return (second - (1 - (1 - p) ** k) ** 2) * sps.beta.pdf(p, a, b)

    return integrate.quad(var_given_p, 0, 1, limit=200, points=[1e-6, 1 - 1e-6])[0]


def test_sampling_variance_by_quadrature():
    c, n, k = np.array([0, 1, 3, 4, 2]), 4, 2
    a, b = _beta_by_hand(c.tolist(), n)
    got = sampling_variance(c, n, k)
    want = [_posterior_variance_by_quadrature(a + ci, b + n - ci, n, k) for ci in c]
    assert got == pytest.approx(want, rel=1e-6)
    # another design's n: the same posterior, n_eval samples
    got6 = sampling_variance(c, n, k, n_eval=6)
    assert got6 == pytest.approx(
        [_posterior_variance_by_quadrature(a + ci, b + n - ci, 6, k) for ci in c], rel=1e-6
    )
    assert beta_sampling_variance(BetaPrior(1.5, 2.0), 5, 3) == pytest.approx(
        _posterior_variance_by_quadrature(1.5, 2.0, 5, 3), rel=1e-6
    )
    with pytest.raises(ValueError, match="sampling_variance: k=5 exceeds n_eval=4"):
        sampling_variance(c, n, 5)
    assert sampling_variance(c, n, 5, n_eval=8).shape == (5,)  # k above the observed n but within n_eval


# ------------------------------------------------------------------------------------------ paired t-test
def test_power_paired_by_hand_and_undefined_designs():
    effect, sd, s, alpha = 0.3, 0.5, 6, 0.1
    crit = sps.t.ppf(1 - alpha / 2, s - 1)
    nc = effect * math.sqrt(s) / sd
    want = sps.nct.sf(crit, s - 1, nc) + sps.nct.cdf(-crit, s - 1, nc)
    assert power_paired(effect, sd, s, alpha) == pytest.approx(want, rel=1e-10)
    assert power_paired(-effect, sd, s, alpha) == pytest.approx(want, rel=1e-10)
    assert power_paired(effect, sd, s) < want  # the default alpha is 0.05
    assert math.isnan(power_paired(effect, sd, 1)) and math.isnan(power_paired(effect, 0.0, 4))
    assert math.isnan(power_paired(effect, math.nan, 4))
    assert power_paired(effect, sd, 2) > 0.0  # two seeds are a test


def test_mde_paired_arguments_and_limits():
    for alpha, power in ((0.05, 0.8), (0.1, 0.9), (0.01, 0.5)):
        mde = mde_paired(0.4, 5, alpha, power)
        assert power_paired(mde, 0.4, 5, alpha) == pytest.approx(power, abs=1e-9)
    assert mde_paired(0.4, 5, power=0.9) > mde_paired(0.4, 5)
    assert mde_paired(0.4, 5, alpha=0.01) > mde_paired(0.4, 5)
    assert mde_paired(0.4, 2) == pytest.approx(mde_paired(0.4, 2, 0.05, 0.8))
    # two seeds: the search bracket has to be doubled
    assert power_paired(mde_paired(0.4, 2), 0.4, 2) == pytest.approx(0.8, abs=1e-9)
    assert mde_paired(1e-3, 40) == pytest.approx(mde_paired(1.0, 40) * 1e-3, rel=1e-9)
    assert math.isnan(mde_paired(0.4, 1)) and math.isnan(mde_paired(math.inf, 5))
    assert math.isnan(mde_paired(math.nan, 5)) and mde_paired(0.0, 5) == 0.0
    for alpha, power in ((0.0, 0.8), (1.0, 0.8), (0.05, 0.05), (0.05, 1.0), (0.5, 0.3)):
        with pytest.raises(ValueError, match=f"mde_paired: need 0 < alpha < power < 1, got alpha={alpha}"):
            mde_paired(0.4, 5, alpha, power)


def test_seeds_for_mde_is_the_fewest_seeds_that_reach_the_target():
    sd = 0.05
    for target, alpha, power in ((0.05, 0.05, 0.8), (0.02, 0.05, 0.8), (0.05, 0.1, 0.9)):
        n = seeds_for_mde(sd, target, alpha=alpha, power=power)
        assert n >= 2
        assert mde_paired(sd, n, alpha, power) <= target
        if n > 2:
            assert mde_paired(sd, n - 1, alpha, power) > target
    assert seeds_for_mde(sd, 0.02) == seeds_for_mde(sd, 0.02, alpha=0.05, power=0.8)
    assert seeds_for_mde(sd, 0.05, alpha=0.1, power=0.9) != seeds_for_mde(sd, 0.05)
    assert seeds_for_mde(sd, 10.0) == 2  # two seeds at least, however large the target
    assert seeds_for_mde(0.0, 0.01) == 2
    assert seeds_for_mde(sd, 1e-4, max_seeds=50) == 51  # out of reach: max_seeds + 1
    assert seeds_for_mde(sd, 1e-4) == 1001
    exact = seeds_for_mde(sd, mde_paired(sd, 7))  # a target met exactly at 7 seeds
    assert exact == 7
    for sd_, target in ((sd, 0.0), (sd, -0.1), (math.nan, 0.1), (math.inf, 0.1)):
        with pytest.raises(ValueError, match="seeds_for_mde: need a positive target and a finite sd"):
            seeds_for_mde(sd_, target)


def test_paired_effect_fields_by_hand_at_another_alpha_and_power():
    d = np.array([0.03, -0.01, 0.06, 0.02, 0.00])
    eff = paired_effect(d, alpha=0.1, power=0.9)
    mean, sd = statistics.fmean(d), statistics.stdev(d)
    half = sps.t.ppf(0.95, 4) * sd / math.sqrt(5)
    t = mean / (sd / math.sqrt(5))
    assert eff.delta == pytest.approx(mean)
    assert (eff.ci_low, eff.ci_high) == pytest.approx((mean - half, mean + half))
    assert eff.pvalue == pytest.approx(2 * sps.t.sf(abs(t), 4))
    assert eff.sd == pytest.approx(sd)
    assert eff.mde == pytest.approx(mde_paired(sd, 5, 0.1, 0.9))
    assert eff.n_seeds == 5
    default = paired_effect(d)
    assert default.ci_high - default.ci_low > eff.ci_high - eff.ci_low
    assert default.mde == pytest.approx(mde_paired(sd, 5))


# ------------------------------------------------------------------------------------- variance components
def _mean_squares(d: list[list[float]]) -> tuple[float, float, float]:
    """Two-way ANOVA without replication, cell by cell."""
    s, p = len(d), len(d[0])
    grand = sum(map(sum, d)) / (s * p)
    rows = [sum(r) / p for r in d]
    cols = [sum(d[i][j] for i in range(s)) / s for j in range(p)]
    ms_s = p * sum((r - grand) ** 2 for r in rows) / (s - 1)
    ms_p = s * sum((c - grand) ** 2 for c in cols) / (p - 1)
    ss_e = sum((d[i][j] - rows[i] - cols[j] + grand) ** 2 for i in range(s) for j in range(p))
    return ms_s, ms_p, ss_e / ((s - 1) * (p - 1))


# three designs, one per branch of seeds_problems_ci: seeds and problems both vary; MS_p < MS_e; MS_s < MS_e
BOTH = [[0.10, 0.30, -0.20, 0.05], [0.40, 0.55, 0.10, 0.35], [-0.20, 0.05, -0.45, -0.30]]
SEEDS = [[-1.09, -0.56, -0.76, -0.62], [-0.37, -0.32, -0.22, -0.51], [0.59, 0.46, 0.48, 0.54]]
PROBLEMS = [[0.09, 0.28, -0.52, -0.34], [-0.09, 0.15, -0.66, 0.29], [-0.13, 0.23, -0.68, 0.32]]


def test_the_three_designs_take_the_three_branches():
    ms_s, ms_p, ms_e = _mean_squares(BOTH)
    assert ms_s + ms_p - ms_e >= max(ms_s, ms_p)
    ms_s, ms_p, ms_e = _mean_squares(SEEDS)
    assert ms_s + ms_p - ms_e < max(ms_s, ms_p) and ms_s >= ms_p
    ms_s, ms_p, ms_e = _mean_squares(PROBLEMS)
    assert ms_s + ms_p - ms_e < max(ms_s, ms_p) and ms_p > ms_s


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_seeds_problems_ci_by_hand_in_each_branch(level):
    for d, branch in ((BOTH, "both"), (SEEDS, "seeds"), (PROBLEMS, "problems")):
        s, p = len(d), len(d[0])
        ms_s, ms_p, ms_e = _mean_squares(d)
        if branch == "both":
            var = (ms_s + ms_p - ms_e) / (s * p)
            df = (ms_s + ms_p - ms_e) ** 2 / (
                ms_s**2 / (s - 1) + ms_p**2 / (p - 1) + ms_e**2 / ((s - 1) * (p - 1))
            )
        elif branch == "seeds":
            var, df = ms_s / (s * p), s - 1
        else:
            var, df = ms_p / (s * p), p - 1
        mean = sum(map(sum, d)) / (s * p)
        half = sps.t.ppf(0.5 + level / 2, df) * math.sqrt(var)
        assert seeds_problems_ci(np.array(d), level=level) == pytest.approx(
            (mean - half, mean + half), rel=1e-12
        )


def test_seeds_problems_ci_of_one_problem_is_the_t_interval_over_seeds_and_of_one_seed_undefined():
    row, col = np.array([BOTH[0]]), np.array(BOTH)[:, :1]
    x = col.ravel()
    half = sps.t.ppf(0.9, x.size - 1) * statistics.stdev(x) / math.sqrt(x.size)
    assert seeds_problems_ci(col, level=0.8) == pytest.approx((x.mean() - half, x.mean() + half))
    # one seed: the seed variance is unknown; an interval over problems alone would read as one over both
    assert all(math.isnan(v) for v in seeds_problems_ci(row, level=0.8))
    for bad in (np.zeros(4), np.zeros((0, 3)), np.zeros((3, 0)), np.zeros((2, 2, 2))):
        with pytest.raises(ValueError, match=r"seeds_problems_ci: expected a \(seeds, problems\) array"):
            seeds_problems_ci(bad)


def test_seeds_problems_ci_with_no_spread_at_all_is_a_point():
    lo, hi = seeds_problems_ci(np.full((3, 4), 0.25))
    assert lo == pytest.approx(0.25) and hi == pytest.approx(0.25)


def test_per_problem_floor_sd_by_hand():
    for d in (BOTH, SEEDS, PROBLEMS):
        assert per_problem_floor_sd(np.array(d)) == pytest.approx(math.sqrt(_mean_squares(d)[2] / len(d[0])))
    for d in (np.array([BOTH[0]]), np.array(BOTH)[:, :1], np.zeros(4)):
        assert math.isnan(per_problem_floor_sd(d))


def test_comparison_components_by_hand_with_and_without_the_floors():
    for d in (BOTH, SEEDS, PROBLEMS):
        s, p = len(d), len(d[0])
        ms_s, ms_p, ms_e = _mean_squares(d)
        for sampling in (0.001, 1.0):  # 1.0: the sampling noise exceeds MS_error, seed x problem floored at 0
            v = np.full((s, p), sampling)
            v[0, 0] = sampling * 2  # the mean of v, not one cell
            samp = sampling * (1 + 1 / (s * p))
            comp = comparison_components(np.array(d), v)
            assert comp.total == pytest.approx(ms_s / p)
            assert comp.total == pytest.approx(statistics.variance([sum(r) / p for r in d]))
            assert comp.seed == pytest.approx(max(ms_s / p - ms_e / p, 0.0))
            assert comp.seed_problem == pytest.approx(max(ms_e - samp, 0.0))
            assert comp.sampling == pytest.approx(samp)
            assert comp.problem == pytest.approx(max((ms_p - ms_e) / s, 0.0))
            assert (comp.n_seeds, comp.n_problems) == (s, p)
    floored = comparison_components(np.array(PROBLEMS), np.zeros((3, 4)))
    assert floored.seed == 0.0  # MS_seed < MS_error in this design
    assert comparison_components(np.array(SEEDS), np.zeros((3, 4))).problem == 0.0
    one_problem = comparison_components(np.array(BOTH)[:, :1], np.full((3, 1), 0.2))
    assert all(
        math.isnan(x)
        for x in (one_problem.total, one_problem.seed, one_problem.seed_problem, one_problem.problem)
    )
    assert (one_problem.n_seeds, one_problem.n_problems) == (3, 1)
    assert one_problem.sampling == pytest.approx(0.2) and one_problem.n_seeds == 3
    with pytest.raises(ValueError, match=r"comparison_components: d \(4,\) and v \(4,\) must be equal"):
        comparison_components(np.zeros(4), np.zeros(4))


def test_predicted_sd_by_hand():
    comp = Components(
        total=0.0, seed=0.004, seed_problem=0.09, sampling=0.03, problem=0.0, n_seeds=5, n_problems=40
    )
    assert predicted_sd(comp, n_problems=100) == pytest.approx(math.sqrt(0.004 + (0.09 + 0.03) / 100))
    assert predicted_sd(comp, n_problems=100, sampling=0.01) == pytest.approx(math.sqrt(0.004 + 0.1 / 100))
    assert predicted_sd(comp, n_problems=100, sampling=0.0) == pytest.approx(math.sqrt(0.004 + 0.09 / 100))


def test_method_components_by_hand():
    x = [[0.2, 0.9, 0.4], [0.5, 0.7, 0.1], [0.3, 0.3, 0.6], [0.8, 0.6, 0.7]]
    v = [[0.01, 0.02, 0.03], [0.00, 0.04, 0.02], [0.01, 0.01, 0.01], [0.05, 0.00, 0.01]]
    s, p = 4, 3
    between = statistics.variance([sum(r) / p for r in x])
    samp = sum(sum(r) for r in v) / s / p**2  # the variance of one run's mean, averaged over runs
    probs = sum(statistics.variance(r) for r in x) / s / p
    mc = method_components(np.array(x), np.array(v))
    assert mc.between_seeds == pytest.approx(math.sqrt(between))
    assert mc.sampling == pytest.approx(math.sqrt(samp))
    assert mc.training == pytest.approx(math.sqrt(max(between - samp, 0.0)))
    assert mc.problems == pytest.approx(math.sqrt(probs))
    assert (mc.n_seeds, mc.n_problems) == (4, 3)
    noisy = method_components(np.array(x), np.array(v) * 100)  # sampling above the spread: no training part
    assert noisy.training == 0.0
    one_problem = method_components(np.array(x)[:, :1], np.array(v)[:, :1])
    assert math.isnan(one_problem.problems) and one_problem.sampling == pytest.approx(
        math.sqrt(sum(r[0] for r in v) / s)
    )
    with pytest.raises(ValueError, match=r"method_components: x \(4, 3\) and v \(4, 2\) must be equal"):
        method_components(np.array(x), np.array(v)[:, :2])


def test_fit_beta_to_passk_stays_within_its_bounds_on_a_flat_curve():
    """Problems either always or never solved: a flat Pass@k curve wants a, b -> 0; the fit stops at 1e-3."""
    fitted = fit_beta_to_passk(np.array([1, 2, 4, 8, 16, 32]), np.full(6, 0.2))
    assert fitted.a == pytest.approx(1e-3, rel=1e-6)
    assert fitted.mean == pytest.approx(0.2, abs=0.005)


def test_sampling_variance_is_never_negative():
    """A nearly certain problem: E[x_hat^2] - E[x]^2 rounds to about -3e-10 here; a variance is floored at 0."""
    assert beta_sampling_variance(BetaPrior(1e5, 1e4), 64, 32) == 0.0


def test_two_seeds_are_a_design_of_their_own():
    """Two seeds: the crossed interval still uses the ANOVA (not the pooled t interval of one seed), the paired
    test has a p-value, and a target met exactly at ``max_seeds`` is found."""
    d = [BOTH[0], BOTH[1]]
    ms_s, ms_p, ms_e = _mean_squares(d)
    combined = ms_s + ms_p - ms_e
    df = combined**2 / (ms_s**2 / 1 + ms_p**2 / 3 + ms_e**2 / 3)
    half = sps.t.ppf(0.975, df) * math.sqrt(combined / 8)
    mean = sum(map(sum, d)) / 8
    assert seeds_problems_ci(np.array(d)) == pytest.approx((mean - half, mean + half), rel=1e-12)
    eff = paired_effect(np.array([0.02, 0.05]))
    assert eff.pvalue == pytest.approx(sps.ttest_1samp([0.02, 0.05], 0.0).pvalue)
    assert seeds_for_mde(0.05, mde_paired(0.05, 5), max_seeds=5) == 5
    assert seeds_for_mde(0.05, mde_paired(0.05, 5) * 0.999, max_seeds=5) == 6


def test_the_smallest_crossed_design_two_seeds_by_two_problems():
    """2 x 2: one degree of freedom for each mean square; every estimate is still defined."""
    d = [[0.30, -0.10], [0.05, 0.20]]
    ms_s, ms_p, ms_e = _mean_squares(d)
    assert all(math.isfinite(m) and m > 0 for m in (ms_s, ms_p, ms_e))
    assert per_problem_floor_sd(np.array(d)) == pytest.approx(math.sqrt(ms_e / 2))
    comp = comparison_components(np.array(d), np.zeros((2, 2)))
    assert (comp.total, comp.seed_problem) == pytest.approx((ms_s / 2, ms_e))
    assert comp.problem == pytest.approx(max((ms_p - ms_e) / 2, 0.0))
    lo, hi = seeds_problems_ci(np.array(d))
    assert math.isfinite(lo) and math.isfinite(hi) and lo < 0.1125 < hi


def test_method_components_of_two_seeds():
    x, v = np.array([[0.2, 0.9, 0.4], [0.5, 0.7, 0.1]]), np.full((2, 3), 0.01)
    mc = method_components(x, v)
    assert mc.between_seeds == pytest.approx(statistics.stdev([0.5, 0.43333333333333335]))
    assert mc.training == pytest.approx(math.sqrt(max(mc.between_seeds**2 - 0.03 / 9, 0.0)))
    two_problems = method_components(x[:, :2], v[:, :2])
    assert two_problems.problems == pytest.approx(
        math.sqrt((statistics.variance([0.2, 0.9]) + statistics.variance([0.5, 0.7])) / 2 / 2)
    )
