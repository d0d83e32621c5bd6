"""``python -m acerl.dvc``: an alias of ``acerl dvc`` (:mod:`acerl.dvc.cli`)."""

from __future__ import annotations

import sys

from acerl.dvc.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.dvc", main))
