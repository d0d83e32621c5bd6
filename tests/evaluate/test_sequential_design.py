"""The two-stage design's error rate: simulated under the null with the rule's own functions.

The sample-size re-estimate uses stage 1's SD and the final t pools it, so the naive final test at 0.049 rejects
a true null more often than 0.049. The design's rule must keep the error rate over both looks at 0.05: the test
simulates the whole design (two comparisons, Holm at both looks, the study's SD and floor) and allows 3.5
Monte Carlo SE above 0.05.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from acerl.evaluate.power import seeds_for_mde
from acerl.evaluate.sequential import (
    SequentialDesign,
    calibration_sds,
    final_calibration,
    holm_rows,
    seeds_needed,
    simulate_design,
)
from acerl.evaluate.stats import EXACT_SIGN_FLIPS, holm, sign_flip_test, tost_paired

DESIGN = SequentialDesign()
N_SIMS = 200_000
# the power study's interim: sd(d_s) about 1.4x the 4-point target, its per-problem floor about 0.8 sd(d_s)
SD, FLOOR = 1.43 * DESIGN.target, 0.8 * 1.43 * DESIGN.target


def _size(result: dict[str, np.ndarray]) -> float:
    return float(np.mean(result["interim"] | result["final"]))


def test_the_design_keeps_its_error_rate_over_both_looks():
    cal = final_calibration(DESIGN, FLOOR)
    declared = DESIGN.alpha_interim + DESIGN.alpha_final
    tolerance = 3.5 * math.sqrt(declared * (1 - declared) / N_SIMS)
    size = _size(simulate_design(DESIGN, sd=SD, floor=FLOOR, n_sims=N_SIMS, seed=1, final_pvalue=cal.pvalue))
    assert size <= declared + tolerance
    # the simulation resolves the defect it guards against: the naive final test (the rule before) exceeds 0.05
    naive = _size(simulate_design(DESIGN, sd=SD, floor=FLOOR, n_sims=N_SIMS, seed=1))
    assert naive > declared + tolerance, naive


@pytest.mark.parametrize("sd", [1.25 * DESIGN.target, 1.5 * DESIGN.target, 2.0 * DESIGN.target])
def test_the_design_keeps_its_error_rate_with_a_small_floor(sd):
    # a floor of a quarter of the target (a larger benchmark or more samples per problem): the SDs at which the
    # re-estimate decides the seeds lie far above the floor, and one comparison (the worst case) is simulated
    floor, n_sims = 0.25 * DESIGN.target, 100_000
    cal = final_calibration(DESIGN, floor)
    declared = DESIGN.alpha_interim + DESIGN.alpha_final
    tolerance = 3.5 * math.sqrt(declared * (1 - declared) / n_sims)
    for m in (1, 2):
        res = simulate_design(
            DESIGN, sd=sd, floor=floor, n_comparisons=m, n_sims=n_sims, seed=7, final_pvalue=cal.pvalue
        )
        assert _size(res) <= declared + tolerance, (m, _size(res))


def test_the_calibration_covers_every_sd_at_which_the_seeds_depend_on_the_data():
    for floor in (0.0, 0.1 * DESIGN.target, FLOOR, 5 * DESIGN.target):
        sds = calibration_sds(DESIGN, floor)
        assert sds[0] >= floor and np.all(np.diff(sds) > 0)
        # from where stage 1's SD (7 df) almost never asks for more seeds, or from the floor where it is above
        assert sds[0] == floor or seeds_needed(2.0 * sds[0], DESIGN) <= DESIGN.stage1
        # to where the cap almost always decides the seeds: even half the grid's last SD needs more than the cap
        assert seeds_needed(sds[-1] / 2.0, DESIGN) > DESIGN.max_seeds


def test_the_calibration_raises_p_values_and_lowers_the_final_level():
    cal = final_calibration(DESIGN, FLOOR)
    p = np.array([0.001, 0.01, 0.03, 0.049, 0.2, 0.9])
    assert np.all(cal.pvalue(p) >= p) and cal.pvalue(0.049) > 0.049
    level = cal.level(DESIGN.alpha_final)
    assert 0.03 < level < DESIGN.alpha_final and cal.pvalue(level) <= DESIGN.alpha_final
    assert math.isnan(float(cal.pvalue(math.nan)))
    assert cal.one_sided(0.02) == pytest.approx(float(cal.pvalue(0.04)) / 2)


def test_the_simulation_uses_the_rules_own_seeds_and_holm():
    for sd in np.linspace(0.005, 0.15, 9):
        assert int(seeds_needed(sd, DESIGN)) == seeds_for_mde(
            sd, DESIGN.target, alpha=DESIGN.alpha_final, max_seeds=DESIGN.max_seeds
        )
    p = np.random.default_rng(0).random((50, 3))
    np.testing.assert_allclose(holm_rows(p), np.stack([holm(row) for row in p]))
    res = simulate_design(DESIGN, sd=SD, floor=FLOOR, n_sims=2000, seed=3)
    assert res["seeds"].min() >= DESIGN.stage1 and res["seeds"].max() <= DESIGN.max_seeds


def test_sign_flip_exact_enumeration_and_monte_carlo():
    d = np.array([0.03, -0.01, 0.02, 0.05, 0.01, -0.02, 0.04])
    total = abs(d.sum())
    brute = np.mean([abs(np.dot(s, d)) >= total - 1e-15 for s in itertools.product((-1, 1), repeat=d.size)])
    flip = sign_flip_test(d)
    assert flip.exact and flip.pvalue == pytest.approx(brute) and flip.method == "exact"
    big = np.random.default_rng(1).normal(0.01, 0.03, size=EXACT_SIGN_FLIPS + 1)
    bits = (np.arange(2**big.size)[:, None] >> np.arange(big.size)) & 1
    exact = float(np.mean(np.abs((1 - 2 * bits) @ big) >= abs(big.sum()) * (1 - 1e-12)))
    mc = sign_flip_test(big)
    assert not mc.exact and mc.method == "Monte Carlo, 100000 draws"
    assert mc.pvalue == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 100_000) + 1e-5)
    assert math.isnan(sign_flip_test([0.1]).pvalue)


def test_tost_is_two_one_sided_t_tests():
    d = np.array([0.01, -0.02, 0.015, 0.0, -0.005, 0.02])
    lo, hi = tost_paired(d, 0.04)
    assert lo == pytest.approx(sps.ttest_1samp(d, -0.04, alternative="greater").pvalue)
    assert hi == pytest.approx(sps.ttest_1samp(d, 0.04, alternative="less").pvalue)
    with pytest.raises(ValueError, match="margin must be positive"):
        tost_paired(d, 0.0)
    assert all(math.isnan(p) for p in tost_paired([0.1], 0.04))


def test_sign_flip_counts_ties_within_float_residue_when_the_observed_sum_is_zero():
    # per-seed differences in hundredths that sum to exactly 0; in floats the sum and the permuted sums carry
    # residue of about 1e-17, which must not decide which patterns count as at least as extreme
    d = np.array([4, 0, -7, -6, -14, -13, -15, 51]) / 100.0
    assert d.sum() != 0.0  # the residue the test is about
    assert sign_flip_test(d).pvalue == 1.0
    assert sign_flip_test(np.tile(d, 3)).pvalue == 1.0  # Monte Carlo (24 seeds): every draw ties or exceeds
    # the tolerance scales with the data: the same differences in points give the same p-values
    for x in (np.array([0.03, -0.01, 0.02, 0.05, 0.01, -0.02, 0.04]), d[:5]):
        assert sign_flip_test(100.0 * x).pvalue == sign_flip_test(x).pvalue
