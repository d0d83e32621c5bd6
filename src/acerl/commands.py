"""The ``acerl`` subcommands that run a module's own command line, and the ``python -m`` aliases of the old entry
points.

A tool that keeps its arguments in its own module is run by ``acerl``: ``acerl dvc`` is :mod:`acerl.dvc`,
``acerl report power`` is :mod:`acerl.report.power`, and so on (:data:`MODULE_COMMANDS`). The CLI hands the
module every argument after the command's name and returns what its ``main(argv)`` returns. So
``acerl report power --help`` is that module's own help, and its exit codes and one-line errors are its own.

``python -m <module>`` still runs the same code: an alias that first says on stderr which command it stands for
(:func:`run_alias`). ``python -m acerl`` is the CLI itself, not an alias.

No project imports: each module's ``__main__`` guard calls :func:`run_alias`, and the CLI sits above them all.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ModuleCommand:
    """``acerl <command> ARGS ...`` runs ``<module>.main([ARGS ...])``."""

    command: str
    """The words after ``acerl``: ``dvc``, ``report power``."""
    module: str
    """The module whose ``main(argv)`` parses and runs the command."""
    help: str
    """One line for ``acerl --help`` and ``acerl report --help``."""

    @property
    def alias(self) -> str:
        """The old entry point ``python -m <alias>`` (a package's ``__main__`` runs as the package)."""
        return self.module.removesuffix(".__main__")

    @property
    def name(self) -> str:
        """The last word of the command: the subcommand (``dvc``) or the report (``power``)."""
        return self.command.split()[-1]


MODULE_COMMANDS: tuple[ModuleCommand, ...] = (
    ModuleCommand(
        "dvc",
        "acerl.dvc.__main__",
        "write / check dvc.yaml, sync a pulled study for Snakemake, verify the DVC cache (docs/sharing.md)",
    ),
    ModuleCommand(
        "sft",
        "acerl.models.sft",
        "SFT a tiny base model on worked solutions by hand (the study's prepare-base does it for tiny models)",
    ),
    ModuleCommand(
        "update-mass",
        "acerl.diagnostics.update_mass",
        "where GRPO's and ACE's update of the same batch move probability (docs/reports.md)",
    ),
    ModuleCommand(
        "report paper",
        "acerl.report.__main__",
        "the paper's Tables 1-5 and figures from its published numbers (config/paper_results/)",
    ),
    ModuleCommand(
        "report power",
        "acerl.report.power",
        "from Pass@k files: variance decomposition, power of each comparison, designs' MDE",
    ),
    ModuleCommand(
        "report sequential",
        "acerl.report.sequential",
        "the power study's sequential design: the interim look, or the final test",
    ),
    ModuleCommand(
        "report training",
        "acerl.report.training",
        "training-batch diagnostics across seeds: each method minus its baseline, by seed",
    ),
    ModuleCommand(
        "report methods",
        "acerl.report.methods",
        "the methods beyond the paper (report.methods): Pass@k, differences, diagnostics",
    ),
    ModuleCommand(
        "report gate",
        "acerl.report.gate",
        "the testbed gate (report.gate): RL sharpens and narrows, a positive control keeps coverage",
    ),
)

ALIASES: dict[str, str] = {c.alias: c.command for c in MODULE_COMMANDS} | {"acerl.train": "train"}
"""``python -m <module>`` -> the ``acerl`` command it is an alias of (``acerl.train`` is the CLI's ``train``)."""


def alias_line(module: str) -> str:
    """What ``python -m <module>`` prints on stderr before it runs."""
    return f"acerl: python -m {module} is an alias of 'acerl {ALIASES[module]}'"


def run_alias(module: str, main: Callable[[list[str]], int | None]) -> int:
    """Run ``python -m <module>``: the alias line on stderr, then ``main`` with the command line's arguments;
    its exit code (0 for ``None``)."""
    print(alias_line(module), file=sys.stderr, flush=True)
    return main(sys.argv[1:]) or 0
