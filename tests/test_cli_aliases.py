"""One command line: each tool with options of its own is an ``acerl`` subcommand that hands them to its module
(:mod:`acerl.commands`); the old ``python -m acerl.<module>`` entry points are aliases that say so on stderr; and
no document tells a user to run an alias."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from acerl.cli import main, module_command
from acerl.commands import ALIASES, MODULE_COMMANDS, ModuleCommand, alias_line

REPO = Path(__file__).resolve().parents[1]
ACERL = Path(sys.executable).parent / "acerl"

DESCRIPTIONS = {  # the start of each module's own description, as its parser prints it
    "dvc": "The pipeline as DVC stages: ``dvc.yaml`` is generated from the config",
    "sft": "Supervised fine-tuning of the tiny base model on worked solutions",
    "update-mass": "Print where GRPO's and ACE's update of the same batch move probability",
    "report paper": "regenerate the paper's Tables 1-5",
    "report power": "Print the variance decomposition, the power of every comparison",
    "report sequential": "Print one look of the power study's sequential design",
    "report training": "Print the paired training-batch diagnostics",
    "report methods": "Print the methods-beyond-the-paper table",
    "report gate": "Print the testbed gate (report.gate)",
}
ENTRY_POINTS_NOT_ALIASES = {
    "acerl": "the CLI itself, where no console script is installed",
    "acerl.cli": "the CLI itself",
    "acerl.report.resample": "retired before the aliases: it names `acerl resample` and exits 2",
}


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=REPO, capture_output=True, text=True, timeout=300)


def help_text(
    capsys: pytest.CaptureFixture[str], main_fn: Callable[[list[str]], object], argv: list[str]
) -> str:
    with pytest.raises(SystemExit) as exit_:
        main_fn(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


def flat(text: str) -> str:
    """``text`` with every run of whitespace one space (argparse wraps lines to the terminal)."""
    return " ".join(text.split())


# -------------------------------------------------------------------------------- acerl <module command>
def test_every_module_command_has_a_described_module() -> None:
    assert set(DESCRIPTIONS) == {c.command for c in MODULE_COMMANDS}
    assert len({c.module for c in MODULE_COMMANDS}) == len(MODULE_COMMANDS)


@pytest.mark.parametrize("command", MODULE_COMMANDS, ids=lambda c: c.command)
def test_a_module_command_shows_its_modules_own_help(
    capsys: pytest.CaptureFixture[str], command: ModuleCommand
) -> None:
    out = help_text(capsys, main, [*command.command.split(), "--help"])
    assert out.startswith(f"usage: acerl {command.command} "), out
    assert flat(DESCRIPTIONS[command.command]) in flat(out)
    module_main = importlib.import_module(command.module).main
    assert (
        help_text(capsys, module_main, ["--help"]) == out
    )  # one home for the arguments: the module's parser


def test_help_lists_the_module_commands_and_the_reports(capsys: pytest.CaptureFixture[str]) -> None:
    top = flat(help_text(capsys, main, ["--help"]))
    report = flat(help_text(capsys, main, ["report", "--help"]))
    assert "--partial" in report  # the study's report keeps its options
    for c in MODULE_COMMANDS:
        assert f"{c.name} {flat(c.help)}" in top, c.command
        assert (f"{c.name} {flat(c.help)}" in report) == c.command.startswith("report "), c.command


def test_module_command_names_the_command_and_what_its_module_gets() -> None:
    power = next(c for c in MODULE_COMMANDS if c.command == "report power")
    assert module_command(["report", "power", "a.json", "--k", "8"]) == (power, ["a.json", "--k", "8"])
    assert module_command(["dvc"]) == (MODULE_COMMANDS[0], [])
    for own in (
        ["report"],
        ["report", "--partial", "--root", "x"],
        ["resample", "power"],
        ["reports", "power"],
    ):
        assert module_command(own) is None, own


def test_usage_errors_name_the_new_command_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, needle in (
        (["sft"], "acerl sft: error: the following arguments are required: --data, --out"),
        (["update-mass"], "acerl update-mass: error: the following arguments are required: --config"),
        (["report", "paper"], "acerl report paper: error: the following arguments are required: --out"),
        (["dvc", "render"], "acerl dvc: error: argument command: invalid choice: 'render'"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        assert needle in capsys.readouterr().err


def test_acerl_report_methods_keeps_its_one_line_error_and_exit_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["report", "methods", "--config", "config/methods.yaml", "--root", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1, err
    assert err[0].startswith("acerl report methods: missing input: ") and "no Pass@k file" in err[0]


def test_acerl_report_sequential_keeps_its_one_line_error_and_exit_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        ["report", "sequential", "--counts", str(tmp_path / "absent.csv"), "--benchmark", "synth_easy"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        code == 2
        and len(err) == 1
        and err[0].startswith("acerl report sequential: ")
        and "absent.csv" in err[0]
    )


def test_acerl_dvc_checks_dvc_yaml_with_its_own_exit_codes(tmp_path: Path) -> None:
    proc = run(ACERL, "dvc", "check")
    assert (proc.returncode, proc.stdout) == (0, "dvc.yaml is current\n"), proc.stderr
    stale = tmp_path / "dvc.yaml"
    stale.write_text("stages: {}\n")
    proc = run(ACERL, "dvc", "check", "--out", stale)  # its config is relative to the dvc.yaml: none there
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"acerl dvc: config file not found: {tmp_path / 'config' / 'config.yaml'}")
    proc = run(ACERL, "dvc", "check", "--out", stale, "--config", REPO / "config" / "config.yaml")
    assert proc.returncode == 1 and f"{stale} is stale: run `acerl dvc write`" in proc.stderr


# ------------------------------------------------------------------------------------ python -m aliases
def test_the_alias_line() -> None:
    assert alias_line("acerl.report.power") == (
        "acerl: python -m acerl.report.power is an alias of 'acerl report power'"
    )
    assert ALIASES["acerl.report"] == "report paper" and ALIASES["acerl.train"] == "train"


def test_every_python_m_entry_point_is_the_cli_or_an_alias() -> None:
    guarded = set()
    for path in (REPO / "src").rglob("*.py"):
        if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"):
            parts = path.relative_to(REPO / "src").with_suffix("").parts
            guarded.add(".".join(p for p in parts if p != "__main__"))
    assert guarded == set(ALIASES) | set(ENTRY_POINTS_NOT_ALIASES)


@pytest.mark.parametrize("module", sorted(ALIASES))
def test_an_alias_says_so_then_runs_its_command(module: str) -> None:
    proc = run(sys.executable, "-m", module, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [alias_line(module)]
    assert proc.stdout.startswith(f"usage: acerl {ALIASES[module]} "), proc.stdout


def test_an_alias_keeps_the_arguments_exit_code_and_error_line(tmp_path: Path) -> None:
    stray = tmp_path / "metrics.jsonl"
    stray.write_text('{"step": 1}\n')
    new = run(ACERL, "report", "training", stray)
    assert new.returncode == 4 and new.stderr.count("\n") == 1, new.stderr
    assert new.stderr.startswith("acerl report training: ") and str(stray) in new.stderr
    old = run(sys.executable, "-m", "acerl.report.training", stray)
    assert old.returncode == 4
    assert old.stderr.splitlines() == [alias_line("acerl.report.training"), new.stderr.strip()]
    assert old.stdout == new.stdout == ""


def test_the_train_alias_is_acerl_train(tmp_path: Path) -> None:
    proc = run(sys.executable, "-m", "acerl.train", "--model", "tiny", "--method", "grpo", "--root", tmp_path)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == alias_line("acerl.train")
    assert [line for line in lines if line.startswith("acerl train: ")] == [lines[-1]]
    assert lines[-1].startswith("acerl train: missing input: ")


# ---------------------------------------------------------------------------- documents name the commands
PYTHON_M = re.compile(r"python3?\s+-m\s+(acerl(?:\.\w+)+)")
REPLACED = {**ALIASES, "acerl.report.resample": "resample"}
"""Every ``python -m`` module with an ``acerl`` command, and that command."""


def alias_mentions(text: str) -> list[str]:
    """Each ``python -m <module>`` in ``text`` whose module has an ``acerl`` command, with that command."""
    return [f"python -m {m}: acerl {REPLACED[m]}" for m in PYTHON_M.findall(text) if m in REPLACED]


def user_documents() -> list[Path]:
    """What tells a user what to run: README, CONTRIBUTING, docs/*.md, the Makefile, dvc.yaml, the workflow,
    scripts and config files (not benchmarks/results/, the history of what was run)."""
    files = [REPO / name for name in ("README.md", "CONTRIBUTING.md", "Makefile", "Snakefile", "dvc.yaml")]
    files += sorted((REPO / "docs").glob("*.md"))
    for folder in ("workflow", "scripts", "config"):
        files += sorted(
            p for p in (REPO / folder).rglob("*") if p.is_file() and p.suffix not in (".csv", ".png")
        )
    return [f for f in files if f.is_file()]


def test_alias_mentions_finds_an_alias_however_it_is_written() -> None:
    text = "run `python -m acerl.report.power m.json`, then python3 -m\n    acerl.dvc write; python -m acerl.train"
    assert alias_mentions(text) == [
        "python -m acerl.report.power: acerl report power",
        "python -m acerl.dvc: acerl dvc",
        "python -m acerl.train: acerl train",
    ]
    assert alias_mentions("python -m acerl.report --out x; python -m acerl.report.resample") == [
        "python -m acerl.report: acerl report paper",
        "python -m acerl.report.resample: acerl resample",
    ]
    not_aliases = "python -m acerl config runs; `python -m acerl.<module>`; python -m acerl.cli; -m acerl.dvc"
    assert alias_mentions(not_aliases) == []


def test_no_document_tells_a_user_to_run_an_alias() -> None:
    documents = user_documents()
    assert {REPO / "README.md", REPO / "dvc.yaml", REPO / "docs" / "sharing.md"} <= set(documents)
    assert any(p.suffix == ".smk" for p in documents)
    found = {
        str(p.relative_to(REPO)): alias_mentions(p.read_text(encoding="utf-8", errors="ignore"))
        for p in documents
    }
    assert not {f: m for f, m in found.items() if m}, "write the acerl command instead"
