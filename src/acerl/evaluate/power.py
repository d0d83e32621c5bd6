"""Power of an ACE-vs-baseline comparison: where Pass@k's variance comes from, and what effect a design can see.

The design: method A (ACE) and its baseline B share the base model, the training seeds (data order, rollout
seeds) and the evaluation sampling seeds, and are evaluated on the same ``P`` problems with ``n`` samples each.
Seed ``s`` of A and seed ``s`` of B form a pair. With per-problem Pass@k ``x[m, s, i]`` the per-seed difference
is ``d_s = mean_i (x[A, s, i] - x[B, s, i])`` and the observed effect ``D = mean_s d_s``.

- **Test** (:func:`paired_effect`): the paired t-test on the ``S`` per-seed differences (``S - 1`` degrees of
  freedom) -- exact for normal ``d_s``, which are means over problems. It treats the benchmark's problems as
  fixed, like the paper's "mean +- 95% CI over independent training runs"; its variance ``Var(d_s)`` holds the
  training noise and the evaluation sampling noise (which ``n`` samples were drawn).
- **Seeds and problems both random** (:func:`seeds_problems_ci`): the interval that also covers the choice of
  problems -- what a new problem set from the same distribution would show. Seeds and problems are crossed (the
  same problems for every seed and both methods), so ``Var(mean d) = s2_seed / S + s2_problem / P +
  s2_residual / (S P)``, estimated without bias by ``(MS_seed + MS_problem - MS_error) / (S P)`` from the
  two-way ANOVA, with Satterthwaite's degrees of freedom for the t quantile. (Resampling seeds and problems
  independently -- the "pigeonhole" bootstrap -- counts the residual about three times: its intervals were
  1.5x too wide with 99.5% coverage in simulation.) Shown beside the t interval, not used for the test.
- **Minimal detectable effect** (:func:`mde_paired`): the smallest true difference the paired t-test detects
  with probability ``power`` at two-sided level ``alpha``, from the noncentral t distribution with
  noncentrality ``delta * sqrt(S) / sd``.
- **Variance components** (:func:`comparison_components`, :func:`method_components`): ``Var(d_s)`` split into
  a seed effect (the whole policy better or worse), a seed x problem effect (training noise that averages out
  over problems) and evaluation sampling noise; :func:`predicted_sd` then gives ``sd(d_s)`` of another design
  (seeds, problems, ``n``) and :func:`mde_paired` its MDE.
- **Sampling noise** (:func:`sampling_variance`): the variance of the unbiased Pass@k estimator of one problem,
  ``Var(x_hat | p) = sum_c Binom(c; n, p) x(c)^2 - (1 - (1-p)^k)^2``, averaged over the problem's success
  probability ``p`` given its observed ``c`` correct of ``n`` under a Beta prior fitted to all problems of the
  run (:func:`fit_beta_prior`; method of moments). The plug-in ``p = c / n`` would call a problem with
  ``c = 0`` noiseless, which at ``k = n`` is the problem whose estimate is most uncertain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import special as spf
from scipy import stats as sps

from acerl.evaluate.stats import mean_ci, paired_test
from acerl.passk import pass_at_k_array

__all__ = [
    "BetaPrior",
    "PairedEffect",
    "Components",
    "MethodComponents",
    "fit_beta_prior",
    "fit_beta_to_passk",
    "beta_passk",
    "sampling_variance",
    "beta_sampling_variance",
    "power_paired",
    "mde_paired",
    "seeds_for_mde",
    "per_problem_floor_sd",
    "paired_effect",
    "seeds_problems_ci",
    "comparison_components",
    "method_components",
    "predicted_sd",
]

_MIN_SPREAD = 1e-6


# ------------------------------------------------------------------------------------- problem difficulty
@dataclass(frozen=True)
class BetaPrior:
    """Per-problem success probability ``p ~ Beta(a, b)`` across a benchmark's problems."""

    a: float
    b: float

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)


