"""The typed config: validation errors name the file and the key path; the run grid is derived correctly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from acerl.config import BASE_METHOD, ConfigError, Run, alpha_variant_key, load_config, read_yaml
from acerl.config.settings import run_spec

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "config").glob("*.yaml"))
PAPER_OVERLAYS = ("canary.yaml", "paper_2node.yaml")  # stacked over config/paper.yaml (docs/cluster.md)
STACKED = {"gpu_methods.yaml": ("gpu.yaml", "methods.yaml")}  # overlays stacked over others (docs/gpu.md)


def write(tmp_path: Path, data: dict, name: str = "c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def base_dict() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_validate(path: Path) -> None:
    files = [REPO / "config" / "config.yaml"] if path.name != "config.yaml" else []
    if path.name in PAPER_OVERLAYS:
        files.append(REPO / "config" / "paper.yaml")
    files += [REPO / "config" / name for name in STACKED.get(path.name, ())]
    cfg = load_config([*files, path])
    assert cfg.runs(), "a study with no training runs"
    assert max(cfg.evaluation.ks) <= cfg.evaluation.n


def test_unknown_key_names_file_and_path(tmp_path: Path) -> None:
    d = base_dict()
    d["models"]["tiny"]["train"]["learning_rate"] = 1e-3
    p = write(tmp_path, d)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg
    assert "models.tiny.train.learning_rate" in msg and "unknown key" in msg


def test_wrong_type_names_key_path(tmp_path: Path) -> None:
    d = base_dict()
    d["evaluation"]["n"] = "many"
    with pytest.raises(ConfigError, match=r"evaluation\.n"):
        load_config(write(tmp_path, d))


def test_unknown_method_reference_lists_valid_names(tmp_path: Path) -> None:
    d = base_dict()
    d["study"]["main"]["methods"].append("ppo")
    with pytest.raises(ConfigError, match=r"study\.main\.methods\[4\].*'ppo'.*valid: .*ace_grpo"):
        load_config(write(tmp_path, d))


def test_k_larger_than_n_rejected(tmp_path: Path) -> None:
    d = base_dict()
    d["evaluation"]["n"] = 16
    with pytest.raises(ConfigError, match="exceeds samples per problem"):
        load_config(write(tmp_path, d))


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:2:1: not valid YAML"):
        load_config(bad)


def test_overrides_and_later_files_win(tmp_path: Path) -> None:
    over = write(tmp_path, {"evaluation": {"n": 64}}, "over.yaml")
    cfg = load_config([REPO / "config" / "config.yaml", over], ["methods.ace_grpo.estimator.alpha=0.5"])
    assert cfg.evaluation.n == 64
    assert cfg.evaluation.temperature == 0.7  # untouched keys survive the merge
    assert cfg.methods["ace_grpo"].estimator.alpha == 0.5


def test_run_grid_default_config() -> None:
    cfg = load_config(REPO / "config" / "config.yaml")
    runs = cfg.runs()
    assert len(runs) == len(set(runs)), "duplicate runs"
    main = {(r.method, r.seed) for r in runs if r.method in {"grpo", "dapo", "ace_grpo", "ace_dapo"}}
    assert main == {(m, s) for m in ["grpo", "dapo", "ace_grpo", "ace_dapo"] for s in [0, 1, 2, 3, 4]}
    # the alpha sweep reuses ace_grpo for the default alpha, grpo for alpha = 0, and adds one run per other alpha
    sweep = sorted(r.method for r in runs if r.method.startswith("ace_grpo-alpha"))
    assert sweep == ["ace_grpo-alpha0.5", "ace_grpo-alpha2"]
    assert cfg.method("ace_grpo-alpha0.5").estimator.alpha == 0.5
    assert cfg.method("ace_grpo-alpha0.5").family == "grpo"
    assert cfg.base_runs() == [Run("tiny", BASE_METHOD, 0)]


def test_evaluations_follow_the_tables() -> None:
    """Base + main grid on every benchmark (Tables 1-2); sweep / ablation-only runs on their table's one."""
    cfg = load_config(REPO / "config" / "config.yaml")
    pairs = cfg.evaluations()
    assert len(pairs) == len(set(pairs))
    by_bench = {b: {r.id for bb, r in pairs if bb == b} for b in ("synth_easy", "synth_hard")}
    main = {f"tiny/{m}/seed{s}" for m in ("grpo", "dapo", "ace_grpo", "ace_dapo") for s in range(5)}
    assert by_bench["synth_hard"] == main | {"tiny/base/seed0"}
    extra = {f"tiny/ace_grpo-alpha{a}/seed0" for a in ("0.5", "2")} | {"tiny/ace_grpo_relu/seed0"}
    assert by_bench["synth_easy"] == main | {"tiny/base/seed0"} | extra
    assert cfg.table_benchmark("alpha_sweep") == cfg.table_benchmark("ablation") == "synth_easy"


