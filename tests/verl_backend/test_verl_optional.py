"""verl is an extra (``pip install -e .[verl]``): the core and the embedded default import and run without verl,
Ray and vLLM, and a verl run without them is a one-line error naming the fix (docs/verl.md, "Installing").

Each check runs in a fresh interpreter where a ``sys.meta_path`` finder makes the three unimportable, as in an
environment where the extra was never installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HIDDEN = ("verl", "ray", "vllm")

# Runs in the child: hide the packages, then the code given as argv[1] with the remaining argv.
PRELUDE = f"""
import importlib.abc, sys

class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HIDDEN!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by the test)", name=name)
        return None

sys.meta_path.insert(0, _Hidden())
code, sys.argv = sys.argv[1], ["acerl", *sys.argv[2:]]
exec(code)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in {HIDDEN!r})
assert not leaked, leaked
"""
CLI = "from acerl.cli import main\nrc = main()\nif rc: raise SystemExit(rc)"


def _without_verl(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE, code, *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_the_finder_hides_verl() -> None:
    proc = _without_verl("import verl")
    assert proc.returncode != 0 and "hidden by the test" in proc.stderr


@pytest.mark.parametrize("args", [("--help",), ("config", "show")], ids=["help", "config-show"])
def test_the_cli_runs_without_verl(args: tuple[str, ...]) -> None:
    proc = _without_verl(CLI, *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


def test_the_embedded_path_imports_without_verl() -> None:
    modules = [
        "acerl.cli",
        "acerl.trainers",
        "acerl.train",
        "acerl.pipeline.stages",
        "acerl.pipeline.runtime",
        "acerl.evaluate.pipeline",
        "acerl.generate",
        "acerl.algos",
        "acerl.verl_backend",
        "acerl.verl_backend.launcher",  # builds verl's command line without verl
    ]
    code = "import importlib\nfor m in " + repr(modules) + ": importlib.import_module(m)"
    proc = _without_verl(code)
    assert proc.returncode == 0, proc.stderr


def test_a_verl_run_without_verl_is_a_one_line_error_naming_the_fix(tmp_path: Path) -> None:
    args = ["train", "--config", "config/paper.yaml", "--model", "qwen25_math_7b", "--method", "ace_grpo"]
    args += ["--seed", "0", "--root", str(tmp_path / "work")]
    proc = _without_verl(CLI, *args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert "verl not installed" in lines[0] and "pip install -e .[verl]" in lines[0]
    assert "make setup" in lines[0]
    assert not (tmp_path / "work").exists()  # refused before anything is written
