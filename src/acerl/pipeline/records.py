"""The result records the pipeline writes and the report reads: pydantic models, builders, writers, readers.

A ground-floor module (it imports only :mod:`acerl.errors`, :mod:`acerl.pipeline.io` and :mod:`acerl.passk`), so the
steps that write records (evaluate, diagnostics) and the report that reads them share one definition without
importing each other.

Pass@k metrics (one JSON file per run x benchmark, ``metrics/<benchmark>/<model>/<method>/seed<s>.json``)::

    {"benchmark": "math500", "model": "qwen25_math_7b", "method": "ace_grpo", "seed": 0,
     "n_samples": 32, "ks": [1, 2, 4, 8, 16, 32],
     "pass_at_k": {"1": 0.63, "2": 0.71, ...},          # fractions in [0, 1], mean over problems
     "num_problems": 500,
     "problems": [{"id": "test/algebra/1.json", "n": 32, "c": 20}, ...],
     "grader_timeouts": 0,                              # optional: samples still timed out after the retry
     "software": [{"packages": {"torch": ...}, "acerl": {"commit": ...}, ...}]}   # optional: what made it

``seed`` is an int, or null for an untrained base model. ``n_samples`` is the smallest per-problem ``n``.
``pass_at_k`` must equal Pass@k recomputed from ``problems`` (checked on load).

Diagnostics (one JSON file per training run, ``diagnostics/<model>/<method>/seed<s>.json``)::

    {"model": ..., "method": ..., "seed": 0,
     "records": [{"step": 25, "oef": 0.41, "overconf_magnitude": 0.12, "entropy": 0.55,
                  "n_incorrect": 812, "n_total": 2048}, ...],
     "entropy_early": [{"step": 0, "entropy": 0.71}, ...]}

``oef`` (overconfident-error fraction, paper Sec. 5.2) is null when ``n_incorrect == 0``;
``overconf_magnitude`` (mean ``c_i`` over errors with ``c_i > 0``) is null when there is no such error.

The formats are the pydantic models :class:`PassKRecord` and :class:`DiagnosticsRecord` (unknown keys are
rejected). Records are built with :func:`passk_record` / :func:`diagnostics_record` and kept as plain dicts (what
is written is exactly what was built); :func:`validate_passk_record` / :func:`validate_diagnostics_record` check
one against its model and raise :class:`ResultFormatError` with a one-line message naming the file, the row and
the key, e.g. ``metrics/x.json: problems[2]: key 'c': c=9 exceeds n=4``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from acerl.errors import BadInputError
from acerl.passk import mean_pass_at_k
from acerl.pipeline.io import write_json

__all__ = [
    "DiagnosticsRecord",
    "DiagnosticsRow",
    "EntropyPoint",
    "PassKProblem",
    "PassKRecord",
    "ResultFormatError",
    "diagnostics_record",
    "passk_record",
    "read_json",
    "validate_diagnostics_record",
    "validate_passk_record",
    "write_diagnostics_record",
    "write_passk_record",
]

PASSK_TOLERANCE = 1e-9
"""How far a stored Pass@k may be from the value recomputed from the problems' counts."""


class ResultFormatError(BadInputError):
    """A result file does not follow its format; the message names the file and the key."""


# ------------------------------------------------------------------------------------------ value types
def _invalid(msg: str, *at: str | int) -> PydanticCustomError:
    """A validation error with our message; ``at`` extends the error's location (for checks made by a model
    on its own fields, whose errors pydantic would otherwise place at the model itself)."""
    return PydanticCustomError("acerl_record", "{msg}", {"msg": msg, "at": at})


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
    )