def fit_beta_prior(c: np.ndarray, n: int) -> BetaPrior:
    """Beta prior of the success probability across problems from counts ``c: (P,)`` of ``n`` samples each.

    Method of moments on ``c / n``: ``Var(c/n) = Var(p) (1 - 1/n) + E[p (1 - p)] / n``. A run where every
    problem has the same fraction correct gets a prior concentrated at its mean (variance floor ``1e-6 m (1-m)``).
    """
    frac = np.asarray(c, dtype=np.float64) / n
    if frac.ndim != 1 or frac.size == 0:
        raise ValueError(f"fit_beta_prior: expected counts of shape (P,), got {frac.shape}")
    m = float(np.clip(frac.mean(), 0.5 / (n * frac.size), 1.0 - 0.5 / (n * frac.size)))
    spread = m * (1.0 - m)
    var_p = (frac.var(ddof=1) if frac.size > 1 else 0.0) - spread / n
    var_p = float(np.clip(var_p / (1.0 - 1.0 / n) if n > 1 else var_p, _MIN_SPREAD * spread, 0.99 * spread))
    total = spread / var_p - 1.0
    return BetaPrior(m * total, (1.0 - m) * total)


def _beta_moment(a: np.ndarray | float, b: np.ndarray | float, j: int | np.ndarray) -> np.ndarray:
    """``E[(1 - p)^j]`` for ``p ~ Beta(a, b)``."""
    return np.exp(spf.betaln(a, np.asarray(b) + j) - spf.betaln(a, b))


def beta_passk(prior: BetaPrior, k: int) -> float:
    """Expected Pass@k over problems with ``p ~ prior``: ``1 - E[(1-p)^k]``."""
    return float(1.0 - _beta_moment(prior.a, prior.b, k))


def fit_beta_to_passk(ks: np.ndarray, passk: np.ndarray) -> BetaPrior:
    """The Beta difficulty prior whose Pass@k curve (:func:`beta_passk`) fits ``passk`` at ``ks`` (least
    squares in log a, log b). For published or summary numbers without per-problem counts."""
    ks, passk = np.asarray(ks, dtype=np.int64), np.asarray(passk, dtype=np.float64)
    if ks.shape != passk.shape or ks.size < 2:
        raise ValueError(f"fit_beta_to_passk: need >= 2 matching ks and values, got {ks} and {passk}")

    def resid(theta: np.ndarray) -> np.ndarray:
        a, b = np.exp(theta)
        return 1.0 - _beta_moment(a, b, ks) - passk

    sol = optimize.least_squares(resid, x0=np.log([0.5, 2.0]), bounds=(np.log(1e-3), np.log(1e4)))
    a, b = np.exp(sol.x)
    return BetaPrior(float(a), float(b))


def _x_table(n: int, k: int) -> np.ndarray:
    """Pass@k of a problem with ``c = 0..n`` correct of ``n``: ``(n + 1,)``."""
    return pass_at_k_array(n, np.arange(n + 1), k)


def _posterior_sampling_variance(a: np.ndarray, b: np.ndarray, n_eval: int, k: int) -> np.ndarray:
    """``E[Var(x_hat_{n_eval} | p)]`` for ``p ~ Beta(a, b)`` elementwise (``a, b`` arrays of one shape)."""
    x2 = _x_table(n_eval, k) ** 2
    c = np.arange(n_eval + 1)
    pmf = sps.betabinom.pmf(c, n_eval, a[..., None], b[..., None])  # (..., n_eval + 1)
    second = pmf @ x2
    true_sq = 1.0 - 2.0 * _beta_moment(a, b, k) + _beta_moment(a, b, 2 * k)  # E[(1 - (1-p)^k)^2]
    return np.clip(second - true_sq, 0.0, None)


def sampling_variance(c: np.ndarray, n: int, k: int, *, n_eval: int | None = None) -> np.ndarray:
    """Evaluation-sampling variance of each problem's Pass@k estimate, from one run's counts.

    Args:
        c: ``(P,)`` correct samples per problem (of ``n``).
        n: samples per problem of the observed run.
        k: budget.
        n_eval: samples per problem of the design asked about (default ``n``): how noisy the estimate of the
            same policy would be with ``n_eval`` samples.

    Returns:
        ``(P,)``: ``E[Var(x_hat | p) | c]`` with ``p | c ~ Beta(a + c, b + n - c)``, ``Beta(a, b)`` fitted over
        the run's problems (:func:`fit_beta_prior`).
    """
    c = np.asarray(c, dtype=np.int64)
    n_eval = n if n_eval is None else int(n_eval)
    if k > n_eval:
        raise ValueError(f"sampling_variance: k={k} exceeds n_eval={n_eval}")
    prior = fit_beta_prior(c, n)
    return _posterior_sampling_variance(prior.a + c, prior.b + n - c, n_eval, k)


