"""The power study's two-stage design as numbers: its stopping rule, its re-estimated seeds, and its error rate.

The rule (docs/reports.md, "The power study"): stage 1 runs ``stage1`` seeds; at the interim look a comparison
stops for efficacy where its Holm-adjusted paired-t p is below ``alpha_interim``; otherwise the number of seeds
is re-estimated as the fewest whose MDE at ``sd_plan = max(sd(d_s), floor)`` is at most ``target``
(:func:`seeds_needed`), the largest over the open comparisons, capped at ``max_seeds``. The final paired t-test
pools both stages.

**Why the final p-value is calibrated.** The stage-2 size depends on stage 1's SD, and the final t statistic
pools that same SD: a low stage-1 SD stops the study early with a low pooled SD. The naive final test at 0.049
then rejects a true null about 5.3% of the time over both looks (two comparisons, the study's SD ratio and
floor), and up to 6.6% for one comparison without a floor. :class:`FinalCalibration` simulates the rule under
the null for one comparison (the worst case: its own SD alone decides the seeds) at the observed floor, over a
grid of true SDs at or above the floor that covers every SD at which the seeds depend on the data
(:func:`calibration_sds`), and maps a naive p to the largest rejection rate any of them gives
(``p_final = max(p, G(p))``). Holm then runs on these calibrated p-values, so the error rate over both looks is
at most ``alpha_interim + alpha_final``. The rule does not depend on the mean difference, so the same map
calibrates a test of any other null value: the final interval at ``1 - level(alpha_final)`` and the TOST
p-values use it. Chosen over an inverse-normal combination of the stages' p-values because the completed
study's weights would be fixed after its data were seen; the calibration depends on the rule alone.

:func:`simulate_design` is the whole design (several comparisons, Holm at both looks) under the null, used by
the calibration and by the test of the design's size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from acerl.evaluate.power import mde_paired

__all__ = [
    "SequentialDesign",
    "mde_factors",
    "seeds_needed",
    "holm_rows",
    "simulate_design",
    "FinalCalibration",
    "calibration_sds",
    "final_calibration",
]

CALIBRATION_STEP = 1.15
"""Ratio of neighbouring true SDs on the calibration's grid (:func:`calibration_sds`)."""


@dataclass(frozen=True)
class SequentialDesign:
    """The stopping rule and alpha spending (docs/reports.md, "The power study"); fractions, not points."""

    target: float = 0.04
    power: float = 0.8
    alpha_interim: float = 0.001
    alpha_final: float = 0.049
    max_seeds: int = 64
    stage1: int = 8

    def __post_init__(self) -> None:
        if self.alpha_interim + self.alpha_final > 0.05 + 1e-12:
            raise ValueError(
                f"alpha_interim + alpha_final must be at most 0.05, got {self.alpha_interim + self.alpha_final}"
            )
        if self.stage1 < 2:
            raise ValueError(f"stage 1 needs at least 2 seeds, got {self.stage1}")


@functools.lru_cache(maxsize=16)
def mde_factors(alpha: float, power: float, max_seeds: int) -> np.ndarray:
    """``(max_seeds + 1,)``: ``mde_paired(1, S, alpha, power)`` at index ``S`` (``inf`` for ``S < 2``). The MDE
    scales with the SD, so ``mde_paired(sd, S) = sd * factors[S]``."""
    out = np.full(max_seeds + 1, np.inf)
    out[2:] = [mde_paired(1.0, s, alpha, power) for s in range(2, max_seeds + 1)]
    out.setflags(write=False)
    return out


def seeds_needed(sd_plan: np.ndarray | float, design: SequentialDesign) -> np.ndarray:
    """The fewest seeds (at least 2) whose MDE at ``sd_plan`` is at most ``design.target``, elementwise;
    ``max_seeds + 1`` where even ``max_seeds`` do not reach it (as :func:`acerl.evaluate.power.seeds_for_mde`)."""
    sd = np.asarray(sd_plan, dtype=np.float64)
    ok = sd[..., None] * mde_factors(design.alpha_final, design.power, design.max_seeds) <= design.target
    return np.where(ok.any(axis=-1), ok.argmax(axis=-1), design.max_seeds + 1)


