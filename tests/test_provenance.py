"""Software stamps (:mod:`acerl.pipeline.provenance`): what made an artifact, recorded without changing any run spec."""

from __future__ import annotations

import json
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from acerl.pipeline.provenance import (
    DECIDING_PACKAGES,
    record_launch,
    software_differences,
    software_section,
    software_stamp,
    stamps_in,
)

REPO = Path(__file__).resolve().parents[1]


def _other(**versions: str) -> dict:
    stamp = software_stamp()
    stamp["packages"].update(versions)
    return stamp


def test_stamp_records_installed_versions_and_the_commit() -> None:
    stamp = software_stamp()
    assert set(stamp["packages"]) == {*DECIDING_PACKAGES, "acerl"}
    assert stamp["packages"]["torch"] == metadata.version("torch")
    assert stamp["packages"]["transformers"] == metadata.version("transformers")
    assert stamp["packages"]["math-verify"] == metadata.version("math-verify")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert stamp["acerl"]["commit"] == head.stdout.strip()
    assert isinstance(stamp["acerl"]["dirty"], bool)
    software_stamp()["packages"]["torch"] = "x"  # a copy: the cached stamp is not changed
    assert software_stamp() == stamp


def test_only_deciding_packages_are_differences() -> None:
    assert software_differences(software_stamp()) == []
    assert software_differences(None) == [] and software_differences({}) == []
    other = _other(transformers="0.0.1", acerl="9.9")
    other["acerl"] = {"commit": "0" * 40, "dirty": True}
    now = software_stamp()["packages"]["transformers"]
    assert software_differences(other) == [f"transformers 0.0.1 -> {now}"]  # not the commit, not acerl


def test_record_launch_starts_fresh_and_warns_on_resume_across_versions(tmp_path: Path, caplog) -> None:
    path = tmp_path / "software.json"
    path.write_text(json.dumps({"launches": [_other(torch="1.0")]}))
    assert record_launch(path, resuming=False, what="r") == [software_stamp()]  # a fresh start forgets
    with caplog.at_level("WARNING"):
        record_launch(path, resuming=True, what="r: checkpoint step_2")
    assert caplog.text == ""  # same software: no warning, nothing appended
    assert json.loads(path.read_text())["launches"] == [software_stamp()]

    old = _other(torch="1.0")
    with caplog.at_level("WARNING"):
        launches = record_launch(path, resuming=True, what="r: checkpoint step_2", previous=old)
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1 and "r: checkpoint step_2" in lines[0] and "torch 1.0 ->" in lines[0]
    assert launches == [software_stamp()]  # the record lists launches; the checkpoint's stamp is its own


def test_stamps_in_keeps_distinct_stamps_in_order() -> None:
    a, b = software_stamp(), _other(torch="1.0")
    assert stamps_in([a, None, b, a, {}]) == [a, b]


def test_report_section_flags_inputs_of_other_versions(caplog) -> None:
    assert "other package versions" not in software_section([software_stamp()])
    with caplog.at_level("WARNING"):
        text = software_section([software_stamp(), _other(vllm="0.24.0")])
    assert text.startswith("## Software") and "vllm 0.24.0" in text
    assert "inputs made with other package versions than this report: vllm 0.24.0 ->" in text
    assert sum(r.levelname == "WARNING" for r in caplog.records) == 1
