"""The paper's figures, drawn from DataFrames with matplotlib's object API (no pyplot state, Agg/PDF canvases).

- :func:`penalty_multiplier_figure` — Fig. 1 analogue: the negative-advantage multiplier ``1 + alpha * phi(c)``
  against the confidence shift ``c`` for GRPO (``phi = 0``: flat 1), ACE-ReLU and ACE-Softplus (paper Eq. 5).
- :func:`passk_curves_figure` — Fig. 2: Pass@k against k (log2 axis), one panel per model x benchmark, mean
  line with its 95% CI band across seeds.
- :func:`oef_figure` — Fig. 3: overconfident-error fraction and mean overconfidence magnitude over training
  steps (mean over seeds with a 95% t band).
- :func:`entropy_figure` — Fig. 4: token entropy over the first training steps.
- :func:`passk_difference_figure` — each ACE method minus its baseline against k, paired by seed, with the
  paired 95% t interval and the seed count in the legend.
- :func:`training_dynamics_figure` — per step of training: pass rate, entropy, KL, response length, ACE's
  multiplier and the overconfident-error fraction of the training batch, mean over seeds with a 95% t band.

Bands are 95% t intervals across seeds, clipped to the quantity's range, and drawn only from
:data:`MIN_BAND_SEEDS` seeds up (with two seeds the t quantile is 12.7 and the band fills the axis). Baselines
are dashed and drawn above the solid ACE line of the same hue, so both stay visible where they coincide.

:func:`save_figure` writes a figure as PDF and PNG, each atomically.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator, PercentFormatter

from acerl.evaluate.power import paired_effect
from acerl.pipeline.io import atomic_path
from acerl.report.aggregate import AGG_COLUMNS, MissingData, require_columns, seed_summary
from acerl.report.frames import RUN_COLUMNS
from acerl.report.spec import DisplayNames
from acerl.report.style import method_style, report_style
from acerl.report.training import CURVE_COLUMNS, TRAINING_CURVES, Curve

__all__ = [
    "save_figure",
    "penalty_multiplier",
    "penalty_multiplier_figure",
    "passk_curves_figure",
    "oef_figure",
    "entropy_figure",
    "MIN_BAND_SEEDS",
    "paired_difference_frame",
    "passk_difference_figure",
    "training_dynamics_figure",
]

MIN_BAND_SEEDS = 3
"""Fewest seeds for which a figure draws a confidence band (a 2-seed t band spans the axis and shows nothing)."""


def save_figure(fig: Figure, path_stem: str | Path, formats: Sequence[str] = ("pdf", "png")) -> list[Path]:
    """Save ``fig`` as ``<path_stem>.pdf`` and ``<path_stem>.png`` (each written to a temp file, then renamed).

    Returns:
        The written paths, in the order of ``formats``.
    """
    stem = Path(path_stem)
    out = []
    with report_style():
        for fmt in formats:
            path = stem.with_name(f"{stem.name}.{fmt}")
            with atomic_path(path) as tmp:
                fig.savefig(tmp, format=fmt, metadata=_metadata(fmt))
            out.append(path)
    return out


def _metadata(fmt: str) -> dict[str, str | None]:
    # Fixed metadata: no creation date, so the same figure gives the same PDF bytes (stable caches).
    if fmt == "pdf":
        return {"Creator": "acerl.report", "Producer": None, "CreationDate": None}
    if fmt == "png":
        return {"Software": "acerl.report"}
    return {}


# ------------------------------------------------------------------------------------------------- Fig 1
def penalty_multiplier(c: np.ndarray, alpha: float, modulation: str) -> np.ndarray:
    """``1 + alpha * phi(c)`` (paper Eq. 5, the factor on the negative advantage), ``c: (N,)``.

    ``modulation``: ``"none"`` (GRPO: ``phi = 0``) or a name of :data:`acerl.algos.advantages.MODULATIONS`
    (``"softplus"``, ``"relu"``): the very functions the ACE advantage uses.
    """
    import torch  # lazy: only this figure needs torch

    from acerl.algos.advantages import MODULATIONS

    valid = ("none", *MODULATIONS.names())
    if modulation not in valid:
        raise ValueError(f"unknown modulation {modulation!r}; valid: {', '.join(valid)}")
    t = torch.as_tensor(np.asarray(c, dtype=np.float64))
    phi = torch.zeros_like(t) if modulation == "none" else MODULATIONS.get(modulation)(t)
    return (1.0 + alpha * phi).numpy()


def penalty_multiplier_figure(
    alpha: float = 1.0, c_range: tuple[float, float] = (-4.0, 4.0), names: DisplayNames | None = None
) -> Figure:
    """Fig. 1 analogue: how strongly each error is penalised relative to GRPO as a function of its confidence
    shift ``c_i = log pi_theta(y_i|x) / pi_ref(y_i|x)``; marks the paper's worked examples ``c = -3, 0, 2``."""
    names = names or DisplayNames()
    c = np.linspace(c_range[0], c_range[1], 801)
    curves = [
        ("grpo", names.method("grpo") if "grpo" in names.methods else "GRPO", "none"),
        ("ace_grpo_relu", "ACE-ReLU", "relu"),
        ("ace_grpo", "ACE-Softplus", "softplus"),
    ]
    with report_style():
        fig = Figure(figsize=(5.0, 3.1), layout="constrained")
        ax = fig.add_subplot()
        ax.axvspan(c_range[0], 0.0, color="#f2f2f2", lw=0, zorder=0)
        ax.axvspan(0.0, c_range[1], color="#fdecea", lw=0, zorder=0)
        ax.axvline(0.0, color="#999999", lw=0.8, zorder=1)
        for method, label, mod in curves:
            st = method_style(method)
            ax.plot(
                c,
                penalty_multiplier(c, alpha, mod),
                color=st.color,
                linestyle=st.linestyle,
                lw=2.0,
                label=label,
            )
        pts = np.array([-3.0, 0.0, 2.0])
        vals = penalty_multiplier(pts, alpha, "softplus")
        ax.scatter(pts, vals, color=method_style("ace_grpo").color, s=18, zorder=5)
        for x, y in zip(pts, vals, strict=True):
            ax.annotate(
                f"{y:.2f}", (x, y), textcoords="offset points", xytext=(-4, 7), ha="right", fontsize=7.5
            )
        ymax = float(penalty_multiplier(np.array([c_range[1]]), alpha, "softplus")[0])
        ax.set_xlim(*c_range)
        ax.set_ylim(0.0, ymax * 1.08)
        region: dict[str, Any] = {"va": "top", "fontsize": 7.5}
        ax.text(
            c_range[0] + 0.15,
            ymax,
            "self-correcting /\nexploratory ($c_i \\leq 0$)",
            color="#555555",
            **region,
        )
        ax.text(0.15, ymax, "overconfident\n($c_i > 0$)", color="#a50f15", **region)
        ax.set_xlabel(r"confidence shift $c_i = \log\,\pi_\theta(y_i|x) - \log\,\pi_{\mathrm{ref}}(y_i|x)$")
        ax.set_ylabel(r"penalty multiplier $|A_i^-| \,/\, |\hat{A}_i^-|$")
        ax.set_title(rf"Penalty on incorrect rollouts ($\alpha$ = {alpha:g})")
        ax.legend(loc="center left", bbox_to_anchor=(0.0, 0.42))
    return fig


