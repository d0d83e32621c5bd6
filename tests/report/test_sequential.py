"""The power study's sequential design: the interim look's re-estimate, its decisions, the CLI."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import yaml

from acerl.evaluate.power import mde_paired, per_problem_floor_sd, seeds_for_mde
from acerl.evaluate.stats import holm
from acerl.pipeline.records import passk_record, write_passk_record
from acerl.report.power import paired_matrices
from acerl.report.sequential import SequentialDesign, look_frame, main, planned_seeds

N, P = 8, 40


def _problems(shift_dapo: float, seeds=(0, 1, 2, 3)) -> pd.DataFrame:
    """Two comparisons: ACE-GRPO barely differs from GRPO (0.05 on the logit); ACE-DAPO by ``shift_dapo``."""
    rng = np.random.default_rng(1)
    theta = rng.normal(-0.5, 1.2, size=P)
    rows = []
    for method, shift in (("grpo", 0.0), ("ace_grpo", 0.05), ("dapo", 0.0), ("ace_dapo", shift_dapo)):
        for seed in seeds:
            p = 1 / (1 + np.exp(-(theta + shift + rng.normal(0, 0.3) + rng.normal(0, 0.3, size=P))))
            rows += [
                ("bench", "tiny", method, seed, f"q{i}", N, int(c)) for i, c in enumerate(rng.binomial(N, p))
            ]
    df = pd.DataFrame(rows, columns=["benchmark", "model", "method", "seed", "id", "n", "c"])
    df["seed"] = df["seed"].astype("Int64")
    return df


def test_seeds_for_mde_is_the_smallest_design_that_reaches_the_target():
    n = seeds_for_mde(0.06, 0.04, alpha=0.049)
    assert mde_paired(0.06, n, 0.049) <= 0.04 < mde_paired(0.06, n - 1, 0.049)
    assert seeds_for_mde(1.0, 0.04, max_seeds=10) == 11  # out of reach
    with pytest.raises(ValueError, match="positive target"):
        seeds_for_mde(0.1, 0.0)


def test_interim_look_re_estimates_with_the_floor_and_plans_the_seeds():
    problems = _problems(shift_dapo=0.05)
    design = SequentialDesign()
    look = look_frame(problems, {"ace_grpo": "grpo", "ace_dapo": "dapo"}, "bench", 4, design)
    assert list(look["method"]) == ["ace_grpo", "ace_dapo"] and (look["n_seeds"] == 4).all()
    for r in look.itertuples():
        a, b = paired_matrices(problems, "bench", "tiny", r.method, r.baseline)
        d = a.passk(4) - b.passk(4)
        assert r.delta == pytest.approx(d.mean())
        assert r.sd_floor == pytest.approx(per_problem_floor_sd(d))
        assert r.sd_plan == max(r.sd_diff, r.sd_floor)
        assert r.seeds_needed == seeds_for_mde(r.sd_plan, 0.04, alpha=0.049)
        assert r.mde == pytest.approx(mde_paired(r.sd_plan, 4, 0.049))
    np.testing.assert_allclose(look["p_holm"], holm(look["p_paired"].to_numpy()))
    # nothing is significant at the interim 0.001: both open; the total is what the noisier one needs
    assert set(look["decision"]) <= {"continue", "final"}
    open_ = look[look["decision"] == "continue"]
    assert planned_seeds(look, design) == max(4, min(int(open_["seeds_needed"].max()), 64))


def test_interim_efficacy_stop_and_final_look():
    problems = _problems(shift_dapo=1.5, seeds=tuple(range(6)))
    design = SequentialDesign(target=0.001)  # out of reach: only an efficacy stop ends a comparison early
    look = look_frame(problems, {"ace_grpo": "grpo", "ace_dapo": "dapo"}, "bench", 4, design)
    dapo = look[look["method"] == "ace_dapo"].iloc[0]
    assert dapo.p_holm < 0.001 and dapo.decision == "efficacy"
    assert look[look["method"] == "ace_grpo"].iloc[0].decision == "continue"
    assert planned_seeds(look, design) == 64  # capped
    final = look_frame(problems, {"ace_dapo": "dapo"}, "bench", 4, design, final=True)
    assert list(final["decision"]) == ["final"]
    with pytest.raises(ValueError, match="at most 0.05"):
        SequentialDesign(alpha_interim=0.01, alpha_final=0.049)


def test_cli_prints_the_look_and_the_seeds(tmp_path, capsys):
    problems = _problems(shift_dapo=0.05)
    files = []
    for (method, seed), grp in problems.groupby(["method", "seed"]):
        rec = passk_record(
            benchmark="bench", model="tiny", method=method, seed=int(seed), problem_ids=list(grp["id"]), n=N,
            c=grp["c"].tolist(), ks=[1, 2, 4, 8],
        )  # fmt: skip
        files.append(write_passk_record(rec, tmp_path / f"{method}_{seed}.json"))
    stage2 = tmp_path / "stage2.yaml"
    assert main([*map(str, files), "--benchmark", "bench", "--k", "4", "--write-config", str(stage2)]) == 0
    out = capsys.readouterr().out
    assert "Interim look: Pass@4 on bench" in out and "seeds_needed" in out
    total = int(out.split("asks for ")[1].split()[0])
    assert total >= 4 and f"--configfile config/power.yaml {stage2}" in out
    assert yaml.safe_load(stage2.read_text()) == {"study": {"main": {"seeds": list(range(total))}}}


def test_a_look_needs_two_seeds():
    problems = _problems(shift_dapo=0.05, seeds=(0,))
    with pytest.raises(ValueError, match="ace_grpo vs grpo has 1 paired seed"):
        look_frame(problems, {"ace_grpo": "grpo"}, "bench", 4, SequentialDesign())


# A workflow whose job command names the config files, as the project's rules do (workflow/rules/common.smk)
_SNAKEFILE = """\
CONFIGS = " ".join(["base.yaml", *(p.name for p in map(Path, workflow.config_settings.configfiles))])


