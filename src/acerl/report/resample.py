"""Evaluation noise measured directly: trained policies re-evaluated with other evaluation seeds.

The variance decomposition of :mod:`acerl.report.power` infers the evaluation-sampling part of a paired
difference from a Beta model and treats the two methods' samples as independent, an upper bound when they
share evaluation random numbers (:mod:`acerl.generate.rollout`, common random numbers). This module measures it:
for each evaluation seed ``e`` the policies of the compared methods at one training seed are sampled, graded and
scored exactly as the pipeline does (:func:`~acerl.evaluate.pipeline.sample_run`, ``grade_run``, ``passk_run``)
with ``evaluation.seed = e``, in ``<out>/eval<e>`` (a work directory that links the study's ``data``, ``models``
and ``runs`` and writes its own ``generations``, ``scored`` and ``metrics``). Per comparison and k it reports
the SD over ``e`` of

- ``sd_paired``: ACE minus its baseline, both evaluated with seed ``e`` -- the evaluation noise the study's
  paired comparison carries;
- ``sd_independent``: ACE with seed ``e`` minus the baseline with the next seed -- the same without common
  random numbers;
- ``sd_run``: one run's score (the mean over the compared methods of the SD of a single Pass@k).

Usage (after ``make run``; docs/results.md records what it printed): ``acerl resample``, whose config composes as
every ``acerl`` command's (``config/config.yaml`` under each ``--config FILE``)::

    acerl resample --root . --benchmark synth_easy --seed 0 --eval-seeds 1 2 3 4 5 6
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from acerl.config import Config, Run
from acerl.errors import MissingInputError
from acerl.evaluate.pipeline import grade_run, passk_run, sample_run
from acerl.pipeline import paths
from acerl.pipeline.records import read_json, validate_passk_record

__all__ = ["evaluation_root", "noise_frame", "noise_markdown", "resample"]

LINKED = ("data", "models", "runs")  # read-only inputs shared with the study's work directory


def evaluation_root(root: Path | str, out: Path | str, eval_seed: int) -> Path:
    """``<out>/eval<eval_seed>``: a work directory whose ``data``, ``models`` and ``runs`` link to ``root``'s."""
    work = Path(out) / f"eval{eval_seed}"
    for name in LINKED:
        target = (Path(root) / name).resolve()
        if not target.is_dir():
            raise MissingInputError(f"{target} is missing: run the study (`make run`) before resampling it")
    work.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link, target = work / name, (Path(root) / name).resolve()
        if not link.exists():
            os.symlink(target, link, target_is_directory=True)
    return work


def resample(
    cfg: Config,
    root: Path | str,
    out: Path | str,
    benchmark: str,
    runs: Sequence[Run],
    eval_seeds: Sequence[int],
) -> pd.DataFrame:
    """Evaluate every run with every evaluation seed (finished evaluations are reused); one row per (run,
    evaluation seed, k) with the Pass@k (fraction)."""
    rows = []
    for e in eval_seeds:
        ev_cfg = cfg.model_copy(update={"evaluation": cfg.evaluation.model_copy(update={"seed": int(e)})})
        work = evaluation_root(root, out, e)
        for run in runs:
            if not paths.passk_file(work, benchmark, run).is_file():
                sample_run(ev_cfg, run, benchmark, work, progress=False)
                grade_run(ev_cfg, run, benchmark, work)
                passk_run(ev_cfg, run, benchmark, work)
            file = paths.passk_file(work, benchmark, run)
            record = validate_passk_record(read_json(file), str(file))
            rows += [
                {"method": run.method, "seed": run.seed, "eval_seed": int(e), "k": int(k), "pass": float(v)}
                for k, v in record["pass_at_k"].items()
            ]
    return pd.DataFrame(rows)


def noise_frame(scores: pd.DataFrame, comparisons: Mapping[str, str]) -> pd.DataFrame:
    """Per (method, baseline, k): the SDs over evaluation seeds described in the module docstring (fractions)."""
    wide = scores.pivot_table(index=["k", "eval_seed"], columns="method", values="pass")
    rows = []
    for (method, base), k in ((c, k) for c in comparisons.items() for k in sorted(scores["k"].unique())):
        a = wide.loc[k, method].to_numpy()
        b = wide.loc[k, base].to_numpy()
        rows.append(
            {
                "method": method,
                "baseline": base,
                "k": int(k),
                "n_eval_seeds": len(a),
                "delta": float(np.mean(a - b)),
                "sd_paired": float(np.std(a - b, ddof=1)),
                "sd_independent": float(np.std(a - np.roll(b, -1), ddof=1)),
                "sd_run": float((np.std(a, ddof=1) + np.std(b, ddof=1)) / 2),
            }
        )
    return pd.DataFrame(rows)


def noise_markdown(
    cfg: Config,
    root: Path | str,
    out: Path | str,
    benchmark: str,
    model: str,
    seed: int,
    eval_seeds: Sequence[int],
    comparisons: Mapping[str, str],
) -> str:
    """Re-evaluate the compared methods' policies (``model``, training ``seed``) with each evaluation seed in
    ``out``; the noise table (:func:`noise_frame`) in Pass@k points, as Markdown with its heading."""
    methods = sorted({m for pair in comparisons.items() for m in pair})
    scores = resample(cfg, root, out, benchmark, [Run(model, m, seed) for m in methods], eval_seeds)
    frame = noise_frame(scores, comparisons)
    cols = ["delta", "sd_paired", "sd_independent", "sd_run"]
    frame[cols] = (frame[cols] * 100).round(2)
    heading = f"## Evaluation noise on {benchmark}, training seed {seed} (Pass@k points)"
    return f"{heading}\n\n{frame.to_markdown(index=False)}"


if __name__ == "__main__":
    print(
        "python -m acerl.report.resample is now `acerl resample` (same options; acerl resample -h)",
        file=sys.stderr,
    )
    raise SystemExit(2)