def test_table_benchmark_is_chosen_and_checked(tmp_path: Path) -> None:
    d = base_dict()
    d["study"]["ablation"]["benchmark"] = "synth_hard"
    cfg = load_config(write(tmp_path, d))
    assert cfg.table_benchmark("ablation") == "synth_hard"
    relu = {b for b, r in cfg.evaluations() if r.method == "ace_grpo_relu"}
    assert relu == {"synth_hard"}
    d["study"]["alpha_sweep"]["benchmark"] = "heldout"
    with pytest.raises(ConfigError, match=r"study.alpha_sweep.benchmark: 'heldout' is not one of"):
        load_config(write(tmp_path, d))


def test_tables_reuse_main_runs_over_consistent_seeds() -> None:
    """Paper grid: alpha = 0 is the main grid's GRPO run and alpha = 1.0 its ACE-GRPO run, both over the 5 main
    seeds (the paper's rows equal Table 1's 5-run means); every ablation row averages the same 5 seeds."""
    cfg = load_config([REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"])
    main_seeds = [0, 1, 2, 3, 4]
    sweep = cfg.table_rows("alpha_sweep")
    assert cfg.sweep_method(0.0) == "grpo" and cfg.sweep_method(1.0) == "ace_grpo"
    assert sweep["grpo"] == sweep["ace_grpo"] == main_seeds
    assert {k: v for k, v in sweep.items() if k not in ("grpo", "ace_grpo")} == {
        f"ace_grpo-alpha{a}": [0] for a in ("0.1", "0.5", "2", "5")
    }
    ablation = cfg.table_rows("ablation")
    assert list(ablation) == ["grpo", "ace_grpo_relu", "ace_grpo"]
    assert all(seeds == main_seeds for seeds in ablation.values())
    runs = cfg.runs()
    assert not [r for r in runs if r.method.endswith("-alpha0")]  # no separate alpha = 0 training job
    # 3 models x 4 methods x 5 seeds, + 4 sweep alphas x seed 0, + ACE-ReLU x 5 seeds (was 66: alpha0 + ReLU seed 0)
    assert len(runs) == 60 + 4 + 5


def test_alpha_zero_needs_a_matching_grpo_method(tmp_path: Path) -> None:
    """Without a GRPO method of the same family and normalisation, alpha = 0 stays its own ACE variant."""
    d = base_dict()
    d["methods"]["grpo"]["estimator"] = {"name": "grpo", "norm_by_std": False}  # Dr. GRPO: not ACE at alpha 0
    cfg = load_config(write(tmp_path, d))
    assert cfg.sweep_method(0.0) == "ace_grpo-alpha0"
    assert cfg.method("ace_grpo-alpha0").estimator.alpha == 0.0
    assert cfg.table_rows("alpha_sweep")["ace_grpo-alpha0"] == [0]


def test_alpha_variant_key() -> None:
    assert alpha_variant_key("ace_grpo", 1.0, 1.0) == "ace_grpo"
    assert alpha_variant_key("ace_grpo", 0.1, 1.0) == "ace_grpo-alpha0.1"


def test_run_spec_changes_only_with_what_matters() -> None:
    a = load_config(REPO / "config" / "config.yaml")
    b = load_config(REPO / "config" / "config.yaml", ["methods.ace_grpo.estimator.alpha=2.0"])
    grpo, ace = Run("tiny", "grpo", 0), Run("tiny", "ace_grpo", 0)
    assert run_spec(a, grpo) == run_spec(b, grpo)
    assert run_spec(a, ace) != run_spec(b, ace)


def test_diagnostic_steps_cover_early_window_and_every() -> None:
    cfg = load_config(REPO / "config" / "config.yaml")
    steps = cfg.diagnostic_steps("tiny")
    d = cfg.study.diagnostics
    total = cfg.models["tiny"].train.total_steps
    assert steps[0] == 0 and steps[-1] == total
    assert all(s in steps for s in range(0, min(d.early_steps, total) + 1, d.early_every))
    assert all(s in steps for s in range(0, total + 1, d.every))


def test_reserved_base_method(tmp_path: Path) -> None:
    d = base_dict()
    d["methods"]["base"] = {"display": "x", "family": "grpo"}
    with pytest.raises(ConfigError, match="reserved"):
        load_config(write(tmp_path, d))


def test_config_reference_doc_is_current() -> None:
    from acerl.config import reference_markdown

    doc = REPO / "docs" / "config.md"
    assert doc.read_text() == reference_markdown(), (
        "docs/config.md is stale: acerl config reference > docs/config.md"
    )


@pytest.mark.parametrize(
    ("setting", "environ", "expected"),
    [(3, {"OMP_NUM_THREADS": "2"}, 3), ("job", {"OMP_NUM_THREADS": "2"}, 2), ("job", {}, 1)],
)
def test_torch_threads_number_or_the_jobs_threads(tmp_path: Path, setting, environ, expected) -> None:
    d = base_dict()
    d["compute"]["torch_threads"] = setting
    assert load_config(write(tmp_path, d)).compute.threads(environ) == expected


@pytest.mark.parametrize("bad", [0, "all"])
def test_torch_threads_rejects_bad_values(tmp_path: Path, bad) -> None:
    d = base_dict()
    d["compute"]["torch_threads"] = bad
    with pytest.raises(ConfigError, match=r"compute\.torch_threads"):
        load_config(write(tmp_path, d))


def test_vllm_settings_resolve_per_model_and_rule():
    cfg = load_config([REPO / "config" / "config.yaml"])
    assert cfg.vllm_engine("tiny") == {
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.75,  # the model's train.gpu_memory_utilization (Table 5)
        "kv_cache_gib": None,
        "seed": cfg.evaluation.seed,
        "dtype": "auto",
        "max_model_len": None,
        "enforce_eager": None,
    }
    cfg = load_config(
        [REPO / "config" / "config.yaml"],
        [
            "compute.resources.sample.gpus=2",
            "evaluation.vllm.gpu_memory_utilization=0.5",
            "evaluation.vllm.kv_cache_gib=3",
            "evaluation.vllm.max_model_len=128",
            "evaluation.vllm.enforce_eager=true",
        ],
    )
    engine = cfg.vllm_engine("tiny")
    assert (engine["tensor_parallel_size"], engine["gpu_memory_utilization"]) == (2, 0.5)
    assert (engine["kv_cache_gib"], engine["max_model_len"], engine["enforce_eager"]) == (3, 128, True)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["evaluation.vllm.max_model_len=100"], r"max_model_len: 100 is below models\.tiny's .* budget 128"),
        (
            ["compute.resources.sample.gpus=2", "evaluation.vllm.tensor_parallel_size=4"],
            r"tensor_parallel_size: 4 exceeds the 2 GPU\(s\)",
        ),
        (["evaluation.vllm.tensor_parallel_size=3"], r"does not divide models\.tiny's 4 attention heads"),
        (["evaluation.vllm.kv_cache_gib=0"], r"evaluation\.vllm\.kv_cache_gib"),
        (["evaluation.vllm.dtype=int8"], r"evaluation\.vllm\.dtype"),
        (["evaluation.vllm.gpu_memory_utilization=1.5"], r"evaluation\.vllm\.gpu_memory_utilization"),
        (["evaluation.vllm.swap_space=4"], r"evaluation\.vllm\.swap_space"),
    ],
)
def test_vllm_settings_vllm_would_reject_fail_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config([REPO / "config" / "config.yaml"], overrides)