# ------------------------------------------------------------------------------------------------- Fig 2
def _log2_k_axis(ax: Axes, ks: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(list(ks)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(round(v))}"))
    ax.set_xlim(min(ks) / 1.15, max(ks) * 1.15)


def _band(
    ax: Axes,
    x: np.ndarray,
    mean: np.ndarray,
    ci: np.ndarray,
    color: str,
    n_seeds: np.ndarray,
    bounds: tuple[float, float] = (-math.inf, math.inf),
) -> bool:
    """``mean +- ci`` where at least :data:`MIN_BAND_SEEDS` seeds back it, clipped to ``bounds``; ``True`` if
    any band was drawn."""
    ok = np.isfinite(ci) & (np.asarray(n_seeds, dtype=float) >= MIN_BAND_SEEDS)
    if ok.any():
        lo, hi = np.clip(mean - ci, *bounds), np.clip(mean + ci, *bounds)
        ax.fill_between(x[ok], lo[ok], hi[ok], color=color, alpha=0.18, lw=0, zorder=1)
    return bool(ok.any())


def _line_kwargs(method: str, markers: bool = True) -> dict[str, Any]:
    """The method's line; dashed and dotted baselines above the solid ACE lines (visible where they meet)."""
    st = method_style(method)
    kw = st.line_kwargs()
    if st.linestyle != "-":
        kw["zorder"] = 6
    else:
        kw["linewidth"] = 2.0
    if not markers:
        kw["markersize"] = 0.0
    return kw


def _legend_below(fig: Figure, axes: Sequence[Axes], ncol: int) -> None:
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="outside lower center", ncol=min(ncol, max(1, len(labels))))