def holm_rows(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values of each row of ``p: (N, m)`` (one family per row; no ``nan``)."""
    order = np.argsort(p, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, axis=1)
    m = p.shape[1]
    adj = np.minimum(np.maximum.accumulate(ps * (m - np.arange(m)), axis=1), 1.0)
    out = np.empty_like(adj)
    np.put_along_axis(out, order, adj, axis=1)
    return out


def _tp(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    return 2.0 * sps.t.sf(np.abs(t), df)


def simulate_design(
    design: SequentialDesign,
    *,
    sd: float,
    floor: float = 0.0,
    n_comparisons: int = 2,
    n_sims: int = 100_000,
    seed: int = 0,
    final_pvalue: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """The design run ``n_sims`` times under the null (every comparison's true difference 0).

    Per-seed differences are normal with SD ``sd`` (fractions); ``floor`` is each comparison's per-problem
    floor of ``sd_plan``. Stage 2's mean and sum of squares are drawn from their exact distributions.

    Args:
        final_pvalue: maps the naive final p-values ``(N, m)`` to the p-values Holm runs on (default: the
            naive ones, the rule before calibration).

    Returns:
        ``interim``: ``(N,)`` some comparison stopped for efficacy; ``final``: ``(N,)`` some comparison rejected
        at the final look; ``p_naive``: ``(N, m)`` final naive p (``nan`` after an efficacy stop); ``seeds``.
    """
    rng = np.random.default_rng(seed)
    n1, shape = design.stage1, (n_sims, n_comparisons)
    d1 = rng.normal(0.0, sd, size=(*shape, n1))
    m1 = d1.mean(axis=-1)
    ss1 = ((d1 - m1[..., None]) ** 2).sum(axis=-1)
    s1 = np.sqrt(ss1 / (n1 - 1))
    p1 = _tp(m1 / (s1 / math.sqrt(n1)), np.full(shape, n1 - 1))
    interim = holm_rows(p1) < design.alpha_interim
    stopped = np.any(interim, axis=1)
    need = np.where(interim, 0, seeds_needed(np.maximum(s1, floor), design))
    n = np.maximum(n1, np.minimum(need.max(axis=1), design.max_seeds))
    extra = (n - n1)[:, None] * np.ones(shape, dtype=np.int64)
    m2 = np.where(extra >= 1, rng.normal(0.0, 1.0, size=shape) * sd / np.sqrt(np.maximum(extra, 1)), 0.0)
    ss2 = np.where(extra >= 2, sd**2 * rng.chisquare(np.maximum(extra - 1, 1)), 0.0)
    total = n[:, None] * np.ones(shape)
    mean = (n1 * m1 + extra * m2) / total
    ss = ss1 + ss2 + n1 * extra * (m1 - m2) ** 2 / total
    p = _tp(mean / np.sqrt(ss / (total - 1) / total), total - 1)
    p_final = p if final_pvalue is None else final_pvalue(p)
    final = ~stopped & np.any(holm_rows(p_final) < design.alpha_final, axis=1)
    return {"interim": stopped, "final": final, "p_naive": np.where(stopped[:, None], np.nan, p), "seeds": n}


@dataclass(frozen=True)
class FinalCalibration:
    """The final look's p-value map for one comparison (:func:`final_calibration`): ``null_p[j]`` are the
    sorted naive final p-values of the ``j``-th simulated true SD (an efficacy stop counts as ``inf``)."""

    floor: float
    null_p: tuple[np.ndarray, ...]

    def rejection_rate(self, u: np.ndarray | float) -> np.ndarray:
        """``G(u)``: the largest probability over the simulated SDs that the naive final p is at most ``u``."""
        u = np.asarray(u, dtype=np.float64)
        rates = [np.searchsorted(p, u, side="right") / p.size for p in self.null_p]
        return np.max(rates, axis=0)

    def pvalue(self, p: np.ndarray | float) -> np.ndarray:
        """The calibrated two-sided p-value ``max(p, G(p))`` (``nan`` stays ``nan``)."""
        p = np.asarray(p, dtype=np.float64)
        out = np.maximum(p, self.rejection_rate(np.nan_to_num(p, nan=1.0)))
        return np.where(np.isnan(p), np.nan, out)

    def one_sided(self, p: np.ndarray | float) -> np.ndarray:
        """The calibrated one-sided p-value: half the two-sided map of ``2 p`` (the null is symmetric)."""
        return self.pvalue(np.minimum(2.0 * np.asarray(p, dtype=np.float64), 1.0)) / 2.0

    def level(self, alpha: float) -> float:
        """The naive two-sided level whose calibrated p is at most ``alpha``: the level of the final interval."""
        grid = np.unique(np.concatenate([p[p <= alpha] for p in self.null_p] + [np.array([alpha])]))
        ok = grid[self.pvalue(grid) <= alpha]
        return float(ok.max()) if ok.size else 0.0


def calibration_sds(design: SequentialDesign, floor: float) -> np.ndarray:
    """The true ``sd(d_s)`` (fractions) the calibration simulates: a geometric grid (step
    :data:`CALIBRATION_STEP`) over every SD at which the rule's seed count depends on the data, from the floor.

    Below ``sd_low``, half the SD at which stage 1's seeds meet the target, stage 1's SD (7 df) almost never
    asks for more seeds, so the final test is a fixed-size t-test. Above ``sd_high``, twice the SD at which
    ``max_seeds`` meet it, the cap almost always decides the seeds: fixed size again. Where the rule's size
    exceeds alpha lies between the two, wherever the floor is: a grid tied to the floor (1-4x the floor)
    missed it for a small floor (a larger benchmark or n). True SDs below the floor are outside the model.
    """
    factors = mde_factors(design.alpha_final, design.power, design.max_seeds)
    low = max(floor, 0.5 * design.target / factors[design.stage1])
    high = max(low, 2.0 * design.target / factors[design.max_seeds])
    steps = math.ceil(math.log(high / low) / math.log(CALIBRATION_STEP) - 1e-9)
    return low * CALIBRATION_STEP ** np.arange(steps + 1)


@functools.lru_cache(maxsize=8)
def final_calibration(
    design: SequentialDesign, floor: float, *, n_sims: int = 100_000, seed: int = 20261127
) -> FinalCalibration:
    """Simulate the design for one comparison under the null at each true SD of :func:`calibration_sds`
    with the observed ``floor`` (fractions). Cached: a look calls it per comparison; one calibration simulates
    ``n_sims`` studies per SD, one to two million in all (seconds)."""
    sims = []
    for j, sd in enumerate(calibration_sds(design, floor)):
        res = simulate_design(
            design, sd=float(sd), floor=floor, n_comparisons=1, n_sims=n_sims, seed=seed + j
        )
        sims.append(np.sort(np.nan_to_num(res["p_naive"][:, 0], nan=np.inf)))
    return FinalCalibration(floor, tuple(sims))
