"""The result files the pipeline writes and the report reads: builders, validators, loaders.

Pass@k metrics (one JSON file per run x benchmark, ``metrics/<benchmark>/<model>/<method>/seed<s>.json``)::

    {"benchmark": "math500", "model": "qwen25_math_7b", "method": "ace_grpo", "seed": 0,
     "n_samples": 32, "ks": [1, 2, 4, 8, 16, 32],
     "pass_at_k": {"1": 0.63, "2": 0.71, ...},          # fractions in [0, 1], mean over problems
     "num_problems": 500,
     "problems": [{"id": "test/algebra/1.json", "n": 32, "c": 20}, ...]}

``seed`` is an int, or null for an untrained base model. ``n_samples`` is the smallest per-problem ``n``.
``pass_at_k`` must equal Pass@k recomputed from ``problems`` (checked on load).

Diagnostics (one JSON file per training run, ``diagnostics/<model>/<method>/seed<s>.json``)::

    {"model": ..., "method": ..., "seed": 0,
     "records": [{"step": 25, "oef": 0.41, "overconf_magnitude": 0.12, "entropy": 0.55,
                  "n_incorrect": 812, "n_total": 2048}, ...],
     "entropy_early": [{"step": 0, "entropy": 0.71}, ...]}

``oef`` (overconfident-error fraction, paper Sec. 5.2) is null when ``n_incorrect == 0``;
``overconf_magnitude`` (mean ``c_i`` over errors with ``c_i > 0``) is null when there is no such error.

Both are built with :func:`passk_record` / :func:`diagnostics_record` by the pipeline steps, so writer and
reader share one definition; loaders raise :class:`ResultFormatError` naming the file and the key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from acerl.errors import BadInputError
from acerl.evaluate.passk import mean_pass_at_k
from acerl.io import write_json

__all__ = [
    "ResultFormatError",
    "RUN_COLUMNS",
    "DIAG_COLUMNS",
    "ENTROPY_COLUMNS",
    "Diagnostics",
    "passk_record",
    "validate_passk_record",
    "write_passk_record",
    "read_json",
    "passk_frame",
    "load_passk_records",
    "load_passk_problems",
    "diagnostics_record",
    "validate_diagnostics_record",
    "write_diagnostics_record",
    "diagnostics_frames",
    "load_diagnostics",
]

RUN_COLUMNS = ("benchmark", "model", "method", "seed", "k", "pass_at_k")
"""Columns of the per-run long Pass@k table (one row per run x benchmark x k); ``pass_at_k`` is a fraction."""

DIAG_COLUMNS = (
    "model",
    "method",
    "seed",
    "step",
    "oef",
    "overconf_magnitude",
    "entropy",
    "n_incorrect",
    "n_total",
)
ENTROPY_COLUMNS = ("model", "method", "seed", "step", "entropy")

_PASSK_TOLERANCE = 1e-9


class ResultFormatError(BadInputError):
    """A result file does not follow its format; the message names the file and the key."""


@dataclass(frozen=True)
class _Where:
    source: str

    def error(self, key: str, msg: str) -> ResultFormatError:
        return ResultFormatError(f"{self.source}: key '{key}': {msg}")


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
    )


def _get(obj: Mapping[str, Any], key: str, where: _Where) -> Any:
    if key not in obj:
        raise where.error(key, "missing")
    return obj[key]


def _get_str(obj: Mapping[str, Any], key: str, where: _Where) -> str:
    v = _get(obj, key, where)
    if not isinstance(v, str) or not v:
        raise where.error(key, f"expected a non-empty string, got {v!r}")
    return v


def _get_int(
    obj: Mapping[str, Any], key: str, where: _Where, *, minimum: int = 0, nullable: bool = False
) -> Any:
    v = _get(obj, key, where)
    if v is None and nullable:
        return None
    if not _is_int(v) or v < minimum:
        kind = "an integer" + (" or null" if nullable else "")
        raise where.error(key, f"expected {kind} >= {minimum}, got {v!r}")
    return int(v)


def _get_num(
    obj: Mapping[str, Any],
    key: str,
    where: _Where,
    *,
    lo: float | None = None,
    hi: float | None = None,
    nullable: bool = False,
) -> float | None:
    v = _get(obj, key, where)
    if v is None and nullable:
        return None
    if not _is_num(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = (
            f" in [{lo}, {hi}]"
            if lo is not None and hi is not None
            else (f" >= {lo}" if lo is not None else "")
        )
        kind = "a finite number" + rng + (" or null" if nullable else "")
        raise where.error(key, f"expected {kind}, got {v!r}")
    return float(v)


def _get_list(obj: Mapping[str, Any], key: str, where: _Where) -> list[Any]:
    v = _get(obj, key, where)
    if not isinstance(v, list):
        raise where.error(key, f"expected a list, got {type(v).__name__}")
    return v


def _get_map(obj: Any, key: str, where: _Where) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise where.error(key, f"expected an object, got {type(obj).__name__}")
    return obj


# ------------------------------------------------------------------------------------------------- Pass@k
def passk_record(
    benchmark: str,
    model: str,
    method: str,
    seed: int | None,
    problem_ids: Sequence[str],
    n: int | Sequence[int] | np.ndarray,
    c: Sequence[int] | np.ndarray,
    ks: Sequence[int],
) -> dict[str, Any]:
    """Build the Pass@k metrics record of one run on one benchmark.

    Args:
        benchmark, model, method: keys (e.g. ``"math500"``, ``"qwen25_math_7b"``, ``"ace_grpo"``).
        seed: training seed, or ``None`` for an untrained base model.
        problem_ids: ``(P,)`` problem ids.
        n: samples per problem, an int or ``(P,)``.
        c: correct samples per problem, ``(P,)``.
        ks: budgets (each ``<= min(n)``).

    Returns:
        The JSON-ready record (see the module docstring); Pass@k from :func:`acerl.evaluate.passk.mean_pass_at_k`.
    """
    c_arr = np.asarray(c, dtype=np.int64)
    n_arr = np.broadcast_to(np.asarray(n, dtype=np.int64), c_arr.shape)
    if len(problem_ids) != c_arr.size:
        raise ValueError(f"passk_record: {len(problem_ids)} problem ids but {c_arr.size} counts")
    if len(set(problem_ids)) != len(problem_ids):
        raise ValueError("passk_record: duplicate problem ids")
    ks_sorted = sorted({int(k) for k in ks})
    record: dict[str, Any] = {
        "benchmark": str(benchmark),
        "model": str(model),
        "method": str(method),
        "seed": None if seed is None else int(seed),
        "n_samples": int(n_arr.min()) if n_arr.size else 0,
        "ks": ks_sorted,
        "pass_at_k": {str(k): v for k, v in mean_pass_at_k(n_arr, c_arr, ks_sorted).items()},
        "num_problems": int(c_arr.size),
        "problems": [
            {"id": str(pid), "n": int(nn), "c": int(cc)}
            for pid, nn, cc in zip(problem_ids, n_arr, c_arr, strict=True)
        ],
    }
    validate_passk_record(record, "<passk_record>")
    return record


def validate_passk_record(obj: Any, source: str = "<record>") -> dict[str, Any]:
    """Check a Pass@k record (types, ranges, consistency with its problems); returns it unchanged.

    Raises:
        ResultFormatError: naming ``source`` and the offending key.
    """
    w = _Where(source)
    obj = _get_map(obj, "<root>", w)
    for key in ("benchmark", "model", "method"):
        _get_str(obj, key, w)
    _get_int(obj, "seed", w, nullable=True)
    n_samples = _get_int(obj, "n_samples", w, minimum=1)
    ks = _get_list(obj, "ks", w)
    if not ks or not all(_is_int(k) and k >= 1 for k in ks) or len(set(ks)) != len(ks):
        raise w.error("ks", f"expected a non-empty list of distinct integers >= 1, got {ks!r}")
    if max(ks) > n_samples:
        raise w.error("ks", f"largest k ({max(ks)}) exceeds n_samples ({n_samples})")
    pk = _get_map(_get(obj, "pass_at_k", w), "pass_at_k", w)
    if set(pk) != {str(k) for k in ks}:
        raise w.error("pass_at_k", f"keys {sorted(pk)} do not match ks {ks}")
    for k, v in pk.items():
        if not _is_num(v) or not 0.0 <= v <= 1.0:
            raise w.error(f"pass_at_k.{k}", f"expected a fraction in [0, 1], got {v!r}")
    num = _get_int(obj, "num_problems", w, minimum=1)
    problems = _get_list(obj, "problems", w)
    if len(problems) != num:
        raise w.error("problems", f"{len(problems)} entries but num_problems is {num}")
    ns, cs, ids = [], [], set()
    for i, p in enumerate(problems):
        pw = _Where(f"{source}: problems[{i}]")
        p = _get_map(p, f"problems[{i}]", w)
        pid = _get_str(p, "id", pw)
        if pid in ids:
            raise pw.error("id", f"duplicate problem id {pid!r}")
        ids.add(pid)
        nn = _get_int(p, "n", pw, minimum=n_samples)
        cc = _get_int(p, "c", pw)
        if cc > nn:
            raise pw.error("c", f"c={cc} exceeds n={nn}")
        ns.append(nn)
        cs.append(cc)
    recomputed = mean_pass_at_k(np.asarray(ns), np.asarray(cs), ks)
    for k in ks:
        if abs(recomputed[k] - float(pk[str(k)])) > _PASSK_TOLERANCE:
            raise w.error(
                f"pass_at_k.{k}",
                f"stored {pk[str(k)]!r} but the problems give {recomputed[k]!r} (stale file?)",
            )
    return dict(obj)


def write_passk_record(record: Mapping[str, Any], path: str | Path) -> Path:
    """Validate and write a Pass@k record atomically."""
    validate_passk_record(record, str(path))
    return write_json(path, record)


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; errors name the file."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultFormatError(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise ResultFormatError(f"{path}: not valid JSON ({e})") from None


def passk_frame(records: Iterable[tuple[Mapping[str, Any], str]]) -> pd.DataFrame:
    """Long Pass@k table from validated ``(record, source)`` pairs.

    Returns:
        DataFrame with :data:`RUN_COLUMNS` plus ``n_samples`` and ``num_problems``; one row per record x k;
        ``seed`` is a nullable ``Int64`` (``<NA>`` for base models).

    Raises:
        ResultFormatError: two records for the same (benchmark, model, method, seed), naming both sources.
    """
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[Any, ...], str] = {}
    for rec, source in records:
        rec = validate_passk_record(rec, source)
        key = (rec["benchmark"], rec["model"], rec["method"], rec["seed"])
        if key in seen:
            raise ResultFormatError(f"{source}: duplicates run {key} already read from {seen[key]}")
        seen[key] = source
        for k in rec["ks"]:
            rows.append(
                {
                    "benchmark": rec["benchmark"],
                    "model": rec["model"],
                    "method": rec["method"],
                    "seed": rec["seed"],
                    "k": int(k),
                    "pass_at_k": float(rec["pass_at_k"][str(k)]),
                    "n_samples": rec["n_samples"],
                    "num_problems": rec["num_problems"],
                }
            )
    df = pd.DataFrame(rows, columns=[*RUN_COLUMNS, "n_samples", "num_problems"])
    df["seed"] = df["seed"].astype("Int64")
    return df.astype({"k": "int64", "pass_at_k": "float64", "n_samples": "int64", "num_problems": "int64"})


def load_passk_records(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Read Pass@k metrics files into the long table of :func:`passk_frame` (benchmark, model, method, seed,
    k, pass_at_k, ...)."""
    return passk_frame((read_json(p), str(p)) for p in paths)


