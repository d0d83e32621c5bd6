"""The "methods beyond the paper" table: Pass@k per method with its t interval, each method minus the baseline and
the reference paired by seed, Holm over the methods within each family, MDE; curves per method. Checked against
the project's statistics functions applied by hand and a case computed on paper."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from acerl.config import MethodsComparison
from acerl.evaluate.power import paired_effect
from acerl.evaluate.stats import holm, mean_ci
from acerl.report.methods import main, methods_curves, methods_table

METHODS = ("grpo", "ace_grpo", "nsr", "psr", "kl_cov")


def problems(
    seed: int = 0, n: int = 8, n_problems: int = 6, seeds: tuple[int, ...] = (23, 24, 25, 26)
) -> pd.DataFrame:
    """Per-problem counts: c correct of n per (method, seed, problem); NSR is better than GRPO by design."""
    rng = np.random.default_rng(seed)
    rows = []
    for m in METHODS:
        for s in seeds:
            for p in range(n_problems):
                base = rng.integers(0, n + 1)
                c = min(n, base + (2 if m == "nsr" else 0))
                rows.append(
                    {"benchmark": "b", "model": "tiny", "method": m, "seed": s, "id": f"p{p}", "n": n, "c": c}
                )
    df = pd.DataFrame(rows)
    df["seed"] = df["seed"].astype("Int64")
    return df


MC = MethodsComparison(methods=["nsr", "psr", "kl_cov"], expected={"nsr": "keeps", "psr": "lowers"})


def _per_seed(df: pd.DataFrame, method: str, k: int) -> np.ndarray:
    """Pass@k (points) per seed, by hand: 1 - C(n - c, k) / C(n, k) averaged over problems."""
    sub = df[df["method"] == method]
    out = []
    for _, g in sub.groupby("seed"):
        vals = [1 - math.comb(int(r.n) - int(r.c), k) / math.comb(int(r.n), k) for r in g.itertuples()]
        out.append(100 * float(np.mean(vals)))
    return np.array(out)


def test_the_table_is_the_projects_statistics_applied_to_the_declared_comparison() -> None:
    df = problems()
    table = methods_table(df, MC, "b", "tiny", k=4)
    assert list(table.index) == ["grpo", "ace_grpo", "nsr", "psr", "kl_cov"]
    for m in table.index:
        ci = mean_ci(_per_seed(df, m, 4))
        assert table.loc[m, "passk"] == pytest.approx(ci.mean, abs=1e-9)
        assert table.loc[m, "ci"] == pytest.approx(ci.half_width, abs=1e-9)
    for ref in ("grpo", "ace_grpo"):
        ps = []
        for m in MC.methods:
            eff = paired_effect(_per_seed(df, m, 4) - _per_seed(df, ref, 4), alpha=0.05)
            assert table.loc[m, f"d_{ref}"] == pytest.approx(eff.delta, abs=1e-9)
            assert (table.loc[m, f"lo_{ref}"], table.loc[m, f"hi_{ref}"]) == pytest.approx(
                (eff.ci_low, eff.ci_high)
            )
            assert table.loc[m, f"mde_{ref}"] == pytest.approx(eff.mde, rel=1e-9)
            ps.append(eff.pvalue)
        np.testing.assert_allclose(table.loc[list(MC.methods), f"holm_{ref}"].to_numpy(), holm(ps))
    assert table.loc["nsr", "d_grpo"] > 0 and table.loc["nsr", "expected"] == "keeps"
    assert math.isnan(table.loc["grpo", "holm_grpo"])  # the baseline is not in its own family of tests


def test_a_case_by_hand() -> None:
    """Two seeds, one problem, n = 2, k = 1: Pass@1 = c / 2. GRPO c = (0, 1), NSR c = (2, 2): NSR minus GRPO =
    (100 + 50) / 2 = 75 points; GRPO's mean 25 with t half-width t(0.975, 1) * 35.36 / sqrt(2)."""
    rows = []
    for m, cs in {"grpo": (0, 1), "ace_grpo": (1, 1), "nsr": (2, 2)}.items():
        for s, c in zip((23, 24), cs, strict=True):
            rows.append(
                {"benchmark": "b", "model": "tiny", "method": m, "seed": s, "id": "p", "n": 2, "c": c}
            )
    df = pd.DataFrame(rows)
    df["seed"] = df["seed"].astype("Int64")
    table = methods_table(df, MethodsComparison(methods=["nsr"]), "b", "tiny", k=1)
    assert table.loc["nsr", "d_grpo"] == pytest.approx(75.0)
    assert table.loc["nsr", "d_ace_grpo"] == pytest.approx(50.0)
    assert table.loc["grpo", "passk"] == pytest.approx(25.0)
    assert table.loc["grpo", "ci"] == pytest.approx(
        12.706204736 * math.sqrt(2 * 25**2) / math.sqrt(2), rel=1e-6
    )
    assert table.loc["nsr", "holm_grpo"] == pytest.approx(
        table.loc["nsr", "p_grpo"]
    )  # one method: no adjustment


def test_curves_per_method() -> None:
    df = problems(1)
    curves = methods_curves(df, ["grpo", "nsr"], "b", "tiny", [1, 2, 4, 8])
    assert len(curves) == 8
    for m in ("grpo", "nsr"):
        values = curves[curves["method"] == m]["passk"].to_numpy()
        assert (np.diff(values) >= -1e-9).all()  # Pass@k grows with k
        assert values[0] == pytest.approx(_per_seed(df, m, 1).mean())


def test_missing_runs_are_a_one_line_error(tmp_path, capsys) -> None:
    code = main(["--config", "config/methods.yaml", "--root", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1 and "no Pass@k file" in err[0] and "snakemake -c2 all" in err[0]