def beta_sampling_variance(prior: BetaPrior, n: int, k: int) -> float:
    """Mean over problems (``p ~ prior``) of the sampling variance of one problem's Pass@k with ``n``
    samples: the per-problem evaluation noise of a benchmark known only by its Pass@k curve."""
    return float(_posterior_sampling_variance(np.array(prior.a), np.array(prior.b), n, k))


# ------------------------------------------------------------------------------------------- paired t-test
def power_paired(effect: float, sd: float, n_seeds: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test (``S = n_seeds`` pairs, ``S - 1`` df) at true mean difference
    ``effect`` when the per-seed differences have standard deviation ``sd``."""
    if n_seeds < 2 or not sd > 0.0:
        return math.nan
    df = n_seeds - 1
    crit = sps.t.ppf(1.0 - alpha / 2.0, df)
    nc = abs(effect) * math.sqrt(n_seeds) / sd  # the power is symmetric in the sign of the effect
    wrong_side = float(sps.nct.cdf(-crit, df, nc))  # negligible; scipy returns nan for some large nc
    return float(sps.nct.sf(crit, df, nc)) + (wrong_side if math.isfinite(wrong_side) else 0.0)


def mde_paired(sd: float, n_seeds: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimal detectable effect of the paired t-test: the ``delta > 0`` with ``power_paired(delta) = power``.

    ``nan`` when ``n_seeds < 2`` (no test) or ``sd`` is not finite; 0 when ``sd == 0``.
    """
    if not 0.0 < alpha < 1.0 or not alpha < power < 1.0:
        raise ValueError(f"mde_paired: need 0 < alpha < power < 1, got alpha={alpha}, power={power}")
    if n_seeds < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0.0:
        return 0.0
    hi = sd
    while power_paired(hi, sd, n_seeds, alpha) < power:
        hi *= 2.0
    return float(optimize.brentq(lambda e: power_paired(e, sd, n_seeds, alpha) - power, 0.0, hi, xtol=1e-12))


def seeds_for_mde(
    sd: float, target: float, *, alpha: float = 0.05, power: float = 0.8, max_seeds: int = 1000
) -> int:
    """The fewest seeds (at least 2) whose paired-t MDE at ``sd(d_s) = sd`` is at most ``target``;
    ``max_seeds + 1`` when even ``max_seeds`` do not reach it (the design cannot resolve ``target``)."""
    if not target > 0.0 or not math.isfinite(sd):
        raise ValueError(f"seeds_for_mde: need a positive target and a finite sd, got {target} and {sd}")
    for n in range(2, max_seeds + 1):
        if mde_paired(sd, n, alpha, power) <= target:
            return n
    return max_seeds + 1


@dataclass(frozen=True)
class PairedEffect:
    """A vs B paired by seed: mean difference ``delta`` with its t interval, p-value, sd of ``d_s``, MDE."""

    delta: float
    ci_low: float
    ci_high: float
    pvalue: float
    sd: float
    mde: float
    n_seeds: int


def paired_effect(d: np.ndarray, *, alpha: float = 0.05, power: float = 0.8) -> PairedEffect:
    """The paired test on per-seed differences ``d: (S,)`` (``mean_i x_A - mean_i x_B`` of each seed).

    The ``1 - alpha`` t interval, the two-sided p-value (:func:`acerl.evaluate.stats.paired_test`) and the MDE
    at the observed ``sd(d)``. With one seed only ``delta`` is defined (the rest is ``nan``).
    """
    d = np.asarray(d, dtype=np.float64)
    ci = mean_ci(d, level=1.0 - alpha)
    p = paired_test(d, np.zeros_like(d)).pvalue if d.size >= 2 else math.nan
    return PairedEffect(
        delta=ci.mean,
        ci_low=ci.low,
        ci_high=ci.high,
        pvalue=p,
        sd=ci.std,
        mde=mde_paired(ci.std, ci.n, alpha, power),
        n_seeds=ci.n,
    )


# ------------------------------------------------------------------------------------- variance components
def seeds_problems_ci(d: np.ndarray, *, level: float = 0.95) -> tuple[float, float]:
    """Interval of ``mean(d)`` with seeds and problems both random (crossed two-way random-effects model).

    ``Var(mean d)`` is estimated by ``(MS_seed + MS_problem - MS_error) / (S P)`` (unbiased), floored at
    ``max(MS_seed, MS_problem) / (S P)`` (each alone estimates less than the whole); the t quantile uses
    Satterthwaite's degrees of freedom, or those of the flooring mean square where the floor applies. In
    simulation (S = 5, P = 100) it covered 94.6-97.5% with 1.3x the width of the known-variance interval
    (the 4 seed df cost that; the crossed bootstrap: 99.5%, 1.5-1.6x).

    Args:
        d: ``(S, P)`` per-seed, per-problem differences ``x_A - x_B`` (seed ``s`` of both methods in row ``s``).
        level: confidence level.

    Returns:
        ``(low, high)``; ``(nan, nan)`` with one seed (the seed variance is unknown: an interval over problems
        alone would read as one over both); with one problem the t interval over the seeds.
    """
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 2 or 0 in d.shape:
        raise ValueError(f"seeds_problems_ci: expected a (seeds, problems) array, got {d.shape}")
    n_s, n_p = d.shape
    if n_s == 1:
        return math.nan, math.nan
    if n_p == 1:
        ci = mean_ci(d.ravel(), level=level)
        return ci.low, ci.high
    ms_s, ms_p, ms_e = _anova(d)
    combined = ms_s + ms_p - ms_e
    if combined >= max(ms_s, ms_p):
        den = ms_s**2 / (n_s - 1) + ms_p**2 / (n_p - 1) + ms_e**2 / ((n_s - 1) * (n_p - 1))
        var, df = combined / (n_s * n_p), combined**2 / den if den > 0 else math.inf
    elif ms_s >= ms_p:
        var, df = ms_s / (n_s * n_p), float(n_s - 1)
    else:
        var, df = ms_p / (n_s * n_p), float(n_p - 1)
    half = float(sps.t.ppf(0.5 + level / 2.0, df)) * math.sqrt(var)
    mean = float(d.mean())
    return mean - half, mean + half


@dataclass(frozen=True)
class Components:
    """Variance components of the per-seed difference ``d_s`` of a comparison (Pass@k fractions squared).

    ``Var(d_s) = seed + (seed_problem + sampling) / P``; ``problem`` (the spread of the per-problem mean
    difference) only matters when the problem set is itself resampled. ``total`` is the observed ``Var(d_s)``.
    """

    total: float
    seed: float
    seed_problem: float
    sampling: float
    problem: float
    n_seeds: int
    n_problems: int


def _anova(d: np.ndarray) -> tuple[float, float, float]:
    """Two-way (seeds x problems, one value per cell) mean squares ``(MS_seed, MS_problem, MS_error)``."""
    n_s, n_p = d.shape
    row, col, grand = d.mean(axis=1, keepdims=True), d.mean(axis=0, keepdims=True), d.mean()
    ms_s = n_p * float(((row - grand) ** 2).sum()) / (n_s - 1) if n_s > 1 else math.nan
    ms_p = n_s * float(((col - grand) ** 2).sum()) / (n_p - 1) if n_p > 1 else math.nan
    dof = (n_s - 1) * (n_p - 1)
    ms_e = float(((d - row - col + grand) ** 2).sum()) / dof if dof > 0 else math.nan
    return ms_s, ms_p, ms_e


def per_problem_floor_sd(d: np.ndarray) -> float:
    """``sqrt(MS_error / P)`` of ``d: (S, P)``: the part of ``sd(d_s)`` that training x problem and sampling
    noise alone give (``nan`` with one seed). ``Var(d_s)`` is not below it in expectation *under the assumption*
    of the additive random-effects model (a seed effect of variance >= 0, i.e. the problems' errors of one seed
    not negatively correlated); it is a floor of the model, not a bound the data guarantee."""
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] < 2 or d.shape[1] < 2:
        return math.nan
    return math.sqrt(_anova(d)[2] / d.shape[1])


