"""The lab's stories, end to end on the CI-scale study (config/test.yaml over config/config.yaml).

A is the session's CI-scale study (``snakemake -c2 all``, ``tests/study.py``) in a scratch git repository: it
records the outputs with ``dvc commit`` and pushes them to a local directory remote. Then, each in its own
``git clone``:

1. B pulls: ``dvc status`` and ``snakemake -n`` have nothing to do; B regenerates the tables with no training or
   sampling, with DVC and with Snakemake.
2. Changing an ACE alpha marks only that method's runs and what depends on them, the same jobs in both tools;
   ``dvc repro`` reruns exactly those, and Snakemake then agrees nothing is left.
3. A deleted final checkpoint comes back bit-identical from ``dvc checkout``.
4. A damaged file (on the remote, in the cache) is reported: what DVC 3.67 does, and ``verify-cache``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from dvc_helpers import (
    ACERL_DVC,
    TEST_CONFIG,
    commit_all,
    descendants,
    dvc_stages,
    dvc_status,
    init_repo,
    out_paths,
    sh,
    snakemake_dry_run,
    snakemake_jobs,
)

from acerl.dvc import TRAINING_PLOT_METRICS, write_dvc_yaml

pytestmark = pytest.mark.slow

CONFIG_ARGS = [arg for f in TEST_CONFIG for arg in ("--config", f)]
FINAL = "runs/tiny/grpo/seed0/final"
REPORT_OUTS = ("results/tables", "results/figures", "results/report.md")


@dataclass(frozen=True)
class Study:
    base: Path  # scratch folder holding A, the remote and the clones
    a: Path
    remote: Path


@pytest.fixture(scope="module")
def study(ci_study: Path, tmp_path_factory: pytest.TempPathFactory) -> Study:
    """A: a copy of the session's CI-scale study (run by Snakemake, ``tests/study.py``) as a fresh git
    repository whose outputs ``dvc commit`` records in ``dvc.lock`` (docs/sharing.md, "Using both tools"),
    pushed to a local directory remote."""
    base = tmp_path_factory.mktemp("dvc-study")
    a, remote = base / "A", base / "remote"
    shutil.copytree(ci_study, a, symlinks=True)
    write_dvc_yaml(TEST_CONFIG, a / "dvc.yaml")
    init_repo(a, remote)
    sh(a, "dvc", "commit", "--force")
    assert dvc_status(a) == {}, "dvc.lock does not describe what Snakemake produced"
    commit_all(a, "the study and its results (dvc.lock)")
    sh(a, "dvc", "push")
    return Study(base, a, remote)


def pulled_clone(study: Study, name: str) -> Path:
    """A colleague's ``git clone`` of A, then ``dvc pull`` and the Snakemake sync (docs/sharing.md)."""
    clone = study.base / name
    sh(study.base, "git", "clone", "-q", str(study.a), str(clone))
    sh(clone, "dvc", "pull")
    sh(clone, *ACERL_DVC, "sync-snakemake", *CONFIG_ARGS)
    return clone


