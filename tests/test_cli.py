"""The ``acerl`` command line as a user meets it: expected failures print one line naming the file / key and the
fix with a documented exit code (no traceback unless ``--verbose``); config composes as in the workflow; one
training command; a closed stdout ends quietly; hub models come from the local Hugging Face cache offline."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from support.unprivileged import run_acerl_bound_by_permissions

from acerl.cli import UNGUARDED_SCRIPT, config_files, main, reimported_in_a_worker
from acerl.config import Run, load_config
from acerl.errors import BadInputError, MissingInputError, SourceUnavailableError
from acerl.models.prepare import check_base_folder
from acerl.pipeline import paths
from acerl.pipeline.io import write_jsonl
from acerl.train.__main__ import main as train_module_main

REPO = Path(__file__).resolve().parents[1]
ACERL = Path(sys.executable).parent / "acerl"
PAPER_MODEL = "qwen25_math_7b"
PAPER_HUB_ID = "Qwen/Qwen2.5-Math-7B"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands run from the project directory, where the workflow default config/config.yaml lives."""
    monkeypatch.chdir(REPO)


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(err: str, *needles: str) -> str:
    """``err`` is one ``acerl <command>: <kind>: ...`` line holding every needle, with no traceback."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("acerl ")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------------------- error policy
def test_train_without_base_model_is_one_line_exit_3(capsys, tmp_path: Path) -> None:
    code, _, err = run_main(
        capsys, "train", "--model", "tiny", "--method", "ace_grpo", "--root", str(tmp_path)
    )
    assert code == MissingInputError.exit_code == 3
    line = assert_one_line(err, "acerl train: missing input:", str(paths.base_model_dir(tmp_path, "tiny")))
    assert "acerl prepare-base --model tiny" in line  # the fix


@pytest.mark.parametrize("command", ["train", "sample"])
def test_a_negative_seed_is_a_one_line_usage_error_that_makes_nothing(
    capsys, tmp_path: Path, command
) -> None:
    """``--seed -1`` passed every check and ended in a numpy traceback after making ``seed-1/``."""
    extra = ["--benchmark", "synth_easy"] if command == "sample" else []
    argv = [command, "--model", "tiny", "--method", "grpo", "--seed", "-1", "--root", str(tmp_path), *extra]
    code, out, err = run_main(capsys, *argv)
    assert code == 2 and out == ""
    assert_one_line(err, f"acerl {command}: config error: --seed: a seed is a whole number >= 0, got -1")
    assert list(tmp_path.iterdir()) == []


def test_a_printed_fix_command_keeps_the_invocation_s_config_set_and_root(capsys, tmp_path: Path) -> None:
    """The fix dropped ``--config``/``--root``: copied, it read the default config and wrote into ``.``."""
    extra = tmp_path / "my config.yaml"
    extra.write_text("compute: {torch_threads: 1}\n")
    root = tmp_path / "work dir"
    argv = [
        "train",
        "--model",
        "tiny",
        "--method",
        "grpo",
        "--config",
        str(extra),
        "--set",
        "compute.torch_threads=1",
    ]
    code, _, err = run_main(capsys, *argv, "--root", str(root))
    assert code == 3
    line = assert_one_line(err, "acerl train: missing input:")
    fix = re.search(r"run `([^`]*)` first", line)
    assert fix is not None, line
    assert shlex.split(fix.group(1)) == [
        "acerl", "prepare-base", "--model", "tiny",
        "--config", str(extra), "--set", "compute.torch_threads=1", "--root", str(root),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "fix"),
    [
        (
            "grade",
            "run the sample step first: `acerl sample --model tiny --method grpo --seed 0 --benchmark synth_easy",
        ),
        (
            "passk",
            "run the grade step first: `acerl grade --model tiny --method grpo --seed 0 --benchmark synth_easy",
        ),
    ],
)
def test_a_missing_evaluation_input_names_the_command_with_the_invocation_s_options(
    capsys, tmp_path: Path, command: str, fix: str
) -> None:
    argv = ["--model", "tiny", "--method", "grpo", "--seed", "0", "--benchmark", "synth_easy"]
    code, _, err = run_main(capsys, command, *argv, "--config", "config/test.yaml", "--root", str(tmp_path))
    assert code == 3
    assert_one_line(err, f"{fix} --config config/test.yaml --root {tmp_path}`)")


def test_fix_command_repeats_only_the_options_of_its_invocation() -> None:
    from acerl.errors import fix_command, invocation_options

    assert fix_command("prepare-base", "--model", "tiny") == "`acerl prepare-base --model tiny`"
    with invocation_options(["--no-default-config", "--config", "a b.yaml"]):
        assert (
            fix_command("grade", "--seed", "0")
            == "`acerl grade --seed 0 --no-default-config --config 'a b.yaml'`"
        )
    assert fix_command("grade") == "`acerl grade`"


def test_diagnose_on_a_run_outside_study_diagnostics_says_to_list_it_and_retrain(
    capsys, tmp_path: Path
) -> None:
    """The advice was "train the run": a trained run outside the list has no diagnostic checkpoints to read."""
    cfg = load_config([REPO / "config" / "config.yaml"])
    assert Run("tiny", "dapo", 0) not in cfg.diagnostic_runs()
    argv = ["diagnose", "--model", "tiny", "--method", "dapo", "--seed", "0", "--root", str(tmp_path)]
    code, _, err = run_main(capsys, *argv)
    assert code == 2
    line = assert_one_line(err, "acerl diagnose: config error: tiny/dapo/seed0 is not in study.diagnostics")
    assert "list it there" in line
    assert f"retrain it with `acerl train --model tiny --method dapo --seed 0 --root {tmp_path}`" in line


def test_verbose_adds_the_traceback(capsys, tmp_path: Path) -> None:
    code, _, err = run_main(
        capsys, "train", "--model", "tiny", "--method", "grpo", "--root", str(tmp_path), "--verbose"
    )
    assert code == 3
    assert "Traceback (most recent call last)" in err and "MissingInputError" in err
    assert err.rstrip().splitlines()[-1].startswith("acerl train: missing input:")


def test_python_m_acerl_train_is_acerl_train(capsys, monkeypatch, tmp_path: Path) -> None:
    """One training command: the module entry point is the CLI's ``train`` with the same options and policy."""
    code = train_module_main(
        ["--model", "tiny", "--method", "grpo", "--root", str(tmp_path), "--threads", "1"]
    )
    assert code == 3
    assert_one_line(capsys.readouterr().err, "acerl train: missing input:")
    # run as ``python -m acerl.train ...`` it reads its options from the command line, after the program name
    argv = ["python -m acerl.train", "--model", "tiny", "--method", "grpo", "--root", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    assert train_module_main() == 3
    assert_one_line(capsys.readouterr().err, "acerl train: missing input:")


def test_train_has_the_local_trainer_options(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["train", "-h"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for opt in ("--device", "--threads", "--reference", "--ref-ema-decay", "--old-logprobs", "--no-progress"):
        assert opt in out


def test_local_trainer_options_refused_with_verl(capsys, tmp_path: Path) -> None:
    code, _, err = run_main(
        capsys, "train", "--model", "tiny", "--method", "grpo", "--root", str(tmp_path),
        "--set", "compute.backend=verl", "--reference", "ema", "--threads", "2",
    )  # fmt: skip
    assert code == 2
    assert_one_line(err, "config error", "--threads", "--reference", "compute.backend: verl")


def test_unknown_model_names_the_valid_ones(capsys, tmp_path: Path) -> None:
    code, _, err = run_main(capsys, "prepare-base", "--model", "gpt5", "--root", str(tmp_path))
    assert code == 2
    assert_one_line(err, "--model", "'gpt5'", "valid: tiny")


def test_missing_dataset_file_names_the_key(capsys, tmp_path: Path) -> None:
    """Real data from a local path that is absent: the file, and the key to fix."""
    code, _, err = run_main(
        capsys, "prepare-data", "--config", "config/paper.yaml", "--root", str(tmp_path),
        "--set", f"data.real.train.path={tmp_path / 'nope.jsonl'}",
    )  # fmt: skip
    assert code == MissingInputError.exit_code == 3
    assert_one_line(
        err, "acerl prepare-data: missing input:", f"{tmp_path / 'nope.jsonl'} (data.real.train.path:"
    )


def test_malformed_data_row_names_file_and_line(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "train.jsonl"
    bad.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n{"id": "b", "problem": \n')
    code, _, err = run_main(
        capsys, "prepare-data", "--config", "config/paper.yaml", "--root", str(tmp_path / "w"),
        "--set", f"data.real.train.path={bad}",
    )  # fmt: skip
    assert code == 4
    assert_one_line(err, "bad input", f"{bad}:2: invalid JSON")


def test_config_error_lists_valid_template_names(capsys) -> None:
    code, _, err = run_main(capsys, "config", "--set", "models.tiny.template=bogus")
    assert code == 2
    assert "Traceback" not in err
    assert "models.tiny.template: unknown prompt template 'bogus'; valid: " in err and "qwen_boxed" in err


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("families.grpo.reference=ema", "families.grpo.reference: 'ema'"),
        ("models.tiny.train.old_logprobs=rollout", "models.tiny.train.old_logprobs: 'rollout'"),
    ],
)
def test_local_only_settings_with_verl_are_refused(capsys, setting: str, key: str) -> None:
    """verl has no EMA reference and always recomputes log pi_old: such settings are refused at validation,
    never silently dropped by the backend."""
    code, _, err = run_main(capsys, "config", "--set", "compute.backend=verl", "--set", setting)
    assert code == 2
    assert_one_line(err, "config error", key, "compute.backend: local")


def test_closed_stdout_ends_quietly_like_a_unix_tool() -> None:
    """``acerl config runs | head -0``: no BrokenPipeError traceback, the SIGPIPE status 141."""
    proc = subprocess.Popen(
        [str(ACERL), "config", "runs"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # the reader goes away before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""


def _write_root_generations(root: Path, run: Run) -> None:
    """Three questions (gold 3) x four completions \\boxed{\\sqrt{i^2}}, i = 0..3: square roots are past the
    grader's fast path, so math-verify grades them in the worker processes; one completion per question is right."""
    completions = [
        {"text": f"\\boxed{{\\sqrt{{{i * i}}}}}", "finish_reason": "stop", "num_tokens": 9} for i in range(4)
    ]
    write_jsonl(
        paths.generations_file(root, "synth_easy", run),
        [{"id": f"q{j}", "answer": "3", "completions": completions} for j in range(3)],
    )


GRADE_JOB = ["grade", "--model", "tiny", "--method", "grpo", "--seed", "0", "--benchmark", "synth_easy"]


def _grade_in_subprocess(root: Path, *launcher: str) -> subprocess.CompletedProcess[str]:
    """``acerl grade`` of the square-root generations under ``root``, started as ``launcher`` (a fresh process)."""
    _write_root_generations(root, Run("tiny", "grpo", 0))
    return subprocess.run(
        [sys.executable, *launcher, *GRADE_JOB, "--root", str(root)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_python_dash_m_acerl_grades_with_worker_processes(tmp_path: Path) -> None:
    """``python -m acerl`` is the command where no console script is installed (a ``--target`` install on a
    GPU machine): ``acerl grade`` through it starts the grader's worker processes and writes every verdict."""
    proc = _grade_in_subprocess(tmp_path, "-m", "acerl")
    assert proc.returncode == 0, proc.stderr
    scored = pd.read_parquet(paths.scored_file(tmp_path, "synth_easy", Run("tiny", "grpo", 0)))
    assert len(scored) == 3 * 4
    assert scored["correct"].sum() == 3  # \\sqrt{9} in each question


def test_acerl_main_module_is_inert_when_reimported() -> None:
    """A worker process re-imports the main script under ``__mp_main__`` (multiprocessing's spawn/forkserver
    start): ``acerl/__main__.py`` must not run the command again there."""
    import runpy

    namespace = runpy.run_path(str(REPO / "src" / "acerl" / "__main__.py"), run_name="__mp_main__")
    assert namespace["main"] is main  # imported, not called: calling it would parse pytest's argv and exit


def test_unguarded_script_is_refused_in_workers_not_rerun(tmp_path: Path) -> None:
    """A hand-made ``acerl`` script without the ``__main__`` guard (seen on a GPU machine): each grader worker
    re-imports it while starting; the command must not run again there (it once retrained a whole run inside a
    worker) but say which guard is missing, and the parent's error points to that message."""
    script = tmp_path / "acerl-unguarded"
    script.write_text("import sys\nfrom acerl.cli import main\nsys.exit(main())\n")
    proc = _grade_in_subprocess(tmp_path, str(script))
    assert proc.returncode != 0
    assert UNGUARDED_SCRIPT in proc.stderr
    assert "grader worker died while starting" in proc.stderr
    assert "stderr above" in proc.stderr
    assert not paths.scored_file(tmp_path, "synth_easy", Run("tiny", "grpo", 0)).exists()


def test_main_refuses_to_run_while_a_worker_imports_it(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    assert reimported_in_a_worker()
    code, out, err = run_main(capsys, "config", "runs")
    assert (code, out) == (2, "")
    assert err.strip() == UNGUARDED_SCRIPT


@pytest.mark.parametrize(
    ("completions", "needle"),
    [
        ([{"text": "3", "finish_reason": "stop"}], "completion 0: missing key(s) 'num_tokens'"),
        (
            [{"text": "3", "finish_reason": "stop", "num_tokens": 1}, "3"],
            "completion 1: missing key(s) 'text'",
        ),
        ("3", "'completions' is a str, expected a list"),
    ],
)
def test_malformed_completion_is_one_line_exit_4(capsys, tmp_path: Path, completions, needle) -> None:
    run = ["--model", "tiny", "--method", "grpo", "--seed", "0", "--benchmark", "synth_easy"]
    gen = paths.generations_file(tmp_path, "synth_easy", Run("tiny", "grpo", 0))
    write_jsonl(gen, [{"id": "q7", "answer": "3", "completions": completions}])
    code, _, err = run_main(capsys, "grade", *run, "--root", str(tmp_path))
    assert code == BadInputError.exit_code == 4
    assert_one_line(
        err, "acerl grade: bad input:", str(gen), "row id 'q7'", needle, f"acerl sample {' '.join(run)}"
    )


def _truncate(path: Path) -> None:
    """Cut ``path`` to half its size: a copy or a write cut short (a full disk)."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_generations_file_is_exit_4_naming_the_fix(capsys, tmp_path: Path) -> None:
    run = ["--model", "tiny", "--method", "grpo", "--seed", "0", "--benchmark", "synth_easy"]
    gen = paths.generations_file(tmp_path, "synth_easy", Run("tiny", "grpo", 0))
    completions = [{"text": f"\\boxed{{{i}}}", "finish_reason": "stop", "num_tokens": 5} for i in range(64)]
    write_jsonl(gen, [{"id": f"q{j}", "answer": "3", "completions": completions} for j in range(20)])
    _truncate(gen)
    code, _, err = run_main(capsys, "grade", *run, "--root", str(tmp_path))
    assert code == BadInputError.exit_code == 4
    assert_one_line(
        err, "acerl grade: bad input:", str(gen), "truncated", "delete it", f"acerl sample {' '.join(run)}"
    )


def test_truncated_scored_file_is_exit_4_naming_the_fix(capsys, tmp_path: Path) -> None:
    run = ["--model", "tiny", "--method", "grpo", "--seed", "0", "--benchmark", "synth_easy"]
    scored = paths.scored_file(tmp_path, "synth_easy", Run("tiny", "grpo", 0))
    scored.parent.mkdir(parents=True)
    pd.DataFrame(
        {"id": [f"q{i // 4}" for i in range(400)], "correct": [i % 3 == 0 for i in range(400)]}
    ).to_parquet(scored)
    _truncate(scored)
    code, _, err = run_main(capsys, "passk", *run, "--root", str(tmp_path))
    assert code == 4
    assert_one_line(err, "acerl passk: bad input:", str(scored), "delete it", f"acerl grade {' '.join(run)}")


EVAL_JOB = ["--model", "tiny", "--method", "grpo", "--seed", "0", "--benchmark", "synth_easy"]


def test_ks_of_zero_is_a_config_error_before_any_stage(capsys) -> None:
    """``evaluation.ks=[0,1,2]`` passed ``acerl config`` and crashed ``acerl passk``."""
    code, out, err = run_main(capsys, "config", "show", "--set", "evaluation.ks=[0,1,2]")
    assert (code, out) == (2, "")
    assert_one_line(err, "acerl config: config error:", "evaluation.ks.0", "greater than or equal to 1")


def test_an_empty_benchmark_file_is_one_line_exit_4(capsys, tmp_path: Path) -> None:
    write_jsonl(paths.data_file(tmp_path, "synth_easy"), [])
    code, _, err = run_main(capsys, "sample", *EVAL_JOB, "--root", str(tmp_path))
    assert code == 4
    assert_one_line(
        err,
        "acerl sample: bad input:",
        str(paths.data_file(tmp_path, "synth_easy")),
        "no problems",
        "prepare-data",
    )


@pytest.mark.parametrize("command", ["grade", "passk"])
def test_an_empty_generations_or_scored_file_is_one_line_exit_4(capsys, tmp_path: Path, command: str) -> None:
    """An empty generations file was graded with exit 0; its scored file then crashed ``acerl passk``."""
    run = Run("tiny", "grpo", 0)
    write_jsonl(paths.generations_file(tmp_path, "synth_easy", run), [])
    scored = paths.scored_file(tmp_path, "synth_easy", run)
    scored.parent.mkdir(parents=True)
    columns = {"id": "string", "correct": "bool", "status": "string"}
    pd.DataFrame({c: pd.Series([], dtype=t) for c, t in columns.items()}).to_parquet(scored)
    empty, remake = {
        "grade": (paths.generations_file(tmp_path, "synth_easy", run), "acerl sample"),
        "passk": (scored, "acerl grade"),
    }[command]
    code, _, err = run_main(capsys, command, *EVAL_JOB, "--root", str(tmp_path))
    assert code == 4
    assert_one_line(
        err, f"acerl {command}: bad input:", f"{empty}: no problems", f"{remake} {' '.join(EVAL_JOB)}"
    )


def test_a_generations_file_of_part_of_the_benchmark_is_one_line_exit_4(capsys, tmp_path: Path) -> None:
    """12 of 24 problems passed grade, passk and the report with exit 0 (and a Pass@8 of another benchmark)."""
    ids = [f"q{i}" for i in range(24)]
    write_jsonl(
        paths.data_file(tmp_path, "synth_easy"), [{"id": i, "problem": "1+2", "answer": "3"} for i in ids]
    )
    gen = paths.generations_file(tmp_path, "synth_easy", Run("tiny", "grpo", 0))
    completions = [{"text": "\\boxed{3}", "finish_reason": "stop", "num_tokens": 4}]
    write_jsonl(gen, [{"id": i, "answer": "3", "completions": completions} for i in ids[:12]])
    code, _, err = run_main(capsys, "grade", *EVAL_JOB, "--root", str(tmp_path))
    assert code == 4
    assert_one_line(
        err, str(gen), "12 of synth_easy's 24 problems (12 missing", f"acerl sample {' '.join(EVAL_JOB)}"
    )


def test_another_run_s_generations_are_one_line_exit_4(capsys, tmp_path: Path) -> None:
    """GRPO's generations copied in under another method's name were graded as that method's."""
    gen = paths.generations_file(tmp_path, "synth_easy", Run("tiny", "ace_grpo", 0))
    completions = [{"text": "\\boxed{3}", "finish_reason": "stop", "num_tokens": 4}]
    write_jsonl(
        gen,
        [{"id": "q0", "answer": "3", "completions": completions, "model_dir": "runs/tiny/grpo/seed0/final"}],
    )
    job = ["--model", "tiny", "--method", "ace_grpo", "--seed", "0", "--benchmark", "synth_easy"]
    code, _, err = run_main(capsys, "grade", *job, "--root", str(tmp_path))
    assert code == 4
    assert_one_line(
        err, str(gen), "sampled from runs/tiny/grpo/seed0/final, not from run tiny/ace_grpo/seed0's policy"
    )


def test_an_unwritable_results_folder_is_one_line_naming_it_and_nothing_is_written(tmp_path: Path) -> None:
    """A ``results/`` this user may not write ended ``acerl report`` in a traceback."""
    results = paths.results_dir(tmp_path)
    results.mkdir()
    (results / "report.md").write_text("the last report\n")
    results.chmod(0o555)
    try:
        argv = ["report", "--partial", "--config", "config/test.yaml", "--root", str(tmp_path)]
        proc = run_acerl_bound_by_permissions(*argv, cwd=REPO)
    finally:
        results.chmod(0o755)
    assert proc.returncode == 4, proc.stderr
    line = assert_one_line(proc.stderr, "acerl report: permission denied:", str(results), "dr-xr-xr-x")
    assert "may not write" in line and "another --root" in line
    assert [p.name for p in results.iterdir()] == ["report.md"]


def test_every_exit_status_is_in_the_readme() -> None:
    """The exit statuses of :mod:`acerl.errors` (130 for Ctrl-C among them) are the README's list."""
    import acerl.errors

    codes = re.findall(r"^(\d+)\s{2,}", acerl.errors.__doc__ or "", re.M)
    assert {"0", "1", "2", "3", "4", "75", "130", "141"} <= set(codes)
    readme = (REPO / "README.md").read_text()
    para = readme[readme.index("An expected failure prints one line") :].split("\n\n", 1)[0]
    for code in codes:
        assert re.search(rf"\b{code}\b", para), (code, para)


@pytest.mark.parametrize("command", ["train", "sample", "grade", "passk", "diagnose"])
def test_unknown_method_names_the_valid_ones_in_every_run_command(
    capsys, tmp_path: Path, command: str
) -> None:
    bench = ["--benchmark", "synth_easy"] if command in {"sample", "grade", "passk"} else []
    code, _, err = run_main(
        capsys,
        command,
        "--model",
        "tiny",
        "--method",
        "ace_foo",
        "--seed",
        "0",
        *bench,
        "--root",
        str(tmp_path),
    )
    assert code == 2
    assert_one_line(err, f"acerl {command}: config error:", "--method", "'ace_foo'", "valid: base, grpo")


def test_unknown_benchmark_lists_the_configured_ones(capsys, tmp_path: Path) -> None:
    """Not "run prepare-data", which cannot help: the benchmark is not in the config."""
    code, _, err = run_main(
        capsys,
        "sample",
        "--model",
        "tiny",
        "--method",
        "base",
        "--benchmark",
        "gsm8k",
        "--root",
        str(tmp_path),
    )
    assert code == 2
    line = assert_one_line(err, "--benchmark", "'gsm8k'", "valid: synth_easy, synth_hard")
    assert "prepare-data" not in line


def test_config_folder_is_a_one_line_error(capsys) -> None:
    code, _, err = run_main(capsys, "config", "--config", "config")
    assert code == 2
    assert_one_line(err, "acerl config: config error:", "config is a folder", "config/test.yaml")


def test_misspelt_set_key_blames_the_override_not_the_file(capsys) -> None:
    code, _, err = run_main(capsys, "config", "--set", "models.tiny.train.total_stepz=3")
    assert code == 2
    line = assert_one_line(err, "--set models.tiny.train.total_stepz=3", "models.tiny.train.total_stepz")
    assert "config/config.yaml" not in line
    # a bad file is still the file's fault, whatever the overrides
    code, _, err = run_main(capsys, "config", "--config", "config/test.yaml", "--set", "bogus_key=1",
                            "--no-default-config")  # fmt: skip
    assert code == 2
    assert "config/test.yaml" in err and "--set" not in err


def test_config_help_explains_its_actions(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["config", "-h"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for action, says in [("validate", "check the composed config"), ("show", "as JSON"), ("runs", "every run"),
                         ("reference", "docs/config.md")]:  # fmt: skip
        assert re.search(rf"^  {action}\s+.*{re.escape(says)}", out, re.M), (action, out)


def test_report_with_missing_inputs_is_an_error_unless_partial(tmp_path: Path) -> None:
    """Exit 3 naming the missing files and --partial; with --partial the runs present (none) are reported, and
    the log holds acerl's messages, not fontTools' INFO lines about subsetting each PDF font."""
    cmd = [str(ACERL), "report", "--config", "config/test.yaml", "--root", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == MissingInputError.exit_code == 3
    line = assert_one_line(proc.stderr, "acerl report: missing input:", "14 of 14 result files", "--partial")
    assert (
        str(
            paths.passk_file(
                tmp_path, "synth_easy", load_config(config_files(["config/test.yaml"])).base_runs()[0]
            )
        )
        in line
    )
    assert not paths.report_file(tmp_path).exists()
    proc = subprocess.run([*cmd, "--partial"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert paths.report_file(tmp_path).is_file()
    assert "INFO acerl" in proc.stderr and "fontTools" not in proc.stderr


def test_resample_composes_the_config_as_every_command(tmp_path: Path) -> None:
    """``acerl resample --config config/test.yaml`` stacks config/config.yaml underneath (test.yaml alone is
    not a complete config), then stops at the study that has not run (exit 3), writing nothing."""
    proc = subprocess.run(
        [str(ACERL), "resample", "--config", "config/test.yaml", "--root", str(tmp_path / "study"),
         "--benchmark", "synth_easy", "--eval-seeds", "1", "2", "--comparisons", "ace_grpo:grpo"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert_one_line(
        proc.stderr, "acerl resample: missing input:", str(tmp_path / "study" / "data"), "make run"
    )
    assert not (tmp_path / "study").exists()
    old = subprocess.run(
        [sys.executable, "-m", "acerl.report.resample"], cwd=REPO, capture_output=True, text=True
    )
    assert old.returncode == 2 and "acerl resample" in old.stderr


def test_resample_refuses_a_malformed_comparison(capsys) -> None:
    code, _, err = run_main(capsys, "resample", "--benchmark", "synth_easy", "--eval-seeds", "1", "2",
                            "--comparisons", "ace_grpo-grpo")  # fmt: skip
    assert code == 2
    assert_one_line(err, "--comparisons", "method:baseline")


# -------------------------------------------------------------------------------------- one way in: config
def test_cli_stacks_user_files_over_the_workflow_default(capsys) -> None:
    """``acerl config --config config/paper.yaml`` validates what ``snakemake --configfile=config/paper.yaml``
    runs (common.smk: the default first, then the user's files)."""
    code, out, err = run_main(capsys, "config", "--config", "config/paper.yaml")
    assert code == 0, err
    assert "benchmarks math500, aime2025" in out
    assert config_files(["config/paper.yaml"]) == [Path("config/config.yaml"), Path("config/paper.yaml")]
    assert config_files(["config/config.yaml", "config/test.yaml"]) == [
        Path("config/config.yaml"),
        Path("config/test.yaml"),
    ]
    cli = load_config(config_files(["config/paper.yaml"]))
    assert cli == load_config(["config/config.yaml", "config/paper.yaml"])


def test_no_default_config_uses_the_files_alone(capsys) -> None:
    code, _, err = run_main(capsys, "config", "--no-default-config", "--config", "config/paper.yaml")
    assert code == 2
    assert_one_line(err, "config error", "config/paper.yaml", "methods")


def test_default_config_missing_names_the_fix(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(capsys, "config")
    assert code == 2
    assert_one_line(err, "config/config.yaml", "project directory", "--no-default-config")


# ---------------------------------------------------------------------------------- hub models, offline
def _offline_env(hub_cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {**env, "HF_HUB_OFFLINE": "1", "HF_HOME": str(hub_cache.parent), "HF_HUB_CACHE": str(hub_cache)}


def _fake_hub_snapshot(hub_cache: Path, repo_id: str, files: dict[str, str]) -> Path:
    """A model in the Hugging Face cache layout (refs/main -> snapshots/<commit>/), as a download leaves it."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for name, text in files.items():
        (snap / name).write_text(text)
    return snap


def _prepare_paper_base(root: Path, hub_cache: Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(ACERL), "prepare-base", "--config", "config/paper.yaml", "--model", PAPER_MODEL]
    return subprocess.run(
        [*cmd, "--root", str(root)], cwd=REPO, env=_offline_env(hub_cache), capture_output=True, text=True
    )


def test_hub_model_from_the_local_cache_offline(tmp_path: Path) -> None:
    snap = _fake_hub_snapshot(
        tmp_path / "hf" / "hub",
        PAPER_HUB_ID,
        {"config.json": '{"model_type": "qwen2"}', "tokenizer.json": "{}"},
    )
    proc = _prepare_paper_base(tmp_path / "w", tmp_path / "hf" / "hub")
    assert proc.returncode == 0, proc.stderr
    out = paths.base_model_dir(tmp_path / "w", PAPER_MODEL)
    assert (
        not out.is_symlink() and (out / "config.json").stat().st_ino == (snap / "config.json").stat().st_ino
    )
    shutil.rmtree(
        tmp_path / "hf"
    )  # the cache was on the preparing node's local disk: the training node lacks it
    assert (out / "config.json").read_text() == '{"model_type": "qwen2"}'
    assert check_base_folder(tmp_path / "w", PAPER_MODEL) == out


def test_a_base_folder_linked_into_another_nodes_cache_is_named(capsys, tmp_path: Path) -> None:
    """A base folder older code left as a link into a Hugging Face cache this node lacks: training stops with a
    one-line error naming the link and the command that puts the files into the project, which then does."""
    out = paths.base_model_dir(tmp_path / "w", "tiny")
    out.parent.mkdir(parents=True)
    out.symlink_to(tmp_path / "node-local" / "hf" / "hub" / "snapshots" / "abc", target_is_directory=True)
    code, _, err = run_main(
        capsys, "train", "--model", "tiny", "--method", "grpo", "--root", str(tmp_path / "w")
    )
    assert code == MissingInputError.exit_code == 3
    assert_one_line(err, "acerl train: missing input:", f"{out} links to", "acerl prepare-base --model tiny")
    paper = paths.base_model_dir(tmp_path / "w", PAPER_MODEL)
    paper.symlink_to(tmp_path / "node-local" / "gone", target_is_directory=True)
    snap = _fake_hub_snapshot(tmp_path / "hf" / "hub", PAPER_HUB_ID, {"config.json": "{}"})
    proc = _prepare_paper_base(tmp_path / "w", tmp_path / "hf" / "hub")
    assert proc.returncode == 0, proc.stderr
    assert (
        not paper.is_symlink() and (paper / "config.json").read_text() == (snap / "config.json").read_text()
    )


def test_hub_model_offline_and_not_cached_names_models_path(tmp_path: Path) -> None:
    (tmp_path / "hf" / "hub").mkdir(parents=True)
    proc = _prepare_paper_base(tmp_path / "w", tmp_path / "hf" / "hub")
    assert proc.returncode == SourceUnavailableError.exit_code == 4, proc.stderr
    assert_one_line(
        proc.stderr, "acerl prepare-base: source unavailable:", PAPER_HUB_ID, f"models.{PAPER_MODEL}.path"
    )
    assert not paths.base_model_dir(tmp_path / "w", PAPER_MODEL).exists()


def test_local_model_path_is_linked_and_checked(capsys, tmp_path: Path) -> None:
    local = tmp_path / "my-model"
    local.mkdir()
    argv = [
        "prepare-base",
        "--config",
        "config/paper.yaml",
        "--model",
        PAPER_MODEL,
        "--root",
        str(tmp_path / "w"),
    ]
    code, _, err = run_main(capsys, *argv, "--set", f"models.{PAPER_MODEL}.path={local}")
    assert code == 2
    assert_one_line(err, f"models.{PAPER_MODEL}.path", "no config.json")
    (local / "config.json").write_text("{}")
    code, _, err = run_main(capsys, *argv, "--set", f"models.{PAPER_MODEL}.path={local}")
    assert code == 0, err
    out = paths.base_model_dir(tmp_path / "w", PAPER_MODEL)
    assert not out.is_symlink() and (out / "config.json").read_text() == "{}"


# ------------------------------------------------------------------------------ the paper-scale profile
def test_missing_slurm_profile_names_the_installer(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "site"))
    code, _, err = run_main(capsys, "profile")
    assert code == 3
    assert_one_line(
        err, "acerl profile: missing input:", "'slurm'", "scripts/install_slurm_profile.sh --partition"
    )


def test_installed_slurm_profile_is_found(tmp_path: Path) -> None:
    """After the installer, ``acerl profile`` finds the profile where ``snakemake --profile slurm`` does."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    install = [str(REPO / "scripts" / "install_slurm_profile.sh"), "--partition", "gpu", "--no-account"]
    subprocess.run(
        [*install, "--status-command", "squeue"], cwd=REPO, env=env, check=True, capture_output=True
    )
    proc = subprocess.run([str(ACERL), "profile"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == tmp_path / "xdg" / "snakemake" / "slurm" / "config.yaml"


def test_every_profile_command_shown_names_the_installer() -> None:
    """Nowhere the project shows ``snakemake --profile slurm`` without the installer (or the check naming it)."""
    from support.study import project_files

    shown = [
        f
        for f in project_files()
        if not f.startswith("tests/") and "snakemake --profile slurm" in (REPO / f).read_text(errors="ignore")
    ]
    assert {"README.md", "Makefile", "Snakefile", "config/paper.yaml", "docs/cluster.md"} <= set(shown)
    for f in shown:
        text = (REPO / f).read_text(errors="ignore")
        assert "install_slurm_profile.sh" in text, (
            f"{f} shows `snakemake --profile slurm` without the installer"
        )


SHELL_OPERATORS = {"&&", "||", "|", ";", ">", "2>"}


def documented_commands() -> list[tuple[str, list[str]]]:
    """Every ``acerl ...`` command line of README.md and docs/*.md (a ``<placeholder>`` read as a word, a line
    ending in ``\\`` continued by the next, the command ending at a shell operator such as ``&&``)."""
    found = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for line in doc.read_text().replace("\\\n", " ").splitlines():
            if re.match(r"^\s*acerl [a-z]", line):
                argv = shlex.split(re.sub(r"<[\w-]+>", "x", line.split("  #")[0]))[1:]
                ends = [i for i, word in enumerate(argv) if word in SHELL_OPERATORS]
                found.append((f"{doc.name}: {line.strip()}", argv[: ends[0]] if ends else argv))
    return found


class _Parsed(Exception):
    """Raised by a parser that accepted its arguments, so that nothing runs."""


def test_every_documented_command_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs' command lines are accepted as written (``acerl report config/paper.yaml`` was not) by the parser
    that ``acerl`` hands them to: the CLI's own, or a module command's (``acerl dvc write``, ``acerl report power
    ...``)."""
    commands = documented_commands()
    for first in (["report"], ["resample"], ["dvc"], ["report", "sequential"], ["report", "paper"]):
        assert any(argv[: len(first)] == first for _, argv in commands), first
    parse_args = argparse.ArgumentParser.parse_args

    def parse_only(
        self: argparse.ArgumentParser, args: list[str] | None = None, namespace: None = None
    ) -> None:
        parse_args(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    for where, argv in commands:
        try:
            main(argv)
        except _Parsed:
            continue
        except SystemExit as e:
            pytest.fail(f"{where}: exit {e.code}")
        pytest.fail(f"{where}: ran without parsing its arguments")
