"""``python -m acerl.train ...``: an alias of ``acerl train ...`` (one option set; see ``acerl train -h``).

Exit codes: those of every ``acerl`` command (:mod:`acerl.errors`), and 75
(:data:`acerl.train.PREEMPTED_EXIT_CODE`) after a SIGTERM / SIGUSR1 checkpoint: rerun the same command to resume.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from acerl.cli import main as cli_main

    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.train", main))
