"""The testbed gate (``acerl report gate``): per-base differences averaged over base models with a t interval
over bases, each criterion checked against its declared threshold; the report regenerated from its exported
data; and the interval's error rate, by simulation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from acerl.config import load_config
from acerl.evaluate.stats import mean_ci
from acerl.passk import pass_at_k_array
from acerl.report.gate import GATE_FAILED, criteria, main, per_base, render_gate

REPO = Path(__file__).resolve().parents[2]
CONFIGS = [REPO / "config" / "config.yaml", REPO / "config" / "gate.yaml"]
BASES = ("tiny_b0", "tiny_b1", "tiny_b2", "tiny_b3")
N = 32
SEEDS = tuple(load_config(CONFIGS).study.main.seeds)  # the gate's declared training seeds


def problems(
    sharpen: float = 1.6,
    floor: float = 0.2,
    seed: int = 0,
    n_problems: int = 40,
    seeds: tuple[int, ...] = SEEDS,
) -> pd.DataFrame:
    """Counts of a testbed where GRPO sharpens (solved problems' rate x ``sharpen``) and narrows (problems the
    base solves less often than ``floor`` are lost), and the control keeps every problem (rate x 1.2)."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in BASES:
        p = rng.beta(0.6, 1.2, n_problems)
        arms = {
            "base": {None: p},
            "grpo": {s: np.where(p < floor, 0.0, np.minimum(1.0, sharpen * p)) for s in seeds},
            "grpo_kl": {s: np.minimum(1.0, 1.2 * p) for s in seeds},
        }
        for method, runs in arms.items():
            for s, rate in runs.items():
                c = rng.binomial(N, rate)
                rows += [
                    {
                        "benchmark": "synth_mix",
                        "model": b,
                        "method": method,
                        "seed": s,
                        "id": f"q{i}",
                        "n": N,
                        "c": int(x),
                    }
                    for i, x in enumerate(c)
                ]
    df = pd.DataFrame(rows)
    df["seed"] = df["seed"].astype("Int64")
    return df


def _by_hand(df: pd.DataFrame, model: str, method: str, k: int) -> float:
    """Mean over the run's seeds of Pass@k (points), 1 - C(n - c, k) / C(n, k) averaged over problems."""
    sub = df[(df["model"] == model) & (df["method"] == method)]
    per_seed = [
        100 * np.mean([1 - math.comb(N - int(c), k) / math.comb(N, k) for c in g["c"]])
        for _, g in sub.groupby(sub["seed"].fillna(-1))
    ]
    return float(np.mean(per_seed))


def test_each_criterion_is_the_mean_of_per_base_differences_with_a_t_interval_over_bases(
    tmp_path: Path,
) -> None:
    two_seeds = tmp_path / "two_seeds.yaml"  # a design with two seeds a base: methods are averaged over seeds
    two_seeds.write_text("study:\n  main: {seeds: [0, 1]}\n")
    cfg = load_config([*CONFIGS, two_seeds])
    df = problems(seeds=(0, 1))
    table = per_base(df, cfg, ks=[1, 32])
    sharp = [_by_hand(df, b, "grpo", 1) - _by_hand(df, b, "base", 1) for b in BASES]
    narrow = [_by_hand(df, b, "base", 32) - _by_hand(df, b, "grpo", 32) for b in BASES]
    found = {c.name: c for c in criteria(table, cfg.report.gate, 32)}
    for name, diffs in (("sharpening", sharp), ("narrowing", narrow)):
        ci = mean_ci(diffs)
        assert found[name].mean == pytest.approx(ci.mean, abs=1e-9)
        assert (found[name].low, found[name].high) == pytest.approx(
            (ci.low, ci.mean + ci.half_width), abs=1e-9
        )
        assert found[name].n_bases == 4
    assert found["sharpening"].passed and found["narrowing"].passed, found
    assert found["control keeps coverage"].passed and found["control keeps accuracy"].passed, found
    # the control is paired by seed within a base: control minus GRPO of the same seed, averaged
    assert table.loc[table["k"] == 32, "control_minus_baseline"].to_numpy() == pytest.approx(
        (table.loc[table["k"] == 32, "control"] - table.loc[table["k"] == 32, "baseline"]).to_numpy()
    )