def test_power_study_config_reuses_the_default_runs_and_declares_its_endpoint(tmp_path) -> None:
    """config/power.yaml: the main grid only, one benchmark, the primary endpoint declared; its train and sample
    jobs have the default study's params (so a default study's runs are reused), except the training of the
    default's diagnosed runs, which also saves the diagnostics' checkpoints."""
    from acerl.pipeline.stages import Job, param_values

    default = load_config(REPO / "config" / "config.yaml")
    power = load_config([REPO / "config" / "config.yaml", REPO / "config" / "power.yaml"])
    assert power.study.alpha_sweep is power.study.ablation is power.study.diagnostics is None
    assert power.evaluation.benchmarks == ["synth_easy"] and power.primary_endpoint == ("synth_easy", 32)
    assert default.primary_endpoint == ("synth_easy", 32)  # the first benchmark, the largest k
    shared = [r for r in power.runs() if r.seed in default.study.main.seeds]
    assert len(shared) == 4 * 5 and len(power.runs()) == 4 * 8
    diagnosed = set(default.study.diagnostics.methods), set(default.study.diagnostics.seeds)
    for run in shared:
        sample = Job("sample", run=run, benchmark="synth_easy")
        assert param_values(power, sample) == param_values(default, sample), run
        train = param_values(power, Job("train_policy", run=run))
        other = param_values(default, Job("train_policy", run=run))
        if run.method in diagnosed[0] and run.seed in diagnosed[1]:  # only the saved policies differ
            assert train["run_spec"].pop("diagnostic_steps") == [], run
            assert other["run_spec"].pop("diagnostic_steps"), run
        assert train == other, run
    d = yaml.safe_load((REPO / "config" / "power.yaml").read_text())
    d["report"]["primary"]["benchmark"] = "synth_hard"
    with pytest.raises(ConfigError, match=r"report.primary.benchmark: 'synth_hard' is not one of"):
        load_config([REPO / "config" / "config.yaml", write(tmp_path, d)])
    d["report"]["primary"] = {"k": 3}
    with pytest.raises(ConfigError, match=r"report.primary.k: 3 is not one of evaluation.ks"):
        load_config([REPO / "config" / "config.yaml", write(tmp_path, d)])


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (
            ("study", "main", "seeds"),
            [0, -1],
            r"study\.main\.seeds\.1: Input should be greater than or equal to 0",
        ),
        (
            ("study", "main", "seeds"),
            [0, 0],
            r"study\.main\.seeds: seed 0 is listed 2 times: list each seed once",
        ),
        (("study", "main", "seeds"), [], r"study\.main\.seeds: .*at least 1 item"),
        (("study", "main", "methods"), [], r"study\.main\.methods: .*at least 1 item"),
        (("study", "main", "models"), [], r"study\.main\.models: .*at least 1 item"),
        (
            ("study", "alpha_sweep", "seeds"),
            [-2],
            r"study\.alpha_sweep\.seeds\.0: .*greater than or equal to 0",
        ),
        (("study", "ablation", "seeds"), [1, 1], r"study\.ablation\.seeds: seed 1 is listed 2 times"),
        (
            ("study", "diagnostics", "seeds"),
            [-1],
            r"study\.diagnostics\.seeds\.0: .*greater than or equal to 0",
        ),
        (("evaluation", "seed"), -5, r"evaluation\.seed: .*greater than or equal to 0"),
        (("evaluation", "ks"), [0, 1, 2], r"evaluation\.ks\.0: .*greater than or equal to 1"),
        (("evaluation", "ks"), [], r"evaluation\.ks: .*at least 1 item"),
    ],
)
def test_bad_seeds_and_empty_grids_are_errors_naming_the_key(tmp_path: Path, where, value, message) -> None:
    """A negative seed, a repeated seed or an empty grid was accepted (a repeat silently counted once)."""
    d = base_dict()
    node = d
    for key in where[:-1]:
        node = node.setdefault(key, {})
    node[where[-1]] = value
    p = write(tmp_path, d)
    with pytest.raises(ConfigError, match=message) as e:
        load_config(p)
    assert e.value.exit_code == 2 and str(p) in str(e.value)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("methods", "ace_grpo", "estimator", "alpha"), True),
        (("evaluation", "temperature"), False),
        (("evaluation", "n"), True),
    ],
)
def test_true_or_false_where_a_number_goes_is_an_error(tmp_path: Path, where, value) -> None:
    """pydantic reads ``alpha: true`` as 1.0; a YAML bool in a number's place is a mistake, not a number."""
    d = base_dict()
    node = d
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    key, text = ".".join(where), str(value).lower()
    with pytest.raises(ConfigError, match=rf"{re.escape(key)}: {text} is not a number: write the number"):
        load_config(write(tmp_path, d))
    with pytest.raises(ConfigError, match=rf"--set {re.escape(key)}={text}: .* is not a number"):
        load_config(REPO / "config" / "config.yaml", [f"{key}={text}"])


