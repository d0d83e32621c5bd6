"""The power study's sequential design: the interim look after the first stage of seeds, and the final test.

The design (docs/reports.md, "The power study", fixed before any run of ``config/power.yaml``): stage 1 runs
``study.main.seeds`` of the main grid; at the interim look, per comparison (ACE-GRPO vs GRPO, ACE-DAPO vs DAPO)
on the primary endpoint, the paired t-test (Holm over the comparisons) may stop a comparison for efficacy at
``alpha_interim`` (Haybittle-Peto); the variance of the per-seed difference is re-estimated as
``max(Var(d_s), MS_error / P)`` (the observed variance, floored at its per-problem part, which it cannot be
below in expectation), and the total number of seeds is the fewest whose MDE at ``alpha_final`` and ``power``
is at most ``target`` for every comparison still open, capped at ``max_seeds``. The final test runs at
``alpha_final``; ``alpha_interim + alpha_final <= 0.05`` bounds the family-wise error over both looks.

    python -m acerl.report.sequential metrics/synth_easy/tiny/*/*.json --benchmark synth_easy --k 32
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from acerl.evaluate.power import mde_paired, paired_effect, per_problem_floor_sd, seeds_for_mde
from acerl.evaluate.stats import holm
from acerl.report.frames import load_passk_problems
from acerl.report.power import paired_matrices

# Snakemake's rerun triggers for stage 2: all but `params` (see stage2_command)
STAGE2_TRIGGERS = "--rerun-triggers mtime input code software-env"

__all__ = ["SequentialDesign", "look_frame", "planned_seeds", "main"]


@dataclass(frozen=True)
class SequentialDesign:
    """The stopping rule and alpha spending (docs/reports.md, "The power study"); fractions, not points."""

    target: float = 0.04
    power: float = 0.8
    alpha_interim: float = 0.001
    alpha_final: float = 0.049
    max_seeds: int = 64

    def __post_init__(self) -> None:
        if self.alpha_interim + self.alpha_final > 0.05 + 1e-12:
            raise ValueError(
                f"alpha_interim + alpha_final must be at most 0.05, got {self.alpha_interim + self.alpha_final}"
            )


def look_frame(
    problems: pd.DataFrame,
    comparisons: Mapping[str, str],
    benchmark: str,
    k: int,
    design: SequentialDesign,
    *,
    final: bool = False,
) -> pd.DataFrame:
    """One look of the design at Pass@``k`` on ``benchmark``, one row per (model, comparison).

    Columns (fractions): ``n_seeds``, ``delta``, ``ci_low``/``ci_high`` (the t interval at the look's level),
    ``p_paired``, ``p_holm`` (Holm over the rows), ``sd_diff``, ``sd_floor`` (``sqrt(MS_error / P)``),
    ``sd_plan`` (the larger), ``mde`` (at ``sd_plan``, this look's seeds and ``alpha_final``),
    ``seeds_needed`` (for ``target``; ``max_seeds + 1``: out of reach), ``decision``: ``efficacy`` (interim
    adjusted p below ``alpha_interim``), ``continue`` (more seeds needed), ``final`` (the design's seeds are
    reached, or ``final=True``: the final test at ``alpha_final``).
    """
    alpha = design.alpha_final if final else design.alpha_interim
    rows = []
    for model in sorted(set(problems.loc[problems["benchmark"] == benchmark, "model"])):
        for method, baseline in comparisons.items():
            a, b = paired_matrices(problems, benchmark, model, method, baseline)
            if len(a.seeds) < 2:
                raise ValueError(
                    f"{model} on {benchmark}: {method} vs {baseline} has {len(a.seeds)} paired seed(s); a look "
                    "needs at least 2 (run more of stage 1)"
                )
            d = a.passk(k) - b.passk(k)
            eff = paired_effect(d.mean(axis=1), alpha=design.alpha_final, power=design.power)
            floor = per_problem_floor_sd(d)
            sd_plan = eff.sd if math.isnan(floor) else max(eff.sd, floor)
            need = seeds_for_mde(
                sd_plan,
                design.target,
                alpha=design.alpha_final,
                power=design.power,
                max_seeds=design.max_seeds,
            )
            rows.append(
                (model, method, baseline, eff.n_seeds, eff.delta, eff.ci_low, eff.ci_high, eff.pvalue, eff.sd,
                 floor, sd_plan, mde_paired(sd_plan, eff.n_seeds, design.alpha_final, design.power), need)
            )  # fmt: skip
    cols = ["model", "method", "baseline", "n_seeds", "delta", "ci_low", "ci_high", "p_paired", "sd_diff",
            "sd_floor", "sd_plan", "mde", "seeds_needed"]  # fmt: skip
    out = pd.DataFrame(rows, columns=cols)
    out.insert(8, "p_holm", holm(out["p_paired"].to_numpy()))
    efficacy = (out["p_holm"] < alpha).to_numpy()
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


def main(argv: list[str] | None = None) -> int:
    """Print one look of the power study's sequential design (Markdown) and, at the interim look, the seeds the
    design asks for next. Exit code 2: too few seeds for a look (the message names the comparison)."""
    ap = argparse.ArgumentParser(prog="python -m acerl.report.sequential", description=main.__doc__)
    ap.add_argument("metrics", nargs="+", type=Path, help="Pass@k metrics files of the main grid")
    ap.add_argument("--benchmark", required=True, help="the primary endpoint's benchmark")
    ap.add_argument("--k", type=int, default=32, help="the primary endpoint's k (default 32)")
    ap.add_argument("--comparisons", nargs="+", default=["ace_grpo:grpo", "ace_dapo:dapo"],
                    help="method:baseline pairs")  # fmt: skip
    ap.add_argument("--final", action="store_true", help="the final look (test at alpha_final)")
    d = SequentialDesign()
    ap.add_argument("--target", type=float, default=100 * d.target, help="MDE target in points (default 4)")
    ap.add_argument("--max-seeds", type=int, default=d.max_seeds, help="cap on the total seeds (default 64)")
    ap.add_argument("--write-config", type=Path, default=None,
                    help="interim look: write the stage-2 seeds as a config file to merge over config/power.yaml")  # fmt: skip
    args = ap.parse_args(argv)
    design = SequentialDesign(target=args.target / 100.0, max_seeds=args.max_seeds)
    problems = load_passk_problems(args.metrics)
    comparisons = dict(pair.split(":", 1) for pair in args.comparisons)
    try:
        look = look_frame(problems, comparisons, args.benchmark, args.k, design, final=args.final)
    except ValueError as err:
        print(f"acerl.report.sequential: {err}", file=sys.stderr)
        return 2
    shown = look.copy()
    for c in ("delta", "ci_low", "ci_high", "sd_diff", "sd_floor", "sd_plan", "mde"):
        shown[c] = shown[c] * 100.0
    kind = "Final" if args.final else "Interim"
    level = design.alpha_final if args.final else design.alpha_interim
    print(f"## {kind} look: Pass@{args.k} on {args.benchmark} (points; t interval at 1 - {design.alpha_final:g}; "
          f"efficacy at Holm p < {level:g})\n")  # fmt: skip
    print(shown.to_markdown(index=False, floatfmt=".3f"))
    if not args.final:
        total = planned_seeds(look, design)
        print(f"\nThe design asks for {total} seeds in total (seeds 0..{total - 1}).")
        if args.write_config is not None:
            args.write_config.write_text(
                "# stage 2 of the power study (python -m acerl.report.sequential --write-config)\n"
                f"study:\n  main:\n    seeds: [{', '.join(str(s) for s in range(total))}]\n"
            )
            print(f"Stage 2: {stage2_command(args.write_config)}")
    return 0


def stage2_command(stage2_config: Path) -> str:
    """Stage 2's Snakemake command. Every job's command names the config files, so the added file changes the
    `params` of every stage-1 job: without the params trigger (nothing that decides a job differs between the
    stages) stage 1's jobs are kept and only the new seeds run."""
    return f"snakemake -c1 all --configfile config/power.yaml {stage2_config} {STAGE2_TRIGGERS}"


if __name__ == "__main__":
    sys.exit(main())
