"""Every "delete it and rerun" message, followed to the letter on a copy of the CI-scale study, ends in a clean
state: the printed folder or file deleted, the printed command run, then the command that failed succeeds and
gives what it gave before the damage.

The messages come from :func:`acerl.errors.reading` (a truncated or corrupt file) and name what to delete and the
``acerl`` command that writes it again, with the invocation's ``--config``. Covered here: a generations file (read
by ``grade``), a scored file (``passk``), a final policy's weights (``sample``), a preparation record (``train``)
and every checkpoint of a run (``train``, which names one folder at a time). The corrupt result files the report
reads are followed in ``tests/report/test_corrupt_advice.py``.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from support.study import VENV_BIN, run_bounded, snakemake_env, tail

from acerl.config import Run
from acerl.models.lean import WEIGHTS
from acerl.pipeline import paths
from acerl.pipeline.io import read_jsonl
from acerl.pipeline.stages import PARAMS_RECORD
from acerl.train.checkpoint import MODEL_FILE

pytestmark = pytest.mark.slow

CONFIG = ["--config", "config/test.yaml"]
RUN = Run("tiny", "grpo", 0)
BENCH = "synth_easy"
RUN_ARGS = ["--model", "tiny", "--method", "grpo", "--seed", "0"]
TIMEOUT_S = 900


@pytest.fixture()
def study(ci_study: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "study"
    shutil.copytree(ci_study, dest, symlinks=True)
    return dest


def _acerl(study: Path, *args: str) -> tuple[int, str]:
    env = snakemake_env(extra={"PYTHONPATH": str(study / "src")})
    proc = run_bounded([str(VENV_BIN / "acerl"), *args], cwd=study, env=env, timeout_s=TIMEOUT_S)
    return proc.returncode, proc.stdout


def _advice(out: str, failing: list[str]) -> tuple[Path, list[str]]:
    """The one error line of ``acerl <failing>``: the path it says to delete and the command it says to run
    (``rerun the same command``: ``failing`` itself)."""
    command = failing[0]
    (line,) = [s for s in out.splitlines() if s.startswith(f"acerl {command}: bad input: ")]
    found = re.search(
        r" is unreadable \(truncated or corrupt: .*\); delete (\S+) and rerun (?:`([^`]+)`|the same command)",
        line,
    )
    assert found, line
    target = found.group(1)
    if target == "it":
        target = line.removeprefix(f"acerl {command}: bad input: ").split(" is unreadable", 1)[0]
    return Path(target), shlex.split(found.group(2)) if found.group(2) else ["acerl", *failing]


def _follow(study: Path, failing: list[str], expect_fix: list[str], rounds: int = 1) -> None:
    """Run ``failing`` (exit 4), check the printed fix is ``acerl <expect_fix>`` (with ``--config
    config/test.yaml`` unless it is ``failing`` itself), delete what it names and run it, ``rounds`` times; then
    ``failing`` exits 0."""
    for _ in range(rounds):
        code, out = _acerl(study, *failing)
        assert code == 4, tail(out)
        target, fix = _advice(out, failing)
        assert fix == ["acerl", *expect_fix, *([] if expect_fix == failing else CONFIG)], fix
        target = target if target.is_absolute() else study / target
        assert target.exists() and study in target.parents, target
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        if fix[1:] != failing:  # "rerun the same command": the loop's next round runs it
            code, out = _acerl(study, *fix[1:])
            assert code == 0, tail(out)
    code, out = _acerl(study, *failing)
    assert code == 0, tail(out)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _completions(study: Path) -> list[list[str]]:
    rows = read_jsonl(paths.generations_file(study, BENCH, RUN), required=("id", "completions"))
    return [r["completions"] for r in rows]


def _passk(study: Path) -> dict:
    record = json.loads(paths.passk_file(study, BENCH, RUN).read_text())
    return {k: v for k, v in record.items() if k != "software"}


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v.clone() for k, v in load_file(folder / WEIGHTS).items()}  # not views of the file's mmap


def _same_weights(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_corrupt_generations_file_then_a_corrupt_scored_file(study: Path):
    bench = ["--benchmark", BENCH]
    before, passk = _completions(study), _passk(study)
    _truncate(paths.generations_file(study, BENCH, RUN))
    _follow(study, ["grade", *RUN_ARGS, *bench, *CONFIG], ["sample", *RUN_ARGS, *bench])
    assert _completions(study) == before  # the same seeds: the same samples again
    _truncate(paths.scored_file(study, BENCH, RUN))
    _follow(study, ["passk", *RUN_ARGS, *bench, *CONFIG], ["grade", *RUN_ARGS, *bench])
    assert _passk(study) == passk


def test_a_corrupt_final_policy(study: Path):
    """``sample`` names the final folder and ``acerl train``, which exports it again from the last checkpoint."""
    final = paths.policy_dir(study, RUN)
    before, samples = _weights(final), _completions(study)
    _truncate(final / WEIGHTS)
    bench = ["--benchmark", BENCH]
    _follow(study, ["sample", *RUN_ARGS, *bench, *CONFIG], ["train", *RUN_ARGS])
    assert _same_weights(_weights(final), before)
    assert _completions(study) == samples


def test_a_corrupt_preparation_record_then_corrupt_checkpoints(study: Path):
    """``train`` checks the record of ``data/`` (and says to rebuild it with ``prepare-data``); then, with every
    checkpoint of the run corrupt, it names one checkpoint folder at a time until none is left, and trains the run
    from step 0 to the same policy."""
    final = paths.policy_dir(study, RUN)
    before = _weights(final)
    shutil.rmtree(final)  # a run that is not finished reads its inputs and checkpoints
    record = paths.data_file(study, "train").parent / PARAMS_RECORD
    record.write_text(record.read_text()[:5])
    _follow(study, ["train", *RUN_ARGS, *CONFIG], ["prepare-data"])
    assert _same_weights(_weights(final), before)

    shutil.rmtree(final)
    ckpts = sorted(paths.checkpoints_dir(study, RUN).glob("step_*"))
    assert len(ckpts) == 2
    for ckpt in ckpts:
        _truncate(ckpt / MODEL_FILE)
    train = ["train", *RUN_ARGS, *CONFIG]
    _follow(study, train, train, rounds=len(ckpts))
    assert _same_weights(_weights(final), before)