def test_a_bool_key_still_takes_a_bool(tmp_path: Path) -> None:
    d = base_dict()
    d["study"]["main"]["include_base"] = False
    assert load_config(write(tmp_path, d)).study.main.include_base is False


def test_a_key_given_twice_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    """PyYAML keeps the last of two equal keys: the first value was dropped without a word."""
    p = tmp_path / "c.yaml"
    p.write_text("evaluation:\n  n: 8\n  ks: [1, 2]\n  n: 16\n")
    with pytest.raises(ConfigError) as e:
        load_config([REPO / "config" / "config.yaml", p])
    assert str(e.value) == f"{p}:4: key 'n' is given twice in one mapping (first on line 2): keep one"
    p.write_text("evaluation: {n: 8, n: 16}\n")
    with pytest.raises(ConfigError, match=rf"{re.escape(str(p))}:1: key 'n' is given twice"):
        load_config([REPO / "config" / "config.yaml", p])
    p.write_text("base: &b {n: 8}\nevaluation:\n  <<: *b\n  ks: [1, 2]\n")  # a merge key is not a repeat
    assert read_yaml(p)["evaluation"] == {"n": 8, "ks": [1, 2]}


def test_a_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("study:\n  main: {models: [tiny]\n")
    with pytest.raises(ConfigError) as e:
        load_config([REPO / "config" / "config.yaml", p])
    assert str(e.value).startswith(f"{p}:3:1: not valid YAML: while parsing a flow mapping")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "models.tiny.train.grup_size=3",
            r"models\.tiny\.train\.grup_size: unknown key \(did you mean 'group_size'\?",
        ),
        ("evaluaton.n=3", r"evaluaton: unknown key \(did you mean 'evaluation'\?"),
        ("study.main.seed=[1]", r"study\.main\.seed: unknown key \(did you mean 'seeds'\?"),
        (
            "methods.ace_grpo.estimator.alfa=1",
            r"not a key of the 'ace' estimator \(did you mean 'alpha'\? valid: ",
        ),
        ("evaluation.zzzz=1", r"evaluation\.zzzz: unknown key \(misspelt\? see docs/config\.md\)"),
    ],
)
def test_a_misspelt_key_suggests_the_closest_one(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(REPO / "config" / "config.yaml", [override])
