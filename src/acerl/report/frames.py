"""The result files as the report's DataFrames: Pass@k records in a long table, diagnostics in two tables.

The file formats, their validation and their builders are :mod:`acerl.pipeline.records`; every loader here validates
each record it reads (errors name the file, the row and the key) and rejects two files for the same run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from acerl.pipeline.records import (
    DIAGNOSTICS_ROW_KEYS,
    ResultFormatError,
    read_json,
    validate_diagnostics_record,
    validate_passk_record,
)

__all__ = [
    "RUN_COLUMNS",
    "DIAG_COLUMNS",
    "ENTROPY_COLUMNS",
    "Diagnostics",
    "passk_frame",
    "load_passk_records",
    "load_passk_problems",
    "diagnostics_frames",
    "load_diagnostics",
]

RUN_COLUMNS = ("benchmark", "model", "method", "seed", "k", "pass_at_k")
"""Columns of the per-run long Pass@k table (one row per run x benchmark x k); ``pass_at_k`` is a fraction."""

DIAG_COLUMNS = ("model", "method", "seed", *DIAGNOSTICS_ROW_KEYS)
ENTROPY_COLUMNS = ("model", "method", "seed", "step", "entropy")


# ------------------------------------------------------------------------------------------------- Pass@k
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