def comparison_components(d: np.ndarray, v: np.ndarray) -> Components:
    """Split the variance of the per-seed difference into its sources.

    Args:
        d: ``(S, P)`` per-problem differences ``x_A - x_B``.
        v: ``(S, P)`` their sampling variances ``v_A + v_B`` (:func:`sampling_variance` of each run; the two
            methods' sampling noise is taken as independent; with common evaluation seeds it is an upper bound
            and the training terms lower bounds *if* the coupling correlates the two methods' sampling noise
            positively, an assumption the coupling makes likely but no formula guarantees).

    Returns:
        :class:`Components`: ``sampling = mean(v)``; ``seed_problem = max(MS_error - sampling, 0)``;
        ``seed = max(Var(d_s) - MS_error / P, 0)``; ``problem = max((MS_problem - MS_error) / S, 0)``
        (two-way random-effects ANOVA; ``nan`` where one seed makes a term undefined).
    """
    d, v = np.asarray(d, dtype=np.float64), np.asarray(v, dtype=np.float64)
    if d.ndim != 2 or d.shape != v.shape:
        raise ValueError(
            f"comparison_components: d {d.shape} and v {v.shape} must be equal (seeds, problems)"
        )
    n_s, n_p = d.shape
    ms_s, ms_p, ms_e = _anova(d)
    sampling = float(v.mean())
    if n_s < 2 or n_p < 2:  # one seed (or problem): the split is undefined
        return Components(math.nan, math.nan, math.nan, sampling, math.nan, n_s, n_p)
    total = ms_s / n_p
    return Components(
        total=total,
        seed=max(total - ms_e / n_p, 0.0),
        seed_problem=max(ms_e - sampling, 0.0),
        sampling=sampling,
        problem=max((ms_p - ms_e) / n_s, 0.0),
        n_seeds=n_s,
        n_problems=n_p,
    )