def _panel_grid(
    frame: pd.DataFrame, models: Sequence[str], benchmarks: Sequence[str], missing: str
) -> tuple[list[str], list[str]]:
    """The rows (models) and columns (benchmarks) of a model x benchmark grid of panels: those with a panel that
    has rows in ``frame``, in the given order. Raises :class:`MissingData` (``missing``) when no panel has."""
    panels = [
        (m, b)
        for m in models
        for b in benchmarks
        if not frame[(frame["model"] == m) & (frame["benchmark"] == b)].empty
    ]
    if not panels:
        raise MissingData(missing)
    return [m for m in models if any(p[0] == m for p in panels)], [
        b for b in benchmarks if any(p[1] == b for p in panels)
    ]


def passk_curves_figure(
    agg: pd.DataFrame,
    *,
    names: DisplayNames,
    models: Sequence[str],
    benchmarks: Sequence[str],
    methods: Sequence[str],
    scale: float = 100.0,
) -> Figure:
    """Fig. 2: Pass@k (%) vs k, rows = models, columns = benchmarks; bands = 95% CI across seeds.

    Raises:
        MissingData: no (model, benchmark) panel has data.
    """
    require_columns(agg, AGG_COLUMNS, "aggregated results")
    rows_m, cols_b = _panel_grid(
        agg[agg["method"].isin(methods)], models, benchmarks, "no Pass@k results for the Pass@k curves"
    )
    with report_style():
        fig = Figure(figsize=(3.2 * len(cols_b) + 0.4, 2.5 * len(rows_m) + 0.5), layout="constrained")
        axes = fig.subplots(len(rows_m), len(cols_b), squeeze=False)
        for i, model in enumerate(rows_m):
            for j, bench in enumerate(cols_b):
                ax = axes[i][j]
                sub = agg[(agg["model"] == model) & (agg["benchmark"] == bench)]
                if sub.empty:
                    ax.set_axis_off()
                    continue
                ks = sorted(int(k) for k in sub["k"].unique())
                for method in methods:
                    d = sub[sub["method"] == method].sort_values("k")
                    if d.empty:
                        continue
                    x = d["k"].to_numpy(dtype=float)
                    y = d["mean"].to_numpy(dtype=float) * scale
                    ax.plot(
                        x,
                        y,
                        label=names.method(method) if method != "base" else "Base model",
                        **_line_kwargs(method),
                    )
                    ci = d["ci95"].to_numpy(dtype=float) * scale
                    n = d["n_seeds"].to_numpy(dtype=float)
                    _band(ax, x, y, ci, method_style(method).color, n, (0.0, scale))
                _log2_k_axis(ax, ks)
                ax.set_title(f"{names.model(model)} · {names.benchmark(bench)}")
                if i == len(rows_m) - 1:
                    ax.set_xlabel("$k$ (samples)")
                if j == 0:
                    ax.set_ylabel("Pass@$k$ (%)")
        _legend_below(fig, [a for row in axes for a in row], ncol=len(methods))
    return fig


