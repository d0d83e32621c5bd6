"""The verl command line per method (acerl.verl_backend.launcher): the keys that decide the algorithm.

No verl import here: only the generated overrides, Hydra parsing of our value formatting, checkpoint helpers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from acerl.config import Config, Run, load_config
from acerl.config.settings import run_spec
from acerl.data.real import IDENTITY_CHAT_TEMPLATE
from acerl.pipeline import paths
from acerl.pipeline.io import write_jsonl
from acerl.verl_backend.checkpoints import (
    CALLBACK_CLASS,
    DiagnosticSnapshots,
    export_checkpoint,
    latest_step,
    merge_command,
    save_frequency,
    snapshot_actor,
)
from acerl.verl_backend.launcher import (
    ENTRY_MODULE,
    build_verl_command,
    collect_metrics,
    format_value,
    supersede_if_settings_changed,
    train_run_verl,
    verl_overrides,
)

REPO = Path(__file__).resolve().parents[2]
PAPER_CONFIGS = [REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"]
PAPER_MODELS = ("qwen25_math_7b", "qwen3_8b_base", "llama31_8b_instruct")
PAPER_METHODS = ("grpo", "dapo", "ace_grpo", "ace_dapo")


def _ov(cfg, run: Run, root: Path = Path("/work")) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in verl_overrides(cfg, run, root):
        key, value = item.split("=", 1)
        assert key not in out, f"override {key} given twice"
        out[key] = value
    return out


# Paper Table 5 columns and Sec. 5.1 / DAPO settings, written out independently of config/paper.yaml.
TABLE5 = {
    "qwen25_math_7b": {"batch": 2048, "lr": "1e-05", "resp": 3000, "steps": 80},
    "qwen3_8b_base": {"batch": 1024, "lr": "5e-07", "resp": 8192, "steps": 160},
    "llama31_8b_instruct": {"batch": 1024, "lr": "1e-06", "resp": 4096, "steps": 160},
}


@pytest.mark.parametrize("model", PAPER_MODELS)
@pytest.mark.parametrize("method", PAPER_METHODS)
def test_algorithm_keys_per_method(paper_cfg, model: str, method: str) -> None:
    ov = _ov(paper_cfg, Run(model, method, 3))
    t5 = TABLE5[model]
    a, r = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    # Table 5, shared by every method on a model
    assert ov["data.train_batch_size"] == str(t5["batch"])
    assert ov[f"{a}.ppo_mini_batch_size"] == "1024"
    assert ov[f"{a}.ppo_micro_batch_size_per_gpu"] == "16"
    # dynamic batching with per-GPU token budgets (2x / 3x the longest sequence), not 16 fixed sequences
    longest = 1024 + t5["resp"]
    for key in (
        f"{a}.use_dynamic_bsz",
        f"{r}.log_prob_use_dynamic_bsz",
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
    ):
        assert ov[key] == "True"
    assert ov[f"{a}.ppo_max_token_len_per_gpu"] == str(2 * longest)
    assert ov[f"{r}.log_prob_max_token_len_per_gpu"] == str(3 * longest)
    assert ov["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"] == str(3 * longest)
    assert ov[f"{a}.optim.lr"] == t5["lr"]
    assert ov[f"{r}.n"] == "8"
    assert ov[f"{r}.temperature"] == "1.0"
    assert ov["data.max_prompt_length"] == "1024"
    assert ov["data.max_response_length"] == str(t5["resp"])
    assert ov[f"{r}.val_kwargs.n"] == "128"
    assert ov["trainer.test_freq"] == "-1"  # no in-training validation (Pass@k is the evaluation stage's)
    assert ov[f"{r}.gpu_memory_utilization"] == "0.75"
    assert ov["trainer.total_epochs"] == "10"
    assert ov["trainer.total_training_steps"] == str(t5["steps"])
    assert ov[f"{r}.name"] == "vllm"
    assert ov["data.seed"] == ov[f"{r}.seed"] == "3"
    # family: GRPO = symmetric clip + KL 0.001; DAPO = clip-higher, dual clip 10, dynamic sampling, overlong
    dapo = method in ("dapo", "ace_dapo")
    assert ov[f"{a}.clip_ratio_low"] == "0.2"
    assert ov[f"{a}.clip_ratio_high"] == ("0.28" if dapo else "0.2")
    assert ov[f"{a}.clip_ratio_c"] == ("10.0" if dapo else "3.0")
    # DAPO: token-level loss (DAPO recipe); the GRPO family's aggregation is a config decision (config/paper.yaml)
    grpo_agg = paper_cfg.family("grpo").loss_agg_mode
    assert ov[f"{a}.loss_agg_mode"] == ("token-mean" if dapo else grpo_agg)
    assert ov[f"{a}.use_kl_loss"] == "True"  # the reference policy is always on (ACE-DAPO needs it)
    assert ov[f"{a}.kl_loss_coef"] == ("0.0" if dapo else "0.001")
    assert ov[f"{a}.kl_loss_type"] == "low_var_kl"
    assert ov["algorithm.use_kl_in_reward"] == "False"
    # FSDP2 for actor and reference, as the CPU step executes (verl's default is FSDP1); no entropy in the
    # update pass (entropy_coeff 0; actor/entropy comes from the old-log-prob pass)
    assert ov[f"{a}.strategy"] == ov["actor_rollout_ref.ref.strategy"] == "fsdp2"
    assert f"{a}.calculate_entropy" not in ov and ov[f"{a}.entropy_coeff"] == "0.0"
    assert ov["algorithm.filter_groups.enable"] == str(dapo)
    if dapo:
        assert ov["algorithm.filter_groups.metric"] == "acc"
        # the DAPO recipe's cap: 10 generation batches of 3x the training batch (its run_dapo_*.sh scripts)
        assert ov["algorithm.filter_groups.max_num_gen_batches"] == "10"
        assert ov["+trainer.acerl.gen_batch_size"] == str(3 * int(ov["data.train_batch_size"]))
    else:
        assert "+trainer.acerl.gen_batch_size" not in ov
    if dapo:
        assert ov["reward.reward_manager.name"] == "dapo"
        assert ov["+reward.reward_kwargs.overlong_buffer_cfg.enable"] == "True"
        assert ov["+reward.reward_kwargs.overlong_buffer_cfg.len"] == "512"
        assert ov["+reward.reward_kwargs.max_resp_len"] == str(t5["resp"])
        assert ov["+reward.custom_reward_function.reward_kwargs.incorrect_score"] == "-1.0"
    else:
        assert ov["reward.reward_manager.name"] == "naive"
        assert ov["+reward.custom_reward_function.reward_kwargs.incorrect_score"] == "0.0"
    assert ov["reward.custom_reward_function.path"] == "pkg://acerl.grading.reward"
    assert ov["reward.custom_reward_function.name"] == "compute_score"
    # estimator
    ace = method.startswith("ace")
    assert ov["algorithm.adv_estimator"] == ("ace" if ace else "grpo")
    assert ov["algorithm.norm_adv_by_std_in_grpo"] == "True"
    assert ov["critic.enable"] == "False"
    if ace:
        assert ov["algorithm._target_"] == "acerl.verl_backend.plugin.AceAlgoConfig"
        assert ov["+algorithm.ace.alpha"] == "1.0"
        assert ov["+algorithm.ace.modulation"] == "softplus"
        assert ov["+algorithm.ace.length_normalize"] == "True"
        assert ov["+algorithm.ace.granularity"] == "sequence"
        assert ov["+algorithm.ace.amplify"] == "incorrect"  # paper Def. 2; ACE reads verl's acc
    else:
        assert not any(k.startswith(("+algorithm.ace", "algorithm._target_")) for k in ov)
    # the plugin reaches every Ray process
    env_key = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES"
    assert ov[env_key] == "acerl.verl_backend.plugin"
    # checkpoints inside the run folder, resumable
    assert ov["trainer.resume_mode"] == "auto"
    assert ov["trainer.default_local_dir"] == str(paths.checkpoints_dir(Path("/work"), Run(model, method, 3)))
    assert ov["trainer.max_actor_ckpt_to_keep"] == "2"
    assert ov["trainer.logger"] == "[console,file]"


def test_resources_and_ray(paper_cfg) -> None:
    one = _ov(paper_cfg, Run("qwen25_math_7b", "grpo", 0))
    assert (one["trainer.nnodes"], one["trainer.n_gpus_per_node"]) == ("1", "8")
    assert one["ray_kwargs.ray_init.num_cpus"] == "64"
    assert _ov(paper_cfg, Run("qwen3_8b_base", "grpo", 0))["trainer.nnodes"] == "1"  # one node by default
    two_nodes = load_config([*PAPER_CONFIGS, REPO / "config" / "paper_2node.yaml"])
    two = _ov(two_nodes, Run("qwen3_8b_base", "grpo", 0))  # config/paper_2node.yaml: 2 nodes
    assert (two["trainer.nnodes"], two["trainer.n_gpus_per_node"]) == ("2", "8")
    assert two["ray_kwargs.ray_init.num_cpus"] == "null"  # ray.init() joining a cluster rejects num_cpus


def test_qwen3_thinking_off_and_templates(paper_cfg) -> None:
    assert _ov(paper_cfg, Run("qwen3_8b_base", "ace_grpo", 0))[
        "+data.apply_chat_template_kwargs.enable_thinking"
    ] == ("False")
    assert not any(
        "apply_chat_template_kwargs" in k for k in _ov(paper_cfg, Run("qwen25_math_7b", "ace_grpo", 0))
    )


def test_diagnostic_checkpoints(paper_cfg) -> None:
    """Diagnostic runs save at every diagnostic step (gcd schedule) and snapshot them through the callback."""
    ov = _ov(paper_cfg, Run("qwen25_math_7b", "ace_grpo", 0))
    steps = paper_cfg.diagnostic_steps("qwen25_math_7b")
    assert steps == [0, 5, 10, 15, 20, 25, 50, 75, 80]
    assert ov["trainer.save_freq"] == "5"
    assert ov["trainer.checkpoint_callback_class"] == "acerl.verl_backend.checkpoints.DiagnosticSnapshots"
    assert ov["+trainer.acerl.snapshot_steps"] == "[5,10,15,20,25,50,75,80]"
    plain = _ov(paper_cfg, Run("qwen25_math_7b", "dapo", 0))  # not a diagnostics run
    assert plain["trainer.save_freq"] == "10"
    # every run gets the callback: it prunes what an earlier attempt left beyond max_actor_ckpt_to_keep
    assert plain["trainer.checkpoint_callback_class"] == CALLBACK_CLASS
    assert plain["+trainer.acerl.snapshot_steps"] == "[]"


def test_save_frequency() -> None:
    assert save_frequency(10, [0, 5, 10, 25, 90]) == 5
    assert save_frequency(10, []) == 10
    assert save_frequency(25, [0, 20, 40]) == 5
    assert save_frequency(7, [3]) == 1


def test_alpha_sweep_and_relu_variants(paper_cfg) -> None:
    ov = _ov(paper_cfg, Run("qwen25_math_7b", "ace_grpo-alpha0.5", 0))
    assert ov["+algorithm.ace.alpha"] == "0.5"
    assert _ov(paper_cfg, Run("qwen25_math_7b", "ace_grpo_relu", 0))["+algorithm.ace.modulation"] == "relu"


def test_plain_template_gets_identity_chat_template(verl_base_config, apply_overrides) -> None:
    cfg = load_config(PAPER_CONFIGS[:1], overrides=["compute.resources.train_policy={gpus: 1, threads: 2}"])
    overrides = verl_overrides(cfg, Run("tiny", "ace_dapo", 0), "/work")
    composed = apply_overrides(verl_base_config, overrides)
    assert composed.actor_rollout_ref.model.custom_chat_template == IDENTITY_CHAT_TEMPLATE


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        "a b",
        "it's",
        "back\\slash",
        "x\\'y",
        "end\\",
        "{% for m in messages %}{{ m['content'] }}",
        "null",
        "=,]",
    ],
)
def test_format_value_round_trips_through_hydra(verl_base_config, value: str, apply_overrides) -> None:
    cfg = apply_overrides(verl_base_config, [f"trainer.project_name={format_value(value)}"])
    assert cfg.trainer.project_name == value


def test_format_value_types(verl_base_config, apply_overrides) -> None:
    cfg = apply_overrides(
        verl_base_config,
        [
            f"trainer.nnodes={format_value(3)}",
            f"actor_rollout_ref.actor.optim.lr={format_value(5e-7)}",
            f"trainer.logger={format_value(['console', 'file'])}",
            f"trainer.resume_from_path={format_value(None)}",
            f"trainer.val_before_train={format_value(False)}",
        ],
    )
    assert cfg.trainer.nnodes == 3 and cfg.actor_rollout_ref.actor.optim.lr == 5e-7
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.trainer.resume_from_path is None and cfg.trainer.val_before_train is False


def test_token_budget_and_validation_knobs() -> None:
    knobs = [
        "models.qwen25_math_7b.train.max_tokens_per_gpu=6000",
        "models.qwen25_math_7b.train.val_every=20",
    ]
    cfg = load_config(PAPER_CONFIGS, knobs)
    ov = _ov(cfg, Run("qwen25_math_7b", "grpo", 0))
    assert ov["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == "6000"
    assert ov["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"] == "9000"
    assert ov["trainer.test_freq"] == "20"
    short = load_config(PAPER_CONFIGS, ["models.qwen25_math_7b.train.max_tokens_per_gpu=4000"])
    with pytest.raises(ValueError, match=r"max_tokens_per_gpu=4000 is below one full sequence .* 4024"):
        verl_overrides(short, Run("qwen25_math_7b", "grpo", 0), "/work")


def test_misconfigurations_fail(paper_cfg) -> None:
    cpu = load_config(PAPER_CONFIGS[:1])  # the embedded default has no GPUs
    with pytest.raises(ValueError, match="needs GPUs"):
        verl_overrides(cpu, Run("tiny", "grpo", 0), "/work")
    # a run's cross-key checks fail when the config loads (acerl config), not minutes into its job
    with pytest.raises(
        ValueError, match=r"overlong.buffer \(512\) exceeds models.qwen25_math_7b.train.max_resp"
    ):
        load_config(PAPER_CONFIGS, overrides=["models.qwen25_math_7b.train.max_response_length=256"])
    with pytest.raises(ValueError, match="not trained"):
        verl_overrides(paper_cfg, Run("qwen25_math_7b", "base", 0), "/work")


def test_command_and_dry_run(tmp_path: Path, monkeypatch, caplog) -> None:
    paper_cfg = load_config([*PAPER_CONFIGS, REPO / "config" / "paper_2node.yaml"])
    run = Run("qwen3_8b_base", "ace_dapo", 1)
    cmd = build_verl_command(paper_cfg, run, tmp_path)
    assert cmd[:3] == [sys.executable, "-m", ENTRY_MODULE]
    monkeypatch.setenv(
        "ACERL_RAY_ON_SLURM", str(Path(__file__).resolve().parents[2] / "scripts" / "ray_on_slurm.sh")
    )
    with caplog.at_level("INFO", logger="acerl.verl_backend.launcher"):
        out = train_run_verl(paper_cfg, run, tmp_path, dry_run=True)
    assert out == paths.policy_dir(tmp_path, run)
    assert "ray_on_slurm.sh -- " in caplog.text  # 2 nodes: through the SLURM Ray launcher
    assert "VERL_USE_EXTERNAL_MODULES=acerl.verl_backend.plugin" in caplog.text
    assert not any(tmp_path.iterdir())  # a dry run writes nothing


def test_site_hooks_extra_modules_and_overrides(paper_cfg, tmp_path: Path, monkeypatch, caplog) -> None:
    """``ACERL_VERL_EXTRA_MODULES`` joins the ACE plugin in ``VERL_USE_EXTERNAL_MODULES``;
    ``ACERL_VERL_EXTRA_OVERRIDES`` names a file of overrides that replace the generated ones in place (a
    ``+key`` given twice would stop Hydra) or are appended."""
    from acerl.errors import MissingInputError
    from acerl.verl_backend.launcher import extra_overrides_from_env, merge_overrides, verl_env

    run = Run("qwen25_math_7b", "dapo", 0)
    monkeypatch.setenv("ACERL_VERL_EXTRA_MODULES", "site_a, site_b")
    assert (
        verl_env(paper_cfg, run, tmp_path)["VERL_USE_EXTERNAL_MODULES"]
        == "acerl.verl_backend.plugin,site_a,site_b"
    )
    base = ["a.b=1", "+reward.reward_kwargs.max_resp_len=3000", "c=2"]
    merged = merge_overrides(base, ["reward.reward_kwargs.max_resp_len=64", "+new.key=3", "a.b=4"])
    assert merged == ["a.b=4", "+reward.reward_kwargs.max_resp_len=64", "c=2", "+new.key=3"]
    f = tmp_path / "site.txt"
    f.write_text(
        "# CPU site\n\nactor_rollout_ref.rollout.name=cpu_hf\n+reward.reward_kwargs.max_resp_len=64\n"
    )
    monkeypatch.setenv("ACERL_VERL_EXTRA_OVERRIDES", str(f))
    assert extra_overrides_from_env() == [
        "actor_rollout_ref.rollout.name=cpu_hf",
        "+reward.reward_kwargs.max_resp_len=64",
    ]
    with caplog.at_level("INFO", logger="acerl.verl_backend.launcher"):
        train_run_verl(paper_cfg, run, tmp_path, dry_run=True)
    assert caplog.text.count("reward.reward_kwargs.max_resp_len=") == 1
    assert "+reward.reward_kwargs.max_resp_len=64" in caplog.text
    assert "actor_rollout_ref.rollout.name=cpu_hf" in caplog.text and "rollout.name=vllm" not in caplog.text
    monkeypatch.setenv("ACERL_VERL_EXTRA_OVERRIDES", str(tmp_path / "missing.txt"))
    with pytest.raises(MissingInputError, match="ACERL_VERL_EXTRA_OVERRIDES=.*missing.txt: no such file"):
        extra_overrides_from_env()


# ---------------------------------------------------------------------------------------- checkpoints
def _fake_actor(folder: Path, world: int = 2) -> Path:
    (folder / "huggingface").mkdir(parents=True)
    (folder / "huggingface" / "config.json").write_text("{}")
    (folder / "fsdp_config.json").write_text(json.dumps({"world_size": world}))
    for rank in range(world):
        (folder / f"model_world_size_{world}_rank_{rank}.pt").write_bytes(b"m")
        (folder / f"optim_world_size_{world}_rank_{rank}.pt").write_bytes(b"o")
        (folder / f"extra_state_world_size_{world}_rank_{rank}.pt").write_bytes(b"e")
    return folder


def test_snapshot_links_model_not_optimizer(tmp_path: Path) -> None:
    actor = _fake_actor(tmp_path / "ckpt" / "global_step_5" / "actor")
    target = snapshot_actor(actor, tmp_path / "snap" / "step_000005")
    names = sorted(p.name for p in (target / "actor").iterdir())
    assert names == [
        "extra_state_world_size_2_rank_0.pt",
        "extra_state_world_size_2_rank_1.pt",
        "fsdp_config.json",
        "huggingface",
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    ]
    # a hard link survives verl deleting the rotated checkpoint
    (actor / "model_world_size_2_rank_0.pt").unlink()
    assert (target / "actor" / "model_world_size_2_rank_0.pt").read_bytes() == b"m"


def test_diagnostic_snapshot_callback(tmp_path: Path) -> None:
    config = OmegaConf.create(
        {"trainer": {"acerl": {"snapshot_steps": [5, 10], "snapshot_dir": str(tmp_path / "s")}}}
    )
    assert (
        f"{DiagnosticSnapshots.__module__}.{DiagnosticSnapshots.__qualname__}" == CALLBACK_CLASS
    )  # verl loads it by name
    cb = DiagnosticSnapshots(config=config)
    for step in (5, 7):
        _fake_actor(tmp_path / f"global_step_{step}" / "actor")
        cb.on_save(trainer=None, global_step=step, checkpoint_dir=str(tmp_path / f"global_step_{step}"))
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["step_000005"]


def test_export_checkpoint_is_atomic(tmp_path: Path) -> None:
    actor = _fake_actor(tmp_path / "global_step_9" / "actor")
    calls: list[list[str]] = []

    def fake_merger(cmd, check, env):  # stands in for the verl model merger process
        calls.append(cmd)
        Path(cmd[cmd.index("--target_dir") + 1], "config.json").write_text("{}")

    out = export_checkpoint(actor, tmp_path / "final", run=fake_merger)
    assert (out / "config.json").is_file()
    assert calls[0][1:] == merge_command(actor, "X")[1:-1] + [calls[0][-1]]
    assert calls[0][calls[0].index("--local_dir") + 1] == str(actor)

    def broken(cmd, check, env):
        pass

    with pytest.raises(RuntimeError, match="no config.json"):
        export_checkpoint(actor, tmp_path / "other", run=broken)
    assert not (tmp_path / "other").exists()


def test_latest_step(tmp_path: Path) -> None:
    assert latest_step(tmp_path) is None
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("90\n")
    assert latest_step(tmp_path) == 90


def test_a_torn_tracker_counts_as_the_newest_checkpoint(tmp_path: Path, caplog) -> None:
    """A kill while verl rewrote ``latest_checkpointed_iteration.txt`` leaves it empty: the newest folder counts
    (with a warning) and the file is written back for verl, which reads it with ``int()``."""
    from acerl.verl_backend.checkpoints import repair_tracker

    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    for step in (2, 4):
        _fake_actor(tmp_path / f"global_step_{step}" / "actor")
    tracker.write_text("")
    with caplog.at_level("WARNING"):
        assert latest_step(tmp_path) == 4
    assert "not a step number" in caplog.text and "global_step_4" in caplog.text
    assert repair_tracker(tmp_path) == 4 and tracker.read_text() == "4"
    for step in (2, 4):
        shutil.rmtree(tmp_path / f"global_step_{step}")
    tracker.write_text("\x00\x00")  # a torn write on a filesystem that zero-fills
    assert repair_tracker(tmp_path) is None and not tracker.exists()  # no checkpoint: start from step 0


def test_changed_settings_move_verl_checkpoints_aside(paper_cfg, tmp_path: Path) -> None:
    """verl would resume any checkpoint it finds: after a settings change the launcher moves them aside."""
    run = Run("qwen25_math_7b", "ace_dapo", 0)
    ckpts = paths.checkpoints_dir(tmp_path, run)
    (ckpts / "global_step_10").mkdir(parents=True)
    (ckpts / "latest_checkpointed_iteration.txt").write_text("10\n")
    spec = paths.run_spec_file(tmp_path, run)
    spec.write_text(json.dumps(run_spec(paper_cfg, run)))
    assert not supersede_if_settings_changed(paper_cfg, run, tmp_path)  # same settings: resume
    assert latest_step(ckpts) == 10

    override = tmp_path / "alpha.yaml"
    override.write_text("methods: {ace_dapo: {estimator: {alpha: 0.5}}}\n")
    changed = load_config([*PAPER_CONFIGS, override])
    assert supersede_if_settings_changed(changed, run, tmp_path)
    assert latest_step(ckpts) is None
    (moved,) = paths.run_dir(tmp_path, run).glob("checkpoints.superseded-*")
    assert (moved / "global_step_10").is_dir() and latest_step(moved) == 10


def test_collect_metrics_last_attempt_wins(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    old = [{"step": 1, "data": {"actor/entropy": 1.0}}, {"step": 2, "data": {"actor/entropy": 2.0}}]
    (logs / "metrics.attempt-20260101T000000Z.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in old) + '{"st'
    )
    (logs / "metrics.jsonl").write_text(json.dumps({"step": 2, "data": {"actor/entropy": 2.5}}) + "\n")
    out = collect_metrics(logs, tmp_path / "metrics.jsonl")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == [{"step": 1, "actor/entropy": 1.0}, {"step": 2, "actor/entropy": 2.5}]


# ------------------------------------------------------------------------------------ orchestration
def _fake_verl(calls: list[list[str]], ray_dirs: list[Path] | None = None):
    """Stands in for the verl training process and the model merger (the launcher's ``runner``).

    Training: makes Ray's session folder under ``RAY_TMPDIR`` (recorded in ``ray_dirs``), saves
    ``global_step_N/actor`` every ``save_freq`` steps keeping only the newest (verl's rotation), runs the
    configured checkpoint callback, writes verl's file-logger records.
    """
    ray_dirs = [] if ray_dirs is None else ray_dirs

    def runner(cmd: list[str], env: dict[str, str], check: bool):
        calls.append(cmd)
        if (
            "RAY_TMPDIR" in env and "verl.model_merger" not in cmd
        ):  # Ray's session folder, as ray.init makes it
            Path(env["RAY_TMPDIR"], "ray", "session_latest").mkdir(parents=True, exist_ok=True)
            ray_dirs.append(Path(env["RAY_TMPDIR"]))
        if "verl.model_merger" in cmd:
            Path(cmd[cmd.index("--target_dir") + 1], "config.json").write_text("{}")
            return subprocess.CompletedProcess(cmd, 0)
        ov = dict(item.lstrip("+").split("=", 1) for item in cmd[3:])
        ckpts, freq, total = (
            Path(ov["trainer.default_local_dir"]),
            int(ov["trainer.save_freq"]),
            int(ov["trainer.total_training_steps"]),
        )
        callback = DiagnosticSnapshots(
            OmegaConf.create(
                {
                    "trainer": {
                        "max_actor_ckpt_to_keep": int(ov["trainer.max_actor_ckpt_to_keep"]),
                        "acerl": {
                            "snapshot_steps": json.loads(ov["trainer.acerl.snapshot_steps"]),
                            "snapshot_dir": ov["trainer.acerl.snapshot_dir"],
                        },
                    }
                }
            )
        )
        with open(env["VERL_FILE_LOGGER_PATH"], "w") as log:
            for step in range(1, total + 1):
                log.write(json.dumps({"step": step, "data": {"actor/entropy": 1.0 / step}}) + "\n")
                if step % freq == 0 or step == total:
                    for old in ckpts.glob("global_step_*"):
                        shutil.rmtree(old)
                    _fake_actor(ckpts / f"global_step_{step}" / "actor")
                    (ckpts / "latest_checkpointed_iteration.txt").write_text(str(step))
                    callback.on_save(
                        trainer=None, global_step=step, checkpoint_dir=str(ckpts / f"global_step_{step}")
                    )
        return subprocess.CompletedProcess(cmd, 0)

    return runner


def _tiny_verl_run(tmp_path: Path, keep: bool = False, extra: tuple[str, ...] = ()) -> tuple[Config, Run]:
    """A 4-step paper-scale run (checkpoint at step 4, diagnostics at 0, 2, 4) with its data and a
    tokenizer-only base model under ``tmp_path``, for the stand-in runner :func:`_fake_verl`."""
    cfg = load_config(
        PAPER_CONFIGS,
        overrides=[
            f"compute.keep_verl_checkpoints={str(keep).lower()}",
            "models.qwen25_math_7b.train={prompts_per_step: 4, mini_batch_size: 4, total_epochs: 2, total_steps: 4, "
            "save_every: 4}",
            "study.diagnostics={models: [qwen25_math_7b], methods: [ace_grpo], seeds: [0], every: 2, early_steps: 0}",
            *extra,
        ],
    )
    run = Run("qwen25_math_7b", "ace_grpo", 0)
    rows = [{"id": f"p{i}", "problem": f"Find {i}+{i}.", "answer": str(2 * i)} for i in range(9)]
    for split in ("train", "math500", "aime2025"):
        write_jsonl(paths.data_file(tmp_path, split), rows)
    base = _tokenizer_only_base(tmp_path, run.model)
    (base / "config.json").write_text('{"base": true}')
    return cfg, run


@pytest.mark.parametrize("keep", [False, True])
def test_train_run_verl_orchestration(tmp_path: Path, keep: bool) -> None:
    cfg, run = _tiny_verl_run(tmp_path, keep)
    calls: list[list[str]] = []
    ray_dirs: list[Path] = []
    final = train_run_verl(cfg, run, tmp_path, runner=_fake_verl(calls, ray_dirs))
    assert final == paths.policy_dir(tmp_path, run) and (final / "config.json").is_file()
    assert ray_dirs and not any(
        d.exists() for d in ray_dirs
    )  # the job's own Ray folder is gone after main_ppo
    assert calls[0][1:3] == ["-m", ENTRY_MODULE] and "trainer.save_freq=2" in calls[0]
    merged = [c[c.index("--local_dir") + 1] for c in calls[1:]]
    assert [Path(m).parent.name for m in merged] == ["step_000002", "step_000004", "global_step_4"]
    assert (paths.diag_step_dir(tmp_path, run, 0) / "config.json").read_text() == '{"base": true}'
    for step in (2, 4):
        assert (paths.diag_step_dir(tmp_path, run, step) / "config.json").is_file()
    assert not (paths.run_dir(tmp_path, run) / "diag_raw").exists()  # snapshots removed after export
    # resumable checkpoints removed after export, unless compute.keep_verl_checkpoints
    assert latest_step(paths.checkpoints_dir(tmp_path, run)) == (4 if keep else None)
    metrics = [json.loads(line) for line in paths.train_metrics_file(tmp_path, run).read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert json.loads(paths.verl_command_file(tmp_path, run).read_text())["argv"] == calls[0]
    assert (paths.run_dir(tmp_path, run) / "run_spec.json").is_file()
    assert (
        train_run_verl(cfg, run, tmp_path, runner=_fake_verl(calls)) == final and len(calls) == 4
    )  # no rerun


@pytest.mark.parametrize(
    "knob",
    [
        "gpu_memory_utilization=0.5",
        "max_tokens_per_gpu=9000",
        "save_every=2",
        "keep_checkpoints=3",
    ],
)
def test_a_resource_key_change_resumes_and_reruns_no_finished_run(tmp_path: Path, knob: str) -> None:
    """A resource key changed mid-grid (the canary's hint for an out-of-memory step) keeps an interrupted run's
    checkpoints, whose ``run_spec.json`` was recorded with the keys, and a finished run's ``final/``; Snakemake's
    and DVC's params of the job do not move."""
    from acerl.config.settings import RESOURCE_KEYS
    from acerl.pipeline.stages import Job, param_keys, param_values

    cfg, run = _tiny_verl_run(tmp_path)
    ckpts = paths.checkpoints_dir(tmp_path, run)
    _fake_actor(ckpts / "global_step_2" / "actor")
    (ckpts / "latest_checkpointed_iteration.txt").write_text("2")
    knobs = cfg.models[run.model].train.model_dump(mode="json", include=set(RESOURCE_KEYS))
    spec = run_spec(cfg, run)
    paths.run_spec_file(tmp_path, run).write_text(json.dumps({**spec, "train": {**spec["train"], **knobs}}))
    changed, _ = _tiny_verl_run(tmp_path, extra=(f"models.qwen25_math_7b.train.{knob}",))
    assert changed.models[run.model].train != cfg.models[run.model].train
    job = Job("train_policy", run=run)
    assert param_values(changed, job) == param_values(cfg, job)  # Snakemake's record
    assert not any(
        k.startswith("models.qwen25_math_7b.train." + knob.split("=")[0]) for k in param_keys(changed, job)
    )
    assert not supersede_if_settings_changed(changed, run, tmp_path)  # resumed at step 2, not restarted
    assert latest_step(ckpts) == 2 and not list(paths.run_dir(tmp_path, run).glob("*.superseded-*"))
    calls: list[list[str]] = []
    final = train_run_verl(changed, run, tmp_path, runner=_fake_verl(calls))
    started = len(calls)
    for settings in (cfg, changed):  # finished: returned as it is, under either value
        assert train_run_verl(settings, run, tmp_path, runner=_fake_verl(calls)) == final
    assert len(calls) == started


def test_verl_returns_a_final_policy_only_for_its_settings_and_locks_the_run(tmp_path: Path) -> None:
    """A finished verl run's ``final/`` is not returned for other settings (the run folder's ``run_spec.json``
    decides, as for the local trainer), and a second launcher of a run being trained is refused."""
    from acerl.train.finished import StaleFinalError
    from acerl.train.lock import RunLockedError, run_lock

    train = "models.qwen25_math_7b.train={prompts_per_step: 4, mini_batch_size: 4, total_epochs: 2, total_steps: 2}"
    cfg = load_config(PAPER_CONFIGS, overrides=[train])
    run = Run("qwen25_math_7b", "ace_grpo", 0)
    rows = [{"id": f"p{i}", "problem": f"Find {i}+{i}.", "answer": str(2 * i)} for i in range(9)]
    for split in ("train", "math500", "aime2025"):
        write_jsonl(paths.data_file(tmp_path, split), rows)
    (_tokenizer_only_base(tmp_path, run.model) / "config.json").write_text('{"base": true}')
    calls: list[list[str]] = []
    final = train_run_verl(cfg, run, tmp_path, runner=_fake_verl(calls))
    started = len(calls)  # the training and the merges
    assert train_run_verl(cfg, run, tmp_path, runner=_fake_verl(calls)) == final and len(calls) == started
    other = load_config(PAPER_CONFIGS, overrides=[train, "methods.ace_grpo.estimator.alpha=0.5"])
    with pytest.raises(StaleFinalError, match=r"ace\.alpha|alpha.*vs 0\.5"):
        train_run_verl(other, run, tmp_path, runner=_fake_verl(calls))
    assert len(calls) == started  # nothing started
    with run_lock(tmp_path, Run("qwen25_math_7b", "grpo", 0)):
        with pytest.raises(
            RunLockedError, match="qwen25_math_7b/grpo/seed0 is being trained by another process"
        ):
            train_run_verl(cfg, Run("qwen25_math_7b", "grpo", 0), tmp_path, runner=_fake_verl(calls))
    assert len(calls) == started


def test_a_retry_after_a_torn_tracker_resumes(tmp_path: Path) -> None:
    """The final step's checkpoint was saved and the tracker torn by the kill: the retry exports that step."""
    cfg, run = _tiny_verl_run(tmp_path)
    ckpts = paths.checkpoints_dir(tmp_path, run)
    for step in (2, 4):
        _fake_actor(paths.verl_snapshot_dir(tmp_path, run) / f"step_{step:06d}" / "actor")
    _fake_actor(ckpts / "global_step_4" / "actor")
    (ckpts / "latest_checkpointed_iteration.txt").write_text("")
    calls: list[list[str]] = []
    final = train_run_verl(cfg, run, tmp_path, runner=_fake_verl(calls))
    assert (final / "config.json").is_file()
    assert all("verl.model_merger" in c for c in calls)  # exported, not trained again


def _tokenizer_only_base(root: Path, model: str) -> Path:
    """A base-model folder holding only a tokenizer (the character tokenizer with a ChatML chat template)."""
    from acerl.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.chat_template = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    base = paths.base_model_dir(root, model)
    tok.save_pretrained(base)
    return base


def test_too_few_steps_for_the_schedule(tmp_path: Path) -> None:
    """The step check counts the prompts verl keeps after its prompt-length filter (defect: raw parquet rows):
    9 rows, 2 of them too long for max_prompt_length=200 -> 7 prompts -> 1 step per epoch at 4 prompts."""
    cfg = load_config(
        PAPER_CONFIGS,
        overrides=[
            "models.qwen25_math_7b.train={prompts_per_step: 4, mini_batch_size: 4, total_epochs: 2, total_steps: 4, "
            "max_prompt_length: 200}"
        ],
    )
    problems = [f"q{i}" if i < 7 else "x" * 300 for i in range(9)]
    write_jsonl(
        paths.data_file(tmp_path, "train"),
        [{"id": str(i), "problem": p, "answer": "1"} for i, p in enumerate(problems)],
    )
    for split in ("math500", "aime2025"):
        write_jsonl(paths.data_file(tmp_path, split), [{"id": "b", "problem": "q", "answer": "1"}])
    (_tokenizer_only_base(tmp_path, "qwen25_math_7b") / "config.json").write_text('{"base": true}')
    with pytest.raises(
        ValueError,
        match="7 of 9 training prompts fit max_prompt_length=200; they give 1 steps per epoch.*set it to 2",
    ):
        train_run_verl(cfg, Run("qwen25_math_7b", "grpo", 0), tmp_path, runner=_fake_verl([]))


def test_verl_processes_get_no_rocr_devices_beside_cuda_ones(tmp_path) -> None:
    """A SLURM GPU job on a site whose gres.conf names no vendor has both CUDA_VISIBLE_DEVICES and
    ROCR_VISIBLE_DEVICES; verl's workers refuse to start with both (the canary test met it on the local
    cluster). The launcher's processes get the CUDA one only; an AMD-only environment is left as it is."""
    from acerl.verl_backend.launcher import process_env

    slurm = {"CUDA_VISIBLE_DEVICES": "0,1", "ROCR_VISIBLE_DEVICES": "0,1", "GPU_DEVICE_ORDINAL": "0,1"}
    got = process_env({"X": "1"}, slurm)
    assert got == {"CUDA_VISIBLE_DEVICES": "0,1", "GPU_DEVICE_ORDINAL": "0,1", "X": "1"}
    assert process_env({}, {"ROCR_VISIBLE_DEVICES": "0"}) == {"ROCR_VISIBLE_DEVICES": "0"}

    seen: list[dict[str, str]] = []
    calls: list[list[str]] = []
    fake = _fake_verl(calls)

    def runner(cmd, env, check):
        seen.append(dict(env))
        return fake(cmd, env, check)

    cfg, run = _tiny_verl_run(tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in slurm.items():
            mp.setenv(k, v)
        train_run_verl(cfg, run, tmp_path, runner=runner)
    assert seen and all("ROCR_VISIBLE_DEVICES" not in e and e["CUDA_VISIBLE_DEVICES"] == "0,1" for e in seen)
