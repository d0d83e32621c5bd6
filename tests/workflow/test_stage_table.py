"""One stage table (acerl.pipeline.stages) feeds Snakemake and DVC: both tools see the same jobs, files and deciding params,
and a changed key reruns the same jobs in both (Snakemake's params trigger, ``dvc status``). The rules spell out the
table's patterns and commands; the tests here check the rules as written, and every job of the default, CI-scale
and paper grids, against it."""

from __future__ import annotations

import contextlib
import copy
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.perturb import candidates, leaves, nest
from support.study import REPO, copy_project, copy_workflow, snakemake_env

from acerl import stage_versions
from acerl.config import deep_merge, load_config, merged_dict, spec_json, validate
from acerl.config.settings import run_spec, spec_keys
from acerl.dvc import render_dvc_yaml, stage_name
from acerl.pipeline.stages import (
    STAGES,
    VERSIONS_FILE,
    Job,
    config_args,
    job_benchmark_file,
    job_command,
    job_inputs,
    job_log_file,
    job_outputs,
    param_keys,
    pattern_job,
    stage_argv,
    study_jobs,
)

SMK_API = Path(__file__).with_name("smk_api.py")
GRIDS = {
    "default": ("config/config.yaml",),
    "test": ("config/config.yaml", "config/test.yaml"),
    "paper": ("config/config.yaml", "config/paper.yaml"),
}


def smk_api(workdir: Path, *args: str) -> Any:
    proc = subprocess.run(
        [sys.executable, str(SMK_API), str(workdir), *args],
        cwd=workdir,
        env=snakemake_env(extra={"PYTHONPATH": str(workdir / "src")} if (workdir / "src").is_dir() else None),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _covered(key: str, listed: list[str]) -> bool:
    return any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in listed)


def _dvc_param_keys(stage: dict[str, Any]) -> dict[str, list[str]]:
    return {f: keys for entry in stage.get("params", []) for f, keys in entry.items()}


# ------------------------------------------------------------------------------------------- agreement
@pytest.mark.parametrize("grid", list(GRIDS))
def test_snakemake_and_dvc_see_the_same_jobs_files_and_params(tmp_path: Path, grid: str) -> None:
    """Every job of the default, CI-scale and paper grids: Snakemake's DAG (its Python API) and the generated
    dvc.yaml have the same jobs, commands, inputs, outputs and deciding keys, and the same code version; each
    Snakemake job runs the table's command (``job_command``) into the table's log."""
    files = GRIDS[grid]
    wd = copy_workflow(tmp_path)
    smk = smk_api(wd, "jobs", *files[1:])
    cfg = load_config([REPO / f for f in files])
    dvc = yaml.safe_load(render_dvc_yaml(cfg, files, REPO))["stages"]
    data = {f: yaml.safe_load((REPO / f).read_text()) for f in files}
    table = {stage_name(j.stage, *j.parts): j for j in study_jobs(cfg)}
    assert len(smk) == len(dvc) == len(table)
    by_outputs = {}
    for name, st in dvc.items():
        outs = [o if isinstance(o, str) else next(iter(o)) for o in st.get("outs", [])]
        persist = {next(iter(o)) for o in st.get("outs", []) if not isinstance(o, str)}
        by_outputs[frozenset(set(outs) - persist | set(st.get("metrics", [])))] = name
    for job in smk:
        name = by_outputs[frozenset(job["output"])]  # KeyError: a Snakemake job DVC does not have
        st, tj = dvc[name], table[name]
        assert job["rule"] == tj.stage
        assert st["cmd"] == job_command(tj, files)
        assert job["shell"] == _shell(tj.stage, st["cmd"], job["log"][0]), name
        assert job["params"]["configs"] == shlex.join(config_args(files))
        assert job["log"] == [job_log_file(".", tj).as_posix()], name
        assert job["benchmark"] == job_benchmark_file(".", tj).as_posix(), name
        assert job["input"] == sorted(st.get("deps", [])), name
        decides = json.loads(job["params"]["decides"])
        assert decides.pop("version") == stage_versions.STAGE_VERSIONS[tj.stage]
        keys = param_keys(cfg, tj)
        # Snakemake records a training job's resolved run spec, DVC the keys it is resolved from
        if tj.stage == "train_policy":
            assert decides.pop("run_spec") == json.loads(spec_json(run_spec(cfg, tj.run))), name
            assert sorted(decides) == sorted(set(keys) - set(spec_keys(cfg, tj.run))), name
        else:
            assert sorted(decides) == sorted(keys), name
        listed = _dvc_param_keys(st)
        assert listed.pop(VERSIONS_FILE) == [f"STAGE_VERSIONS.{tj.stage}"]
        for f, dvc_keys in listed.items():
            assert all(_covered(k, keys) for k in dvc_keys), (name, f, dvc_keys)
        for key in keys:  # a key some file sets (or sets a part of) is one of DVC's params in that file
            for f, d in data.items():
                if _sets(d, key):
                    assert _covered(key, listed.get(f, [])), (name, f, key)
    assert {j["rule"] for j in smk} <= set(STAGES)


