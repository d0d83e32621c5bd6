"""Pass@k: the unbiased estimator of Chen et al. (2021), as in the paper's Sec. 5.1 ("Metrics").

For one problem with ``n`` samples of which ``c`` are correct, the probability that at least one of ``k``
samples drawn without replacement is correct is

    Pass@k = 1 - C(n - c, k) / C(n, k)

(the paper's equation, before the expectation over problems). It is computed in the numerically stable
product form used by human-eval, limit-of-RLVR and lighteval::

    1 - prod_{i = n-c+1}^{n} (1 - k / i)        (= 1 exactly when n - c < k)

which never forms a binomial coefficient, so it stays exact for large ``n``. The benchmark score is the mean
over problems (:func:`mean_pass_at_k`). ``n`` must be at least the largest ``k`` reported.

The one estimator of the project (a ground-floor module, numpy only): the evaluate step, the result records
(:mod:`acerl.pipeline.records`), the power analysis and the report all import it from here.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import numpy as np

__all__ = ["pass_at_k", "pass_at_k_array", "mean_pass_at_k"]


def _as_int(value: object, name: str) -> int:
    try:  # int and numpy integers; floats (even 3.0) are rejected
        return operator.index(value)  # type: ignore[arg-type]  # any object: the check itself
    except TypeError:
        raise TypeError(f"pass@k: {name} must be an integer, got {type(value).__name__} {value!r}") from None


def _check(n: int, c: int, k: int) -> None:
    if n < 0 or c < 0 or k < 0:
        raise ValueError(f"pass@k: n, c and k must be non-negative, got n={n}, c={c}, k={k}")
    if k < 1:
        raise ValueError(f"pass@k: k must be at least 1, got k={k}")
    if c > n:
        raise ValueError(f"pass@k: more correct samples than samples (c={c} > n={n})")
    if k > n:
        raise ValueError(
            f"pass@k: k={k} exceeds the number of samples n={n}; sample at least k completions per problem"
        )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k for one problem (Chen et al. 2021; paper Sec. 5.1): ``1 - C(n-c, k) / C(n, k)``.

    Args:
        n: samples drawn for the problem (``n >= k``).
        c: samples graded correct (``0 <= c <= n``).
        k: budget (``k >= 1``).

    Returns:
        A probability in [0, 1]; exactly 1.0 when ``n - c < k`` (every k-subset holds a correct sample).

    Raises:
        ValueError: negative arguments, ``k < 1``, ``c > n`` or ``k > n``.
    """
    n, c, k = _as_int(n, "n"), _as_int(c, "c"), _as_int(k, "k")
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k_array(n: np.ndarray | int, c: np.ndarray, k: int) -> np.ndarray:
    """Per-problem Pass@k, vectorised over problems.

    Args:
        n: samples per problem, an int (same for every problem) or an integer array ``(P,)``.
        c: correct samples per problem, integer array ``(P,)``.
        k: budget, ``1 <= k <= min(n)``.

    Returns:
        ``(P,)`` float64 array of :func:`pass_at_k` values (identical to calling it problem by problem:
        each distinct ``(n, c)`` pair is evaluated once with the same product form).

    Raises:
        ValueError: shape mismatch, or any problem violating :func:`pass_at_k`'s conditions (the message names
        the first offending problem index).
    """
    k = _as_int(k, "k")
    c_arr = np.asarray(c)
    if c_arr.ndim != 1:
        raise ValueError(f"pass@k: c must be a 1-D array over problems, got shape {c_arr.shape}")
    n_arr = np.broadcast_to(np.asarray(n), c_arr.shape) if np.ndim(n) == 0 else np.asarray(n)
    if n_arr.shape != c_arr.shape:
        raise ValueError(f"pass@k: n has shape {n_arr.shape} but c has shape {c_arr.shape}")
    for name, arr in (("n", n_arr), ("c", c_arr)):
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"pass@k: {name} must hold integers, got dtype {arr.dtype}")
    if c_arr.size == 0:
        return np.zeros(0, dtype=np.float64)
    bad = np.flatnonzero((n_arr < 0) | (c_arr < 0) | (c_arr > n_arr) | (k > n_arr) | (k < 1))
    if bad.size:
        i = int(bad[0])
        try:
            _check(int(n_arr[i]), int(c_arr[i]), k)
        except ValueError as e:
            raise ValueError(f"problem index {i}: {e}") from None
    pairs, inverse = np.unique(np.stack([n_arr, c_arr], axis=1).astype(np.int64), axis=0, return_inverse=True)
    values = np.array([pass_at_k(int(nn), int(cc), k) for nn, cc in pairs], dtype=np.float64)
    return values[np.asarray(inverse).reshape(-1)]


def mean_pass_at_k(n: np.ndarray | int, c: np.ndarray, ks: Iterable[int]) -> dict[int, float]:
    """Benchmark Pass@k: the mean over problems of :func:`pass_at_k_array`, for every ``k`` in ``ks``.

    Args:
        n: samples per problem, int or ``(P,)``.
        c: correct samples per problem, ``(P,)`` with ``P >= 1``.
        ks: budgets, each ``<= min(n)``.

    Returns:
        ``{k: mean Pass@k}`` (fractions in [0, 1]), in the order of ``ks``.
    """
    if np.asarray(c).size == 0:
        raise ValueError("pass@k: no problems (c is empty); a mean over zero problems is undefined")
    return {int(k): float(pass_at_k_array(n, c, k).mean()) for k in ks}
