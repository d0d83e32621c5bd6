"""``acerl report paper --out DIR [--paper-dir config/paper_results]``: regenerate the paper's Tables 1-5 (and
the Fig. 1 analogue and Pass@k curves) from its published numbers. A study's report is ``acerl report``.

``python -m acerl.report`` is an alias of ``acerl report paper``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acerl report paper", description=__doc__)
    parser.add_argument(
        "--out", type=Path, required=True, help="output folder (tables/, figures/, report.md)"
    )
    parser.add_argument(
        "--paper-dir", type=Path, default=None, help="folder of the paper's numbers (config/paper_results)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("fontTools").setLevel(logging.WARNING)
    from acerl.report.render import render_paper

    for path in render_paper(args.out, args.paper_dir):
        print(path)
    return 0


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.report", main))
