"""``acerl train`` where its inputs or its run folder fail it: one line naming the file or folder and the fix,
and nothing written."""

from __future__ import annotations

import os
from pathlib import Path

from support.unprivileged import run_acerl_bound_by_permissions
from trainer_fixtures import REPO, TRAIN_OVERRIDES

from acerl.cli import main
from acerl.config import Run
from acerl.pipeline import paths
from acerl.pipeline.io import write_jsonl

RUN = Run("tiny", "grpo", 0)


def _argv(root: Path) -> list[str]:
    argv = ["train", "--model", "tiny", "--method", "grpo", "--seed", "0", "--root", os.fspath(root)]
    for item in TRAIN_OVERRIDES:
        argv += ["--set", item]
    return argv


def test_an_empty_training_set_is_one_line_exit_4(tiny_root: Path, capsys, monkeypatch) -> None:
    """An empty data/train.jsonl ended in a traceback (``the training set is empty``)."""
    train_file = paths.data_file(tiny_root, "train")
    write_jsonl(train_file, [])
    monkeypatch.chdir(REPO)
    capsys.readouterr()
    assert main(_argv(tiny_root)) == 4
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(
        f"acerl train: bad input: {train_file}: no training problems (an empty training set)"
    )
    assert "acerl prepare-data" in err
    assert not paths.policy_dir(tiny_root, RUN).exists()


def test_an_unwritable_run_folder_is_one_line_naming_it_and_nothing_is_written(tiny_root: Path) -> None:
    """A run folder this user may not write ended in a traceback."""
    run_dir = paths.run_dir(tiny_root, RUN)
    run_dir.mkdir(parents=True)
    run_dir.chmod(0o555)
    try:
        proc = run_acerl_bound_by_permissions(*_argv(tiny_root), cwd=REPO)
    finally:
        run_dir.chmod(0o755)
    assert proc.returncode == 4, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("acerl ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("acerl train: permission denied: ")
    assert str(run_dir) in lines[0] and "dr-xr-xr-x" in lines[0] and "may not write" in lines[0]
    assert list(run_dir.iterdir()) == []