# -------------------------------------------------------------------------------------------- Fig 3 / 4
def _step_lines(
    ax: Axes,
    df: pd.DataFrame,
    value: str,
    methods: Sequence[str],
    names: DisplayNames,
    scale: float = 1.0,
    bounds: tuple[float, float] = (-math.inf, math.inf),
) -> bool:
    drawn = False
    for method in methods:
        d = df[(df["method"] == method)].dropna(subset=[value])
        if d.empty:
            continue
        s = seed_summary(d, ["step"], value).sort_values("step")
        x = s["step"].to_numpy(dtype=float)
        y = s["mean"].to_numpy(dtype=float) * scale
        kw = _line_kwargs(method, markers=len(x) <= 30)
        if len(x) <= 30:
            kw["markersize"] = 3.0
        ax.plot(x, y, label=names.method(method), **kw)
        lo, hi = bounds
        ci = s["ci95"].to_numpy(dtype=float) * scale
        _band(
            ax,
            x,
            y,
            ci,
            method_style(method).color,
            s["n_seeds"].to_numpy(dtype=float),
            (lo * scale, hi * scale),
        )
        drawn = True
    return drawn


def _models_with(df: pd.DataFrame, models: Sequence[str] | None, methods: Sequence[str]) -> list[str]:
    present = df[df["method"].isin(methods)]["model"].unique().tolist()
    order = list(models) if models is not None else sorted(present)
    return [m for m in order if m in present]


def oef_figure(
    records: pd.DataFrame,
    *,
    names: DisplayNames,
    methods: Sequence[str] = ("grpo", "ace_grpo"),
    models: Sequence[str] | None = None,
) -> Figure:
    """Fig. 3: OEF (%) and mean overconfidence magnitude over training steps; one row per model.

    ``records``: :data:`acerl.report.frames.DIAG_COLUMNS`. Bands: 95% t CI across seeds (none for one seed).

    Raises:
        MissingData: no diagnostics for ``methods``.
    """
    rows_m = _models_with(records, models, methods)
    if not rows_m:
        raise MissingData(f"no diagnostics records for methods {list(methods)}")
    with report_style():
        fig = Figure(figsize=(7.0, 2.4 * len(rows_m) + 0.5), layout="constrained")
        axes = fig.subplots(len(rows_m), 2, squeeze=False)
        for i, model in enumerate(rows_m):
            d = records[records["model"] == model]
            ax_f, ax_m = axes[i]
            _step_lines(ax_f, d, "oef", methods, names, scale=100.0, bounds=(0.0, 1.0))
            _step_lines(ax_m, d, "overconf_magnitude", methods, names, bounds=(0.0, math.inf))
            ax_f.set_ylabel("overconfident-error\nfraction (OEF)")
            ax_f.yaxis.set_major_formatter(PercentFormatter(decimals=0))
            ax_m.set_ylabel("mean overconfidence\n" + r"$\mathbb{E}[c_i \mid c_i > 0,\, r_i = 0]$")
            ax_f.set_title(f"Overconfident-error fraction · {names.model(model)}")
            ax_m.set_title(f"Overconfidence magnitude · {names.model(model)}")
            last = float(d["step"].max()) if len(d) else 1.0
            for ax in (ax_f, ax_m):
                ax.set_xlim(0, max(last, 1.0) * 1.04)
                if i == len(rows_m) - 1:
                    ax.set_xlabel("training step")
        _legend_below(fig, [a for row in axes for a in row], ncol=len(methods))
    return fig


