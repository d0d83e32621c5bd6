"""Statistics for the report: confidence intervals across seeds and over problems, and significance tests.

- :func:`mean_ci` — mean and 95% confidence half-width across independent training runs (seeds), Student t with
  ``n - 1`` degrees of freedom: ``t_{0.975, n-1} * s / sqrt(n)`` with the sample standard deviation ``s``
  (``ddof=1``). This is what the paper's Table 1 reports ("mean +- 95% confidence interval over 5 independent
  training runs"). With one seed the half-width is ``nan`` (undefined, rendered without a +-).
- :func:`bootstrap_ci` — percentile bootstrap over problems (resample problems with replacement), for the
  test-set uncertainty of one run (the paper's Table 2 caption: on AIME's 30 problems this dominates).
- :func:`welch_test`, :func:`paired_test`, :func:`compare_seeds` — two-sided tests of method A against baseline
  B across seeds. Welch's unequal-variance t-test is always computed; the paired t-test only when both methods
  were run with the same set of seeds (seed ``s`` of A and of B share data order and evaluation samples, so
  their difference removes that shared noise). The report's test is the paired one wherever the runs are
  paired by seed (:meth:`Comparison.p_primary`), Welch's only where they are not.
- :func:`holm` — Holm's step-down adjustment of a family of p-values (the report corrects each table with it).
- :func:`welch_from_summary` — Welch's test from means, CI half-widths and seed counts (for published numbers
  where the per-seed values are not available).
- :func:`sign_flip_test` — the paired permutation test (signs of the per-seed differences flipped), which needs
  no normality: exact enumeration up to :data:`EXACT_SIGN_FLIPS` seeds, Monte Carlo beyond.
- :func:`tost_paired` — two one-sided tests of equivalence within a margin, on per-seed differences.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

__all__ = [
    "MeanCI",
    "TTestResult",
    "Comparison",
    "mean_ci",
    "t_half_width",
    "half_width",
    "CI_KINDS",
    "bootstrap_ci",
    "welch_test",
    "paired_test",
    "compare_seeds",
    "welch_from_summary",
    "holm",
    "EXACT_SIGN_FLIPS",
    "SignFlip",
    "sign_flip_test",
    "tost_paired",
]


@dataclass(frozen=True)
class MeanCI:
    """Mean of ``n`` values with its t-based confidence half-width (``nan`` when ``n < 2``)."""

    mean: float
    half_width: float
    std: float
    n: int
    level: float = 0.95

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width


@dataclass(frozen=True)
class TTestResult:
    """A two-sided t-test: statistic, p-value and degrees of freedom (``nan`` when undefined)."""

    statistic: float
    pvalue: float
    df: float


@dataclass(frozen=True)
class Comparison:
    """Method A vs baseline B across seeds. ``p_paired`` is ``None`` unless both used the same seeds."""

    mean_a: float
    mean_b: float
    n_a: int
    n_b: int
    p_welch: float
    p_paired: float | None

    @property
    def delta(self) -> float:
        """``mean_a - mean_b``."""
        return self.mean_a - self.mean_b

    @property
    def p_primary(self) -> float:
        """The p-value of the study's test: paired where the seeds match, Welch's where they do not."""
        return self.p_welch if self.p_paired is None else self.p_paired


_NAN_TEST = TTestResult(math.nan, math.nan, math.nan)


def _as_1d(values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D sequence of values, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{what}: no values")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: values must be finite, got {arr.tolist()}")
    return arr


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")


def t_half_width(std: float, n: int, level: float = 0.95) -> float:
    """Half-width ``t_{(1+level)/2, n-1} * std / sqrt(n)`` of a Student-t CI (``nan`` when ``n < 2``)."""
    _check_level(level)
    if n < 2:
        return math.nan
    return float(sps.t.ppf(0.5 + level / 2.0, df=n - 1) * std / math.sqrt(n))


CI_KINDS = ("t", "normal")
"""Seed CIs: ``t`` (Student t, n - 1 degrees of freedom; the default) or ``normal`` (z = 1.96 at 95%, what a
paper reporting ``1.96 s / sqrt(n)`` would print; 1.42x narrower than t for 5 seeds)."""


def half_width(std: float, n: int, level: float = 0.95, kind: str = "t") -> float:
    """CI half-width across ``n`` seeds: :func:`t_half_width` (``kind="t"``) or ``z_{(1+level)/2} * std /
    sqrt(n)`` (``kind="normal"``); ``nan`` when ``n < 2``."""
    if kind == "t":
        return t_half_width(std, n, level)
    if kind != "normal":
        raise ValueError(f"CI kind must be one of {', '.join(CI_KINDS)}; got {kind!r}")
    _check_level(level)
    return float(sps.norm.ppf(0.5 + level / 2.0) * std / math.sqrt(n)) if n >= 2 else math.nan


def mean_ci(values: Sequence[float] | np.ndarray, level: float = 0.95, kind: str = "t") -> MeanCI:
    """Mean across seeds with a Student-t (default) or normal confidence interval.

    Args:
        values: ``(S,)`` one value per seed (e.g. Pass@k of each training run).
        level: confidence level (default 0.95).
        kind: ``"t"`` or ``"normal"`` (:data:`CI_KINDS`).

    Returns:
        :class:`MeanCI` with ``half_width = t_{(1+level)/2, S-1} * s / sqrt(S)`` (``z`` instead of ``t`` for
        ``"normal"``), ``s`` the sample std (``ddof=1``). With one seed ``std`` and ``half_width`` are ``nan``: a
        CI from one run is undefined.
    """
    arr = _as_1d(values, "mean_ci")
    n = int(arr.size)
    std = float(arr.std(ddof=1)) if n >= 2 else math.nan
    return MeanCI(float(arr.mean()), half_width(std, n, level, kind), std, n, level)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_boot: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
    statistic: Callable[[np.ndarray], np.ndarray] | None = None,
    chunk: int = 1000,
) -> tuple[float, float]:
    """Percentile bootstrap CI of a statistic over problems (resampled with replacement).

    Args:
        values: ``(P,)`` one value per problem (e.g. per-problem Pass@k from :func:`pass_at_k_array`).
        n_boot: bootstrap replicates.
        level: confidence level; the interval is the ``(1-level)/2`` and ``(1+level)/2`` percentiles.
        seed: seed of the ``numpy.random.Generator`` (same seed, same interval).
        statistic: maps a ``(B, P)`` array of resampled values to ``(B,)``; default the row mean.
        chunk: replicates drawn at a time (bounds memory to ``chunk * P`` floats).

    Returns:
        ``(low, high)``. With one problem both equal that value.
    """
    _check_level(level)
    if n_boot < 1:
        raise ValueError(f"bootstrap_ci: n_boot must be >= 1, got {n_boot}")
    arr = _as_1d(values, "bootstrap_ci")
    stat = statistic if statistic is not None else (lambda x: x.mean(axis=1))
    rng = np.random.default_rng(seed)
    reps = np.empty(n_boot, dtype=np.float64)
    for start in range(0, n_boot, chunk):
        size = min(chunk, n_boot - start)
        idx = rng.integers(0, arr.size, size=(size, arr.size))
        reps[start : start + size] = stat(arr[idx])
    low, high = np.percentile(reps, [50.0 * (1.0 - level), 50.0 * (1.0 + level)])
    return float(low), float(high)


def welch_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TTestResult:
    """Two-sided Welch t-test (unequal variances) of mean(a) vs mean(b).

    ``a: (S_a,)``, ``b: (S_b,)`` per-seed values. Returns ``nan`` fields when either side has fewer than two
    values, or both have zero variance (the test is undefined there).
    """
    x, y = _as_1d(a, "welch_test a"), _as_1d(b, "welch_test b")
    if x.size < 2 or y.size < 2:
        return _NAN_TEST
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    if vx + vy == 0.0:
        return _NAN_TEST
    res = sps.ttest_ind(x, y, equal_var=False)
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    return TTestResult(float(res.statistic), float(res.pvalue), float(df))


def paired_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TTestResult:
    """Two-sided paired t-test on ``a[i] - b[i]`` (``a, b: (S,)``, element ``i`` of both from seed ``i``).

    Returns ``nan`` fields when ``S < 2`` or all differences are equal (zero variance).
    """
    x, y = _as_1d(a, "paired_test a"), _as_1d(b, "paired_test b")
    if x.shape != y.shape:
        raise ValueError(f"paired_test: a has {x.size} values but b has {y.size}; pairs need equal lengths")
    d = x - y
    if d.size < 2 or np.all(d == d[0]):
        return _NAN_TEST
    res = sps.ttest_rel(x, y)
    return TTestResult(float(res.statistic), float(res.pvalue), float(d.size - 1))


def compare_seeds(a: Mapping[int, float], b: Mapping[int, float]) -> Comparison:
    """Method A vs baseline B, each given as ``{seed: value}``.

    Welch's test always; the paired test only when ``set(a) == set(b)`` (matched seeds), pairing by seed.
    """
    if not a or not b:
        raise ValueError(f"compare_seeds: need values for both methods, got {len(a)} and {len(b)} seeds")
    xa = np.array([a[s] for s in sorted(a)], dtype=np.float64)
    xb = np.array([b[s] for s in sorted(b)], dtype=np.float64)
    p_paired = paired_test(xa, xb).pvalue if set(a) == set(b) else None
    return Comparison(
        mean_a=float(xa.mean()),
        mean_b=float(xb.mean()),
        n_a=int(xa.size),
        n_b=int(xb.size),
        p_welch=welch_test(xa, xb).pvalue,
        p_paired=p_paired,
    )


def welch_from_summary(
    mean_a: float,
    half_width_a: float,
    n_a: int,
    mean_b: float,
    half_width_b: float,
    n_b: int,
    level: float = 0.95,
) -> TTestResult:
    """Welch's test from summary statistics: each CI half-width is turned back into a sample std
    (``s = hw * sqrt(n) / t_{(1+level)/2, n-1}``, the inverse of :func:`mean_ci`). ``nan`` if undefined."""
    _check_level(level)
    values = (mean_a, half_width_a, mean_b, half_width_b)
    if n_a < 2 or n_b < 2 or not all(math.isfinite(float(v)) for v in values):
        return _NAN_TEST
    q = 0.5 + level / 2.0
    sa = half_width_a * math.sqrt(n_a) / sps.t.ppf(q, df=n_a - 1)
    sb = half_width_b * math.sqrt(n_b) / sps.t.ppf(q, df=n_b - 1)
    va, vb = sa**2 / n_a, sb**2 / n_b
    if va + vb == 0.0:
        return _NAN_TEST
    res = sps.ttest_ind_from_stats(mean_a, sa, n_a, mean_b, sb, n_b, equal_var=False)
    df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    return TTestResult(float(res.statistic), float(res.pvalue), float(df))


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values of one family (controls the family-wise error rate at any
    dependence). ``nan`` entries are not tests: they stay ``nan`` and do not count in the family's size."""
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"holm: expected a 1-D sequence of p-values, got shape {p.shape}")
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    if idx.size == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    m = order.size
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adjusted, 1.0)
    return out


