"""The "methods beyond the paper" table: Pass@k per method with its t interval, each method minus the baseline and
the reference paired by seed, Holm over the methods within each family, MDE; curves per method. Checked against
the project's statistics functions applied by hand and a case computed on paper."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from acerl.config import MethodsComparison
from acerl.evaluate.power import mde_paired, paired_effect
from acerl.evaluate.stats import holm, mean_ci
from acerl.report.methods import (
    BASE_LABEL,
    main,
    methods_curves,
    methods_figure,
    methods_table,
    planning_alpha,
)
from acerl.report.style import METHOD_STYLES, method_style

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
            # the MDE at the alpha the seeds were planned at (Holm's first step), not at the family's 0.05
            assert planning_alpha(MC) == pytest.approx(0.05 / 3)
            assert table.loc[m, f"mde_{ref}"] == pytest.approx(mde_paired(eff.sd, 4, 0.05 / 3), rel=1e-9)
            assert table.loc[m, f"mde_{ref}"] > eff.mde
            ps.append(eff.pvalue)
        np.testing.assert_allclose(table.loc[list(MC.methods), f"holm_{ref}"].to_numpy(), holm(ps))
    assert table.loc["nsr", "d_grpo"] > 0 and table.loc["nsr", "expected"] == "keeps"
    assert math.isnan(table.loc["grpo", "holm_grpo"])  # the baseline is not in its own family of tests


def _problems_random_by_hand(x: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The crossed seeds x problems random-effects interval of ``mean(x)``, ``x: (S, P)``, written out with loops:
    the three mean squares, ``Var = (MS_s + MS_p - MS_e) / (S P)`` with Satterthwaite's df, floored at the larger
    of ``MS_s``, ``MS_p`` over ``S P`` (with that mean square's df)."""
    n_s, n_p = x.shape
    grand = sum(sum(row) for row in x) / (n_s * n_p)
    rows = [sum(x[i]) / n_p for i in range(n_s)]
    cols = [sum(x[i][j] for i in range(n_s)) / n_s for j in range(n_p)]
    ms_s = n_p * sum((r - grand) ** 2 for r in rows) / (n_s - 1)
    ms_p = n_s * sum((c - grand) ** 2 for c in cols) / (n_p - 1)
    resid = [(x[i][j] - rows[i] - cols[j] + grand) ** 2 for i in range(n_s) for j in range(n_p)]
    ms_e = sum(resid) / ((n_s - 1) * (n_p - 1))
    combined = ms_s + ms_p - ms_e
    if combined >= max(ms_s, ms_p):
        df = combined**2 / (ms_s**2 / (n_s - 1) + ms_p**2 / (n_p - 1) + ms_e**2 / ((n_s - 1) * (n_p - 1)))
        var = combined / (n_s * n_p)
    else:
        var, df = max(ms_s, ms_p) / (n_s * n_p), float(n_s - 1 if ms_s >= ms_p else n_p - 1)
    half = float(sps.t.ppf(0.5 + level / 2, df)) * math.sqrt(var)
    return grand - half, grand + half