def entropy_figure(
    entropy: pd.DataFrame,
    *,
    names: DisplayNames,
    methods: Sequence[str] = ("grpo", "ace_grpo"),
    models: Sequence[str] | None = None,
    max_step: int = 20,
) -> Figure:
    """Fig. 4: mean token entropy over training steps ``0..max_step``; one panel per model.

    ``entropy``: :data:`acerl.report.frames.ENTROPY_COLUMNS`.

    Raises:
        MissingData: no entropy values for ``methods`` up to ``max_step``.
    """
    early = entropy[entropy["step"] <= max_step]
    cols_m = _models_with(early, models, methods)
    if not cols_m:
        raise MissingData(f"no early-entropy values for methods {list(methods)}")
    with report_style():
        fig = Figure(figsize=(3.3 * len(cols_m) + 0.3, 2.7), layout="constrained")
        axes = fig.subplots(1, len(cols_m), squeeze=False)[0]
        for ax, model in zip(axes, cols_m, strict=True):
            _step_lines(ax, early[early["model"] == model], "entropy", methods, names)
            ax.set_title(names.model(model))
            ax.set_xlabel("training step")
            ax.set_xlim(0, max_step if max_step > 0 else 1)
            ax.xaxis.set_major_locator(
                FixedLocator(list(range(0, max_step + 1, max(1, math.ceil(max_step / 5)))))
            )
        axes[0].set_ylabel("token entropy (nats)")
        _legend_below(fig, list(axes), ncol=len(methods))
    return fig


# ------------------------------------------------------------------------------------- paired difference
DIFF_COLUMNS = ("benchmark", "model", "method", "baseline", "k", "delta", "ci_low", "ci_high", "n_seeds")


def paired_difference_frame(runs: pd.DataFrame, comparisons: dict[str, str] | None = None) -> pd.DataFrame:
    """Each ACE method minus its baseline per (benchmark, model, k), paired by the seeds both ran.

    ``runs``: :data:`acerl.report.frames.RUN_COLUMNS`; ``comparisons``: ``{method: baseline}``. ``delta`` is the
    mean per-seed difference (a fraction), ``ci_low``/``ci_high`` its paired 95% t interval
    (:func:`acerl.evaluate.power.paired_effect`, NaN for one seed), ``n_seeds`` the seeds paired.
    """
    require_columns(runs, RUN_COLUMNS, "paired differences")
    rows = []
    for (bench, model, k), grp in runs.groupby(["benchmark", "model", "k"], sort=True):
        for method, baseline in (comparisons or {}).items():
            a = grp[grp["method"] == method].dropna(subset=["seed"]).set_index("seed")["pass_at_k"]
            b = grp[grp["method"] == baseline].dropna(subset=["seed"]).set_index("seed")["pass_at_k"]
            shared = a.index.intersection(b.index)
            if shared.empty:
                continue
            d = a.loc[shared].to_numpy(dtype=float) - b.loc[shared].to_numpy(dtype=float)
            eff = paired_effect(d)
            rows.append(
                (bench, model, method, baseline, int(k), eff.delta, eff.ci_low, eff.ci_high, eff.n_seeds)
            )
    return pd.DataFrame(rows, columns=list(DIFF_COLUMNS))