def _name(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise _invalid(f"expected a non-empty string, got {v!r}")
    return v


def _integer(minimum: int = 0, *, nullable: bool = False) -> PlainValidator:
    def check(v: Any) -> int | None:
        if v is None and nullable:
            return None
        if not _is_int(v) or v < minimum:
            kind = "an integer" + (" or null" if nullable else "")
            raise _invalid(f"expected {kind} >= {minimum}, got {v!r}")
        return int(v)

    return PlainValidator(check)


def _number(lo: float, hi: float | None = None, *, nullable: bool = False, kind: str = "") -> PlainValidator:
    def check(v: Any) -> float | None:
        if v is None and nullable:
            return None
        if not _is_num(v) or v < lo or (hi is not None and v > hi):
            rng = f" in [{lo}, {hi}]" if hi is not None else f" >= {lo}"
            what = kind or "a finite number" + rng + (" or null" if nullable else "")
            raise _invalid(f"expected {what}, got {v!r}")
        return float(v)

    return PlainValidator(check)


def _budgets(v: Any) -> list[int]:
    if not isinstance(v, list) or not v or not all(_is_int(k) and k >= 1 for k in v) or len(set(v)) != len(v):
        raise _invalid(f"expected a non-empty list of distinct integers >= 1, got {v!r}")
    return [int(k) for k in v]


Name = Annotated[str, PlainValidator(_name)]
Count = Annotated[int, _integer(0)]
Seed = Annotated[int | None, _integer(0, nullable=True)]
Budgets = Annotated[list[int], PlainValidator(_budgets)]
Fraction = Annotated[float, _number(0.0, 1.0, kind="a fraction in [0, 1]")]
NullableFraction = Annotated[float | None, _number(0.0, 1.0, nullable=True)]
NonNegative = Annotated[float, _number(0.0)]
NullableNonNegative = Annotated[float | None, _number(0.0, nullable=True)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_unique(values: Sequence[Any], field: str, where: str, what: str) -> None:
    seen: set[Any] = set()
    for i, v in enumerate(values):
        if v in seen:
            raise _invalid(f"duplicate {what} {v!r}", where, i, field)
        seen.add(v)


# ------------------------------------------------------------------------------------------------ Pass@k
class PassKProblem(_Record):
    """One problem's counts: ``n`` samples, ``c`` of them correct."""

    id: Name
    n: Count
    c: Count

    @model_validator(mode="after")
    def _c_at_most_n(self) -> PassKProblem:
        if self.c > self.n:
            raise _invalid(f"c={self.c} exceeds n={self.n}", "c")
        return self


class PassKRecord(_Record):
    """Pass@k of one run on one benchmark (the module docstring shows the file)."""

    benchmark: Name
    model: Name
    method: Name
    seed: Seed
    n_samples: Annotated[int, _integer(1)]
    ks: Budgets
    pass_at_k: dict[str, Fraction]
    num_problems: Annotated[int, _integer(1)]
    problems: list[PassKProblem]
    # samples the grader could not decide (timeout after its retry), scored incorrect (absent in older files)
    grader_timeouts: Count | None = None
    # what made the samples, verdicts and this record (acerl.pipeline.provenance.software_stamp; absent in older files)
    software: list[dict[str, Any]] = []

    @model_validator(mode="after")
    def _consistent(self) -> PassKRecord:
        if max(self.ks) > self.n_samples:
            raise _invalid(f"largest k ({max(self.ks)}) exceeds n_samples ({self.n_samples})", "ks")
        if set(self.pass_at_k) != {str(k) for k in self.ks}:
            raise _invalid(f"keys {sorted(self.pass_at_k)} do not match ks {self.ks}", "pass_at_k")
        if len(self.problems) != self.num_problems:
            raise _invalid(
                f"{len(self.problems)} entries but num_problems is {self.num_problems}", "problems"
            )
        _check_unique([p.id for p in self.problems], "id", "problems", "problem id")
        for i, p in enumerate(self.problems):
            if p.n < self.n_samples:
                raise _invalid(
                    f"expected an integer >= {self.n_samples} (n_samples), got {p.n}", "problems", i, "n"
                )
        ns = np.array([p.n for p in self.problems])
        recomputed = mean_pass_at_k(ns, np.array([p.c for p in self.problems]), self.ks)
        for k in self.ks:
            stored = self.pass_at_k[str(k)]
            if abs(recomputed[k] - stored) > PASSK_TOLERANCE:
                msg = f"stored {stored!r} but the problems give {recomputed[k]!r} (stale file?)"
                raise _invalid(msg, "pass_at_k", str(k))
        return self


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
        The JSON-ready record (see the module docstring); Pass@k from :func:`acerl.passk.mean_pass_at_k`.
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


# -------------------------------------------------------------------------------------------- diagnostics
class DiagnosticsRow(_Record):
    """The diagnostics of one checkpoint (paper Sec. 5.2)."""

    step: Count
    oef: NullableFraction
    overconf_magnitude: NullableNonNegative
    entropy: NonNegative
    n_incorrect: Count
    n_total: Count

    @model_validator(mode="after")
    def _consistent(self) -> DiagnosticsRow:
        if self.n_incorrect > self.n_total:
            raise _invalid(f"{self.n_incorrect} exceeds n_total={self.n_total}", "n_incorrect")
        if self.oef is None and self.n_incorrect > 0:
            raise _invalid(f"null although n_incorrect={self.n_incorrect} > 0", "oef")
        if self.overconf_magnitude is None and self.oef is not None and self.oef > 0:
            raise _invalid(f"null although oef={self.oef} > 0", "overconf_magnitude")
        return self


class EntropyPoint(_Record):
    """Mean token entropy at one early training step (paper Fig. 4)."""

    step: Count
    entropy: NonNegative


class DiagnosticsRecord(_Record):
    """The diagnostics of one training run (the module docstring shows the file)."""

    model: Name
    method: Name
    seed: Seed
    records: list[DiagnosticsRow]
    entropy_early: list[EntropyPoint]

    @model_validator(mode="after")
    def _unique_steps(self) -> DiagnosticsRecord:
        _check_unique([r.step for r in self.records], "step", "records", "step")
        _check_unique([e.step for e in self.entropy_early], "step", "entropy_early", "step")
        return self


DIAGNOSTICS_ROW_KEYS: tuple[str, ...] = tuple(DiagnosticsRow.model_fields)
"""The keys of one diagnostics row, in file order."""


def _plain(v: Any) -> Any:
    """numpy scalars to Python ones, NaN to ``None`` (JSON has no NaN; a missing metric is null)."""
    if isinstance(v, (float, np.floating)) and math.isnan(v):
        return None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


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
    rec = {
        "model": str(model),
        "method": str(method),
        "seed": None if seed is None else int(seed),
        "records": [{k: _plain(r.get(k)) for k in DIAGNOSTICS_ROW_KEYS} for r in records],
        "entropy_early": [
            {"step": _plain(e.get("step")), "entropy": _plain(e.get("entropy"))} for e in entropy_early
        ],
    }
    validate_diagnostics_record(rec, "<diagnostics_record>")
    return rec


# ------------------------------------------------------------------------------------ validate, read, write
_MESSAGES = {"missing": "missing", "extra_forbidden": "unexpected key (a typo?)"}


def _one_line(err: ValidationError, source: str) -> str:
    """The first validation error as ``<source>: <row>: key '<key>': <message>``.

    The row is the location up to the last list index (``problems[2]``); the key is the rest (``c``, or
    ``pass_at_k.1`` in a mapping). A wrong type where an object was expected names the row alone.
    """
    first = err.errors(include_url=False)[0]
    ctx = first.get("ctx") or {}
    loc = (*first["loc"], *ctx.get("at", ()))
    msg = _MESSAGES.get(first["type"], ctx.get("msg", first["msg"]))
    if first["type"] in ("model_type", "dict_type", "list_type"):
        msg = f"expected {'a list' if first['type'] == 'list_type' else 'an object'}, got "
        msg += type(first["input"]).__name__
    cut = max((i + 1 for i, part in enumerate(loc) if isinstance(part, int)), default=0)
    row = "".join(
        f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(loc[:cut])
    )
    key = ".".join(map(str, loc[cut:])) or ("<root>" if not row else "")
    return ": ".join(part for part in (source, row, f"key '{key}'" if key else "", msg) if part)


def _validate(model: type[_Record], obj: Any, source: str) -> dict[str, Any]:
    try:
        model.model_validate(obj)
    except ValidationError as err:
        raise ResultFormatError(_one_line(err, source)) from None
    return dict(obj)


def validate_passk_record(obj: Any, source: str = "<record>") -> dict[str, Any]:
    """Check a Pass@k record against :class:`PassKRecord` (types, ranges, Pass@k recomputed from the problems);
    returns it unchanged. Raises :class:`ResultFormatError` naming ``source``, the row and the key."""
    return _validate(PassKRecord, obj, source)


def validate_diagnostics_record(obj: Any, source: str = "<record>") -> dict[str, Any]:
    """Check a diagnostics record against :class:`DiagnosticsRecord`; returns it unchanged. Raises
    :class:`ResultFormatError` naming ``source``, the row and the key."""
    return _validate(DiagnosticsRecord, obj, source)


def write_passk_record(record: Mapping[str, Any], path: str | Path) -> Path:
    """Validate and write a Pass@k record atomically."""
    validate_passk_record(record, str(path))
    return write_json(path, record)


def write_diagnostics_record(record: Mapping[str, Any], path: str | Path) -> Path:
    """Validate and write a diagnostics record atomically."""
    validate_diagnostics_record(record, str(path))
    return write_json(path, record)


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; errors name the file."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultFormatError(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise ResultFormatError(
            f"{path}: not valid JSON ({e}), a truncated or corrupt file: delete it and rerun the step that wrote "
            "it (with Snakemake, name the file as a target: deleting it alone does not rerun its job)"
        ) from None
