"""One verl 0.9.1 training step on CPU with verl's own components, for GRPO, DAPO, ACE-GRPO and ACE-DAPO.

``tests/fakes/verl_cpu_step.py`` runs in a fresh process with the environment the launcher gives every Ray worker
(``VERL_USE_EXTERNAL_MODULES`` naming the ACE plugin) plus this directory's CPU platform; it executes verl's
``RLHFDataset`` on the parquet ``prepare_verl_data`` writes (real MATH-500 problems), the agent-loop batch
layout, verl's ``RewardLoopWorker`` with the reward manager the launcher selects (``dapo`` with overlong
shaping for the DAPO family) calling ``acerl.grading.reward.compute_score``, verl's ``ActorRolloutRefWorker``
(FSDP2 engine) for old and reference log-probs, the V1 trainer's advantage function with the plugin's
estimator, verl's policy loss, and one ``update_actor`` step. The tests check each stage against acerl's own
code on the same tensors. About a minute of CPU time for the four methods (one process).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.ci_inputs import import_or_skip

from acerl.algos.advantages import grpo_advantages
from acerl.algos.dapo import overlong_penalty
from acerl.algos.losses import agg_loss, kl_penalty, vanilla_policy_loss
from acerl.prompts import build_prompt

pytestmark = pytest.mark.verl
import_or_skip("verl")

HERE = Path(__file__).resolve().parent
METHODS = ("grpo", "dapo", "ace_grpo", "ace_dapo")
TEMPLATE = "qwen_boxed"  # the paper model the step takes its overrides from (qwen25_math_7b)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def step(tmp_path_factory, shared_data: Path) -> Path:
    """Run ``verl_cpu_step.py`` once for every method."""
    import acerl
    from acerl.verl_backend import PLUGIN_MODULE

    work = tmp_path_factory.mktemp("verl_cpu_step")
    src = Path(acerl.__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(src), str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
        "VERL_USE_EXTERNAL_MODULES": f"{PLUGIN_MODULE},fakes.verl_cpu_platform",  # the launcher's plugin + the CPU platform
        "VERL_PLATFORM": "cpu",
        "VERL_ENGINE_DEVICE": "cuda",  # selects verl's FSDP engine class; tensors stay on the CPU
        "MASTER_PORT": str(_free_port()),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    repo = HERE.parents[1]
    cmd = [
        sys.executable,
        str(HERE.parent / "fakes" / "verl_cpu_step.py"),
        str(work),
        str(shared_data),
        str(repo),
        ",".join(METHODS),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-6000:])
    return work


def _load(step: Path, method: str) -> tuple[dict, dict]:
    tensors = torch.load(step / f"result_{method}.pt", weights_only=True)
    return tensors, json.loads((step / f"result_{method}.json").read_text())


def _problems(step: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (step / "data" / "train.jsonl").read_text().splitlines()]
    return {r["id"]: r for r in rows}


def _tokenizer(step: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(step / "model")


def test_dataset_renders_and_filters_like_acerl(step: Path) -> None:
    """RLHFDataset on our parquet: the chat rendering equals ``build_prompt`` and the prompt-length filter keeps
    exactly the problems whose rendered prompt fits ``data.max_prompt_length``."""
    _, res = _load(step, "grpo")
    tok, problems = _tokenizer(step), _problems(step)
    for pid, text in zip(res["problems"], res["prompt_texts"], strict=True):
        assert text == build_prompt(problems[pid]["problem"], TEMPLATE, tok)
    lengths = [
        len(tok(build_prompt(r["problem"], TEMPLATE, tok), add_special_tokens=False)["input_ids"])
        for r in problems.values()
    ]
    assert res["dataset_len"] == sum(n <= res["max_prompt_length"] for n in lengths) < len(problems)


@pytest.mark.parametrize("method", METHODS)
def test_reward_manager_calls_our_grader(step: Path, method: str) -> None:
    """verl's reward manager (``naive``; ``dapo`` with overlong shaping for the DAPO family) scores each
    response as ``acerl.grading.reward.compute_score`` plus ``acerl.algos.dapo.overlong_penalty``; its ``acc``
    (what ACE reads) is the grader's verdict before the penalty."""
    from acerl.grading.reward import close_grader, compute_score

    t, res = _load(step, method)
    tok, problems = _tokenizer(step), _problems(step)
    dapo = method.endswith("dapo")
    assert res["reward_manager"] == ("dapo" if dapo else "naive")
    answers = [problems[res["problems"][g]]["answer"] for g in t["group"].tolist()]
    texts = [
        tok.decode(r[m.bool()], skip_special_tokens=True)
        for r, m in zip(t["responses"], t["response_mask"], strict=True)
    ]
    try:
        graded = [
            compute_score("math500", s, a, {}, incorrect_score=-1.0 if dapo else 0.0)
            for s, a in zip(texts, answers, strict=True)
        ]
    finally:
        close_grader()
    expected = torch.tensor([g["score"] for g in graded])
    assert t["correct"].tolist() == [bool(g["acc"]) for g in graded]
    assert t["correct"].any() and not t["correct"].all()
    if dapo:
        buf = res["overlong_buffer"]
        expected = expected + overlong_penalty(
            t["response_lengths"], res["max_response_length"], int(buf["len"]), float(buf["penalty_factor"])
        )
        assert (t["correct"] & (t["scores"] < 1)).any()  # some correct answers were shaped below +1
    torch.testing.assert_close(t["scores"], expected.float(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_worker_log_probs_equal_transformers(step: Path, method: str) -> None:
    """verl's FSDP worker (fp32) gives the log-probs of a plain transformers forward with
    ``acerl.algos.losses.token_logprobs``, for the policy and the (different) reference model."""
    t, _ = _load(step, method)
    m = t["response_mask"].bool()
    torch.testing.assert_close(t["old_log_probs"][m], t["hf_log_probs"][m], rtol=0, atol=1e-5)
    torch.testing.assert_close(t["ref_log_prob"][m], t["hf_ref_log_probs"][m], rtol=0, atol=1e-5)
    assert (t["old_log_probs"][m] - t["ref_log_prob"][m]).abs().max() > 1e-2  # c_i is not trivially 0


@pytest.mark.parametrize("method", METHODS)
def test_entropy_diagnostic(step: Path, method: str) -> None:
    """The paper's entropy diagnostic on the verl path: the worker's per-token entropy (computed with the old
    log-probs) equals ``acerl.algos.losses.entropy_from_logits``, and V1's ``actor/entropy`` metric is its
    ``agg_loss`` over response tokens."""
    t, res = _load(step, method)
    m = t["response_mask"]
    torch.testing.assert_close(t["entropy"][m.bool()], t["hf_entropy"][m.bool()], rtol=0, atol=1e-5)
    expected = agg_loss(t["hf_entropy"], m, res["loss_agg_mode"])
    assert res["actor_entropy"] == pytest.approx(float(expected), abs=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_advantages_equal_acerl(step: Path, method: str) -> None:
    """The V1 advantage step with the launcher's estimator: verl's own GRPO for grpo/dapo equals acerl's
    ``grpo_advantages``; for the ACE methods the plugin's advantage equals the paper's Eq. 5
    written out here on verl's numbers: the GRPO advantage verl computed for the same rollouts (the method
    without ACE), times ``1 + alpha * softplus(c_i)`` with ``c_i`` the mean over response tokens of
    ``old_log_probs - ref_log_prob``, exactly on the incorrect rollouts with ``A < 0``; ACE's statistics land
    in the step metrics."""
    t, res = _load(step, method)
    mask, groups = t["response_mask"], t["group"]
    adv = t["advantages"]
    assert torch.equal(adv, adv[:, :1] * mask)  # one value per sequence, zero on padding
    if not method.startswith("ace"):
        assert res["adv_estimator"] == "grpo"
        torch.testing.assert_close(adv[:, 0], grpo_advantages(t["scores"], groups), rtol=0, atol=1e-6)
        return
    assert res["adv_estimator"] == "ace" and res["ace"]["amplify"] == "incorrect"
    assert res["ace"]["length_normalize"] and res["ace"]["modulation"] == "softplus"
    plain, _ = _load(step, method.removeprefix("ace_"))
    assert torch.equal(plain["scores"], t["scores"]) and torch.equal(plain["group"], groups)
    base = plain["advantages"][:, 0]  # verl's GRPO (Eq. 2's A_i) on the same rewards
    m = mask.double()
    c = ((t["old_log_probs"].double().nan_to_num() - t["ref_log_prob"].double()) * m).sum(-1) / m.sum(-1)
    amplified = ~t["correct"] & (base < 0)
    multiplier = 1 + res["ace"]["alpha"] * torch.nn.functional.softplus(c)
    expected = torch.where(amplified, base.double() * multiplier, base.double())
    torch.testing.assert_close(adv[:, 0].double(), expected, rtol=0, atol=1e-5)
    assert amplified.any() and (multiplier[amplified] > 1 + 1e-3).all()  # the amplification is exercised
    if method == "ace_dapo":  # a correct but overlong answer below its group's mean is not amplified
        assert (t["correct"] & (base < 0)).any()
    assert res["step_metrics"]["ace/negative_frac"] == pytest.approx(float((base < 0).double().mean()))
    assert res["step_metrics"]["ace/multiplier_mean_neg"] == pytest.approx(  # over the amplified rollouts
        float(multiplier[amplified].mean()), abs=1e-5
    )


@pytest.mark.parametrize("method", METHODS)
def test_policy_loss_and_update(step: Path, method: str) -> None:
    """verl's policy loss with the method's clip settings equals ``acerl.algos.losses.vanilla_policy_loss`` on
    the step's tensors (log-probs after the update: ratios != 1); the worker's update, run with the launcher's
    dynamic batching, splits the batch into as many micro-batches as the token budget needs, reports the on-policy
    loss ``agg_loss(-A)`` and the reference KL summed over them, and takes one AdamW step of the configured
    learning rate (at step 1 Adam moves every parameter tensor's largest entry by ``lr``, whatever the
    gradient's scale)."""
    t, res = _load(step, method)
    mask = t["response_mask"]
    ours = vanilla_policy_loss(
        t["old_log_probs"],
        t["new_log_probs"],
        t["advantages"],
        mask,
        res["loss_agg_mode"],
        clip_ratio_low=res["clip_ratio_low"],
        clip_ratio_high=res["clip_ratio_high"],
        clip_ratio_c=res["clip_ratio_c"],
    )
    assert res["verl_policy_loss"] == pytest.approx(float(ours.loss), abs=1e-6)
    assert res["verl_policy_loss_metrics"]["actor/pg_clipfrac"] == pytest.approx(
        ours.metrics["actor/pg_clipfrac"]
    )
    assert res["verl_policy_loss_metrics"]["actor/pg_clipfrac"] > 0  # the clip range is exercised
    upd = res["update_metrics"]
    tokens = int(t["attention_mask"].sum())
    [split] = res["update_micro_batches"]  # one mini-batch, one epoch: one split into micro-batches
    assert sum(split) == len(mask) and len(split) >= -(-tokens // res["ppo_max_token_len_per_gpu"]) >= 2
    on_policy = agg_loss(-t["advantages"], mask, res["loss_agg_mode"])
    assert sum(upd["actor/pg_loss"]) == pytest.approx(float(on_policy), abs=1e-5)
    kl = agg_loss(kl_penalty(t["old_log_probs"], t["ref_log_prob"], "low_var_kl"), mask, res["loss_agg_mode"])
    assert sum(upd["kl_loss"]) == pytest.approx(float(kl), rel=1e-4)
    lr = res["lr"]
    assert all(abs(moved - lr) < 0.02 * lr for moved in res["moved"].values()), res["moved"]


@pytest.mark.parametrize("method", METHODS)
def test_cpu_step_runs_the_launchers_settings(step: Path, method: str) -> None:
    """The strategy and the update's entropy flag that ran are the launcher's for the paper run (FSDP2 for
    actor and reference; no entropy in the update pass), not a CPU override."""
    from acerl.config import Run, load_config
    from acerl.verl_backend.launcher import verl_overrides

    _, res = _load(step, method)
    repo = HERE.parents[1]
    cfg = load_config([repo / "config" / "config.yaml", repo / "config" / "paper.yaml"])
    ov = dict(o.split("=", 1) for o in verl_overrides(cfg, Run("qwen25_math_7b", method, 0), "/w"))
    a = "actor_rollout_ref.actor"
    assert (
        res["strategy"] == [ov[f"{a}.strategy"], ov["actor_rollout_ref.ref.strategy"]] == ["fsdp2", "fsdp2"]
    )
    assert res["calculate_entropy_in_update"] is False


def test_checkpoint_written_by_verl_resumes(step: Path) -> None:
    """verl's checkpoint manager saves the updated actor (``global_step_1/actor``); a fresh worker that loads
    it holds exactly the saved policy (the worker side of ``trainer.resume_mode``)."""
    _, res = _load(step, "grpo")
    actor = step / "checkpoints" / "global_step_1" / "actor"
    assert (actor / "fsdp_config.json").is_file() and (actor / "huggingface" / "config.json").is_file()
    assert res["resumed"]["max_diff_fresh"] > 1e-3  # a fresh worker is the initial model ...
    assert res["resumed"]["max_diff_loaded"] == 0.0  # ... and exactly the saved policy after loading


def test_model_merger_exports_verl_checkpoint(step: Path, tmp_path: Path) -> None:
    """The pipeline's export (``python -m verl.model_merger merge --backend fsdp``) on that checkpoint gives a
    Hugging Face folder transformers loads: the trained weights (in bf16, the merger's dtype) and the
    tokenizer with its chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from acerl.verl_backend.checkpoints import export_checkpoint

    target = export_checkpoint(step / "checkpoints" / "global_step_1" / "actor", tmp_path / "policy")
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    saved = torch.load(step / "actor_params_step1.pt", weights_only=True)
    state = model.state_dict()
    assert set(saved) <= set(state)
    for name, value in saved.items():
        torch.testing.assert_close(state[name], value.to(torch.bfloat16).float(), rtol=0, atol=0)
    tok = AutoTokenizer.from_pretrained(target)
    assert tok.chat_template == _tokenizer(step).chat_template