def tree_digest(path: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``path`` (or of ``path`` itself)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {
        str(p.relative_to(path) if p != path else p.name): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in files
        if p.name != ".snakemake_timestamp"
    }


def remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink()


def stage_of_job(stages: dict[str, dict], rule: str, outs: frozenset[str]) -> str:
    """The DVC stage of a Snakemake job: same rule, same outputs."""
    for name, st in stages.items():
        if name.split("-", 1)[0] == rule and outs <= set(out_paths(st)):
            return name
    raise AssertionError(f"no DVC stage for Snakemake job {rule} -> {sorted(outs)}")


def jobs_snakemake_would_run(clone: Path) -> set[str]:
    stages = dvc_stages(clone / "dvc.yaml")
    return {stage_of_job(stages, r, o) for r, o in snakemake_jobs(snakemake_dry_run(clone, TEST_CONFIG))}


def stages_dvc_would_run(clone: Path) -> set[str]:
    """Changed stages (``dvc status``) and every stage downstream of them."""
    return descendants(dvc_stages(clone / "dvc.yaml"), dvc_status(clone))


def set_alpha(config: Path, method: str, alpha: float) -> None:
    """Edit ``methods.<method>.estimator.alpha`` in place (what ``dvc exp run -S`` would do)."""
    lines = config.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(f"  {method}:"):
            lines[i], n = re.subn(r"alpha: [0-9.]+", f"alpha: {alpha}", line)
            assert n == 1, line
            config.write_text("".join(lines))
            return
    raise AssertionError(f"methods.{method} not found in {config}")


def cache_file_of(repo: Path, out_dir: str, name: str) -> Path:
    """The cache file holding ``<out_dir>/<name>`` (from dvc.lock and the directory's ``.dir`` listing)."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    dir_md5 = next(
        o["md5"] for st in lock["stages"].values() for o in st.get("outs", []) if o["path"] == out_dir
    )
    cache = repo / ".dvc" / "cache" / "files" / "md5"
    listing = json.loads((cache / dir_md5[:2] / dir_md5[2:]).read_text())
    md5 = next(e["md5"] for e in listing if e["relpath"] == name)
    return cache / md5[:2] / md5[2:]


def damage(path: Path, keep_mode: bool) -> None:
    """Flip one byte in the middle of a cache file; ``keep_mode``: leave it read-only, as DVC wrote it."""
    mode = path.stat().st_mode
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    if keep_mode:
        path.chmod(mode)


# ---------------------------------------------------------------------------------------------- stories
def test_story1_a_colleague_pulls_everything_and_reruns_nothing(study: Study):
    b = pulled_clone(study, "B")
    assert tree_digest(b / FINAL) == tree_digest(study.a / FINAL)
    assert dvc_status(b) == {}
    assert "Nothing to be done" in snakemake_dry_run(b, TEST_CONFIG)

    # Pass@k per run from `dvc metrics show`; training curves from `dvc plots show`.
    shown = json.loads(sh(b, "dvc", "metrics", "show", "--json").stdout)[""]["data"]
    stages = dvc_stages(b / "dvc.yaml")
    passk_files = {m for name, st in stages.items() if name.startswith("passk-") for m in st["metrics"]}
    assert set(shown) == passk_files
    assert all(set(v["data"]["pass_at_k"]) == {"1", "2", "4", "8"} for v in shown.values())
    plots = json.loads(sh(b, "dvc", "plots", "show", "--json").stdout)
    assert "errors" not in json.dumps(plots)
    assert {f"training/tiny/{m}" for m in TRAINING_PLOT_METRICS} <= set(plots["data"])

    # Deleted results come back from the cache: nothing runs.
    tables = tree_digest(study.a / "results/tables")
    for p in REPORT_OUTS:
        remove(b / p)
    proc = sh(b, "dvc", "repro")
    assert re.findall(r"Running stage '([^']+)'", proc.stdout) == [], proc.stdout
    assert "Stage 'report' is cached - skipping run, checking out outputs" in proc.stdout
    assert tree_digest(b / "results/tables") == tables

    # B regenerates the tables: the report stage runs, nothing else.
    proc = sh(b, "dvc", "repro", "--force", "--single-item", "report")
    assert re.findall(r"Running stage '([^']+)'", proc.stdout) == ["report"], proc.stdout
    assert tree_digest(b / "results/tables") == tables
    assert dvc_status(b) == {}
    # ... without erasing the study's cost (B has no benchmark files): compute.md and its dvc.lock entry as
    # pulled (the lock's report entry changes only where a file records the commit that made it: report.md/html)
    compute = "results/compute.md"
    assert (b / compute).read_bytes() == (study.a / compute).read_bytes()
    assert "Compute per run" in (b / compute).read_text()
    pulled = yaml.safe_load(sh(b, "git", "show", "HEAD:dvc.lock").stdout)["stages"]
    now = yaml.safe_load((b / "dvc.lock").read_text())["stages"]
    changed = {
        out["path"]
        for name in set(pulled) & set(now)
        for out, was in zip(now[name].get("outs", []), pulled[name].get("outs", []), strict=True)
        if out != was
    }
    assert set(now) == set(pulled) and changed <= {"results/report.html", "results/report.md"}, changed

    # The same with Snakemake.
    for p in REPORT_OUTS:
        remove(b / p)
    assert jobs_snakemake_would_run(b) == {"report"}
    sh(b, "snakemake", "all", "--cores", "1", "--configfile", *TEST_CONFIG[1:])
    assert tree_digest(b / "results/tables") == tables


def test_story2_changing_an_ace_alpha_reruns_only_its_runs_in_both_tools(study: Study):
    c = pulled_clone(study, "C")
    config = c / "config" / "config.yaml"
    original = config.read_text()

    # ACE-GRPO's alpha also names the alpha sweep's runs (alpha 1.0 becomes run ace_grpo-alpha1): regenerate.
    set_alpha(config, "ace_grpo", 2.0)
    assert sh(c, *ACERL_DVC, "check", *CONFIG_ARGS, check=False).returncode == 1
    sh(c, *ACERL_DVC, "write", *CONFIG_ARGS)
    # (the sweep-only run is evaluated on Table 4's benchmark only, the main run on both)
    expected = {"report", "diagnose-tiny-ace_grpo-seed0"} | {
        f"{step}-tiny-{method}-seed0"
        for method, benches in (
            ("ace_grpo", ("synth_easy", "synth_hard")),
            ("ace_grpo-alpha1", ("synth_easy",)),
        )
        for step in ["train_policy"] + [f"{s}-{b}" for s in ("sample", "grade", "passk") for b in benches]
    }
    assert stages_dvc_would_run(c) == expected  # not ace_grpo-alpha0.5: that sweep point fixes its own alpha
    assert jobs_snakemake_would_run(c) == expected

    # ACE-DAPO's alpha: a value inside the grid; dvc.yaml stays current.
    config.write_text(original)
    sh(c, "git", "checkout", "dvc.yaml")
    set_alpha(config, "ace_dapo", 0.5)
    sh(c, *ACERL_DVC, "check", *CONFIG_ARGS)
    assert set(dvc_status(c)) == {"train_policy-tiny-ace_dapo-seed0", "report"}
    expected = {"train_policy-tiny-ace_dapo-seed0", "report"} | {
        f"{step}-{bench}-tiny-ace_dapo-seed0"
        for step in ("sample", "grade", "passk")
        for bench in ("synth_easy", "synth_hard")
    }
    assert stages_dvc_would_run(c) == expected
    assert jobs_snakemake_would_run(c) == expected

    # `dvc repro` reruns exactly those stages (training, sampling, grading, Pass@k, the report) ...
    untouched = tree_digest(c / "runs/tiny/ace_grpo/seed0/final")
    proc = sh(c, "dvc", "repro")
    assert set(re.findall(r"Running stage '([^']+)'", proc.stdout)) == expected, proc.stdout
    assert dvc_status(c) == {}
    assert tree_digest(c / "runs/tiny/ace_grpo/seed0/final") == untouched
    ace_dapo = "runs/tiny/ace_dapo/seed0/final"
    assert tree_digest(c / ace_dapo) != tree_digest(study.a / ace_dapo)  # retrained with the new alpha
    # ... and Snakemake, told what DVC ran, has nothing left to do either.
    sh(c, *ACERL_DVC, "sync-snakemake", *CONFIG_ARGS)
    assert "Nothing to be done" in snakemake_dry_run(c, TEST_CONFIG)


def test_story3_a_deleted_checkpoint_is_restored_bit_identically(study: Study):
    d = pulled_clone(study, "D")
    before = tree_digest(d / FINAL)
    remove(d / FINAL)
    status = dvc_status(d)
    assert set(status) == {  # the stage whose output it is and the ones reading it
        "train_policy-tiny-grpo-seed0",
        "sample-synth_easy-tiny-grpo-seed0",
        "sample-synth_hard-tiny-grpo-seed0",
        "diagnose-tiny-grpo-seed0",
        "report",  # its training-dynamics figure reads the main grid's runs
    }
    assert all("deleted" in json.dumps(v) for v in status.values())
    sh(d, "dvc", "checkout", FINAL)
    assert tree_digest(d / FINAL) == before == tree_digest(study.a / FINAL)
    assert dvc_status(d) == {}
    sh(d, *ACERL_DVC, "sync-snakemake", *CONFIG_ARGS)  # the restored folder is newer than what used it
    assert "Nothing to be done" in snakemake_dry_run(d, TEST_CONFIG)


def test_story4_a_damaged_file_is_reported_not_used(study: Study):
    weights = "model.safetensors"
    good = tree_digest(study.a / FINAL)[weights]
    e = study.base / "E"
    sh(study.base, "git", "clone", "-q", str(study.a), str(e))

    # (a) Damaged on the remote (same size). DVC 3.67 trusts what it downloads from a remote unless the remote
    # has `verify = true`: the damaged file is checked out; `verify-cache` names it.
    bad_remote = study.base / "remote-damaged"
    shutil.copytree(study.remote, bad_remote)
    damage(bad_remote / cache_file_of(study.a, FINAL, weights).relative_to(study.a / ".dvc" / "cache"), True)
    sh(e, "dvc", "remote", "modify", "--local", "lab", "url", str(bad_remote))
    sh(e, "dvc", "pull")
    assert tree_digest(e / FINAL)[weights] != good
    proc = sh(e, *ACERL_DVC, "verify-cache", check=False)
    assert proc.returncode == 1 and f"{FINAL}/{weights}" in proc.stderr

    # ... with `verify = true` (docs/sharing.md) `dvc pull` re-hashes the download, refuses it and fails.
    shutil.rmtree(e / ".dvc" / "cache")
    remove(e / FINAL)
    sh(e, "dvc", "remote", "modify", "--local", "lab", "verify", "true")
    proc = sh(e, "dvc", "pull", check=False)
    assert proc.returncode != 0 and FINAL in proc.stdout + proc.stderr
    assert not (e / FINAL / weights).exists()
    assert "train_policy-tiny-grpo-seed0" in dvc_status(e)

    # (b) Damaged in the local cache, still read-only: DVC trusts it without re-hashing and checks it out ...
    sh(e, "dvc", "remote", "modify", "--local", "lab", "url", str(study.remote))
    sh(e, "dvc", "pull")
    assert tree_digest(e / FINAL)[weights] == good
    damage(cache_file_of(e, FINAL, weights), keep_mode=True)
    remove(e / FINAL)
    sh(e, "dvc", "checkout", FINAL)
    assert tree_digest(e / FINAL)[weights] != good
    assert dvc_status(e) == {}
    # ... `verify-cache` names it; --repair, pull and a relinking checkout restore the original.
    proc = sh(e, *ACERL_DVC, "verify-cache", check=False)
    assert proc.returncode == 1 and f"{FINAL}/{weights}" in proc.stderr
    sh(e, *ACERL_DVC, "verify-cache", "--repair", check=False)
    sh(e, "dvc", "pull")
    sh(e, "dvc", "checkout", "--relink")
    assert tree_digest(e / FINAL)[weights] == good
    sh(e, *ACERL_DVC, "verify-cache")

    # (c) Damaged and no longer read-only (rewritten by some tool): DVC re-hashes it and reports it.
    damage(cache_file_of(e, FINAL, weights), keep_mode=False)
    status = dvc_status(e)
    assert "not in cache" in json.dumps(status.get("train_policy-tiny-grpo-seed0"))
    sh(e, "dvc", "fetch")
    remove(e / FINAL)
    sh(e, "dvc", "checkout", FINAL)
    assert tree_digest(e / FINAL)[weights] == good
    assert dvc_status(e) == {}
