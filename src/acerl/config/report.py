"""The ``report`` section of a config: the primary endpoint, the comparisons declared before their runs (methods
beyond the paper, the testbed gate) and how the report shows them (split from :mod:`acerl.config.schema`, which
it builds on)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from acerl.config.schema import Seeds, _Model

__all__ = ["MethodsComparison", "PrimaryEndpoint", "ReportConfig", "TestbedGate"]


class PrimaryEndpoint(_Model):
    """The one comparison the study is designed to test (docs/reports.md, "One test, declared")."""

    benchmark: str | None = Field(
        None,
        description="benchmark of the primary endpoint; null: the first of evaluation.benchmarks (the "
        "MATH-500-role benchmark, as the paper's headline Table 1)",
    )
    k: int | None = Field(
        None,
        ge=1,
        description="Pass@k of the primary endpoint; null: the largest of evaluation.ks (the paper's "
        "headline Pass@32)",
    )


class MethodsComparison(_Model):
    """Methods beyond the paper against the paper's two (config/methods.yaml; docs/reports.md, "Methods beyond
    the paper"), declared before any run: each method of ``methods`` minus ``baseline`` and minus ``reference``
    at the primary endpoint (``report.primary``), paired by seed; Holm over ``methods`` within each of the two
    families of tests; every other k is secondary."""

    methods: list[str] = Field(..., description="the methods compared (keys of methods)")
    baseline: str = Field(
        "grpo", description="the first reference: the primary tests are method minus baseline"
    )
    reference: str | None = Field(
        "ace_grpo", description="the second reference (secondary tests: method minus reference); null: none"
    )
    seeds: list[int] | None = Field(
        None,
        description="seeds of the analysis (fresh ones, whose results nobody saw); null: the main grid's",
    )
    expected: dict[str, Literal["keeps", "lowers", "none"]] = Field(
        {},
        description="the direction the literature expects of each method at the primary endpoint vs the "
        "baseline: keeps (raises or keeps large-k Pass@k: the positive control), lowers, none",
    )
    multiplicity: Literal["holm"] = Field("holm", description="adjustment over the methods (Holm 1979)")
    alpha: float = Field(0.05, gt=0, lt=1, description="family-wise error rate of each family of tests")


class TestbedGate(_Model):
    """The testbed gate (``acerl report gate``; config/gate.yaml; docs/tiny_task.md, "The gate"), declared before
    its runs: on the main grid's base models (independently SFT'd bases of one recipe, the unit of analysis),
    ``baseline`` must sharpen (Pass@1 above the base's) and narrow (Pass@k at the largest k below the base's), and
    ``control`` must keep coverage (Pass@k at the largest k above the baseline's, Pass@1 not below the base's).
    Each criterion is a mean over bases of the per-base difference with its t interval over bases; it passes when
    the mean reaches its threshold and the interval excludes 0 on the threshold's side."""

    baseline: str = Field(
        "grpo", description="the RL method that must sharpen and narrow (a method of the grid)"
    )
    control: str = Field(..., description="the positive control: a method built to keep coverage")
    benchmark: str | None = Field(None, description="the gate's benchmark (null: report.primary's)")
    sharpening_min: float = Field(5.0, ge=0, description="baseline Pass@1 minus the base's, points, at least")
    narrowing_min: float = Field(
        3.0, ge=0, description="base Pass@k minus the baseline's at the largest k, points"
    )
    control_min: float = Field(
        ..., ge=0, description="control minus baseline at the largest k, points: the design's MDE, declared"
    )
    control_p1_margin: float = Field(
        1.0, ge=0, description="control Pass@1 minus the base's must stay above minus this margin (points)"
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="the intervals' coverage")


class ReportConfig(_Model):
    primary: PrimaryEndpoint = Field(
        default_factory=PrimaryEndpoint,
        description="primary endpoint: each ACE method vs its baseline at Pass@k on this benchmark, Holm over the "
        "comparisons; every other test of a table is secondary, Holm over the rest of the table",
    )
    compare_to_paper: bool = Field(True, description="add an 'ours vs paper' table")
    ci: Literal["t", "normal"] = Field(
        "t",
        description="95% CI across seeds in Tables 1-2: Student t with n_seeds - 1 degrees of freedom (the honest "
        "interval for 5 seeds) or normal (1.96 s / sqrt(n), 1.42x narrower at 5 seeds); the paper does not say "
        "which it used (docs/deviations.md)",
    )
    formats: list[Literal["pdf", "png"]] = ["pdf", "png"]
    equivalence_margin: float = Field(
        4.0,
        gt=0.0,
        description="equivalence margin of ACE vs its baseline in Pass@k points: the power tables' TOST p tests "
        "|difference| < margin. Default 4: the power study's MDE target, the smallest effect its design "
        "resolves; the paper's +2.5 (MATH-500, Pass@32) lies inside it, so equivalence at 4 does not exclude "
        "the paper's effect (docs/deviations.md)",
    )
    equivalence_declared: bool = Field(
        True,
        description="whether the TOST against equivalence_margin was declared before the study's data were "
        "seen; false: the reports that print its p label it post hoc (the power study added it after its final "
        "look, config/power.yaml)",
    )
    pilot_seeds: Seeds = Field(
        [],
        description="seeds of the main grid whose results were seen before a sequential design was fixed "
        "(pilot): acerl report sequential also reports the design without them",
    )
    stage1_seeds: int | None = Field(
        None,
        ge=2,
        description="a sequential design's first stage: its first N seeds of the main grid, in order. The "
        "report's per-seed table and strip plot then mark each seed's stage, and its stage table gives each "
        "stage's estimate and their difference (null: one stage; config/power.yaml: 8)",
    )
    methods: MethodsComparison | None = Field(
        None,
        description="the comparison of methods beyond the paper (acerl report methods; config/methods.yaml)",
    )
    gate: TestbedGate | None = Field(
        None,
        description="the testbed gate (acerl report gate; config/gate.yaml): RL sharpens and narrows here",
    )
