"""Result records (acerl.pipeline.records): builders, pydantic validation with one-line errors naming file, row and key;
the report's DataFrame loaders (acerl.report.frames) on top."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from acerl.passk import pass_at_k
from acerl.pipeline.records import (
    ResultFormatError,
    diagnostics_record,
    passk_record,
    validate_passk_record,
    write_diagnostics_record,
    write_passk_record,
)
from acerl.report.frames import (
    DIAG_COLUMNS,
    RUN_COLUMNS,
    load_diagnostics,
    load_passk_problems,
    load_passk_records,
)


def _record(seed=0, method="ace_grpo", c=(0, 2, 4, 1)):
    ids = [f"p{i}" for i in range(len(c))]
    return passk_record("math500", "qwen25_math_7b", method, seed, ids, 4, np.array(c), [4, 1, 2])


def test_passk_record_shape_and_values():
    rec = _record()
    assert rec["ks"] == [1, 2, 4]
    assert set(rec["pass_at_k"]) == {"1", "2", "4"}
    assert rec["n_samples"] == 4 and rec["num_problems"] == 4
    assert rec["problems"][1] == {"id": "p1", "n": 4, "c": 2}
    want = np.mean([pass_at_k(4, c, 2) for c in (0, 2, 4, 1)])
    assert rec["pass_at_k"]["2"] == pytest.approx(want)
    assert json.loads(json.dumps(rec)) == rec  # plain JSON types only


def test_passk_record_rejects_bad_inputs():
    with pytest.raises(ValueError, match="3 problem ids but 4 counts"):
        passk_record("b", "m", "x", 0, ["a", "b", "c"], 4, [0, 1, 2, 3], [1])
    with pytest.raises(ValueError, match="duplicate problem ids"):
        passk_record("b", "m", "x", 0, ["a", "a"], 4, [0, 1], [1])
    with pytest.raises(ValueError, match="exceeds"):
        passk_record("b", "m", "x", 0, ["a", "b"], 4, [0, 1], [8])


def test_round_trip_to_long_dataframe(tmp_path):
    paths = [
        write_passk_record(_record(seed=0), tmp_path / "s0.json"),
        write_passk_record(_record(seed=1, c=(4, 4, 4, 4)), tmp_path / "s1.json"),
        write_passk_record(_record(seed=None, method="base"), tmp_path / "base.json"),
    ]
    df = load_passk_records(paths)
    assert list(df.columns[:6]) == list(RUN_COLUMNS)
    assert len(df) == 9
    assert str(df["seed"].dtype) == "Int64"
    assert df.loc[df["method"] == "base", "seed"].isna().all()
    s1 = df[(df["seed"] == 1)]
    assert s1["pass_at_k"].tolist() == [1.0, 1.0, 1.0]
    probs = load_passk_problems(paths)
    assert list(probs.columns) == ["benchmark", "model", "method", "seed", "id", "n", "c"]
    assert len(probs) == 12 and probs["c"].sum() == 7 + 16 + 7
    assert not list(tmp_path.glob(".*tmp*"))  # atomic writes leave no temp files


def _write_raw(path, obj):
    path.write_text(json.dumps(obj))
    return path


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda r: r.pop("benchmark"), "'benchmark': missing"),
        (lambda r: r.update(seed="0"), "'seed': expected an integer or null"),
        (lambda r: r.update(seed=True), "'seed'"),
        (lambda r: r["pass_at_k"].update({"1": 1.5}), "'pass_at_k.1': expected a fraction"),
        (lambda r: r["pass_at_k"].update({"2": 0.1}), "'pass_at_k.2': stored 0.1 but the problems give"),
        (lambda r: r["pass_at_k"].pop("4"), "'pass_at_k': keys"),
        (lambda r: r.update(ks=[1, 2, 8]), "'ks': largest k"),
        (lambda r: r.update(num_problems=5), "'problems': 4 entries but num_problems is 5"),
        (lambda r: r["problems"][2].update(c=9), "problems\\[2\\]: key 'c': c=9 exceeds n=4"),
        (lambda r: r["problems"][3].update(id="p0"), "problems\\[3\\]: key 'id': duplicate"),
        (lambda r: r["problems"][0].update(n=2), "problems\\[0\\]: key 'n'"),
    ],
)
def test_validation_errors_name_file_and_key(tmp_path, mutate, key):
    rec = _record()
    mutate(rec)
    path = _write_raw(tmp_path / "bad.json", rec)
    with pytest.raises(ResultFormatError, match=f"bad.json.*{key}"):
        load_passk_records([path])


def test_invalid_json_and_duplicates_are_reported(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    with pytest.raises(ResultFormatError, match="broken.json: not valid JSON"):
        load_passk_records([bad])
    with pytest.raises(ResultFormatError, match="missing.json: file not found"):
        load_passk_records([tmp_path / "missing.json"])
    a = write_passk_record(_record(), tmp_path / "a.json")
    b = write_passk_record(_record(), tmp_path / "b.json")
    with pytest.raises(ResultFormatError, match="b.json: duplicates run .* already read from .*a.json"):
        load_passk_records([a, b])


def test_write_refuses_an_invalid_record(tmp_path):
    rec = _record()
    rec["pass_at_k"]["1"] = 0.99
    with pytest.raises(ResultFormatError, match="out.json"):
        write_passk_record(rec, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()
    assert validate_passk_record(_record()) == _record()


def _diag(seed=0, **over):
    rows = [
        {"step": 0, "oef": 0.2, "overconf_magnitude": 0.1, "entropy": 0.7, "n_incorrect": 10, "n_total": 32},
        {
            "step": 25,
            "oef": float("nan"),
            "overconf_magnitude": None,
            "entropy": 0.5,
            "n_incorrect": 0,
            "n_total": 32,
        },
        {"step": 50, "oef": 0.0, "overconf_magnitude": None, "entropy": 0.4, "n_incorrect": 5, "n_total": 32},
    ]
    rows[0].update(over)
    return diagnostics_record("qwen25_math_7b", "grpo", seed, rows, [{"step": 0, "entropy": 0.7}])


def test_diagnostics_round_trip(tmp_path):
    rec = _diag()
    assert rec["records"][1]["oef"] is None  # NaN becomes null
    p0 = write_diagnostics_record(rec, tmp_path / "d0.json")
    p1 = write_diagnostics_record(_diag(seed=1), tmp_path / "d1.json")
    d = load_diagnostics([p0, p1])
    assert list(d.records.columns) == list(DIAG_COLUMNS)
    assert len(d.records) == 6 and len(d.entropy_early) == 2
    assert math.isnan(d.records.loc[d.records["step"] == 25, "oef"].iloc[0])
    assert d.records["oef"].dtype == np.float64
    assert isinstance(d.entropy_early, pd.DataFrame) and d.entropy_early["entropy"].tolist() == [0.7, 0.7]


@pytest.mark.parametrize(
    ("over", "msg"),
    [
        ({"oef": None}, "records\\[0\\]: key 'oef': null although n_incorrect=10"),
        ({"oef": 1.2}, "records\\[0\\]: key 'oef'"),
        ({"overconf_magnitude": None}, "key 'overconf_magnitude': null although oef=0.2"),
        ({"n_incorrect": 40}, "key 'n_incorrect': 40 exceeds n_total=32"),
        ({"step": 25}, "records\\[1\\]: key 'step': duplicate step 25"),
        ({"entropy": -1.0}, "key 'entropy'"),
    ],
)
def test_diagnostics_validation_errors(over, msg):
    with pytest.raises(ResultFormatError, match=msg):
        _diag(**over)


@pytest.mark.parametrize(
    ("mutate", "msg"),
    [
        (lambda r: r.update(benchmak="math500"), "bad.json: key 'benchmak': unexpected key"),
        (lambda r: r["problems"][1].update(nn=3), "bad.json: problems\\[1\\]: key 'nn': unexpected key"),
        (
            lambda r: r["problems"].__setitem__(1, [3]),
            "bad.json: problems\\[1\\]: expected an object, got list",
        ),
        (lambda r: r.update(problems={}), "bad.json: key 'problems': expected a list, got dict"),
        (lambda r: r.update(ks=[1, 1]), "bad.json: key 'ks': expected a non-empty list of distinct"),
        (lambda r: r["pass_at_k"].update({"1": float("inf")}), "key 'pass_at_k.1': expected a fraction"),
    ],
)
def test_record_errors_are_one_line_with_row_and_key(tmp_path, mutate, msg):
    rec = _record()
    mutate(rec)
    with pytest.raises(ResultFormatError, match=msg) as err:
        validate_passk_record(rec, str(tmp_path / "bad.json"))
    assert "\n" not in str(err.value)


def test_root_must_be_an_object(tmp_path):
    path = _write_raw(tmp_path / "list.json", [1, 2])
    with pytest.raises(ResultFormatError, match="list.json: key '<root>': expected an object, got list"):
        load_passk_records([path])
    with pytest.raises(ResultFormatError, match="diagnostics_record.*entropy_early\\[0\\]: key 'step'"):
        diagnostics_record("m", "grpo", 0, [], [{"step": -1, "entropy": 0.5}])