# ------------------------------------------------------------------------------------------- the rules
EXEC = {
    "train_policy"
}  # `exec acerl train`: the trainer itself gets SLURM's SIGTERM and checkpoints (docs/cluster.md)
INPUT_FUNCTIONS = {  # inputs a wildcard's config decides, so input functions (each commented in its rule)
    "prepare_base": {
        "sft",
        "benchmarks",
        "local",
    },  # the tiny model's SFT data and benchmarks; a hub model's folder
    "sample": {"policy"},  # a run's final policy, or the base model itself for method "base"
}


def _shell(stage: str, command: str, log: str) -> str:
    """A job's shell command: the table's command, its output to the job's log."""
    return f"{'exec ' if stage in EXEC else ''}{command} > {log} 2>&1"


def _flat(files: Any) -> list[Any]:
    """A rule's named files in order, as (path, directory) pairs or ``<function>``; empty lists (a branch not
    taken) left out."""
    out: list[Any] = []
    for value in files.values():
        for v in value if isinstance(value, list) else [value]:
            out.append(v if v == "<function>" else (v["path"], v["directory"]))
    return out


@pytest.mark.parametrize("grid", list(GRIDS))
def test_every_rule_spells_out_its_files_and_command(tmp_path: Path, grid: str) -> None:
    """Each rule as written (Snakemake's parsed rules, wildcards unfilled) shows the stage table's patterns: its
    outputs (a DVC-only ``persist`` log left out), log and benchmark, its inputs (input functions only where a
    wildcard's config decides them: ``INPUT_FUNCTIONS``), and its ``shell:`` the table's command with
    ``{params.configs}`` for the config files and ``{wildcards.*}`` for the job's values."""
    files = GRIDS[grid]
    rules = smk_api(copy_workflow(tmp_path), "rules", *files[1:])
    cfg = load_config([REPO / f for f in files])
    assert sorted(rules) == sorted(STAGES)
    for stage, rule in rules.items():
        job = pattern_job(stage)
        assert rule["unnamed_input"] == rule["unnamed_output"] == 0, stage
        outputs = [(o.path, o.directory) for o in job_outputs(cfg, job) if not o.persist]
        assert _flat(rule["output"]) == outputs, stage
        assert rule["log"] == [job_log_file(".", job).as_posix()], stage
        assert rule["benchmark"] == job_benchmark_file(".", job).as_posix(), stage
        functions = {name for name, value in rule["input"].items() if value == "<function>"}
        assert functions == INPUT_FUNCTIONS.get(stage, set()), stage
        try:
            table = job_inputs(cfg, job)
        except KeyError:  # the inputs of a "{model}" need the model's config: input functions alone
            assert set(rule["input"]) == functions, stage
        else:
            literal = {name: value for name, value in rule["input"].items() if name not in functions}
            want = {name: value for name, value in table.items() if name not in functions}
            assert [path for path, _ in _flat(literal)] == _flat_paths(want), stage
        argv = stage_argv(stage, [], ".", run=job.run, model=job.model if job.run is None else None,
                          benchmark=job.benchmark)  # fmt: skip
        command = " ".join([*argv[:2], "{params.configs}", *argv[2:]])
        spelt = re.sub(r"\{wildcards\.(\w+)(?::q)?\}", r"{\1}", rule["shell"])
        assert spelt == _shell(stage, command, "{log}"), stage