def test_the_absolute_level_has_its_interval_with_problems_random() -> None:
    """Each method's Pass@k carries, beside its t interval over seeds (problems fixed), the interval with seeds
    and problems random; checked against the crossed random-effects interval written out by hand, on data with
    a problem effect (so it is wider than the seeds-only one) and on the case where the floor applies."""
    df = problems(n_problems=12)
    rng = np.random.default_rng(5)
    easy = {f"p{p}": int(rng.integers(0, 8)) for p in range(12)}  # a problem effect shared by every run
    df["c"] = np.minimum(8, df["c"] // 3 + df["id"].map(easy))
    table = methods_table(df, MC, "b", "tiny", k=2)
    for m in table.index:
        sub = df[df["method"] == m].sort_values(["seed", "id"])
        x = np.array(
            [
                [100 * (1 - math.comb(8 - c, 2) / math.comb(8, 2)) for c in g["c"]]
                for _, g in sub.groupby("seed")
            ]
        )
        low, high = _problems_random_by_hand(x)
        assert (table.loc[m, "pr_low"], table.loc[m, "pr_high"]) == pytest.approx((low, high), abs=1e-9)
        assert high - low > 2 * table.loc[m, "ci"]  # the problems' spread widens it
    flat = problems(n_problems=3)  # few problems, no shared effect: the floor may apply
    table = methods_table(flat, MC, "b", "tiny", k=1)
    for m in table.index:
        sub = flat[flat["method"] == m].sort_values(["seed", "id"])
        x = np.array([[100 * c / 8 for c in g["c"]] for _, g in sub.groupby("seed")])
        assert (table.loc[m, "pr_low"], table.loc[m, "pr_high"]) == pytest.approx(
            _problems_random_by_hand(x), abs=1e-9
        )


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


def test_figure_draws_each_method_in_its_fixed_colour() -> None:
    """GRPO, ACE-GRPO and the base model keep the colours and line styles of every other report figure; a method
    without a fixed style gets the one :func:`method_style` assigns it."""
    curves = methods_curves(problems(1), list(METHODS), "b", "tiny", [1, 2, 4, 8])
    displays = {m: m.upper() for m in METHODS}
    fig = methods_figure(curves, displays, "b", base={1: 10.0, 2: 20.0, 4: 30.0, 8: 40.0})
    ax = fig.axes[0]
    lines = {c.get_label(): c.lines[0] for c in ax.containers}  # each method's error bars: its data line
    lines.update({line.get_label(): line for line in ax.get_lines() if line.get_label() == BASE_LABEL})
    for key, label in [*((m, displays[m]) for m in METHODS), ("base", BASE_LABEL)]:
        want = METHOD_STYLES.get(key) or method_style(key)
        assert (lines[label].get_color(), lines[label].get_linestyle()) == (want.color, want.linestyle), key
    assert lines["GRPO"].get_color() == "#6baed6" and lines["ACE_GRPO"].get_color() == "#08519c"


def test_missing_runs_are_a_one_line_error(tmp_path, capsys) -> None:
    code = main(["--config", "config/methods.yaml", "--root", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1 and "no Pass@k file" in err[0] and "snakemake -c2 all" in err[0]


def write_study(root, benchmarks=("synth_easy", "synth_hard"), n: int = 32, n_problems: int = 5) -> None:
    """A finished methods study's files under ``root`` for config/methods.yaml's runs: every run's Pass@k
    record on each benchmark (NSR better than the rest by design) and its metrics.jsonl (six steps), and the
    base model's Pass@k record (``include_base``: one evaluation, solving one problem in every sample)."""
    from acerl.config import Run, load_config
    from acerl.pipeline import paths
    from acerl.pipeline.records import passk_record, write_passk_record
    from acerl.report.methods import comparison_runs
    from acerl.report.training import DIAGNOSTIC_KEYS

    _, model, methods, seeds = comparison_runs(load_config(["config/config.yaml", "config/methods.yaml"]))
    rng = np.random.default_rng(7)
    ids = [f"q{i}" for i in range(n_problems)]
    for m in methods:
        for s in seeds:
            run = Run(model, m, s)
            for b in benchmarks:
                p = 0.03 + (0.03 if m == "nsr" else 0.0)
                rec = passk_record(
                    b, model, m, s, ids, n, rng.binomial(n, p, size=n_problems), [1, 2, 4, 8, 16, 32]
                )
                write_passk_record(rec, paths.passk_file(root, b, run))
            steps = [
                {"step": t, **{k: float(rng.uniform(0, 1)) for k in DIAGNOSTIC_KEYS}} for t in range(1, 7)
            ]
            mf = Path(paths.train_metrics_file(root, run))
            mf.parent.mkdir(parents=True, exist_ok=True)
            mf.write_text("".join(json.dumps(r) + "\n" for r in steps))
    for b in benchmarks:
        c = [n] + [0] * (n_problems - 1)
        rec = passk_record(b, model, "base", None, ids, n, c, [1, 2, 4, 8, 16, 32])
        write_passk_record(rec, paths.passk_file(root, b, Run(model, "base", 0)))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("methods_study")
    write_study(root)
    return root


def test_the_report_from_exported_data_is_the_report_from_the_study(study, tmp_path, capsys) -> None:
    data, figure, strip = tmp_path / "data", tmp_path / "curves.png", tmp_path / "strip.png"
    args = ["--config", "config/methods.yaml"]
    out = ["--figure", str(figure), "--strip", str(strip)]
    assert main([*args, "--root", str(study), "--export", str(data), *out]) == 0
    from_study = capsys.readouterr().out
    assert figure.stat().st_size > 0 and strip.stat().st_size > 0
    every_seed = from_study.split("## Every seed")[1].split("##")[0]
    assert [line.split(" | ")[0] for line in every_seed.splitlines() if line[2:3].isdigit()] == [
        f"| {s}" for s in range(23, 51)
    ]
    counts = pd.read_csv(data / "counts.csv")
    assert sorted(set(counts["benchmark"])) == ["synth_easy"] and len(counts) == 7 * 28 + 1
    # the base model's row: one evaluation, no interval; it solves 1 of the 5 problems in all 32 samples
    base = next(line for line in from_study.splitlines() if line.startswith("| Base model"))
    assert base == "| Base model (untrained, one evaluation) | " + " | ".join(["20.0"] * 6) + " |"
    assert main([*args, "--data", str(data)]) == 0
    assert capsys.readouterr().out == from_study
    nsr = next(line for line in from_study.splitlines() if line.startswith("| NSR |"))
    assert "| keeps |" in nsr and "| 28 |" in nsr
    for key in ("ace/overconfident_frac_neg", "actor/entropy"):
        assert sum(key in line for line in from_study.splitlines()) == 6  # each method minus GRPO
    hard = tmp_path / "hard"
    assert main([*args, "--root", str(study), "--benchmark", "synth_hard", "--export", str(hard)]) == 0
    from_study = capsys.readouterr().out
    assert "Pass@32 on synth_hard" in from_study and set(pd.read_csv(hard / "counts.csv")["benchmark"]) == {
        "synth_hard"
    }
    assert main([*args, "--data", str(hard), "--benchmark", "synth_hard"]) == 0
    assert capsys.readouterr().out == from_study
    assert main([*args, "--data", str(data), "--benchmark", "synth_hard"]) == 3  # that folder is synth_easy's


def test_a_folder_short_of_a_run_or_made_with_another_last_is_refused(study, tmp_path, capsys) -> None:
    data = tmp_path / "data"
    args = ["--config", "config/methods.yaml"]
    assert main([*args, "--root", str(study), "--export", str(data)]) == 0
    capsys.readouterr()
    assert main([*args, "--data", str(data), "--last", "3"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "made with --last 5, not 3" in err[0]
    counts = pd.read_csv(data / "counts.csv")
    drop = (counts["method"] == "kl_cov") & (counts["seed"] == 40) & (counts["benchmark"] == "synth_easy")
    counts[~drop].to_csv(data / "counts.csv", index=False)
    assert main([*args, "--data", str(data)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tiny/kl_cov/seed40" in err[0] and f"--export {data}" in err[0]
    # an export without the base model (include_base): the report says its row is missing
    assert main([*args, "--root", str(study), "--export", str(data)]) == 0
    capsys.readouterr()
    pd.read_csv(data / "counts.csv").query("method != 'base'").to_csv(data / "counts.csv", index=False)
    assert main([*args, "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "| Base model" not in out and "The base model's counts are not in these data" in out
    with pytest.raises(SystemExit) as usage:
        main([*args, "--data", str(data), "--export", str(tmp_path / "x")])
    assert usage.value.code == 2


def test_the_study_report_holds_the_methods_table(study, tmp_path) -> None:
    """The report rule's output (``render_from_files`` with the config's spec) has the methods table of every
    benchmark, the one ``acerl report methods`` prints; a study without ``report.methods`` has none."""
    from acerl.config import Run, load_config
    from acerl.pipeline import paths
    from acerl.report.frames import load_passk_problems
    from acerl.report.methods import comparison_runs, methods_report_table, methods_table
    from acerl.report.render import render_from_files
    from acerl.report.study import report_spec
    from acerl.report.table_format import to_markdown

    cfg = load_config(["config/config.yaml", "config/methods.yaml"])
    mc, model, methods, seeds = comparison_runs(cfg)
    files = [paths.passk_file(study, b, Run(model, m, s)) for b in ("synth_easy", "synth_hard") for m in methods
             for s in seeds]  # fmt: skip
    spec = report_spec(cfg)
    written = render_from_files(tmp_path / "out", spec=spec, passk_paths=files, compare_to_paper=False,
                                formats=("png",))  # fmt: skip
    problems = load_passk_problems(files)
    for bench in ("synth_easy", "synth_hard"):
        md = tmp_path / "out" / "tables" / f"methods_{bench}.md"
        assert md in written
        want = methods_report_table(methods_table(problems, mc, bench, model, 32), mc, spec.names, bench, 32)
        assert md.read_text() == to_markdown(want)
    plain = report_spec(
        load_config(["config/config.yaml", "config/methods.yaml"], overrides=["report.methods=null"])
    )
    written = render_from_files(tmp_path / "plain", spec=plain, passk_paths=files, compare_to_paper=False,
                                formats=("png",))  # fmt: skip
    assert not [p for p in written if p.name.startswith("methods_")]


REPO = Path(__file__).resolve().parents[2]
METHODS_DATA = REPO / "docs" / "results" / "methods"


def test_the_committed_comparison_regenerates_its_published_report(capsys) -> None:
    """docs/results.md's methods table comes from the committed per-seed data by the command it prints: the
    report of each benchmark folder, made with --data, is the committed report.md byte for byte; the primary
    endpoint's folder holds every run of the declared design."""
    folders = sorted(p for p in METHODS_DATA.iterdir() if p.is_dir())
    assert [p.name for p in folders][:1] == ["synth_easy"], folders
    for folder in folders:
        args = [
            "--config",
            str(REPO / "config" / "methods.yaml"),
            "--data",
            str(folder),
            "--benchmark",
            folder.name,
        ]
        assert main(args) == 0
        assert capsys.readouterr().out == (folder / "report.md").read_text()
    counts = pd.read_csv(METHODS_DATA / "synth_easy" / "counts.csv")
    assert len(counts) == 7 * 28 and sorted(set(counts["seed"])) == list(range(23, 51))
