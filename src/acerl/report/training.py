"""Training-batch diagnostics across seeds: each run's overconfident-error fraction, overconfidence magnitude and
token entropy over its last steps, and ACE minus its baseline paired by seed.

Every training run logs the ``ace/`` metrics on each batch it trains on, the GRPO and DAPO runs too (measured as
ACE with its default parameters would measure them, multiplier 1; docs/training.md). So every seed of a study
answers "does ACE damp overconfidence?", not only the few runs the held-out diagnostics stage checkpoints. A
run's value is the mean over its last ``--last`` steps that updated (steps without an update log NaN).

    acerl report training runs/tiny/*/seed*/metrics.jsonl --last 5 --export docs/results/power/training.csv
    acerl report training --frame docs/results/power/training.csv      # the same table from the committed file
    acerl report training runs/*/*/seed*/metrics.jsonl --tensorboard tracker   # curves of finished runs

``--tensorboard DIR`` writes each run's logged metrics as TensorBoard event files in ``DIR/<model>/<method>/seed<s>``
(``tensorboard --logdir DIR``), after the fact: a run trained with ``compute.tracker: none`` has its curves too.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from acerl.errors import BadInputError
from acerl.evaluate.power import paired_effect
from acerl.evaluate.stats import holm
from acerl.pipeline.io import read_jsonl, write_text

__all__ = [
    "DIAGNOSTIC_KEYS",
    "Curve",
    "TRAINING_CURVES",
    "CURVE_COLUMNS",
    "LAST_STEPS_COLUMNS",
    "last_steps_frame",
    "read_last_steps_csv",
    "curves_frame",
    "paired_diagnostics",
    "main",
]

DIAGNOSTIC_KEYS: Mapping[str, str] = {
    "ace/overconfident_frac_neg": "overconfident-error fraction (c > 0 among the errors ACE amplifies)",
    "ace/confidence_mean_neg": "overconfidence magnitude (mean c over those errors)",
    "actor/entropy": "token entropy of the sampling policy",
    "train/pass_rate": "training-batch accuracy",
}


@dataclass(frozen=True)
class Curve:
    """One training-dynamics panel: the metric keys that hold it (the local trainer's first, then verl's), its
    axis label and the range the quantity can take (a band is clipped to it)."""

    name: str
    label: str
    keys: tuple[str, ...]
    bounds: tuple[float, float] = (-math.inf, math.inf)


TRAINING_CURVES: tuple[Curve, ...] = (
    # the fraction correct, not the reward: GRPO's rewards are 0/1 and DAPO's +-1, so their means share no axis
    # (verl logs only its reward, critic/score/mean: a verl run has no point here)
    Curve("pass_rate", "training pass rate\n(fraction correct)", ("train/pass_rate",), (0.0, 1.0)),
    Curve("entropy", "token entropy (nats)", ("actor/entropy",), (0.0, math.inf)),
    Curve("kl", "KL to reference\n(k3 estimate)", ("actor/kl_loss",), (0.0, math.inf)),
    Curve(
        "length",
        "response length\n(tokens)",
        ("train/response_length_mean", "response_length/mean"),
        (0.0, math.inf),
    ),  # fmt: skip
    Curve(
        "multiplier",
        "ACE multiplier on errors\n" + r"$1 + \alpha\,\phi(c)$",
        ("ace/multiplier_mean_neg",),
        (1.0, math.inf),
    ),  # fmt: skip
    Curve("oef", "overconfident-error\nfraction", ("ace/overconfident_frac_neg",), (0.0, 1.0)),
)
"""The panels of the training-dynamics figure; a run's ``metrics.jsonl`` holds the local trainer's keys
(:mod:`acerl.train.metrics`) or verl's, merged by :func:`acerl.verl_backend.launcher.collect_metrics`."""

CURVE_COLUMNS = ("model", "method", "seed", "step", "curve", "value")

_RUN_PATH = re.compile(r"(?P<model>[^/]+)/(?P<method>[^/]+)/seed(?P<seed>\d+)/metrics\.jsonl$")


def _run_of(path: Path) -> tuple[str, str, int]:
    m = _RUN_PATH.search(path.as_posix())
    if m is None:
        raise BadInputError(
            f"{path}: not a training run's metrics file; pass runs/<model>/<method>/seed<s>/metrics.jsonl"
        )
    return m["model"], m["method"], int(m["seed"])


