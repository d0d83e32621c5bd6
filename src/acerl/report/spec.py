"""What a report contains: display names and which models, methods and comparisons go into which table.

The config layer (or :data:`acerl.report.paper.PAPER_SPEC` for the published numbers) fills a
:class:`ReportSpec`; the table and figure builders read nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from acerl.config import MethodsComparison

__all__ = [
    "DisplayNames",
    "AlphaSweepSpec",
    "AblationSpec",
    "ReportSpec",
    "DEFAULT_MAIN_METHODS",
    "DEFAULT_COMPARISONS",
]

DEFAULT_MAIN_METHODS = ("base", "grpo", "dapo", "ace_grpo", "ace_dapo")
"""Row order of the main Pass@k tables within each model group (paper Tables 1-2)."""

DEFAULT_COMPARISONS: Mapping[str, str] = MappingProxyType({"ace_grpo": "grpo", "ace_dapo": "dapo"})
"""ACE method -> the baseline it is tested against."""


def _frozen(m: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(m or {}))


@dataclass(frozen=True)
class DisplayNames:
    """Key -> display name (e.g. ``"ace_grpo" -> "ACE-GRPO"``); an unknown key is shown as itself."""

    models: Mapping[str, str] = field(default_factory=dict)
    methods: Mapping[str, str] = field(default_factory=dict)
    benchmarks: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("models", "methods", "benchmarks"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def model(self, key: str) -> str:
        return self.models.get(key, key)

    def method(self, key: str) -> str:
        return self.methods.get(key, key)

    def benchmark(self, key: str) -> str:
        return self.benchmarks.get(key, key)


def _frozen_seeds(m: Mapping[str, Sequence[int]] | None) -> Mapping[str, tuple[int, ...]] | None:
    return None if m is None else MappingProxyType({k: tuple(int(s) for s in v) for k, v in m.items()})


@dataclass(frozen=True)
class AlphaSweepSpec:
    """Table 4 (App. D): Pass@k of ``model`` on ``benchmark`` for each method key of ``methods`` (key -> alpha).

    ``seeds``: method key -> the seeds its row averages (:meth:`acerl.config.Config.table_rows`: rows that are
    main-grid runs average the main seeds, the others the sweep's); the caption then says how many runs each
    row averages. ``None``: every seed present, no seed note (the paper's own numbers).
    """

    model: str
    benchmark: str
    methods: Mapping[str, float]
    default_alpha: float = 1.0
    zero_label: str | None = "GRPO"  # alpha = 0 is standard GRPO: "0.0 (GRPO)"
    ks: tuple[int, ...] = (1, 32)
    seeds: Mapping[str, tuple[int, ...]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "methods", MappingProxyType({k: float(v) for k, v in self.methods.items()}))
        object.__setattr__(self, "seeds", _frozen_seeds(self.seeds))


@dataclass(frozen=True)
class AblationSpec:
    """Table 3 (Sec. 5.4): the modulation ablation, rows = ``methods`` (key -> row label) of ``model`` on
    ``benchmark``; ``seeds`` as in :class:`AlphaSweepSpec`."""

    model: str
    benchmark: str
    methods: Mapping[str, str]
    seeds: Mapping[str, tuple[int, ...]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "methods", _frozen(self.methods))
        object.__setattr__(self, "seeds", _frozen_seeds(self.seeds))


@dataclass(frozen=True)
class ReportSpec:
    """Everything the report needs besides the data.

    Attributes:
        names: display names.
        models: model order (``None``: sorted keys found in the results).
        benchmarks: benchmark order (``None``: sorted keys found).
        main_methods: row order inside each model group of the Pass@k tables (absent ones are skipped).
        comparisons: ``{ace_method: baseline}`` for the significance tables.
        no_ci_benchmarks: benchmarks whose Pass@k table shows point estimates only (paper Table 2: AIME).
        ks: the k columns (``None``: every k found).
        alpha_sweep, ablation: Tables 4 and 3 (``None``: skipped).
        diagnostic_methods: methods compared in the OEF / entropy figures (paper: GRPO vs ACE-GRPO).
        entropy_steps: last training step shown in the early-entropy figure (paper: 20).
        penalty_alpha: alpha of the penalty-multiplier figure (paper default 1.0).
        primary: the primary endpoint ``(benchmark, k)`` of the significance and power tables' multiplicity
            correction (``None``: every table is one family of secondary tests).
        equivalence_margin: the power tables' TOST margin (a fraction; ``report.equivalence_margin / 100``).
        equivalence_declared: the TOST was declared before the data (``report.equivalence_declared``); if not,
            the power tables label its p post hoc.
        pilot_seeds: seeds whose results were seen before the design (``report.pilot_seeds``): the per-seed
            view marks them and the stage table adds the estimate without them.
        stage1_seeds: a sequential design's first stage (``report.stage1_seeds``; ``None``: one stage).
        methods: the comparison of methods beyond the paper (``report.methods``; ``None``: no such table).
    """

    names: DisplayNames = field(default_factory=DisplayNames)
    models: tuple[str, ...] | None = None
    benchmarks: tuple[str, ...] | None = None
    main_methods: tuple[str, ...] = DEFAULT_MAIN_METHODS
    comparisons: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_COMPARISONS))
    no_ci_benchmarks: tuple[str, ...] = ()
    ks: tuple[int, ...] | None = None
    alpha_sweep: AlphaSweepSpec | None = None
    ablation: AblationSpec | None = None
    diagnostic_methods: tuple[str, ...] = ("grpo", "ace_grpo")
    entropy_steps: int = 20
    penalty_alpha: float = 1.0
    primary: tuple[str, int] | None = None
    equivalence_margin: float = 0.04
    equivalence_declared: bool = True
    pilot_seeds: tuple[int, ...] = ()
    stage1_seeds: int | None = None
    methods: MethodsComparison | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "comparisons", _frozen(self.comparisons))