def _flat_paths(inputs: dict[str, str | list[str]]) -> list[str]:
    return [p for value in inputs.values() for p in ([value] if isinstance(value, str) else value)]


def _sets(data: dict[str, Any], key: str) -> bool:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_the_issue_disagreements_are_gone() -> None:
    """The disagreements issue 18 found between the two hand-written graphs, checked on the table itself."""
    cfg = load_config([REPO / f for f in GRIDS["test"]])
    jobs = {stage_name(j.stage, *j.parts): j for j in study_jobs(cfg)}
    sample = param_keys(cfg, jobs["sample-synth_easy-tiny-grpo-seed0"])
    assert "evaluation.benchmarks" not in sample and "evaluation.seed" in sample
    assert param_keys(cfg, jobs["grade-synth_easy-tiny-grpo-seed0"]) == ["grading.timeout_s"]
    assert "evaluation.seed" in param_keys(cfg, jobs["diagnose-tiny-grpo-seed0"])
    assert not any(
        k.startswith("study.diagnostics.models") for k in param_keys(cfg, jobs["diagnose-tiny-grpo-seed0"])
    )
    curves = [o for o in job_outputs(cfg, jobs["passk-synth_easy-tiny-grpo-seed0"]) if o.name == "curve"]
    assert curves and curves[0].path.endswith(".curve.tsv")
    paper = load_config([REPO / f for f in GRIDS["paper"]])
    verl = [j for j in study_jobs(paper) if j.stage == "prepare_verl_data"]
    assert [j.model for j in verl] == [m for m in paper.models if any(r.model == m for r in paper.runs())]


# ------------------------------------------------------------------------------------------ rerun tests
SMALL = {  # a small grid with every stage kind: 2 methods + an alpha-sweep point, a base model, one diagnostic run
    "study": {
        "main": {"models": ["tiny"], "methods": ["grpo", "ace_grpo"], "seeds": [0], "include_base": True},
        "alpha_sweep": {"model": "tiny", "method": "ace_grpo", "alphas": [0.5], "seeds": [0]},
        "ablation": None,
        "diagnostics": {"models": ["tiny"], "methods": ["ace_grpo"], "seeds": [0]},
    },
    "evaluation": {"benchmarks": ["synth_easy"]},
}
SPEED_KNOBS = {  # rerun nothing in either tool
    "grading.workers": 0,
    "compute.torch_threads": 2,
    "compute.device": "cpu",
    "compute.gradient_checkpointing": True,
    "compute.max_tokens_per_micro_batch": 512,
    "evaluation.vllm.kv_cache_gib": 4.0,
}
EXPLICIT = {  # keys whose generic perturbation is not a valid config
    "models.tiny.source": {"models": {"tiny": {"source": "hub", "hub_id": "org/model"}}},
    "models.tiny.tiny": {"models": {"tiny": {"tiny": {"num_layers": 3}}}},
    "models.tiny.hub_id": {"models": {"tiny": {"hub_id": "org/model"}}},
    "models.tiny.path": {"models": {"tiny": {"path": "elsewhere"}}},
    "models.tiny.template": {"models": {"tiny": {"template": "qwen_boxed"}}},
    "evaluation.max_new_tokens": {"evaluation": {"max_new_tokens": 24}},
    "study.diagnostics.max_new_tokens": {"study": {"diagnostics": {"max_new_tokens": 24}}},
    "name": {"name": "other"},
    "methods.ace_grpo.family": {"methods": {"ace_grpo": {"family": "dapo"}}},
    "compute.precision": {"compute": {"precision": "bf16"}},
    "evaluation.backend": {"evaluation": {"backend": "vllm"}},
    "compute.model_resources": {"compute": {"model_resources": {"tiny": {"sample": {"threads": 2}}}}},
    "models.tiny.train.betas": {"models": {"tiny": {"train": {"betas": [0.9, 0.99]}}}},
}
GRID_KEYS = {  # deciding keys no change of which keeps the graph: the agreement test covers the other graphs
    "methods.ace_grpo.estimator.name": "the alpha sweep's method must use the ACE estimator",
    "compute.backend": "verl adds prepare_verl_data jobs and train inputs (the paper grid)",
    "evaluation.benchmarks": "the benchmarks are the evaluation grid",
}