def last_steps_frame(
    paths: Iterable[str | Path], keys: Sequence[str] = tuple(DIAGNOSTIC_KEYS), last: int = 5
) -> pd.DataFrame:
    """One row per (run, key): ``model``, ``method``, ``seed``, ``key``, ``value`` = the mean of ``key`` over the
    run's last ``last`` steps, NaN entries (a step without an update) skipped; ``steps`` = the run's steps."""
    if last < 1:
        raise ValueError(f"last must be >= 1, got {last}")
    rows = []
    for path in map(Path, paths):
        model, method, seed = _run_of(path)
        records = read_jsonl(path, required=("step",), remake="rerun the training run")
        tail = records[-last:]
        for key in keys:
            values = np.array([r.get(key, math.nan) for r in tail], dtype=np.float64)
            finite = values[np.isfinite(values)]
            value = float(finite.mean()) if finite.size else math.nan
            rows.append((model, method, seed, key, value, len(records)))
    return pd.DataFrame(rows, columns=list(LAST_STEPS_COLUMNS))


LAST_STEPS_COLUMNS = ("model", "method", "seed", "key", "value", "steps")
"""The columns of :func:`last_steps_frame` and of the CSV file ``--export`` writes."""


def read_last_steps_csv(path: Path) -> tuple[pd.DataFrame, int]:
    """A :func:`last_steps_frame` written with ``--export`` (one row per run and key, and the ``last`` it was
    made with), as that frame and that ``last``.

    Raises:
        BadInputError: the file is missing, unreadable or lacks a column (the message names it).
    """
    try:
        frame = pd.read_csv(path, dtype={"model": str, "method": str, "key": str})
    except (OSError, ValueError) as err:
        raise BadInputError(
            f"{path}: not a training-diagnostics CSV ({err}); write it with --export"
        ) from None
    missing = [c for c in (*LAST_STEPS_COLUMNS, "last") if c not in frame.columns]
    if missing:
        raise BadInputError(
            f"{path}: no column {missing[0]!r}; write it with `acerl report training ... --export`"
        )
    lasts = sorted(set(frame["last"]))
    if len(lasts) != 1:
        raise BadInputError(f"{path}: rows made with different --last ({lasts}); export it again")
    return frame[list(LAST_STEPS_COLUMNS)], int(lasts[0])


def curves_frame(paths: Iterable[str | Path], curves: Sequence[Curve] = TRAINING_CURVES) -> pd.DataFrame:
    """Every step of every run as one long table (:data:`CURVE_COLUMNS`), one row per (run, step, curve) whose
    value is finite; each curve takes the first of its keys a record holds.

    Raises:
        BadInputError: a path that is not ``runs/<model>/<method>/seed<s>/metrics.jsonl``, or a corrupt file
            (the message names it).
    """
    rows = []
    for path in map(Path, paths):
        model, method, seed = _run_of(path)
        for record in read_jsonl(path, required=("step",), remake="rerun the training run"):
            for curve in curves:
                value = next((record[k] for k in curve.keys if record.get(k) is not None), None)
                if isinstance(value, int | float) and math.isfinite(value):
                    rows.append((model, method, seed, int(record["step"]), curve.name, float(value)))
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))


