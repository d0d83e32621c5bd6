"""What each table and figure of a study's report is: its category and caption in Snakemake's HTML report.

``snakemake --report report.html`` (or ``.zip``) lists every table (``results/tables/*.html``, the Markdown
table as a page the report shows inline) and figure (``results/figures/*.png``) the report rule wrote, grouped by category, each with the caption given here
(``workflow/rules/report.smk`` passes :func:`captions` to ``workflow/report/item.rst``). A file this catalog does
not know (a table added later) still appears, under "Other tables" / "Other figures" with its name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from acerl.config import Config

__all__ = ["ReportItem", "describe", "captions", "TABLE_STEMS", "FIGURE_STEMS"]

Kind = Literal["table", "figure"]


@dataclass(frozen=True)
class ReportItem:
    category: str
    caption: str


_TABLES: tuple[tuple[str, str, str], ...] = (
    (
        r"passk_(?P<b>.+)",
        "Pass@k",
        "Pass@k (%) of every model and method on {b}: mean over seeds with the 95% confidence interval; "
        "best bold, second underlined within a model (the paper's main tables).",
    ),
    (
        r"significance_(?P<b>.+)",
        "Significance",
        "Each ACE method minus its GRPO-estimator baseline on {b}, in Pass@k points, with the paired t-test "
        "p-value where runs are paired by seed (else Welch's), Holm-adjusted (primary endpoint and the rest).",
    ),
    (
        r"power_(?P<b>.+)",
        "Significance",
        "Each ACE method minus its baseline on {b}, in Pass@k points: the paired 95% interval across seeds, the "
        "interval with seeds and problems both random, and the smallest difference the seeds could detect "
        "(MDE at 80% power).",
    ),
    (
        r"per_seed_(?P<b>.+)",
        "Significance",
        "Every seed's Pass@k on {b} (the primary endpoint): each compared method, its baseline and their "
        "difference, paired by seed; a staged design marks each seed's stage, pilot seeds are marked.",
    ),
    (
        r"stages_(?P<b>.+)",
        "Significance",
        "Each comparison on {b} (the primary endpoint) on each subset of seeds: all, each stage, without the "
        "pilot seeds, and the difference of the stages; t intervals, paired t and sign-flip p, unadjusted.",
    ),
    (
        r"methods_(?P<b>.+)",
        "Methods beyond the paper",
        "Pass@k on {b} of the methods published beside ACE (PSR, NSR, W-REINFORCE, Clip-Cov, KL-Cov): each "
        "minus GRPO and minus ACE-GRPO, paired by seed, with its t interval, Holm's p and the MDE; the direction "
        "the literature predicts, declared before any run.",
    ),
    (
        r"alpha_sensitivity",
        "Ablations",
        "Pass@k as the ACE strength alpha varies (alpha = 0 is the baseline).",
    ),
    (
        r"ablation_modulation",
        "Ablations",
        "Pass@k of the baseline, ACE with ReLU modulation and ACE with softplus modulation.",
    ),
    (
        r"hyperparameters",
        "Setup",
        "Training hyperparameters of each model (the paper's hyperparameter table).",
    ),
    (r"ours_vs_paper", "Comparison with the paper", "Our Pass@k against the paper's published numbers."),
)
_FIGURES: tuple[tuple[str, str, str], ...] = (
    (
        r"passk_curves",
        "Figures",
        "Pass@k against k for every method, per model and benchmark (log-scale k); bands: 95% t intervals "
        "across seeds, drawn from 3 seeds up.",
    ),
    (
        r"passk_difference",
        "Figures",
        "Each ACE method minus its baseline in Pass@k points against k, paired by seed: the mean difference "
        "with its paired 95% t interval; the legend gives the seeds paired. Above 0: ACE is better.",
    ),
    (
        r"per_seed_(?P<b>.+)",
        "Significance",
        "Every seed's paired difference on {b} (the primary endpoint), in Pass@k points, per comparison: stages "
        "in two colours, pilot seeds hollow, the mean of all seeds as a bar.",
    ),
    (
        r"training_dynamics",
        "Training dynamics",
        "Per training step, from each run's metrics.jsonl: batch pass rate (fraction correct), token entropy, KL to the reference, "
        "response length, ACE's mean multiplier on errors and the overconfident-error fraction of the batch; "
        "mean over seeds with a 95% t band (from 3 seeds up).",
    ),
    (
        r"penalty_multiplier",
        "Figures",
        "ACE's penalty multiplier 1 + alpha * softplus(c) on an incorrect rollout against its confidence c.",
    ),
    (
        r"oef_dynamics",
        "Figures",
        "Overconfident-error fraction and overconfidence magnitude on held-out prompts during training.",
    ),
    (r"entropy_early", "Figures", "Mean token entropy of the policy over the first training steps."),
)
TABLE_STEMS = tuple(p for p, _, _ in _TABLES)
FIGURE_STEMS = tuple(p for p, _, _ in _FIGURES)


def describe(stem: str, kind: Kind) -> ReportItem:
    """Category and caption of the table or figure written as ``<stem>.md`` / ``<stem>.png``."""
    for pattern, category, caption in _TABLES if kind == "table" else _FIGURES:
        m = re.fullmatch(pattern, stem)
        if m:
            return ReportItem(category, caption.format(**m.groupdict()))
    return ReportItem("Other tables" if kind == "table" else "Other figures", stem)


def captions(cfg: Config) -> dict[str, str]:
    """Caption of every table and figure a study can write, by file stem (Snakemake's report ``params``)."""
    stems = [
        *(
            f"{prefix}_{b}"
            for b in cfg.evaluation.benchmarks
            for prefix in ("passk", "significance", "power")
        ),
        *(p for p in TABLE_STEMS if "(" not in p),
    ]
    out = {s: describe(s, "table").caption for s in stems}
    out.update({s: describe(s, "figure").caption for s in FIGURE_STEMS})
    return out
