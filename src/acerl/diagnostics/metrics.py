"""Pure diagnostic metrics of paper Sec. 5.2-5.3 (Experiment 1: overconfident errors; Experiment 2: entropy).

Inputs are per-rollout arrays of one diagnostic checkpoint; no model, no files.

- Overconfident error fraction (Sec. 5.2): ``OEF(t) = |{y_i in Y^- : c_i > 0}| / |Y^-|`` over the incorrect
  rollouts ``Y^-``, with ``c_i`` the error confidence score of Def. 1 (length-normalised, as ACE uses it).
- Mean overconfidence magnitude (Sec. 5.2): ``E[c_i | c_i > 0, r_i = 0]``.
- Token-level entropy (Sec. 5.3): ``H(t) = -1/|D| sum_x 1/T sum_j sum_v pi(v|x,y_<j) log pi(v|x,y_<j)`` with ``T``
  the average response length, i.e. the full-vocabulary entropy averaged over every response token of every
  rollout (a token-weighted mean of per-rollout means, :func:`token_weighted_mean`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["overconfidence_stats", "pad_token_values", "token_weighted_mean"]


def _as_1d(x: Tensor | np.ndarray | Sequence[float], name: str, dtype: type | np.dtype) -> np.ndarray:
    arr = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (B,), got shape {arr.shape}")
    return arr.astype(dtype)


def overconfidence_stats(
    c: Tensor | np.ndarray | Sequence[float], incorrect: Tensor | np.ndarray | Sequence[bool]
) -> tuple[float | None, float | None]:
    """OEF and mean overconfidence magnitude of one checkpoint (paper Sec. 5.2, Experiment 1).

    Args:
        c: (B,) confidence scores ``c_i`` of all rollouts (only incorrect ones are used).
        incorrect: (B,) bool, ``r_i = 0`` (wrong, unparseable or timed-out answers).

    Returns:
        ``(oef, magnitude)``: ``oef = #{incorrect, c > 0} / #incorrect`` (``None`` without incorrect rollouts);
        ``magnitude = mean(c | c > 0, incorrect)`` (``None`` without overconfident errors). ``c == 0`` exactly
        is not overconfident (the paper's strict ``c_i > 0``).
    """
    c_arr = _as_1d(c, "c", np.float64)
    wrong = _as_1d(incorrect, "incorrect", bool)
    if c_arr.shape != wrong.shape:
        raise ValueError(f"c has shape {c_arr.shape} but incorrect has shape {wrong.shape}")
    if np.isnan(c_arr[wrong]).any():
        raise ValueError("c is NaN for an incorrect rollout")
    n_wrong = int(wrong.sum())
    if n_wrong == 0:
        return None, None
    over = wrong & (c_arr > 0)
    n_over = int(over.sum())
    oef = n_over / n_wrong
    return oef, (float(c_arr[over].mean()) if n_over else None)


def token_weighted_mean(means: Sequence[float] | np.ndarray, lengths: Sequence[int] | np.ndarray) -> float:
    """``sum_i means_i * lengths_i / sum_i lengths_i``: the mean over all tokens, from per-sequence means.

    Used for ``H(t)`` (paper Sec. 5.3): per-rollout mean token entropies weighted by rollout length give the
    entropy averaged over every response token. Zero-length sequences (NaN mean) are skipped.

    Raises:
        ValueError: mismatched lengths, negative lengths, or no tokens at all.
    """
    m = np.asarray(means, dtype=np.float64)
    n = np.asarray(lengths, dtype=np.int64)
    if m.shape != n.shape or m.ndim != 1:
        raise ValueError(f"means {m.shape} and lengths {n.shape} must be matching 1-D arrays")
    if (n < 0).any():
        raise ValueError("lengths must be non-negative")
    keep = n > 0
    if not keep.any():
        raise ValueError("no tokens: every sequence is empty")
    if np.isnan(m[keep]).any():
        raise ValueError("NaN mean for a non-empty sequence")
    return float((m[keep] * n[keep]).sum() / n[keep].sum())


def pad_token_values(values: Sequence[Sequence[float]]) -> tuple[Tensor, Tensor]:
    """Right-pad ragged per-token values into ``(B, T)`` float64 and a ``(B, T)`` 0/1 response mask.

    ``T`` is the longest sequence (at least 1); padding is 0. The layout :func:`acerl.algos.advantages.
    confidence_scores` takes.
    """
    b = len(values)
    t = max(1, max((len(v) for v in values), default=1))
    out = torch.zeros((b, t), dtype=torch.float64)
    mask = torch.zeros((b, t), dtype=torch.long)
    for i, v in enumerate(values):
        if len(v):
            out[i, : len(v)] = torch.as_tensor(list(v), dtype=torch.float64)
            mask[i, : len(v)] = 1
    return out, mask
