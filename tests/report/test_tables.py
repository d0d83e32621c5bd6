"""Table structure, marks and the two renderers; aggregation and significance feeding them."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from support.report_synthetic import ALPHAS, KS, MAIN, MODELS, NAMES

from acerl.evaluate.stats import holm, mean_ci, paired_test, welch_test
from acerl.report.aggregate import (
    AGG_COLUMNS,
    MissingData,
    aggregate_seeds,
    ours_vs_paper,
    significance,
    significance_from_summary,
)
from acerl.report.stat_tables import significance_table
from acerl.report.table_format import (
    LATEX,
    MARKDOWN,
    Cell,
    Row,
    Table,
    rank_marks,
    render_cell,
    to_latex,
    to_markdown,
)
from acerl.report.tables import (
    ablation_table,
    alpha_table,
    hyperparameter_table,
    ours_vs_paper_table,
    passk_table,
)


# ------------------------------------------------------------------------------------------------ marks
def test_rank_marks_best_and_second():
    assert rank_marks([70.1, 72.3, 71.0, 69.0]) == [None, "bold", "underline", None]


def test_rank_marks_ties_share_marks_competition_ranking():
    # two tied best values: both bold, nothing is second
    assert rank_marks([0.3, 0.3, 0.2, 0.2]) == ["bold", "bold", None, None]
    # a tied second place: both underlined
    assert rank_marks([81.1, 82.3, 81.1, 79.3]) == ["underline", "bold", "underline", None]
    # values equal once rounded to the shown precision tie
    assert rank_marks([74.84, 74.76, 70.0]) == ["bold", "bold", None]


def test_rank_marks_small_groups_and_missing():
    assert rank_marks([0.5]) == [None]
    assert rank_marks([0.5, 0.6]) == [None, "bold"]
    assert rank_marks([None, 0.6, float("nan"), 0.1, 0.2]) == [None, "bold", None, None, "underline"]


# ---------------------------------------------------------------------------------------------- cells
@pytest.mark.parametrize(
    ("cell", "latex", "markdown"),
    [
        (Cell(value=74.2, ci=0.8), r"74.2\tpm{0.8}", "74.2 ± 0.8"),
        (Cell(value=75.14, ci=0.76, mark="bold"), r"\textbf{75.1}\tpm{0.8}", "**75.1** ± 0.8"),
        (Cell(value=54.3, mark="underline"), r"\underline{54.3}", "<u>54.3</u>"),
        (Cell(value=float("nan"), ci=0.5), "--", "–"),
        (Cell(), "--", "–"),
        (Cell(value=-0.04, signed=True), "+0.0", "+0.0"),
        (Cell(value=3.0, signed=True, pvalue=0.0004), r"+3.0 {\scriptsize($p{<}0.001$)}", "+3.0 (p<0.001)"),
        (Cell(value=-1.25, signed=True, pvalue=0.0712), r"-1.2 {\scriptsize($p{=}0.071$)}", "-1.2 (p=0.071)"),
        (Cell(value=2.0, pvalue=float("nan")), "2.0", "2.0"),
        (Cell(raw=1e-5), r"$1 \times 10^{-5}$", "1 × 10⁻⁵"),
        (Cell(raw=5e-7), r"$5 \times 10^{-7}$", "5 × 10⁻⁷"),
        (Cell(raw=0.001), "0.001", "0.001"),
        (Cell(raw=1.0), "1.0", "1.0"),
        (Cell(raw=2048), "2048", "2048"),
        (Cell(raw=np.int64(16)), "16", "16"),
        (Cell(raw=False), "False", "False"),
        (Cell(raw="lr_schedule 50%"), r"lr\_schedule 50\%", "lr_schedule 50%"),
    ],
)
def test_render_cell(cell, latex, markdown):
    assert render_cell(cell, LATEX, 1) == latex
    assert render_cell(cell, MARKDOWN, 1) == markdown


def test_escaping_keeps_math():
    assert LATEX.escape(r"KL coefficient $\beta$ & 5% of x_1") == r"KL coefficient $\beta$ \& 5\% of x\_1"
    assert LATEX.escape(r"$a_b$ c_d") == r"$a_b$ c\_d"
    assert MARKDOWN.escape(r"mean $\pm$ CI, $\alpha$ | $x^2$") == r"mean ± CI, α \| $x^2$"
    assert MARKDOWN.escape(r"bold = $p < 0.05$; $\Delta$@1; $1 \times 10^{-5}$; $\alphax$") == (
        r"bold = p < 0.05; Δ@1; $1 \times 10^{-5}$; $\alphax$"
    )
    assert LATEX.escape("a < b > c ~ d #1") == r"a \textless{} b \textgreater{} c \textasciitilde{} d \#1"


def test_one_structure_two_renderers():
    t = Table(
        name="t",
        caption="Pass@$k$ (%)",
        label="tab:t",
        header=("Model", "@1", "@2"),
        groups=(
            (Row("A", (Cell(value=1.0), Cell(value=2.0, mark="bold"))),),
            (
                Row("B", (Cell(value=3.0, ci=0.1), Cell())),
                Row("C", (Cell(value=1.0), Cell(value=0.5)), bold_label=True),
            ),
        ),
        notes=("a note",),
    )
    tex = to_latex(t)
    assert tex.count(r"\midrule") == 2 and r"\toprule" in tex and r"\bottomrule" in tex
    assert r"\begin{tabular}{lcc}" in tex and r"\caption{Pass@$k$ (\%)}" in tex and r"\label{tab:t}" in tex
    assert r"\providecommand{\tpm}" in tex and "% a note" in tex
    assert r"B & 3.0\tpm{0.1} & -- \\" in tex and r"\textbf{C} & 1.0 & 0.5 \\" in tex
    md = to_markdown(t).splitlines()
    assert md[0] == "**Pass@k (%)**"
    assert md[2:5] == ["| Model | @1 | @2 |", "|:---|---:|---:|", "| A | 1.0 | **2.0** |"]
    assert md[5] == "| B | 3.0 ± 0.1 | – |" and md[6] == "| **C** | 1.0 | 0.5 |" and md[-1] == "a note"
    aligned = to_markdown(
        Table("t", "c", "l", ("M", "Name", "@1"), ((Row("A", (Cell(raw="x"), Cell())),),), align="llc")
    )
    assert "|:---|:---|---:|" in aligned
    assert r"\begin{tabular}{ll}" in to_latex(
        Table("t", "c", "l", ("M", "N"), ((Row("A", (Cell(),)),),), align="ll")
    )
    with pytest.raises(ValueError, match="align"):
        Table("t", "c", "l", ("M", "@1"), (), align="lcc")
    with pytest.raises(ValueError, match="row 'X' has 1 cells, expected 2"):
        Table("t", "c", "l", ("M", "@1", "@2"), ((Row("X", (Cell(),)),),))


# ------------------------------------------------------------------------------------------ aggregation
def test_aggregate_seeds_known_values():
    runs = pd.DataFrame(
        {
            "benchmark": ["b"] * 6,
            "model": ["m"] * 6,
            "method": ["x"] * 5 + ["base"],
            "seed": pd.array([0, 1, 2, 3, 4, None], dtype="Int64"),
            "k": [1] * 6,
            "pass_at_k": [0.1, 0.2, 0.3, 0.4, 0.5, 0.35],
        }
    )
    agg = aggregate_seeds(runs)
    assert list(agg.columns) == list(AGG_COLUMNS)
    x = agg[agg["method"] == "x"].iloc[0]
    m = mean_ci([0.1, 0.2, 0.3, 0.4, 0.5])
    assert x["mean"] == pytest.approx(0.3) and x["ci95"] == pytest.approx(m.half_width) and x["n_seeds"] == 5
    base = agg[agg["method"] == "base"].iloc[0]
    assert base["mean"] == 0.35 and math.isnan(base["ci95"]) and base["n_seeds"] == 1
    with pytest.raises(ValueError, match="duplicate rows"):
        aggregate_seeds(pd.concat([runs, runs.iloc[:1]]))
    with pytest.raises(ValueError, match="missing columns"):
        aggregate_seeds(runs.drop(columns=["seed"]))


def test_significance_welch_and_paired(synthetic_runs):
    sig = significance(synthetic_runs, {"ace_grpo": "grpo", "ace_dapo": "dapo"})
    assert len(sig) == 2 * 2 * 2 * 4  # benchmarks x models x comparisons x ks
    row = sig[
        (sig.benchmark == "bench_a") & (sig.model == "m_large") & (sig.method == "ace_grpo") & (sig.k == 4)
    ]
    r = row.iloc[0]
    sel = synthetic_runs[(synthetic_runs.benchmark == "bench_a") & (synthetic_runs.model == "m_large")]
    a = sel[(sel.method == "ace_grpo") & (sel.k == 4)].sort_values("seed")["pass_at_k"].to_numpy()
    b = sel[(sel.method == "grpo") & (sel.k == 4)].sort_values("seed")["pass_at_k"].to_numpy()
    assert r["p_welch"] == pytest.approx(welch_test(a, b).pvalue)
    assert r["p_paired"] == pytest.approx(paired_test(a, b).pvalue)
    assert r["delta"] == pytest.approx(a.mean() - b.mean()) and r["n"] == r["n_baseline"] == 3


def test_significance_from_summary_matches_per_seed(synthetic_runs):
    agg = aggregate_seeds(synthetic_runs)
    from_seeds = significance(synthetic_runs, {"ace_grpo": "grpo"})
    from_summary = significance_from_summary(agg, {"ace_grpo": "grpo"})
    joined = from_seeds.merge(from_summary, on=["benchmark", "model", "method", "k"], suffixes=("", "_s"))
    assert len(joined) == len(from_seeds) == 16
    np.testing.assert_allclose(joined["p_welch"], joined["p_welch_s"], rtol=1e-8)
    assert joined["p_paired_s"].isna().all()


def test_ours_vs_paper():
    keys = {"benchmark": ["b", "b"], "model": ["m", "m"], "method": ["x", "y"], "k": [1, 1]}
    ours = pd.DataFrame({**keys, "mean": [0.5, 0.6], "ci95": [0.01, np.nan], "std": np.nan, "n_seeds": 3})
    paper = pd.DataFrame({**keys, "mean": [0.45, 0.7], "ci95": np.nan, "std": np.nan, "n_seeds": pd.NA})
    cmp = ours_vs_paper(ours, paper.iloc[:1])
    assert len(cmp) == 1 and cmp["delta"].iloc[0] == pytest.approx(0.05)
    md = to_markdown(ours_vs_paper_table(ours_vs_paper(ours, paper), names=NAMES))
    assert "| b | m | x | 1 | 50.0 ± 1.0 | 45.0 | +5.0 |" in md
    with pytest.raises(MissingData):
        ours_vs_paper_table(ours_vs_paper(ours, paper.assign(model="other")), names=NAMES)


# --------------------------------------------------------------------------------------------- builders
def test_passk_table_shape_labels_and_marks(synthetic_runs):
    agg = aggregate_seeds(synthetic_runs)
    t = passk_table(agg, "bench_a", names=NAMES, models=MODELS, methods=MAIN)
    assert t.header == ("Model", "@1", "@2", "@4", "@8")
    assert [len(g) for g in t.groups] == [5, 5]
    assert [r.label for r in t.groups[0]] == [
        "Small-1B", "Small-1B + GRPO", "Small-1B + DAPO", "Small-1B + ACE-GRPO", "Small-1B + ACE-DAPO",
    ]  # fmt: skip
    base_cells = t.groups[0][0].cells
    assert all(c.ci is None or math.isnan(c.ci) for c in base_cells)  # one run: no interval
    trained = t.groups[0][1].cells[0]
    assert trained.ci is not None and trained.ci > 0
    for group in t.groups:
        for j in range(4):
            col = [r.cells[j] for r in group]
            assert [c.mark for c in col] == rank_marks([c.value for c in col])
    assert "95% confidence interval over 3 independent training runs" in t.caption
    no_ci = passk_table(agg, "bench_b", names=NAMES, models=MODELS, methods=MAIN, with_ci=False, mark=False)
    assert all(c.ci is None and c.mark is None for r in no_ci.rows for c in r.cells)
    assert not no_ci.resize
    with pytest.raises(MissingData):
        passk_table(agg, "nope", names=NAMES, models=MODELS, methods=MAIN)


def test_passk_table_cells_by_hand(synthetic_runs):
    """Every Table 1 cell from the per-seed runs by hand: ``100 * mean`` and ``100 * t_{0.975, n-1} s / sqrt(n)``
    (Student t over seeds), rendered as ``mean ± half-width`` (the paper's tables need ../shared/paper; this
    does not)."""
    from scipy.stats import t as student_t

    agg = aggregate_seeds(synthetic_runs)
    table = passk_table(agg, "bench_a", names=NAMES, models=MODELS, methods=MAIN)
    md = to_markdown(table)
    checked = 0
    for model, group in zip(MODELS, table.groups, strict=True):
        for method, row in zip(MAIN, group, strict=True):
            for k, cell in zip(KS, row.cells, strict=True):
                sel = synthetic_runs[
                    (synthetic_runs.benchmark == "bench_a")
                    & (synthetic_runs.model == model)
                    & (synthetic_runs.method == method)
                    & (synthetic_runs.k == k)
                ]
                values = [float(v) for v in sel["pass_at_k"]]
                n = len(values)
                mean = sum(values) / n
                assert cell.value == pytest.approx(100 * mean)
                if n == 1:
                    assert cell.ci is None or math.isnan(cell.ci)
                    continue
                sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
                half = student_t.ppf(0.975, n - 1) * sd / math.sqrt(n)
                assert cell.ci == pytest.approx(100 * half)
                (line,) = [x for x in md.splitlines() if x.startswith(f"| {row.label} |")]
                cells = [c.strip() for c in line.strip("|").split("|")]
                shown = re.sub(r"\*\*|</?u>", "", cells[1 + KS.index(k)])  # marks off
                assert shown == f"{100 * mean:.1f} ± {100 * half:.1f}"
                checked += 1
    assert checked == len(MODELS) * (len(MAIN) - 1) * len(KS)


def test_alpha_and_ablation_tables(synthetic_runs):
    agg = aggregate_seeds(synthetic_runs)
    t = alpha_table(agg, model="m_large", benchmark="bench_a", alpha_methods=ALPHAS, names=NAMES)
    assert [r.label for r in t.rows] == ["0.0 (GRPO)", "0.5", "1.0 (default)", "2.0"]
    assert [r.bold_label for r in t.rows] == [False, False, True, False]
    assert all(c.mark == "bold" for c in t.rows[2].cells) and t.header[1:] == ("Pass@1 (%)", "Pass@32 (%)")
    assert math.isnan(t.rows[0].cells[1].value)  # no k=32 in the synthetic runs: shown as missing
    ab = ablation_table(
        agg, model="m_large", benchmark="bench_a", names=NAMES,
        methods={"grpo": "GRPO (baseline)", "ace_grpo_relu": "ACE-ReLU", "missing": "X"},
    )  # fmt: skip
    assert [r.label for r in ab.rows] == ["GRPO (baseline)", "ACE-ReLU"]
    with pytest.raises(MissingData):
        alpha_table(agg, model="m_small", benchmark="bench_a", alpha_methods={"zzz": 0.3}, names=NAMES)


def test_hyperparameter_and_significance_tables(synthetic_runs):
    hp = {
        "m_small": {"Learning rate": 1e-6, "Thinking": None},
        "m_large": {"Learning rate": 5e-7, "Steps": 9},
    }
    t = hyperparameter_table(hp, names=NAMES)
    assert t.header == ("Hyperparameter", "Small-1B", "Large-7B")
    tex = to_latex(t)
    assert r"Learning rate & $1 \times 10^{-6}$ & $5 \times 10^{-7}$ \\" in tex
    assert r"Thinking & -- & -- \\" in tex and r"Steps & -- & 9 \\" in tex
    sig = significance(synthetic_runs, {"ace_grpo": "grpo"})
    st = significance_table(sig, "bench_a", names=NAMES, models=MODELS, comparisons={"ace_grpo": "grpo"})
    assert st.rows[0].label == "Small-1B: ACE-GRPO vs GRPO"
    assert st.header[1] == "$\\Delta$@1" and all(c.signed for c in st.rows[0].cells)
    assert "paired t-test" in st.caption and "Welch" not in st.caption and "Holm" in st.caption


def test_significance_table_is_paired_and_holm_adjusted(synthetic_runs):
    """Runs paired by seed get the paired test, corrected for multiplicity: the primary endpoint over its
    comparisons, the table's other cells over the rest (Holm); without a primary endpoint, one family."""
    comparisons = {"ace_grpo": "grpo", "ace_dapo": "dapo"}
    sig = significance(synthetic_runs, comparisons)
    assert set(sig["test"]) == {"paired"}
    np.testing.assert_array_equal(sig["p"], sig["p_paired"])
    bench = sig[sig.benchmark == "bench_a"].reset_index(drop=True)

    def shown(table):
        return {
            (row.label, k): cell.pvalue
            for group in table.groups
            for row in group
            for k, cell in zip((1, 2, 4, 8), row.cells, strict=True)
        }

    def label(r):
        return f"{NAMES.model(r.model)}: {NAMES.method(r.method)} vs {NAMES.method(r.baseline)}"

    one = significance_table(bench, "bench_a", names=NAMES, models=MODELS, comparisons=comparisons)
    expected = dict(zip([(label(r), r.k) for r in bench.itertuples()], holm(bench["p_paired"]), strict=True))
    assert shown(one) == pytest.approx(expected)
    assert f"over the table's {len(bench)} tests" in one.caption

    two = significance_table(
        bench, "bench_a", names=NAMES, models=MODELS, comparisons=comparisons, primary=("bench_a", 8)
    )
    is_primary = (bench["k"] == 8).to_numpy()
    expected = {}
    for mask in (is_primary, ~is_primary):
        fam = bench[mask]
        expected |= dict(zip([(label(r), r.k) for r in fam.itertuples()], holm(fam["p_paired"]), strict=True))
    assert shown(two) == pytest.approx(expected)
    assert "primary endpoint (@8) over its 4 comparison(s)" in two.caption
    for group in two.groups:
        for row in group:
            for cell in row.cells:
                assert (cell.mark == "bold") == (cell.pvalue < 0.05)