rule all:
    input:
        expand("out/seed{s}.txt", s=config["seeds"]),


rule run:
    output:
        "out/seed{s}.txt",
    params:
        cmd=lambda wildcards: f"echo {CONFIGS} seed {wildcards.s}",
    shell:
        "{params.cmd} > {output}"
"""


def test_stage2_command_keeps_stage_1_jobs(tmp_path) -> None:
    """Stage 2 adds a config file, which changes every job's command (a Snakemake param): with the stage-2
    command's triggers only the new seeds run; with Snakemake's defaults stage 1 would rerun whole."""
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    from acerl.report.sequential import stage2_command

    snakemake = str(Path(sys.executable).parent / "snakemake")
    (tmp_path / "Snakefile").write_text(_SNAKEFILE)
    (tmp_path / "stage1.yaml").write_text("seeds: [0, 1]\n")
    (tmp_path / "stage2.yaml").write_text("seeds: [0, 1, 2]\n")

    def snakemake_run(*args: str) -> str:
        cmd = [snakemake, "-c1", "--quiet", "rules", *args]
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr

    snakemake_run("all", "--configfile", "stage1.yaml")  # stage 1
    command = shlex.split(stage2_command(Path("stage2.yaml")))
    assert command[:3] == ["snakemake", "-c1", "all"]
    triggers = command[command.index("--configfile") :]
    triggers[1] = "stage1.yaml"  # config/power.yaml's role
    assert _planned_runs(snakemake_run("-n", "all", *triggers)) == 1  # seed 2 only
    default = snakemake_run("-n", "all", "--configfile", "stage1.yaml", "stage2.yaml")
    assert _planned_runs(default) == 3 and "params have changed" in default  # Snakemake's default triggers


def _planned_runs(dry_run: str) -> int:
    """The count of rule ``run`` in a dry run's job stats."""
    counts = re.findall(r"^run\s+(\d+)$", dry_run, re.M)
    assert counts, dry_run
    return int(counts[0])
