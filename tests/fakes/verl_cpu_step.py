"""Test infrastructure: one verl 0.9.1 training step on CPU with verl's own components, for each method.

Run in a fresh process by ``test_verl_cpu_step.py`` (``python verl_cpu_step.py WORKDIR``) with the environment a
Ray worker of the launcher gets (``VERL_USE_EXTERNAL_MODULES`` naming the ACE plugin, plus this directory's
CPU platform, :mod:`fakes.verl_cpu_platform`). For each of GRPO, DAPO, ACE-GRPO and ACE-DAPO it takes the launcher's
Hydra overrides for a paper run (``verl_overrides``), points them at a tiny Llama and CPU-sized batches, and
runs what the V1 trainer runs in one step (``verl/trainer/ppo/v1/trainer_base.py:_step_once``):

1. prompts: verl's ``RLHFDataset`` over the parquet ``prepare_verl_data`` writes (prompt length filter on);
2. rollouts: fixed responses per prompt (correct / wrong / correct but overlong), packed into a ``DataProto``
   with verl's agent-loop layout (left-padded prompts, right-padded responses, masks, position ids, ``uid``);
3. rewards: verl's ``RewardLoopWorker`` with the reward manager the overrides select (``naive`` or ``dapo``
   with overlong shaping) calling ``acerl.grading.reward.compute_score``; ``rm_scores`` as the agent loop
   places them;
4. old and reference log-probs: verl's ``ActorRolloutRefWorker`` (engine FSDP2 worker) on CPU, called with
   the TensorDict the trainer builds (``left_right_2_no_padding``);
5. advantages: ``v1/utils.compute_advantage_for_multi_trajectories`` with ``config.algorithm``, as
   ``PPOTrainer._compute_advantage`` calls it (the plugin's shim is what that module holds);
6. one ``update_actor`` call through the worker (verl's ``ppo_loss``: policy loss + ``agg_loss``).

Writes ``WORKDIR/result_<method>.pt`` (tensors of every stage, torch.save of plain tensors/lists) and
``WORKDIR/result_<method>.json`` (scalars); the test checks them against ``acerl`` code.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import verl  # noqa: F401  (loads VERL_USE_EXTERNAL_MODULES: the ACE plugin and the CPU platform)

METHODS = ("grpo", "dapo", "ace_grpo", "ace_dapo")
PAPER_MODEL = "qwen25_math_7b"
GROUP_SIZE = 4
N_PROMPTS = 3
MAX_PROMPT_LEN = 256
MAX_RESPONSE_LEN = 64
OVERLONG_BUFFER = 16
MAX_ANSWER_CHARS = 8
CHECKPOINT_METHOD = "grpo"  # the method whose updated actor is checkpointed, reloaded and merged
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_model(folder: Path, seed: int = 0) -> Path:
    """A tiny Llama (``acerl.models``) with the character tokenizer and a ChatML chat template."""
    from acerl.models.tiny import TinyModelConfig, build_tiny_model
    from acerl.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer(model_max_length=512)
    tok.chat_template = CHATML
    arch = TinyModelConfig(
        hidden_size=64, intermediate_size=128, num_heads=2, num_kv_heads=2, max_position_embeddings=512
    )
    model = build_tiny_model(arch, tok, seed=seed)
    model.config.attn_implementation = "sdpa"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def prepare_data(root: Path, shared: Path, paper_cfg) -> Path:
    """``prepare_verl_data`` on a few real MATH-500 problems (as ``data/train.jsonl`` and benchmark files)."""
    from acerl.data.real import prepare_verl_data
    from acerl.pipeline import paths

    rows = [json.loads(line) for line in (shared / "math500.jsonl").read_text().splitlines()[:60]]
    rows = [{"id": r["id"], "problem": r["problem"], "answer": r["answer"]} for r in rows]
    rows = [r for r in rows if len(r["answer"]) <= MAX_ANSWER_CHARS]
    for name in ["train", *paper_cfg.benchmark_names]:
        f = paths.data_file(root, name)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepare_verl_data(paper_cfg, root, [PAPER_MODEL])
    return paths.verl_train_file(root, PAPER_MODEL)


def cpu_overrides(model_dir: Path) -> list[str]:
    """What changes from the paper run to a CPU step (later overrides win in Hydra)."""
    a, r = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    return [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.max_prompt_length={MAX_PROMPT_LEN}",
        f"data.max_response_length={MAX_RESPONSE_LEN}",
        f"data.train_batch_size={N_PROMPTS}",
        f"+{a}.fsdp_config.mixed_precision={{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}}",
        "+actor_rollout_ref.ref.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        f"{a}.ppo_mini_batch_size={N_PROMPTS}",
        # the launcher's dynamic batching, with budgets of ~2 / ~3 sequences per micro-batch at this scale
        f"{a}.ppo_max_token_len_per_gpu={2 * (MAX_PROMPT_LEN + MAX_RESPONSE_LEN)}",
        f"{r}.log_prob_max_token_len_per_gpu={3 * (MAX_PROMPT_LEN + MAX_RESPONSE_LEN)}",
        f"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu={3 * (MAX_PROMPT_LEN + MAX_RESPONSE_LEN)}",
        f"{a}.optim.lr=1e-2",
        f"{r}.n={GROUP_SIZE}",
        f"+reward.reward_kwargs.max_resp_len={MAX_RESPONSE_LEN}",
        f"+reward.reward_kwargs.overlong_buffer_cfg.len={OVERLONG_BUFFER}",
        "+reward.custom_reward_function.reward_kwargs.grader_workers=1",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
    ]


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra_compose("ppo_trainer", overrides=overrides)


def dedupe_overrides(overrides: list[str]) -> list[str]:
    """Hydra rejects a key given twice with ``+``; keep the last value of each key (the CPU one)."""
    last: dict[str, str] = {}
    for ov in overrides:
        key = ov.split("=", 1)[0].lstrip("+")
        last[key] = ov
    out, seen = [], set()
    for ov in overrides:
        key = ov.split("=", 1)[0].lstrip("+")
        if key in seen:
            continue
        seen.add(key)
        chosen = last[key]
        if ov.startswith("+") and not chosen.startswith("+"):
            chosen = "+" + chosen
        out.append(chosen)
    return out


def responses_for(answer: str, j: int) -> list[str]:
    """Per prompt: two short correct answers, one correct but overlong (past ``max_resp_len - buffer``, so
    DAPO's shaping pulls its reward below the group mean), one wrong; lengths differ between prompts."""
    boxed = f"\\boxed{{{answer}}}"
    long_len = MAX_RESPONSE_LEN - 1 - j  # with EOS: MAX_RESPONSE_LEN - j tokens
    return [
        f"The answer is {boxed}.",
        "Step " * j + f"So {boxed}",
        "Let me think. " + "." * (long_len - len("Let me think. ") - len(boxed)) + boxed,
        "I think the answer is \\boxed{0.123}." if j % 2 else "No idea.",
    ]


def pack_rollouts(tokenizer, prompts: list[list[int]], responses: list[list[int]], uids: list[str]):
    """verl's agent-loop layout (``AgentLoopWorker._agent_loop_postprocess`` / ``_postprocess``)."""
    from verl import DataProto
    from verl.utils.model import compute_position_id_with_mask

    bs = len(prompts)
    p_len = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    prompt_ids = torch.full((bs, p_len), pad, dtype=torch.long)
    prompt_mask = torch.zeros((bs, p_len), dtype=torch.long)
    resp_ids = torch.full((bs, MAX_RESPONSE_LEN), pad, dtype=torch.long)
    resp_mask = torch.zeros((bs, MAX_RESPONSE_LEN), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        prompt_ids[i, p_len - len(p) :] = torch.tensor(p)
        prompt_mask[i, p_len - len(p) :] = 1
        resp_ids[i, : len(r)] = torch.tensor(r)
        resp_mask[i, : len(r)] = 1
    attention_mask = torch.cat([prompt_mask, resp_mask], dim=1)
    input_ids = torch.cat([prompt_ids, resp_ids], dim=1)
    position_ids = compute_position_id_with_mask(attention_mask)
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": resp_ids,
            "response_mask": resp_mask,
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
        },
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


def compute_rewards(config, batch, dataset_rows):
    """verl's reward loop worker on the batch; ``rm_scores`` placed on the last response token."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    data = batch
    for key in ("data_source", "reward_model", "extra_info"):
        data.non_tensor_batch[key] = np.array([row[key] for row in dataset_rows], dtype=object)
    worker = RewardLoopWorker(config)
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))  # the worker's own loop
    scores = torch.tensor([o["reward_score"] for o in outputs], dtype=torch.float32)
    extra_fields = [
        {"reward_extra_info": o["reward_extra_info"]} for o in outputs
    ]  # V1's TransferQueue field
    prompt_length = data.batch["prompts"].size(1)
    last = data.batch["attention_mask"][:, prompt_length:].sum(dim=1) - 1
    rm_scores = torch.zeros_like(data.batch["response_mask"], dtype=torch.float32)
    rm_scores[torch.arange(len(data)), last] = scores
    data.batch["rm_scores"] = rm_scores
    return data, scores, extra_fields


def log_probs(worker_call, batch, *, calculate_entropy: bool, temperature: float):
    """The trainer's ``_compute_old_log_prob`` / ``_compute_ref_log_prob`` conversion around a worker call."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    td = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(td, calculate_entropy=calculate_entropy, compute_loss=False, temperature=temperature)
    out = worker_call(td)
    lp = no_padding_2_padding(tu.get(out, "log_probs"), td).float()
    if not calculate_entropy:
        return lp
    return lp, no_padding_2_padding(tu.get(out, "entropy"), td).float()


def micro_batches_of(call):
    """Run ``call()`` and return ``(its result, rows per micro-batch of every split the FSDP engine made)``:
    a spy on ``prepare_micro_batches`` as ``transformer_impl`` calls it (verl's function runs unchanged)."""
    from verl.workers.engine.fsdp import transformer_impl

    original, splits = transformer_impl.prepare_micro_batches, []

    def spy(data, *args, **kwargs):
        micro_batches, indices = original(data, *args, **kwargs)
        splits.append([len(mb) for mb in micro_batches])
        return micro_batches, indices

    transformer_impl.prepare_micro_batches = spy
    try:
        return call(), splits
    finally:
        transformer_impl.prepare_micro_batches = original


def update_actor(worker, config, batch):
    """``_update_actor`` of the legacy trainer (the V1 trainer sets the same keys on the batch meta)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    a = config.actor_rollout_ref.actor
    mini = a.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n
    td = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(
        td,
        calculate_entropy=bool(a.calculate_entropy or a.entropy_coeff != 0.0),  # as V1's _update_actor
        distillation_use_topk=False,
        distillation_only=False,
        global_batch_size=mini,
        mini_batch_size=mini,
        epochs=a.ppo_epochs,
        seed=a.data_loader_seed,
        dataloader_kwargs={"shuffle": a.shuffle},
        compute_loss=True,
        temperature=config.actor_rollout_ref.rollout.temperature,
    )
    out = worker.update_actor(td)
    return tu.get(out, "metrics")


def save_and_resume(actor, config, actor_dir: Path, params: dict[str, torch.Tensor]) -> dict[str, float]:
    """verl's checkpoint manager writes ``global_step_1/actor`` (FSDP shards, ``fsdp_config.json``,
    ``huggingface/``); a fresh worker loads it (``resume_mode``'s worker side): returns the largest parameter
    difference to the saved policy, before and after loading."""
    from verl.workers.engine_workers import ActorRolloutRefWorker

    actor.save_checkpoint(local_path=str(actor_dir), global_step=1, max_ckpt_to_keep=2)
    fresh = ActorRolloutRefWorker(config=config.actor_rollout_ref, role="actor")
    fresh.init_model()
    before = max(float((v - params[k]).abs().max()) for k, v in params_of(fresh).items())
    fresh.load_checkpoint(str(actor_dir))
    after = max(float((v - params[k]).abs().max()) for k, v in params_of(fresh).items())
    return {"max_diff_fresh": before, "max_diff_loaded": after}


def hf_log_probs(model_dir: Path, batch) -> torch.Tensor:
    """Response-token log-probs from a plain transformers forward and ``acerl.algos.losses.token_logprobs``."""
    from transformers import AutoModelForCausalLM

    from acerl.algos.losses import entropy_from_logits, token_logprobs

    model = AutoModelForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.float32, attn_implementation="sdpa"
    )
    model.eval()
    ids, mask, pos = batch.batch["input_ids"], batch.batch["attention_mask"], batch.batch["position_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    t = batch.batch["responses"].size(1)
    return token_logprobs(logits[:, -t - 1 : -1], ids[:, -t:]), entropy_from_logits(logits[:, -t - 1 : -1])


def params_of(worker) -> dict[str, torch.Tensor]:
    module = worker.actor.engine.module
    return {
        k: v.detach().clone().full_tensor() if hasattr(v, "full_tensor") else v.detach().clone()
        for k, v in module.state_dict().items()
    }


def run_method(
    method: str, work: Path, model_dir: Path, ref_dir: Path, train_file: Path, paper_cfg, cache: dict
) -> None:
    """One V1 step for ``method``; ``cache`` keeps what every method shares (rollouts, rewards per reward
    manager, reference log-probs)."""
    from omegaconf import open_dict
    from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn
    from verl.trainer.ppo.v1 import utils as v1_utils
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from acerl.config import Run
    from acerl.verl_backend import plugin
    from acerl.verl_backend.launcher import verl_overrides

    run = Run(model=PAPER_MODEL, method=method, seed=0)
    overrides = dedupe_overrides([*verl_overrides(paper_cfg, run, work), *cpu_overrides(model_dir)])
    config = compose(overrides)
    config.data.train_files = [str(train_file)]
    tokenizer = __import__("transformers").AutoTokenizer.from_pretrained(model_dir)

    t0 = time.perf_counter()
    if "batch" not in cache:  # prompts and rollouts are the same for every method
        # 1. prompts through verl's dataset (chat template, prompt length filter)
        dataset = RLHFDataset(data_files=[str(train_file)], tokenizer=tokenizer, config=config.data)
        rows = [dataset[i] for i in range(N_PROMPTS)]
        # 2. rollouts
        prompts, responses, uids, row_of = [], [], [], []
        for j, row in enumerate(rows):
            ids = tokenizer.apply_chat_template(
                list(row["raw_prompt"]),
                add_generation_prompt=True,
                tokenize=True,
                **dict(config.data.get("apply_chat_template_kwargs", {}) or {}),
            )
            ids = list(ids["input_ids"]) if hasattr(ids, "keys") else list(ids)
            answer = row["reward_model"]["ground_truth"]
            for text in responses_for(answer, j):
                r = tokenizer(text, add_special_tokens=False)["input_ids"][: MAX_RESPONSE_LEN - 1]
                prompts.append(ids)
                responses.append([*r, tokenizer.eos_token_id])
                uids.append(f"uid-{j}")
                row_of.append(row)
        cache.update(
            batch=pack_rollouts(tokenizer, prompts, responses, uids),
            rows=rows,
            row_of=row_of,
            uids=uids,
            dataset_len=len(dataset),
            prompt_texts=[tokenizer.decode(p) for p in prompts[::GROUP_SIZE]],
            response_lengths=torch.tensor([len(r) for r in responses]),
        )
    batch = copy.deepcopy(cache["batch"])
    uids, rows = cache["uids"], cache["rows"]
    # 3. rewards (one reward worker per reward manager)
    manager = config.reward.reward_manager.name
    if ("rewards", manager) not in cache:
        cache["rewards", manager] = compute_rewards(config, copy.deepcopy(batch), cache["row_of"])
    rewarded, scores, extra_fields = cache["rewards", manager]
    batch = copy.deepcopy(rewarded)
    t_reward = time.perf_counter()
    # 4. log-probs through verl's worker: a fresh actor per method; one reference worker for all
    temp = float(config.actor_rollout_ref.rollout.temperature)
    actor = ActorRolloutRefWorker(config=config.actor_rollout_ref, role="actor")
    actor.init_model()
    old, entropy = log_probs(actor.compute_log_prob, batch, calculate_entropy=True, temperature=temp)
    # the V1 trainer's actor/entropy metric (_compute_old_log_prob), the paper's entropy diagnostic on verl
    entropy_metric = float(
        agg_loss(entropy, batch.batch["response_mask"], config.actor_rollout_ref.actor.loss_agg_mode)
    )
    batch.batch["old_log_probs"] = old
    assert config.actor_rollout_ref.actor.use_kl_loss  # the launcher keeps the reference policy on
    if "ref_lp" not in cache:
        ref_config = copy.deepcopy(config.actor_rollout_ref)
        ref_config.model.path = str(ref_dir)  # a reference unlike the policy (as at any step after the first)
        ref = ActorRolloutRefWorker(config=ref_config, role="ref")
        ref.init_model()
        cache["ref_lp"] = log_probs(
            ref.compute_ref_log_prob, batch, calculate_entropy=False, temperature=temp
        )
        cache["hf"], cache["hf_entropy"] = hf_log_probs(model_dir, batch)
        cache["hf_ref"], _ = hf_log_probs(ref_dir, batch)
    ref_lp = cache["ref_lp"]
    batch.batch["ref_log_prob"] = ref_lp
    t_logprob = time.perf_counter()
    # 5. advantages as PPOTrainer._compute_advantage computes them
    batch.batch["token_level_scores"] = batch.batch["rm_scores"]
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    keys = [f"{u}_{i % GROUP_SIZE}_0" for i, u in enumerate(uids)]  # V1: {uid}_{session_id}_{turn}
    step_metrics: dict = {}
    # what the plugin's PPOTrainer._compute_advantage wrapper does after reading extra_fields from TransferQueue
    correct = plugin.correct_from_extra_fields(extra_fields, keys)
    with open_dict(config), plugin.ace_step_context(correct, step_metrics):
        adv_data = v1_utils.compute_advantage_for_multi_trajectories(
            batch,
            batch_keys=keys,
            adv_estimator=config.algorithm.adv_estimator,
            gamma=config.algorithm.gamma,
            lam=config.algorithm.lam,
            num_repeat=config.actor_rollout_ref.rollout.n,
            norm_adv_by_std_in_grpo=config.algorithm.get("norm_adv_by_std_in_grpo", True),
            config=config.algorithm,
        )
    # 6. one update through the worker
    before = params_of(actor)
    metrics, update_splits = micro_batches_of(lambda: update_actor(actor, config, adv_data))
    after = params_of(actor)
    t_update = time.perf_counter()
    new = log_probs(actor.compute_log_prob, batch, calculate_entropy=False, temperature=temp)
    actor_cfg = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    mask = batch.batch["response_mask"]
    verl_loss, verl_loss_metrics = get_policy_loss_fn(actor_cfg.policy_loss.get("loss_mode", "vanilla"))(
        old_log_prob=old,
        log_prob=new,
        advantages=adv_data.batch["advantages"],
        response_mask=mask.bool(),
        loss_agg_mode=actor_cfg.loss_agg_mode,
        config=actor_cfg,
    )
    moved = {k: float((after[k] - before[k]).abs().max()) for k in before}
    resumed = {}
    if method == CHECKPOINT_METHOD:
        resumed = save_and_resume(actor, config, work / "checkpoints" / "global_step_1" / "actor", after)
        torch.save({k: v.clone() for k, v in after.items()}, work / "actor_params_step1.pt")
    a = config.actor_rollout_ref.actor
    tensors = {
        "old_log_probs": old,
        "entropy": entropy,
        "hf_entropy": cache["hf_entropy"],
        "new_log_probs": new,
        "hf_ref_log_probs": cache["hf_ref"],
        "correct": torch.from_numpy(correct),
        "ref_log_prob": ref_lp,
        "hf_log_probs": cache["hf"],
        "responses": batch.batch["responses"],
        "response_mask": batch.batch["response_mask"],
        "attention_mask": batch.batch["attention_mask"],
        "rm_scores": batch.batch["rm_scores"],
        "scores": scores,
        "advantages": adv_data.batch["advantages"],
        "group": torch.tensor([int(u.split("-")[1]) for u in uids]),
        "response_lengths": cache["response_lengths"],
    }
    torch.save({k: v.clone() for k, v in tensors.items()}, work / f"result_{method}.pt")
    result = {
        "method": method,
        "adv_estimator": str(config.algorithm.adv_estimator),
        "ace": dict(config.algorithm.get("ace") or {}),
        "norm_by_std": bool(config.algorithm.norm_adv_by_std_in_grpo),
        "reward_manager": config.reward.reward_manager.name,
        "loss_agg_mode": a.loss_agg_mode,
        "clip_ratio_low": a.clip_ratio_low,
        "clip_ratio_high": a.clip_ratio_high,
        "clip_ratio_c": a.clip_ratio_c,
        "use_kl_loss": bool(a.use_kl_loss),
        "ppo_max_token_len_per_gpu": int(a.ppo_max_token_len_per_gpu),
        "update_micro_batches": update_splits,
        "lr": float(a.optim.lr),
        "strategy": [str(a.strategy), str(config.actor_rollout_ref.ref.strategy)],
        "calculate_entropy_in_update": bool(a.calculate_entropy or a.entropy_coeff != 0.0),
        "dataset_len": cache["dataset_len"],
        "max_prompt_length": int(config.data.max_prompt_length),
        "max_response_length": int(config.data.max_response_length),
        "overlong_buffer": dict(config.reward.get("reward_kwargs", {}).get("overlong_buffer_cfg", {}) or {}),
        "prompt_texts": cache["prompt_texts"],
        "problems": [r["extra_info"]["id"] for r in rows],
        "update_metrics": {
            k: [float(x) for x in v] if isinstance(v, list) else float(v)
            for k, v in metrics.items()
            if isinstance(v, (int, float, list))
        },
        "step_metrics": step_metrics,
        "actor_entropy": entropy_metric,
        "verl_policy_loss": float(verl_loss),
        "verl_policy_loss_metrics": {k: float(v) for k, v in verl_loss_metrics.items()},
        "moved": moved,
        "resumed": resumed,
        "seconds": {
            "data_reward": t_reward - t0,
            "actor_logprobs": t_logprob - t_reward,
            "update": t_update - t_logprob,
        },
    }
    (work / f"result_{method}.json").write_text(json.dumps(result, indent=1))


def main(argv: list[str]) -> None:
    from acerl.config import load_config
    from fakes.verl_cpu_platform import init_gloo_process_group, unpin_fsdp2_offload

    work, shared, repo = Path(argv[0]), Path(argv[1]), Path(argv[2])
    methods = argv[3].split(",") if len(argv) > 3 else list(METHODS)
    init_gloo_process_group(int(os.environ.get("MASTER_PORT", "29591")))
    unpin_fsdp2_offload()
    paper_cfg = load_config([repo / "config" / "config.yaml", repo / "config" / "paper.yaml"])
    model_dir = build_model(work / "model", seed=0)
    ref_dir = build_model(work / "ref_model", seed=1)
    train_file = prepare_data(work, shared, paper_cfg)
    cache: dict = {}
    for method in methods:
        run_method(method, work, model_dir, ref_dir, train_file, paper_cfg, cache)
    print("cpu_step: done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