def load_passk_problems(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Per-problem counts of Pass@k files: columns benchmark, model, method, seed, id, n, c (for bootstraps)."""
    frames = []
    for p in paths:
        rec = validate_passk_record(read_json(p), str(p))
        f = pd.DataFrame(rec["problems"], columns=["id", "n", "c"])
        for key in ("benchmark", "model", "method", "seed"):
            f[key] = rec[key]
        frames.append(f)
    cols = ["benchmark", "model", "method", "seed", "id", "n", "c"]
    if not frames:
        return pd.DataFrame(columns=cols)
    df = pd.concat(frames, ignore_index=True)[cols]
    df["seed"] = df["seed"].astype("Int64")
    return df


# -------------------------------------------------------------------------------------------- diagnostics
class Diagnostics(NamedTuple):
    """Diagnostics of many runs: ``records`` (:data:`DIAG_COLUMNS`), ``entropy_early`` (:data:`ENTROPY_COLUMNS`)."""

    records: pd.DataFrame
    entropy_early: pd.DataFrame


def diagnostics_record(
    model: str,
    method: str,
    seed: int | None,
    records: Sequence[Mapping[str, Any]],
    entropy_early: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Build the diagnostics record of one training run (see the module docstring); validates it.

    Args:
        records: per diagnostic checkpoint ``{"step", "oef", "overconf_magnitude", "entropy", "n_incorrect",
            "n_total"}`` (``oef``/``overconf_magnitude`` may be ``None``; NaN is turned into ``None``).
        entropy_early: ``{"step", "entropy"}`` over the first training steps (paper Fig. 4).
    """

    def clean(v: Any) -> Any:
        if isinstance(v, (float, np.floating)) and math.isnan(v):
            return None
        if isinstance(v, np.integer):
            return int(v)
        if isinstance(v, np.floating):
            return float(v)
        return v

    rec = {
        "model": str(model),
        "method": str(method),
        "seed": None if seed is None else int(seed),
        "records": [{k: clean(r.get(k)) for k in DIAG_COLUMNS[3:]} for r in records],
        "entropy_early": [
            {"step": clean(e.get("step")), "entropy": clean(e.get("entropy"))} for e in entropy_early
        ],
    }
    validate_diagnostics_record(rec, "<diagnostics_record>")
    return rec


def validate_diagnostics_record(obj: Any, source: str = "<record>") -> dict[str, Any]:
    """Check a diagnostics record; returns it unchanged. Raises :class:`ResultFormatError` naming the key."""
    w = _Where(source)
    obj = _get_map(obj, "<root>", w)
    for key in ("model", "method"):
        _get_str(obj, key, w)
    _get_int(obj, "seed", w, nullable=True)
    steps: set[int] = set()
    for i, r in enumerate(_get_list(obj, "records", w)):
        rw = _Where(f"{source}: records[{i}]")
        r = _get_map(r, f"records[{i}]", w)
        step = _get_int(r, "step", rw)
        if step in steps:
            raise rw.error("step", f"duplicate step {step}")
        steps.add(step)
        n_inc = _get_int(r, "n_incorrect", rw)
        n_tot = _get_int(r, "n_total", rw)
        if n_inc > n_tot:
            raise rw.error("n_incorrect", f"{n_inc} exceeds n_total={n_tot}")
        oef = _get_num(r, "oef", rw, lo=0.0, hi=1.0, nullable=True)
        if oef is None and n_inc > 0:
            raise rw.error("oef", f"null although n_incorrect={n_inc} > 0")
        mag = _get_num(r, "overconf_magnitude", rw, lo=0.0, nullable=True)
        if mag is None and oef is not None and oef > 0:
            raise rw.error("overconf_magnitude", f"null although oef={oef} > 0")
        _get_num(r, "entropy", rw, lo=0.0)
    early: set[int] = set()
    for i, e in enumerate(_get_list(obj, "entropy_early", w)):
        ew = _Where(f"{source}: entropy_early[{i}]")
        e = _get_map(e, f"entropy_early[{i}]", w)
        step = _get_int(e, "step", ew)
        if step in early:
            raise ew.error("step", f"duplicate step {step}")
        early.add(step)
        _get_num(e, "entropy", ew, lo=0.0)
    return dict(obj)


def write_diagnostics_record(record: Mapping[str, Any], path: str | Path) -> Path:
    """Validate and write a diagnostics record atomically."""
    validate_diagnostics_record(record, str(path))
    return write_json(path, record)


def diagnostics_frames(records: Iterable[tuple[Mapping[str, Any], str]]) -> Diagnostics:
    """DataFrames of validated ``(diagnostics record, source)`` pairs (null metrics become NaN)."""
    rows: list[dict[str, Any]] = []
    early: list[dict[str, Any]] = []
    seen: dict[tuple[Any, ...], str] = {}
    for rec, source in records:
        rec = validate_diagnostics_record(rec, source)
        key = (rec["model"], rec["method"], rec["seed"])
        if key in seen:
            raise ResultFormatError(f"{source}: duplicates run {key} already read from {seen[key]}")
        seen[key] = source
        ident = {"model": rec["model"], "method": rec["method"], "seed": rec["seed"]}
        rows.extend({**ident, **r} for r in rec["records"])
        early.extend({**ident, **e} for e in rec["entropy_early"])
    rec_df = pd.DataFrame(rows, columns=list(DIAG_COLUMNS))
    rec_df = rec_df.astype({"oef": "float64", "overconf_magnitude": "float64", "entropy": "float64"})
    ent_df = pd.DataFrame(early, columns=list(ENTROPY_COLUMNS)).astype({"entropy": "float64"})
    for df in (rec_df, ent_df):
        df["seed"] = df["seed"].astype("Int64")
        df["step"] = df["step"].astype("int64")
    return Diagnostics(rec_df, ent_df)


def load_diagnostics(paths: Iterable[str | Path]) -> Diagnostics:
    """Read diagnostics files into :class:`Diagnostics` DataFrames."""
    return diagnostics_frames((read_json(p), str(p)) for p in paths)
