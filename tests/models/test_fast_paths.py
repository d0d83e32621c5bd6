"""``compute.fast_paths`` on and off compute the same training steps and samples on the tiny Llama.

Off is the plain path: transformers' ``AutoModelForCausalLM``/``AutoTokenizer``, ``torch.optim.AdamW`` with
``LambdaLR`` and the model's forward per sampled token. On swaps in the lean Llama and tokenizer,
:class:`acerl.optim.AdamW`/:class:`~acerl.optim.StepSchedule` and the Llama-family decode step. What each claims:

- training steps (teacher-forced log-probs, loss, gradients, AdamW with a warm-up schedule): bit for bit;
- sampling at the training rollouts' settings (temperature 1, top-p 1): the same tokens bit for bit, the
  sampler's log-probs within 1e-6 (the decode step sums in another order; measured: 4.8e-7 at most);
- at the evaluation's top-p 0.95 tokens may differ where near-tied probabilities swap places in the top-p sort
  (docs/training.md, "Sampler"); not asserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from acerl.config import TrainHyper
from acerl.generate.rollout import response_logprobs, sample_batch
from acerl.models.lean import LeanLlamaForCausalLM
from acerl.models.loading import load_model_folder
from acerl.models.tiny import TinyModelConfig, build_tiny_model
from acerl.models.tokenizer import LeanTokenizer, build_char_tokenizer
from acerl.optim import AdamW, StepSchedule, build_optimizer
from acerl.pipeline import runtime

SAMPLER_LOGPROB_ATOL = 1e-6
STEPS = 4


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The embedded default's tiny Llama architecture, random init, saved as a model folder."""
    out = tmp_path_factory.mktemp("fast-paths")
    arch = TinyModelConfig()
    tokenizer = build_char_tokenizer(model_max_length=arch.max_position_embeddings)
    build_tiny_model(arch, tokenizer, seed=0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture
def switch() -> Iterator[None]:
    yield
    runtime.set_fast_paths(True)


def _job(folder: Path, on: bool) -> dict[str, object]:
    """One job with the switch ``on``: sample with a seeded generator, then STEPS policy-gradient steps."""
    runtime.set_fast_paths(on)
    model, tokenizer = load_model_folder(folder)
    prompts = [
        tokenizer(f"{a}+{b}=", add_special_tokens=True)["input_ids"] for a, b in ((12, 7), (3, 45), (9, 9))
    ]
    g = torch.Generator().manual_seed(7)
    batch = sample_batch(model, prompts, n=4, temperature=1.0, top_p=1.0, max_new_tokens=24,
                         eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, generator=g)  # fmt: skip
    input_ids = torch.cat([batch.input_ids, batch.response_ids], dim=1)
    mask = torch.cat([batch.attention_mask, batch.response_mask], dim=1)
    rewards = torch.linspace(-1.0, 1.0, input_ids.shape[0])[:, None]
    hyper = TrainHyper(lr=1e-3, warmup_steps=2, total_steps=STEPS, lr_schedule="cosine")
    model.train()
    optimizer, scheduler = build_optimizer(model.parameters(), hyper)
    losses = []
    for _ in range(STEPS):
        logp, _ = response_logprobs(model, input_ids, mask, batch.response_ids.shape[1])
        loss = -(rewards * logp * batch.response_mask).sum() / batch.response_mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.detach())
    return {
        "kinds": (type(model), type(tokenizer), type(optimizer), type(scheduler)),
        "tokens": batch.response_ids,
        "response_mask": batch.response_mask,
        "sampler_logprobs": batch.logprobs,
        "losses": torch.stack(losses),
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "lr": optimizer.param_groups[0]["lr"],
    }


def test_switch_selects_the_paths(folder, switch):
    assert _job(folder, False)["kinds"][0] is not LeanLlamaForCausalLM
    kinds = _job(folder, True)["kinds"]
    assert kinds == (LeanLlamaForCausalLM, LeanTokenizer, AdamW, StepSchedule)
    runtime.set_fast_paths(False)
    plain = _job(folder, False)["kinds"]
    assert plain[2] is torch.optim.AdamW and plain[3] is torch.optim.lr_scheduler.LambdaLR
    assert plain[0].__module__.startswith("transformers.")


def test_fast_and_plain_paths_agree(folder, switch):
    plain, fast = _job(folder, False), _job(folder, True)
    assert torch.equal(plain["tokens"], fast["tokens"])
    assert torch.equal(plain["response_mask"], fast["response_mask"])
    torch.testing.assert_close(
        plain["sampler_logprobs"], fast["sampler_logprobs"], rtol=0.0, atol=SAMPLER_LOGPROB_ATOL
    )
    assert torch.equal(plain["losses"], fast["losses"])
    assert plain["lr"] == fast["lr"]
    assert plain["weights"].keys() == fast["weights"].keys()
    for name, weight in plain["weights"].items():
        assert torch.equal(weight, fast["weights"][name]), name


def test_environment_turns_the_fast_paths_off(monkeypatch, switch):
    runtime.set_fast_paths(True)
    monkeypatch.setenv(runtime.FAST_PATHS_ENV, "0")
    assert not runtime.fast_paths()
    monkeypatch.setenv(runtime.FAST_PATHS_ENV, "1")
    assert runtime.fast_paths()
    runtime.set_fast_paths(False)
    assert not runtime.fast_paths()


@pytest.mark.xfail(
    strict=True,
    reason="open: with one distinct prompt in the batch, the shared-prompt pass's gradients differ between the "
    "lean Llama and transformers' at float rounding (forward equal); docs/training.md 'Fast paths'",
)
def test_shared_prompt_gradients_with_one_distinct_prompt(folder):
    from transformers import AutoModelForCausalLM

    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(4, 40, (1, 12), generator=g).repeat(4, 1)
    ids = torch.cat([prompt, torch.randint(4, 40, (4, 10), generator=g)], dim=1)
    mask = torch.ones_like(ids)
    grads = []
    for model in (AutoModelForCausalLM.from_pretrained(folder), LeanLlamaForCausalLM.from_folder(folder)):
        logp, _ = response_logprobs(model.train(), ids, mask, 10, share_prompts=True)
        logp.sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        assert torch.equal(grad, grads[1][name]), name
