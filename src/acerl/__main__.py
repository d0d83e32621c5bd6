"""``python -m acerl``: the ``acerl`` command where no console script is installed (a ``--target`` install, a
source checkout on PYTHONPATH). The guard matters: the grader's worker processes re-import the main module."""

import sys

from acerl.cli import main

if __name__ == "__main__":
    sys.exit(main())