def passk_difference_figure(
    diffs: pd.DataFrame,
    *,
    names: DisplayNames,
    models: Sequence[str],
    benchmarks: Sequence[str],
    scale: float = 100.0,
) -> Figure:
    """ACE minus baseline in Pass@k points against k, one panel per model x benchmark: the mean paired
    difference with its paired 95% t interval (error bars from two seeds up), a line at 0 (no difference) and
    the seed count in each legend entry.

    ``diffs``: :func:`paired_difference_frame`.

    Raises:
        MissingData: no comparison has a seed both methods ran.
    """
    require_columns(diffs, DIFF_COLUMNS, "paired differences")
    rows_m, cols_b = _panel_grid(
        diffs, models, benchmarks, "no ACE method shares a seed with its baseline (no paired differences)"
    )
    with report_style():
        fig = Figure(figsize=(3.2 * len(cols_b) + 0.4, 2.5 * len(rows_m) + 0.6), layout="constrained")
        axes = fig.subplots(len(rows_m), len(cols_b), squeeze=False)
        for i, model in enumerate(rows_m):
            for j, bench in enumerate(cols_b):
                ax = axes[i][j]
                sub = diffs[(diffs["model"] == model) & (diffs["benchmark"] == bench)]
                if sub.empty:
                    ax.set_axis_off()
                    continue
                ax.axhline(0.0, color="#555555", lw=0.8, zorder=1)
                pairs = list(dict.fromkeys(zip(sub["method"], sub["baseline"], strict=True)))
                for n, (method, baseline) in enumerate(pairs):
                    d = sub[(sub["method"] == method) & (sub["baseline"] == baseline)].sort_values("k")
                    # side by side at each k (a small factor on the log axis) so intervals do not overlap
                    x = d["k"].to_numpy(dtype=float) * 2.0 ** (0.08 * (n - (len(pairs) - 1) / 2))
                    y = d["delta"].to_numpy(dtype=float) * scale
                    lo = d["ci_low"].to_numpy(dtype=float) * scale
                    hi = d["ci_high"].to_numpy(dtype=float) * scale
                    seeds = int(d["n_seeds"].min())
                    kw = _line_kwargs(method)
                    label = f"{names.method(method)} − {names.method(baseline)} ({seeds} seed{'s' * (seeds != 1)})"
                    ax.plot(x, y, label=label, **kw)
                    ok = np.isfinite(lo) & np.isfinite(hi)
                    if ok.any():
                        ax.errorbar(x[ok], y[ok], yerr=[(y - lo)[ok], (hi - y)[ok]], fmt="none",
                                    ecolor=kw["color"], elinewidth=1.0, capsize=2.0, zorder=kw["zorder"])  # fmt: skip
                _log2_k_axis(ax, sorted(int(k) for k in sub["k"].unique()))
                ax.set_title(f"{names.model(model)} · {names.benchmark(bench)}")
                if i == len(rows_m) - 1:
                    ax.set_xlabel("$k$ (samples)")
                if j == 0:
                    ax.set_ylabel("Δ Pass@$k$ (points)\nACE − baseline, paired")
        _legend_below(fig, [a for row in axes for a in row], ncol=2)
    return fig


# ------------------------------------------------------------------------------------- training dynamics
def training_dynamics_figure(
    curves: pd.DataFrame,
    *,
    names: DisplayNames,
    methods: Sequence[str],
    models: Sequence[str] | None = None,
    panels: Sequence[Curve] = TRAINING_CURVES,
) -> Figure:
    """Per training step, one row per model and one panel per curve that any run logged: the mean over seeds
    with its 95% t band (clipped to the quantity's range, from :data:`MIN_BAND_SEEDS` seeds up).

    ``curves``: :func:`acerl.report.training.curves_frame` (both backends' ``metrics.jsonl``).

    Raises:
        MissingData: no run of ``methods`` logged any of the curves.
    """
    require_columns(curves, CURVE_COLUMNS, "training curves")
    rows_m = _models_with(curves, models, methods)
    shown = [c for c in panels if (curves["curve"] == c.name).any()]
    if not rows_m or not shown:
        raise MissingData(f"no training metrics for methods {list(methods)}")
    ncol = min(3, len(shown))
    nrow_per = math.ceil(len(shown) / ncol)
    with report_style():
        fig = Figure(figsize=(3.1 * ncol + 0.3, 2.2 * nrow_per * len(rows_m) + 0.6), layout="constrained")
        axes = fig.subplots(nrow_per * len(rows_m), ncol, squeeze=False)
        for i, model in enumerate(rows_m):
            d = curves[curves["model"] == model]
            for n, curve in enumerate(shown):
                ax = axes[i * nrow_per + n // ncol][n % ncol]
                c = d[d["curve"] == curve.name].rename(columns={"value": curve.name})
                _step_lines(ax, c, curve.name, methods, names, bounds=curve.bounds)
                ax.set_ylabel(curve.label)
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                ax.set_title(f"{names.model(model)}" if len(rows_m) > 1 else "", loc="left")
                ax.set_xlabel("training step")
            for n in range(len(shown), nrow_per * ncol):
                axes[i * nrow_per + n // ncol][n % ncol].set_axis_off()
        _legend_below(fig, [a for row in axes for a in row], ncol=len(methods))
    return fig
