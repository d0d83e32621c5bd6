"""docs/extending.md's worked example as written: its module and its config (with the ``report.methods`` block a
plugin method needs for a comparison) load, and ``acerl report methods`` reads that comparison's runs. In a
process of its own: the plugin registers its names for good."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _write_example(dest: Path) -> Path:
    """The doc's ``my_lab/methods.py`` and ``my_lab.yaml`` (every YAML block that starts with that name) under
    ``dest``; returns the config file."""
    blocks = re.findall(r"```(\w+)\n(.*?)```", (REPO / "docs" / "extending.md").read_text(), flags=re.S)
    module = [b for lang, b in blocks if lang == "python" and b.startswith("# my_lab/methods.py")]
    config = [b for lang, b in blocks if lang == "yaml" and b.startswith("# my_lab.yaml")]
    assert len(module) == 1 and len(config) == 2, (len(module), len(config))
    (dest / "my_lab").mkdir()
    (dest / "my_lab" / "__init__.py").write_text("")
    (dest / "my_lab" / "methods.py").write_text(module[0])
    (dest / "my_lab.yaml").write_text("".join(config))
    return dest / "my_lab.yaml"


def test_the_plugin_example_gets_a_comparison_in_the_report(tmp_path: Path) -> None:
    config = _write_example(tmp_path)
    assert "report:\n  primary:" in config.read_text() and "    methods: [clipped]" in config.read_text()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "acerl",
            "report",
            "methods",
            "--config",
            str(config),
            "--root",
            str(tmp_path),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # past the config to the study's runs: GRPO and Clipped-GRPO on 3 seeds and the base model, none made here
    assert proc.returncode == 3, proc.stderr
    assert "tiny/grpo/seed0.json: no Pass@k file (7 of 7 missing)" in proc.stderr, proc.stderr
