"""The power study's sequential design: the interim look after the first stage of seeds, and the final test.

The design (docs/reports.md, "The power study"; the rule and its error rate: :mod:`acerl.evaluate.sequential`):
stage 1 runs ``stage1`` seeds of the main grid; at the interim look, per comparison (ACE-GRPO vs GRPO, ACE-DAPO
vs DAPO) on the primary endpoint, the paired t-test (Holm over the comparisons) may stop a comparison for
efficacy at ``alpha_interim`` (Haybittle-Peto); the variance of the per-seed difference is re-estimated as
``max(Var(d_s), MS_error / P)`` and the total number of seeds is the fewest whose MDE at ``alpha_final`` and
``power`` is at most ``target`` for every comparison still open, capped at ``max_seeds``. The final test runs
on calibrated p-values (:class:`acerl.evaluate.sequential.FinalCalibration`), so the error rate over both looks
is at most ``alpha_interim + alpha_final`` despite the re-estimate.

Besides the look, the tool prints every seed's paired difference, the estimates of each stage and without the
pilot seeds (``report.pilot_seeds``: results seen before the design), each with the paired t and the sign-flip
permutation p, and at the final look TOST p-values against ``report.equivalence_margin``.

    acerl report sequential metrics/synth_easy/tiny/*/*.json --benchmark synth_easy --k 32
    acerl report sequential --counts docs/results/power/counts.csv --benchmark synth_easy --k 32 \
        --final --config config/power.yaml
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from acerl.errors import UserError
from acerl.evaluate.power import mde_paired, paired_effect, per_problem_floor_sd
from acerl.evaluate.sequential import SequentialDesign, final_calibration, seeds_needed
from acerl.evaluate.stats import holm, mean_ci, sign_flip_test, tost_paired, welch_test
from acerl.report.frames import load_passk_problems
from acerl.report.power import paired_matrices, read_counts_csv, write_counts_csv

# Snakemake's rerun triggers for stage 2: all but `params` (see stage2_command)
STAGE2_TRIGGERS = "--rerun-triggers mtime input code software-env"

__all__ = [
    "SequentialDesign",
    "look_frame",
    "planned_seeds",
    "per_seed_frame",
    "stage_frame",
    "strip_plot",
    "seen_warnings",
    "main",
]


def _differences(
    problems: pd.DataFrame, benchmark: str, model: str, method: str, baseline: str, k: int
) -> tuple[tuple[int, ...], np.ndarray]:
    """The paired seeds and the per-seed, per-problem differences ``(S, P)`` of one comparison."""
    a, b = paired_matrices(problems, benchmark, model, method, baseline)
    return a.seeds, a.passk(k) - b.passk(k)


def look_frame(
    problems: pd.DataFrame,
    comparisons: Mapping[str, str],
    benchmark: str,
    k: int,
    design: SequentialDesign,
    *,
    final: bool = False,
    margin: float | None = None,
) -> pd.DataFrame:
    """One look of the design at Pass@``k`` on ``benchmark``, one row per (model, comparison).

    Columns (fractions): ``n_seeds``, ``delta``, ``level`` and ``ci_low``/``ci_high`` (the t interval at the
    look's level: ``1 - alpha_interim`` at the interim look; at the final look ``1 -`` the calibrated level of
    ``alpha_final``, :meth:`~acerl.evaluate.sequential.FinalCalibration.level`), ``p_paired`` (naive paired t),
    ``p_final`` (final look: calibrated; interim: the naive p), ``p_holm`` (Holm over the rows of ``p_final``),
    ``p_signflip`` (sign-flip permutation), ``dz`` (``mean(d_s) / sd(d_s)``), ``sd_diff``, ``sd_floor``
    (``sqrt(MS_error / P)``), ``sd_plan`` (the larger), ``mde`` (at ``sd_plan``, this look's seeds and
    ``alpha_final``), ``seeds_needed`` (for ``target``; ``max_seeds + 1``: out of reach), ``decision``:
    ``efficacy`` (interim adjusted p below ``alpha_interim``), ``continue`` (more seeds needed), ``final``.
    The final look adds ``sim_low``/``sim_high`` (intervals simultaneous over the rows: each at the calibrated
    level of ``alpha_final / rows``) and, with ``margin`` (a fraction), ``p_tost`` (calibrated).
    """
    rows = []
    for model in sorted(set(problems.loc[problems["benchmark"] == benchmark, "model"])):
        for method, baseline in comparisons.items():
            seeds, d = _differences(problems, benchmark, model, method, baseline, k)
            if len(seeds) < 2:
                raise ValueError(
                    f"{model} on {benchmark}: {method} vs {baseline} has {len(seeds)} paired seed(s); a look "
                    "needs at least 2 (run more of stage 1)"
                )
            d_s = d.mean(axis=1)
            eff = paired_effect(d_s, alpha=design.alpha_final, power=design.power)
            floor = per_problem_floor_sd(d)
            sd_plan = eff.sd if math.isnan(floor) else max(eff.sd, floor)
            need = int(seeds_needed(sd_plan, design))
            mde = mde_paired(sd_plan, eff.n_seeds, design.alpha_final, design.power)
            row = dict(model=model, method=method, baseline=baseline, n_seeds=eff.n_seeds, delta=eff.delta)
            cal = final_calibration(design, 0.0 if math.isnan(floor) else floor) if final else None
            level = 1.0 - (cal.level(design.alpha_final) if cal else design.alpha_interim)
            ci = mean_ci(d_s, level=level)
            row |= dict(level=level, ci_low=ci.low, ci_high=ci.high, p_paired=eff.pvalue)
            row["p_final"] = float(cal.pvalue(eff.pvalue)) if cal else eff.pvalue
            row |= dict(
                p_signflip=sign_flip_test(d_s).pvalue, dz=eff.delta / eff.sd if eff.sd > 0 else math.nan
            )
            row |= dict(sd_diff=eff.sd, sd_floor=floor, sd_plan=sd_plan, mde=mde, seeds_needed=need)
            if cal is not None:
                sim = mean_ci(d_s, level=1.0 - cal.level(design.alpha_final / (len(comparisons) or 1)))
                row |= dict(sim_low=sim.low, sim_high=sim.high)
                if margin is not None:
                    row["p_tost"] = float(max(cal.one_sided(p) for p in tost_paired(d_s, margin)))
            rows.append(row)
    out = pd.DataFrame(rows)
    out.insert(out.columns.get_loc("p_final") + 1, "p_holm", holm(out["p_final"].to_numpy()))
    efficacy = (out["p_holm"] < design.alpha_interim).to_numpy()
    reached = (out["seeds_needed"] <= out["n_seeds"]).to_numpy()
    out["decision"] = np.where(final | reached, "final", np.where(efficacy, "efficacy", "continue"))
    return out


def planned_seeds(look: pd.DataFrame, design: SequentialDesign) -> int:
    """Total seeds the design asks for after an interim look: the largest ``seeds_needed`` of the comparisons
    still open (capped at ``max_seeds``), at least the seeds already run."""
    open_ = look[look["decision"] == "continue"]
    done = int(look["n_seeds"].max())
    if open_.empty:
        return done
    return max(done, min(int(open_["seeds_needed"].max()), design.max_seeds))


def per_seed_frame(
    problems: pd.DataFrame,
    comparisons: Mapping[str, str],
    benchmark: str,
    k: int,
    *,
    stage1: int,
    pilot_seeds: Sequence[int] = (),
) -> pd.DataFrame:
    """Every paired seed of every comparison: ``model, method, baseline, seed, stage`` (1 for the first
    ``stage1`` seeds in order, else 2), ``pilot`` (listed in ``pilot_seeds``), ``score_method``,
    ``score_baseline`` and ``d`` (their difference; Pass@``k`` fractions)."""
    rows = []
    for model in sorted(set(problems.loc[problems["benchmark"] == benchmark, "model"])):
        for method, baseline in comparisons.items():
            a, b = paired_matrices(problems, benchmark, model, method, baseline)
            xa, xb = a.passk(k).mean(axis=1), b.passk(k).mean(axis=1)
            for i, seed in enumerate(a.seeds):
                rows.append(
                    (model, method, baseline, seed, 1 if i < stage1 else 2, seed in set(pilot_seeds), xa[i],
                     xb[i], xa[i] - xb[i])
                )  # fmt: skip
    cols = ["model", "method", "baseline", "seed", "stage", "pilot", "score_method", "score_baseline", "d"]
    return pd.DataFrame(rows, columns=cols)


def stage_frame(per_seed: pd.DataFrame, *, level: float = 0.95) -> pd.DataFrame:
    """Per comparison, the estimate on each subset of seeds: ``all``, ``stage 1``, ``stage 2``, ``without
    pilot`` (where some seeds are pilot) and ``stage 2 - stage 1`` (the difference of the stages' means with
    Welch's test). Columns: ``n_seeds``, ``delta``, ``ci_low``/``ci_high`` (t, at ``level``, unadjusted),
    ``p_t`` (paired t; Welch's for the stage difference), ``p_signflip`` (sign-flip permutation; ``nan`` for
    the stage difference), ``flips`` (exact or Monte Carlo)."""
    rows = []
    for (model, method, baseline), grp in per_seed.groupby(["model", "method", "baseline"], sort=False):
        subsets = {"all": grp, "stage 1": grp[grp["stage"] == 1], "stage 2": grp[grp["stage"] == 2]}
        if grp["pilot"].any():
            subsets["without pilot"] = grp[~grp["pilot"]]
        for name, sub in subsets.items():
            if sub.empty:
                continue
            d = sub["d"].to_numpy()
            ci, flip = mean_ci(d, level=level), sign_flip_test(d)
            p_t = paired_effect(d).pvalue
            rows.append((model, method, baseline, name, len(d), ci.mean, ci.low, ci.high, p_t, flip.pvalue,
                         flip.method if len(d) >= 2 else ""))  # fmt: skip
        s1, s2 = (grp.loc[grp["stage"] == s, "d"].to_numpy() for s in (1, 2))
        if len(s1) >= 2 and len(s2) >= 2:
            w = welch_test(s2, s1)
            diff = float(s2.mean() - s1.mean())
            se = math.sqrt(s1.var(ddof=1) / len(s1) + s2.var(ddof=1) / len(s2))
            half = float(sps.t.ppf(0.5 + level / 2.0, w.df)) * se if math.isfinite(w.df) else math.nan
            rows.append((model, method, baseline, "stage 2 - stage 1", len(s1) + len(s2), diff, diff - half,
                         diff + half, w.pvalue, math.nan, "Welch"))  # fmt: skip
    cols = ["model", "method", "baseline", "seeds", "n_seeds", "delta", "ci_low", "ci_high", "p_t", "p_signflip",
            "flips"]  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def strip_plot(per_seed: pd.DataFrame, path: Path, *, k: int, benchmark: str) -> Path:
    """:func:`acerl.report.per_seed.strip_figure` saved as a PNG or PDF at ``path``."""
    from acerl.report.per_seed import strip_figure

    fig = strip_figure(per_seed, k=k, benchmark=benchmark)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    return path


def seen_warnings(
    roots: Sequence[Path], per_seed: pd.DataFrame, benchmark: str, pilot_seeds: Sequence[int]
) -> list[str]:
    """One line per study folder in ``roots`` whose Pass@k results (``metrics/<benchmark>/<model>/<method>/
    seed<s>.json``) share seeds with this design's comparisons without those seeds being declared pilot: such
    seeds were seen before the design, so its primary analysis is not on fresh seeds."""
    out = []
    for root in roots:
        seen = set()
        for r in per_seed[["model", "method", "baseline"]].drop_duplicates().itertuples(index=False):
            for method in (r.method, r.baseline):
                folder = root / "metrics" / benchmark / r.model / method
                seen |= {int(p.stem[4:]) for p in folder.glob("seed*.json") if p.stem[4:].isdigit()}
        overlap = sorted((seen & set(per_seed["seed"])) - set(pilot_seeds))
        if overlap:
            out.append(
                f"seeds {overlap} of this design already have results in {root} (metrics/{benchmark}/...): they "
                "are not fresh; list them in report.pilot_seeds (the analysis without them is printed) or run "
                "the design on other seeds"
            )
    return out


def _points(df: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    out = df.copy()
    for c in cols:
        if c in out.columns:
            out[c] = out[c] * 100.0
    return out


def _load(args: argparse.Namespace) -> pd.DataFrame:
    if args.counts is not None:
        return read_counts_csv(args.counts)
    if not args.metrics:
        raise ValueError("give metrics files or --counts FILE")
    return load_passk_problems(args.metrics)


POST_HOC_TOST = (
    ", post hoc: not declared before the data were seen (report.equivalence_declared: false), so not a test of "
    "the design"
)
"""What the final look says of its TOST p where the study did not declare it beforehand."""


def _config_defaults(paths: Sequence[Path]) -> tuple[list[int], float, bool]:
    """``report.pilot_seeds``, ``report.equivalence_margin`` and ``report.equivalence_declared`` of the merged
    config files (defaults without)."""
    if not paths:
        return [], 4.0, True
    from acerl.config import load_config

    cfg = load_config(paths)
    report = cfg.report
    return list(report.pilot_seeds), float(report.equivalence_margin), bool(report.equivalence_declared)


def main(argv: list[str] | None = None) -> int:
    """Print one look of the power study's sequential design (Markdown), every seed's paired difference and
    the estimates per stage and without pilot seeds; at the interim look, the seeds the design asks for next.
    Exit code 2: too few seeds for a look, or no data (the message says which)."""
    ap = argparse.ArgumentParser(prog="acerl report sequential", description=main.__doc__)
    ap.add_argument("metrics", nargs="*", type=Path, help="Pass@k metrics files of the main grid")
    ap.add_argument("--counts", type=Path, default=None,
                    help="read the per-problem counts from this CSV (docs/results/power/counts.csv) instead")  # fmt: skip
    ap.add_argument("--export", type=Path, default=None,
                    help="write counts.csv and passk.csv of the data read to this folder")  # fmt: skip
    ap.add_argument("--benchmark", required=True, help="the primary endpoint's benchmark")
    ap.add_argument("--k", type=int, default=32, help="the primary endpoint's k (default 32)")
    ap.add_argument("--comparisons", nargs="+", default=["ace_grpo:grpo", "ace_dapo:dapo"],
                    help="method:baseline pairs")  # fmt: skip
    ap.add_argument("--final", action="store_true", help="the final look (calibrated test at alpha_final)")
    d = SequentialDesign()
    ap.add_argument("--target", type=float, default=100 * d.target, help="MDE target in points (default 4)")
    ap.add_argument("--max-seeds", type=int, default=d.max_seeds, help="cap on the total seeds (default 64)")
    ap.add_argument("--stage1", type=int, default=d.stage1, help="seeds of stage 1 (default 8)")
    ap.add_argument("--config", type=Path, action="append", default=[],
                    help="config files (report.pilot_seeds, report.equivalence_margin); repeatable")  # fmt: skip
    ap.add_argument("--pilot-seeds", type=int, nargs="*", default=None, help="overrides report.pilot_seeds")
    ap.add_argument("--margin", type=float, default=None, help="overrides report.equivalence_margin (points)")
    ap.add_argument("--seen", type=Path, action="append", default=[],
                    help="folder of a study whose results exist already (e.g. the default study's): warn when "
                    "this design's seeds overlap its runs and are not listed as pilot; repeatable")  # fmt: skip
    ap.add_argument(
        "--figure", type=Path, default=None, help="write the per-seed strip plot here (.png/.pdf)"
    )
    ap.add_argument("--write-config", type=Path, default=None,
                    help="interim look: write the stage-2 seeds as a config file to merge over config/power.yaml")  # fmt: skip
    args = ap.parse_args(argv)
    design = SequentialDesign(target=args.target / 100.0, max_seeds=args.max_seeds, stage1=args.stage1)
    try:
        pilot, margin, declared = _config_defaults(args.config)
    except UserError as err:
        print(
            f"acerl report sequential: {str(err).splitlines()[0]} (an overlay such as config/power.yaml goes over "
            "the base: --config config/config.yaml --config config/power.yaml)",
            file=sys.stderr,
        )
        return 2
    pilot = pilot if args.pilot_seeds is None else args.pilot_seeds
    margin = margin if args.margin is None else args.margin
    comparisons = dict(pair.split(":", 1) for pair in args.comparisons)
    try:
        problems = _load(args)
        if args.export is not None:
            ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128) if k <= int(problems["n"].min())]
            for path in write_counts_csv(problems, args.export, ks):
                print(f"wrote {path}")
        look = look_frame(problems, comparisons, args.benchmark, args.k, design, final=args.final,
                          margin=margin / 100.0)  # fmt: skip
        per_seed = per_seed_frame(problems, comparisons, args.benchmark, args.k, stage1=design.stage1,
                                  pilot_seeds=pilot)  # fmt: skip
    except (ValueError, OSError) as err:
        print(f"acerl report sequential: {err}", file=sys.stderr)
        return 2
    for warning in seen_warnings(args.seen, per_seed, args.benchmark, pilot):
        print(f"acerl report sequential: warning: {warning}", file=sys.stderr)
    _print_look(look, args, design, margin, declared)
    _print_seeds(per_seed, pilot, design)
    if args.figure is not None:
        print(f"\nStrip plot: {strip_plot(per_seed, args.figure, k=args.k, benchmark=args.benchmark)}")
    if not args.final:
        total = planned_seeds(look, design)
        print(f"\nThe design asks for {total} seeds in total (seeds 0..{total - 1}).")
        if args.write_config is not None:
            args.write_config.write_text(
                "# stage 2 of the power study (acerl report sequential --write-config)\n"
                f"study:\n  main:\n    seeds: [{', '.join(str(s) for s in range(total))}]\n"
            )
            print(f"Stage 2: {stage2_command(args.write_config)}")
    return 0


def _print_look(
    look: pd.DataFrame,
    args: argparse.Namespace,
    design: SequentialDesign,
    margin: float,
    declared: bool = True,
) -> None:
    shown = _points(look, ("delta", "ci_low", "ci_high", "sim_low", "sim_high", "sd_diff", "sd_floor",
                           "sd_plan", "mde"))  # fmt: skip
    if args.final:
        print(f"## Final look: Pass@{args.k} on {args.benchmark} (points)\n")
        print(f"The test: Holm over the comparisons on the calibrated p (p_final), at {design.alpha_final:g}; the "
              "interim look spent "
              f"{design.alpha_interim:g}. p_final calibrates the paired t for the re-estimated seeds (the rule's "
              "error rate over both looks stays at most "
              f"{design.alpha_interim + design.alpha_final:g}); the interval is at the calibrated level "
              "(`level`), sim_low/sim_high hold for both comparisons together; p_tost: equivalence within "
              f"+-{margin:g} points (report.equivalence_margin){POST_HOC_TOST if not declared else ''}; p_paired, "
              "p_signflip: naive, for reading. Every interval holds the benchmark's problems fixed.\n")  # fmt: skip
    else:
        print(f"## Interim look: Pass@{args.k} on {args.benchmark} (points)\n")
        print(f"The interval is at the interim's level 1 - {design.alpha_interim:g} (the level its efficacy stop "
              f"spends); efficacy at Holm p < {design.alpha_interim:g}. Not the design's answer. The interval holds "
              "the benchmark's problems fixed.\n")  # fmt: skip
    print(shown.to_markdown(index=False, floatfmt=".3f"))


def _print_seeds(per_seed: pd.DataFrame, pilot: Sequence[int], design: SequentialDesign) -> None:
    print("\n## Every seed's paired difference (points)\n")
    wide = per_seed.pivot_table(index=["seed", "stage", "pilot"], columns="method", values="d").reset_index()
    wide.columns = [str(c) for c in wide.columns]
    print(_points(wide, [c for c in wide.columns if c not in ("seed", "stage", "pilot")]).to_markdown(
        index=False, floatfmt="+.1f"))  # fmt: skip
    print(f"\n## By stage (points; stage 1 = the first {design.stage1} seeds; 95% t intervals, unadjusted)\n")
    if pilot:
        print(f"Pilot seeds (results seen before the design, report.pilot_seeds): {sorted(pilot)}.\n")
    stages = _points(stage_frame(per_seed), ("delta", "ci_low", "ci_high"))
    print(stages.to_markdown(index=False, floatfmt=".3f"))


def stage2_command(stage2_config: Path) -> str:
    """Stage 2's Snakemake command. Every job's command names the config files, so the added file changes the
    `params` of every stage-1 job: without the params trigger (nothing that decides a job differs between the
    stages) stage 1's jobs are kept and only the new seeds run."""
    return f"snakemake -c1 all --configfile config/power.yaml {stage2_config} {STAGE2_TRIGGERS}"


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.report.sequential", main))
