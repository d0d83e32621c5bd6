"""Constants and builders shared by the report tests (imported as ``report_synthetic``: a unique name, since
``conftest`` modules of several test folders would clash on ``sys.path``)."""

from __future__ import annotations

import os
from pathlib import Path

from acerl.report.spec import DisplayNames

REPO_ROOT = Path(__file__).resolve().parents[2]
KS = (1, 2, 4, 8)
MODELS = ("m_small", "m_large")
MAIN = ("base", "grpo", "dapo", "ace_grpo", "ace_dapo")
ALPHAS = {"grpo": 0.0, "ace_grpo-alpha0.5": 0.5, "ace_grpo": 1.0, "ace_grpo-alpha2": 2.0}
NAMES = DisplayNames(
    models={"m_small": "Small-1B", "m_large": "Large-7B"},
    methods={"base": "Base", "grpo": "GRPO", "dapo": "DAPO", "ace_grpo": "ACE-GRPO", "ace_dapo": "ACE-DAPO"},
    benchmarks={"bench_a": "Bench-A", "bench_b": "Bench-B"},
)


def paper_tex_path() -> Path:
    """``ace_paper.tex`` beside the repo (``../shared/paper``) or ``$ACERL_PAPER_TEX``."""
    return Path(os.environ.get("ACERL_PAPER_TEX", REPO_ROOT.parent / "shared" / "paper" / "ace_paper.tex"))