def _perturbation(base: dict[str, Any], cfg_dump: dict[str, Any], key: str) -> dict[str, Any] | None:
    """An override (merged over ``base``) changing ``key``'s value, keeping the grid; ``None`` if none found."""
    if key in EXPLICIT:
        return EXPLICIT[key]
    node: Any = cfg_dump
    for part in key.split("."):
        node = node[part]
    old = validate(base)
    for leaf, value in leaves(node, key):
        for new in candidates(value):
            override = nest(leaf, new)
            try:
                cfg = validate(deep_merge(base, override))
            except Exception:
                continue
            if cfg.model_dump() != old.model_dump() and (
                cfg.runs(),
                cfg.evaluations(),
                cfg.diagnostic_runs(),
            ) == (
                old.runs(),
                old.evaluations(),
                old.diagnostic_runs(),
            ):
                return override
    return None


def _changed_leaves(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    la, lb = dict(leaves(a)), dict(leaves(b))
    return [k for k in set(la) | set(lb) if la.get(k, object()) != lb.get(k, object())]


@pytest.fixture(scope="module")
def small_study(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A scratch project on the small grid with a placeholder for every output, recorded by both tools: Snakemake
    (``--touch``: its metadata holds every job's params) and DVC (``dvc commit``: dvc.lock holds the params)."""
    from dvc.repo import Repo

    wd = copy_project(tmp_path_factory.mktemp("stage-table"))
    base = deep_merge(yaml.safe_load((REPO / "config/test.yaml").read_text()), SMALL)
    (wd / "config/test.yaml").write_text(yaml.safe_dump(base))
    files = GRIDS["test"]
    cfg = load_config([wd / f for f in files])
    for job in study_jobs(cfg):
        for out in job_outputs(cfg, job):
            p = wd / out.path
            p.parent.mkdir(parents=True, exist_ok=True)
            if out.directory:
                p.mkdir(exist_ok=True)
                (p / "placeholder").write_text(out.path)
            else:
                p.write_text(out.path)
    env = snakemake_env(extra={"PYTHONPATH": str(wd / "src")})
    touch = subprocess.run(
        ["snakemake", "all", "--touch", "--forceall", "-c1", "--configfile", "config/test.yaml"],
        cwd=wd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert touch.returncode == 0, touch.stderr[-3000:]
    (wd / "dvc.yaml").write_text(render_dvc_yaml(cfg, files, wd))
    Repo.init(str(wd), no_scm=True, force=True)
    with contextlib.chdir(wd), Repo(str(wd)) as repo:  # DVC's API resolves paths from the working directory
        repo.commit(None, force=True)
        assert repo.status() == {}
    merged = merged_dict([wd / f for f in files])
    return {"wd": wd, "cfg": cfg, "base": base, "merged": merged, "files": files}


def _dvc_changed(study: dict[str, Any], test_yaml: dict[str, Any]) -> set[str]:
    """``dvc status`` after writing ``config/test.yaml`` and regenerating dvc.yaml (docs/sharing.md)."""
    from dvc.repo import Repo

    wd, files = study["wd"], study["files"]
    (wd / "config/test.yaml").write_text(yaml.safe_dump(test_yaml))
    cfg = load_config([wd / f for f in files])
    (wd / "dvc.yaml").write_text(render_dvc_yaml(cfg, files, wd))
    with contextlib.chdir(wd), Repo(str(wd)) as repo:
        return set(repo.status())


def _expected(study: dict[str, Any], override: dict[str, Any]) -> set[str]:
    """Jobs whose deciding keys (before or after the change) cover a changed value: what both tools must rerun."""
    old = study["cfg"]
    new = validate(deep_merge(study["merged"], override))
    changed = _changed_leaves(old.model_dump(mode="json"), new.model_dump(mode="json"))
    return {
        stage_name(j.stage, *j.parts)
        for j in study_jobs(old)
        if any(_covered(c, param_keys(old, j) + param_keys(new, j)) for c in changed)
    }


def _smk_changed(study: dict[str, Any], outputs: list[str]) -> set[str]:
    cfg = study["cfg"]
    owner = {o.path: stage_name(j.stage, *j.parts) for j in study_jobs(cfg) for o in job_outputs(cfg, j)}
    return {owner[o] for o in outputs}


@pytest.mark.slow  # about 2-3 min: one Snakemake DAG and one `dvc status` per changed key
def test_changing_each_deciding_key_reruns_the_same_jobs_in_both_tools(small_study: dict[str, Any]) -> None:
    """For every stage, each of its deciding keys (on one job of the stage) is changed in turn: Snakemake's
    params trigger and ``dvc status`` list exactly the jobs whose deciding keys cover it (and that stage's job
    is among them); speed knobs rerun nothing."""
    study = small_study
    cfg, base = study["cfg"], study["base"]
    dump = cfg.model_dump(mode="json")
    variants: dict[str, dict[str, Any]] = {}
    missing = []
    for stage in STAGES:
        jobs = [j for j in study_jobs(cfg) if j.stage == stage]
        if not jobs:
            continue  # prepare_verl_data: verl backend only (the paper grid's agreement test covers it)
        for key in param_keys(cfg, jobs[-1]):
            if key in GRID_KEYS:
                continue
            override = _perturbation(study["merged"], dump, key)
            if override is None:
                missing.append(key)
            else:
                variants[f"{stage}:{key}"] = override
    assert not missing, f"no valid change found for deciding keys {missing}: add one to EXPLICIT"
    for key, value in SPEED_KNOBS.items():
        variants[f"speed:{key}"] = nest(key, value)
    labelled = [
        (label, {"config/test.yaml": yaml.safe_dump(deep_merge(base, override))})
        for label, override in variants.items()
    ]
    (study["wd"] / "variants.json").write_text(json.dumps(labelled))
    smk = smk_api(study["wd"], "changes", str(study["wd"] / "variants.json"), "config/test.yaml")
    for label, override in variants.items():
        expected = _expected(study, override)
        stage = label.split(":", 1)[0]
        assert _smk_changed(study, smk[label]) == expected, label
        assert _dvc_changed(study, deep_merge(base, override)) == expected, label
        if stage == "speed":
            assert expected == set(), label
        else:
            assert any(name.split("-", 1)[0] == stage for name in expected), label
    _dvc_changed(study, base)


@pytest.mark.slow  # shares the scratch study (a Snakemake --touch and a dvc commit) of the key sweep
def test_a_stage_version_bump_reruns_that_stage_in_both_tools(small_study: dict[str, Any]) -> None:
    """Code changes: bumping ``STAGE_VERSIONS['grade']`` reruns every grade job and nothing else, in both tools."""
    from dvc.repo import Repo

    study = small_study
    wd, cfg = study["wd"], study["cfg"]
    versions = wd / VERSIONS_FILE
    original = versions.read_text()
    bumped = copy.deepcopy(stage_versions.STAGE_VERSIONS)
    bumped["grade"] += 1
    versions.write_text(original.replace('"grade": 1,', f'"grade": {bumped["grade"]},'))
    try:
        grade = {stage_name(j.stage, *j.parts) for j in study_jobs(cfg) if j.stage == "grade"}
        test_yaml = (wd / "config/test.yaml").read_text()
        (wd / "variants.json").write_text(json.dumps([["bump", {"config/test.yaml": test_yaml}]]))
        smk = smk_api(wd, "changes", str(wd / "variants.json"), "config/test.yaml")
        assert _smk_changed(study, smk["bump"]) == grade
        with contextlib.chdir(wd), Repo(str(wd)) as repo:
            assert set(repo.status()) == grade
    finally:
        versions.write_text(original)


def test_job_of_every_stage_has_a_version() -> None:
    assert set(stage_versions.STAGE_VERSIONS) == set(STAGES)
    assert all(isinstance(v, int) and v >= 1 for v in stage_versions.STAGE_VERSIONS.values())
    assert Job("report").parts == ()