EXACT_SIGN_FLIPS = 16
"""Up to this many seeds :func:`sign_flip_test` enumerates all ``2^S`` sign patterns; beyond, Monte Carlo."""


SIGN_FLIP_TIES = 1e-9
""":func:`sign_flip_test`'s tie tolerance, a fraction of ``sum(|d|)``: a sign pattern whose ``|sum|`` is within
``SIGN_FLIP_TIES * sum(|d|)`` of the observed one ties with it. Float residue of a signed sum scales with the
data's magnitude (not with the observed sum, which may be 0); real differences between sums are far larger."""


@dataclass(frozen=True)
class SignFlip:
    """A sign-flip permutation p-value and how it was found (``exact``: all patterns; else ``draws`` random)."""

    pvalue: float
    exact: bool
    draws: int

    @property
    def method(self) -> str:
        return "exact" if self.exact else f"Monte Carlo, {self.draws} draws"


def sign_flip_test(d: Sequence[float] | np.ndarray, *, draws: int = 100_000, seed: int = 0) -> SignFlip:
    """Two-sided paired permutation test of ``mean(d) = 0`` (``d: (S,)`` per-seed differences).

    Under the null each ``d_s`` is symmetric about 0, so its sign is exchangeable: the p-value is the share
    of sign patterns whose ``|sum|`` is at least the observed one, ties within float residue included
    (:data:`SIGN_FLIP_TIES`: an observed sum of exactly 0 gives p = 1 whatever the rounding). Exact (all ``2^S``
    patterns, the observed one included) for ``S <= EXACT_SIGN_FLIPS``; otherwise ``(1 + hits) / (1 + draws)``
    over ``draws`` random patterns (seeded: the same p every time). ``nan`` for fewer than 2 values.
    """
    x = _as_1d(d, "sign_flip_test")
    if x.size < 2:
        return SignFlip(math.nan, True, 0)
    # ties count as extreme; their tolerance scales with the data, since the observed sum may be exactly 0
    observed = abs(float(x.sum())) - SIGN_FLIP_TIES * float(np.abs(x).sum())
    if x.size <= EXACT_SIGN_FLIPS:
        bits = (np.arange(2**x.size)[:, None] >> np.arange(x.size)) & 1
        sums = np.abs((1 - 2 * bits) @ x)
        return SignFlip(float(np.mean(sums >= observed)), True, int(sums.size))
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, draws, 10_000):
        signs = rng.choice(np.array([-1.0, 1.0]), size=(min(10_000, draws - start), x.size))
        hits += int(np.sum(np.abs(signs @ x) >= observed))
    return SignFlip((1 + hits) / (1 + draws), False, draws)


def tost_paired(d: Sequence[float] | np.ndarray, margin: float) -> tuple[float, float]:
    """Two one-sided paired t-tests of equivalence within ``(-margin, +margin)`` on ``d: (S,)``.

    Returns ``(p_lower, p_upper)``: the one-sided p of ``mean <= -margin`` and of ``mean >= +margin``; the TOST
    p-value is their maximum (equivalence at level alpha where it is below alpha). ``nan`` for fewer than 2 values
    or zero spread.
    """
    x = _as_1d(d, "tost_paired")
    if not margin > 0.0:
        raise ValueError(f"tost_paired: the margin must be positive, got {margin}")
    if x.size < 2 or float(x.std(ddof=1)) == 0.0:
        return math.nan, math.nan
    se, df = float(x.std(ddof=1)) / math.sqrt(x.size), x.size - 1
    return float(sps.t.sf((x.mean() + margin) / se, df)), float(sps.t.cdf((x.mean() - margin) / se, df))