def predicted_sd(c: Components, *, n_problems: int, sampling: float | None = None) -> float:
    """``sd(d_s)`` of a design with ``n_problems`` problems and per-problem sampling variance ``sampling``
    (default the observed one; :func:`sampling_variance` with ``n_eval`` gives another ``n``'s)."""
    samp = c.sampling if sampling is None else sampling
    return math.sqrt(c.seed + (c.seed_problem + samp) / n_problems)


@dataclass(frozen=True)
class MethodComponents:
    """Standard deviations (Pass@k fraction) of one method's per-seed score: ``between_seeds`` observed,
    ``sampling`` (evaluation noise of one run's mean), ``training`` = the rest, ``problems`` (the standard
    error over problems of one run's mean, ``sd_i(x) / sqrt(P)``, averaged over seeds: the analytic formula,
    not a bootstrap; shared by every run on the same problems)."""

    between_seeds: float
    sampling: float
    training: float
    problems: float
    n_seeds: int
    n_problems: int


def method_components(x: np.ndarray, v: np.ndarray) -> MethodComponents:
    """Decompose one method's per-seed Pass@k: ``x, v: (S, P)`` per-problem values and sampling variances."""
    x, v = np.asarray(x, dtype=np.float64), np.asarray(v, dtype=np.float64)
    if x.ndim != 2 or x.shape != v.shape:
        raise ValueError(f"method_components: x {x.shape} and v {v.shape} must be equal (seeds, problems)")
    n_s, n_p = x.shape
    between = float(x.mean(axis=1).var(ddof=1)) if n_s > 1 else math.nan
    samp = float(v.sum(axis=1).mean()) / n_p**2
    probs = float(x.var(axis=1, ddof=1).mean()) / n_p if n_p > 1 else math.nan
    training = math.sqrt(max(between - samp, 0.0)) if n_s > 1 else math.nan
    return MethodComponents(
        math.sqrt(between) if n_s > 1 else math.nan, math.sqrt(samp), training, math.sqrt(probs), n_s, n_p
    )