def paired_diagnostics(
    frame: pd.DataFrame, comparisons: Mapping[str, str], alpha: float = 0.05
) -> pd.DataFrame:
    """Per (model, comparison, key): both methods' means over the seeds they share, the difference paired by
    seed with its ``1 - alpha`` t interval and two-sided p-value (:func:`acerl.evaluate.power.paired_effect`),
    and ``p_holm``, Holm-adjusted over the table's rows (every row is a secondary question); seeds where either
    value is NaN are left out (``n_seeds`` says how many remain); a key no seed has for both methods has no row."""
    rows = []
    for model in sorted(set(frame["model"])):
        runs = frame[frame["model"] == model].pivot_table(
            index="seed", columns=["key", "method"], values="value", dropna=False
        )
        for method, baseline in comparisons.items():
            for key in sorted(set(frame["key"]), key=list(frame["key"]).index):
                if (key, method) not in runs.columns or (key, baseline) not in runs.columns:
                    continue
                pair = runs[[(key, method), (key, baseline)]].dropna()
                if pair.empty:  # no seed where both runs logged it (a key this trainer does not log)
                    continue
                a, b = pair[(key, method)].to_numpy(), pair[(key, baseline)].to_numpy()
                eff = paired_effect(a - b, alpha=alpha)
                rows.append((model, method, baseline, key, a.mean() if a.size else math.nan,
                             b.mean() if b.size else math.nan, eff.n_seeds, eff.delta, eff.ci_low,
                             eff.ci_high, eff.pvalue))  # fmt: skip
    cols = ["model", "method", "baseline", "key", "mean_method", "mean_baseline", "n_seeds", "delta", "ci_low",
            "ci_high", "p_paired"]  # fmt: skip
    out = pd.DataFrame(rows, columns=cols)
    out["p_holm"] = holm(out["p_paired"].to_numpy()) if len(out) else []
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the paired training-batch diagnostics (Markdown). Exit code 4: a file that is not a training run's
    metrics (the message names it)."""
    ap = argparse.ArgumentParser(prog="acerl report training", description=main.__doc__)
    ap.add_argument("metrics", nargs="*", type=Path, help="runs/<model>/<method>/seed<s>/metrics.jsonl files")
    ap.add_argument("--last", type=int, default=None,
                    help="steps at the end of each run to average (default 5; with --frame, the file's)")  # fmt: skip
    ap.add_argument("--comparisons", nargs="+", default=["ace_grpo:grpo", "ace_dapo:dapo"],
                    help="method:baseline pairs")  # fmt: skip
    ap.add_argument("--export", type=Path, default=None,
                    help="also write each run's values (one row per run and key) to this CSV file")  # fmt: skip
    ap.add_argument("--frame", type=Path, default=None,
                    help="read each run's values from a CSV file --export wrote, instead of metrics files")  # fmt: skip
    ap.add_argument("--tensorboard", type=Path, default=None, metavar="DIR",
                    help="write each run's metrics as TensorBoard event files in DIR/<model>/<method>/seed<s> "
                    "instead of the table (`tensorboard --logdir DIR`)")  # fmt: skip
    args = ap.parse_args(argv)
    if bool(args.metrics) == (args.frame is not None):
        ap.error("give metrics files or --frame FILE (one of the two)")
    if args.tensorboard is not None:
        return _export_tensorboard(args.metrics, args.tensorboard)
    try:
        if args.frame:
            frame, last = read_last_steps_csv(args.frame)
            if args.last is not None and args.last != last:
                raise BadInputError(
                    f"{args.frame}: made with --last {last}, not {args.last}; drop --last, or export again "
                    f"from the runs with --last {args.last}"
                )
        else:
            last = 5 if args.last is None else args.last
            frame = last_steps_frame(args.metrics, last=last)
    except BadInputError as err:
        print(f"acerl report training: {err}", file=sys.stderr)
        return 4
    if args.export is not None:
        write_text(args.export, frame.assign(last=last).to_csv(index=False, float_format="%.10g"))
    table = paired_diagnostics(frame, dict(pair.split(":", 1) for pair in args.comparisons))
    print(f"## Training-batch diagnostics, mean of each run's last {last} steps; method minus baseline "
          "paired by seed, 95% t interval, p Holm-adjusted over the table\n")  # fmt: skip
    print(table.to_markdown(index=False, floatfmt=".4f"))
    return 0


def _export_tensorboard(metrics: Sequence[Path], out: Path) -> int:
    """``--tensorboard``: one event-file folder per run (exit 4 naming a file that is not a run's metrics)."""
    from acerl.train.metrics import read_metrics
    from acerl.train.tracker import export_tensorboard

    try:
        runs = [(path, _run_of(path)) for path in metrics]
        for path, _ in runs:
            if not path.is_file():
                raise BadInputError(f"{path}: no such metrics file; train the run first")
    except BadInputError as err:
        print(f"acerl report training: {err}", file=sys.stderr)
        return 4
    for path, (model, method, seed) in runs:
        folder = out / model / method / f"seed{seed}"
        steps = export_tensorboard(read_metrics(path), folder)
        print(f"{path}: {steps} steps -> {folder}")
    print(f"view them with: tensorboard --logdir {out}")
    return 0


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.report.training", main))