def test_rl_that_only_degrades_fails_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GRPO that lowers Pass@1 (the old embedded default) fails sharpening; the command exits 5."""
    from acerl.report.power import write_counts_csv

    cfg = load_config(CONFIGS)
    df = problems(sharpen=0.8)
    report, passed = render_gate(per_base(df, cfg), cfg)
    assert not passed
    assert "| sharpening |" in report and "FAIL |" in report.split("| sharpening |")[1].splitlines()[0]
    write_counts_csv(df, tmp_path, cfg.evaluation.ks)
    assert main(["--config", str(CONFIGS[1]), "--data", str(tmp_path)]) == GATE_FAILED
    assert "Gate: FAIL" in capsys.readouterr().out


def test_the_report_is_regenerated_from_its_exported_data_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from acerl.report.power import write_counts_csv

    cfg = load_config(CONFIGS)
    df = problems()
    write_counts_csv(df, tmp_path / "data", cfg.evaluation.ks)
    assert (
        main(
            [
                "--config",
                str(CONFIGS[1]),
                "--data",
                str(tmp_path / "data"),
                "--figure",
                str(tmp_path / "g.png"),
            ]
        )
        == 0
    )
    first = capsys.readouterr().out
    assert first == render_gate(per_base(df, cfg), cfg)[0]
    assert "Gate: PASS" in first and (tmp_path / "g.png").stat().st_size > 0
    assert main(["--config", str(CONFIGS[1]), "--data", str(tmp_path / "data")]) == 0
    assert capsys.readouterr().out == first


def test_missing_runs_and_data_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--config", str(CONFIGS[1]), "--data", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "counts.csv: no such file" in err and "--export" in err
    assert main(["--config", str(CONFIGS[1]), "--root", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "no Pass@k file" in err and "snakemake -c2 all --configfile" in err and err.count("\n") == 1


def test_a_gate_needs_its_methods_in_the_grid_and_the_base_models(tmp_path: Path) -> None:
    from acerl.config import ConfigError

    bad = tmp_path / "bad.yaml"
    bad.write_text("report: {gate: {control: nsr}}\n")
    with pytest.raises(ConfigError, match=r"report\.gate\.control"):
        load_config([*CONFIGS, bad])
    bad.write_text("study: {main: {include_base: false}}\n")
    with pytest.raises(ConfigError, match="include_base"):
        load_config([*CONFIGS, bad])


def test_the_interval_over_bases_passes_a_null_effect_at_most_at_its_stated_rate() -> None:
    """Under no effect (per-base differences centred on 0), a criterion with threshold 0 passes only when the
    95% interval's lower end is above 0: at most 2.5% of designs (one-sided), here 4 bases, 4,000 designs (the tolerance is 3 standard errors)."""
    from acerl.config import TestbedGate

    gate = TestbedGate(control="grpo_kl", sharpening_min=0.0, narrowing_min=0.0, control_min=0.0)
    rng = np.random.default_rng(7)
    passes = 0
    trials = 4_000
    for _ in range(trials):
        d = rng.normal(0.0, 3.0, size=4)
        table = pd.DataFrame(
            [
                {
                    "model": f"b{i}",
                    "k": k,
                    "base": 50.0,
                    "baseline": 50.0 + (x if k == 1 else -x),
                    "control": 50.0,
                    "control_minus_baseline": 0.0,
                }
                for i, x in enumerate(d)
                for k in (1, 32)
            ]  # fmt: skip
        )
        passes += criteria(table, gate, 32)[0].passed
    rate = passes / trials
    assert rate == pytest.approx(0.025, abs=0.0075), rate


def test_pass_at_k_of_a_base_is_its_one_evaluation() -> None:
    cfg = load_config(CONFIGS)
    df = problems()
    table = per_base(df, cfg, ks=[4])
    sub = df[(df["model"] == "tiny_b2") & (df["method"] == "base")]
    expected = 100 * pass_at_k_array(sub["n"].to_numpy(), sub["c"].to_numpy(), 4).mean()
    assert table.set_index("model").loc["tiny_b2", "base"] == pytest.approx(expected)


def test_the_committed_gate_is_regenerated_from_its_per_run_data(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/results/gate/report.md is ``acerl report gate --config config/gate.yaml --data docs/results/gate``'s
    output, byte for byte, and its exit status says what the report says (0: PASS, 5: FAIL)."""
    data = REPO / "docs" / "results" / "gate"
    expected = (data / "report.md").read_text(encoding="utf-8")
    rc = main(["--config", str(CONFIGS[1]), "--data", str(data)])
    assert capsys.readouterr().out == expected
    assert rc == (0 if "\nGate: PASS\n" in expected else GATE_FAILED)
