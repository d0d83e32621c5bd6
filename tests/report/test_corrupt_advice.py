"""The advice printed for a corrupt result file, followed to the letter on the CI-scale study, ends in a clean
state: the file written again, the report rewritten, Snakemake with nothing left to do.

The old advice ("delete it and rerun the step that wrote it; the workflow reruns the job of a deleted file")
looped: after the delete, ``snakemake all`` says "Nothing to be done" (a missing intermediate whose consumers are
up to date is not rebuilt) and ``acerl report`` says "run the study first".
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from support.study import SNAKEMAKE, VENV_BIN, run_bounded, snakemake_env, tail

pytestmark = pytest.mark.slow

PASSK = "metrics/synth_easy/tiny/grpo/seed0.json"
DIAG = "diagnostics/tiny/grpo/seed0.json"
TIMEOUT_S = 1200


def _run(cwd: Path, study: Path, *argv: str) -> tuple[int, str]:
    env = snakemake_env(extra={"PYTHONPATH": str(study / "src")})
    proc = run_bounded(list(argv), cwd=cwd, env=env, timeout_s=TIMEOUT_S)
    return proc.returncode, proc.stdout


def _acerl(cwd: Path, study: Path, *args: str) -> tuple[int, str]:
    return _run(cwd, study, str(VENV_BIN / "acerl"), *args)


def _truncate(path: Path) -> dict:
    record = json.loads(path.read_text())
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return record


def _advice(out: str, path: Path | str) -> list[list[str]]:
    """The one error line's commands (each between backticks after 'delete it and run')."""
    (line,) = [s for s in out.splitlines() if s.startswith("acerl report: bad input: ")]
    assert f"{path} is unreadable (truncated or corrupt" in line, line
    fix = line.split("; delete it and ", 1)[1]
    return [shlex.split(c) for c in re.findall(r"`([^`]+)`", fix)]


def _same_result(path: Path, before: dict) -> None:
    after = json.loads(path.read_text())
    assert {k: v for k, v in after.items() if k != "software"} == {
        k: v for k, v in before.items() if k != "software"
    }


def test_following_the_corrupt_result_advice_ends_clean(ci_study: Path, tmp_path: Path):
    study = tmp_path / "study"
    shutil.copytree(ci_study, study, symlinks=True)
    config = ["--config", "config/test.yaml"]

    # in the study's folder: one Snakemake command, with the study's --configfile
    before = _truncate(study / PASSK)
    code, out = _acerl(study, study, "report", *config)
    assert code == 4, tail(out)
    (command,) = _advice(out, PASSK)
    assert command == ["snakemake", "-c1", "all", "--forcerun", "report", "--configfile", "config/test.yaml"]
    (study / PASSK).unlink()
    nothing = _run(study, study, str(SNAKEMAKE), "-n", "all", "--configfile", "config/test.yaml")[1]
    assert "Nothing to be done" in nothing  # why deleting alone loops
    code, out = _run(study, study, str(SNAKEMAKE), *command[1:])
    assert code == 0, tail(out)
    _same_result(study / PASSK, before)
    assert (
        "Nothing to be done"
        in _run(study, study, str(SNAKEMAKE), "-n", "all", "--configfile", "config/test.yaml")[1]
    )
    assert _acerl(study, study, "report", *config)[0] == 0

    # from another folder (--root): the acerl commands that write the file and the report, --config carried
    other = tmp_path / "other"
    shutil.copytree(study / "config", other / "config")
    before = _truncate(study / DIAG)
    code, out = _acerl(other, study, "report", *config, "--root", str(study))
    assert code == 4, tail(out)
    write, report = _advice(out, study / DIAG)
    assert write[:2] == ["acerl", "diagnose"] and report[:2] == ["acerl", "report"]
    for cmd in (write, report):
        assert cmd[cmd.index("--root") + 1] == str(study) and "config/test.yaml" in cmd
    (study / DIAG).unlink()
    for cmd in (write, report):
        code, out = _acerl(other, study, *cmd[1:])
        assert code == 0, tail(out)
    _same_result(study / DIAG, before)
