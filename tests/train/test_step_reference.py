"""One step of the local trainer checked end to end against an independent reference written out here.

The reference below never calls the code under test (no ``acerl.algos``, ``acerl.train`` or
``acerl.generate`` function): from the token ids the trainer sampled it recomputes, row by row and token by
token, following the paper (``../shared/paper/ace_paper.tex``) and the project's documented choices
(docs/algorithms.md, docs/deviations.md):

- the grouping: ``G`` consecutive rows per prompt, the prompt's gold answer, DAPO's dynamic sampling (groups
  with mixed verdicts, kept in sampling order until ``prompts_per_step``);
- the rewards: binary (GRPO) or signed +-1 plus DAPO's soft overlong penalty;
- the advantages ``A_i = (r_i - mean_x) / (std_x + eps)`` (unbiased std, as verl) and ACE's
  ``A_i * (1 + alpha * softplus(c_i))`` on incorrect negative rollouts, ``c_i`` the length-normalised
  ``sum_t log pi_old - log pi_ref`` (Eq. 5, Alg. 1 line 8);
- ``log pi_old`` from the policy that sampled and ``log pi_ref`` from the reference model, each an unpadded
  forward pass per row;
- the loss ``clipped surrogate + beta * KL(pi || pi_ref)`` (Eq. 2, token-mean, k3 estimator),
  its gradient, the gradient clip and one AdamW step; with an EMA reference, ``ref <- d ref + (1 - d) pi``.

The policy is moved away from the reference before the step (``pi != pi_ref``), so the KL term, its gradient
and ACE's confidences are all non-zero: a wrong sign or a swapped model shows up in the numbers.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from trainer_fixtures import DigitVerifier, make_config

import acerl.train.rollouts as rollouts_module
from acerl.config import Run
from acerl.config.settings import resolve
from acerl.train.algorithm import train_step
from acerl.train.run import init_state

ADAM_EPS = 1e-8  # torch's AdamW default (the trainer's optimizer does not change it)
STD_EPS = 1e-6  # the GRPO advantage's epsilon (docs/algorithms.md)

ONE_UPDATE = [
    "models.tiny.train.prompts_per_step=4",
    "models.tiny.train.group_size=4",
    "models.tiny.train.mini_batch_size=4",  # the whole batch is one mini-batch: one optimizer step
    "models.tiny.train.kl_coef=0.5",  # a KL term large enough for its sign to show in the gradient
    "models.tiny.train.lr=0.01",
    "models.tiny.train.grad_clip=1.0e6",  # the clip is checked separately (CLIPPED)
]
# the embedded default's path; responses (<= 12 tokens) narrower than the batch (16 rows), so rows and
# response positions cannot be swapped unnoticed
SINGLE_PASS = ["models.tiny.train.micro_batch_size_per_gpu=16", "models.tiny.train.max_response_length=12"]
# a separate log pi_old pass, 6 micro-batches; responses (<= 12 tokens) narrower than the batch (16 rows)
ACCUMULATED = ["models.tiny.train.micro_batch_size_per_gpu=3", "models.tiny.train.max_response_length=12"]
CLIPPED = ["models.tiny.train.grad_clip=0.05"]

CASES = {
    "grpo": ("grpo", SINGLE_PASS, {}),
    "dapo": ("dapo", SINGLE_PASS, {}),
    "ace_grpo": ("ace_grpo", SINGLE_PASS, {}),
    "ace_dapo": ("ace_dapo", SINGLE_PASS, {}),
    "ace_grpo-accumulated": ("ace_grpo", ACCUMULATED, {}),
    "grpo-clipped": ("grpo", [*SINGLE_PASS, *CLIPPED], {}),
    "ace_grpo-ema": ("ace_grpo", SINGLE_PASS, {"reference": "ema", "ref_ema_decay": 0.9}),
    # sampling and the update at a temperature other than 1 (every shipped config trains at 1.0)
    "ace_grpo-temperature": ("ace_grpo", [*SINGLE_PASS, "models.tiny.train.temperature=1.3"], {}),
}


# --------------------------------------------------------------------------------------------------------------
# The reference, written from the paper's equations
# --------------------------------------------------------------------------------------------------------------


def row_logprobs(
    model: torch.nn.Module, prompt: list[int], response: list[int], temperature: float
) -> tuple[torch.Tensor, list[float]]:
    """``[log pi(y_t | x, y_<t)]_t`` and ``[H(pi(. | x, y_<t))]_t`` (the entropy of each response token's
    sampling distribution, detached) from one unpadded forward pass of ``prompt + response``."""
    logits = model(input_ids=torch.tensor([prompt + response])).logits[0]
    out, entropy = [], []
    for t, token in enumerate(response):
        position = len(prompt) + t - 1  # the logits at position j predict token j + 1
        logp = torch.log_softmax(logits[position].double() / temperature, dim=-1)
        out.append(logp[token])
        entropy.append(float(-(logp.exp() * logp).sum().detach()))
    return torch.stack(out), entropy


def overlong_penalty(length: int, max_length: int, buffer: int, factor: float) -> float:
    """DAPO's soft overlong punishment: 0 up to ``max_length - buffer`` tokens, then linear down to -factor."""
    start = max_length - buffer
    return 0.0 if length <= start else (start - length) / buffer * factor


@dataclass
class Row:
    prompt: list[int]
    response: list[int]
    gold: str
    group: int
    correct: bool = False
    reward: float = 0.0
    advantage: float = 0.0
    confidence: float = 0.0


def reference_rows(sampled, settings, tokenizer, verifier) -> tuple[list[Row], int]:
    """The rows the step trains on (grouping, verdicts, rewards) and how many batches it had to sample."""
    h, fam = settings.hyper, settings.family
    g, want = h.group_size, h.prompts_per_step
    eos = tokenizer.eos_token_id
    kept: list[Row] = []
    needed = 0
    for prompts, golds, batch in sampled:
        needed += 1
        p = batch.input_ids.shape[1] - batch.response_ids.shape[1]
        for k in range(len(prompts)):
            group = []
            for j in range(g):
                r = k * g + j
                prompt = [t for t, m in zip(batch.input_ids[r, :p].tolist(), batch.attention_mask[r, :p].tolist(),
                                            strict=True) if m]  # fmt: skip
                assert prompt == prompts[k], f"row {r} does not belong to prompt {k}"
                n = int(batch.response_mask[r].sum())
                response = batch.response_ids[r, :n].tolist()
                stopped = response[-1] == eos
                text = tokenizer.decode(response[:-1] if stopped else response, skip_special_tokens=True)
                (verdict,) = verifier.grade_many([(text, golds[k])])
                row = Row(prompt, response, golds[k], group=len(kept) // g, correct=verdict.correct)
                if fam.reward == "binary":
                    row.reward = 1.0 if row.correct else 0.0
                else:
                    row.reward = 1.0 if row.correct else -1.0
                if fam.overlong.enable:
                    row.reward += overlong_penalty(
                        n, h.max_response_length, fam.overlong.buffer, fam.overlong.penalty_factor
                    )
                group.append(row)
            mixed = any(r.correct for r in group) and not all(r.correct for r in group)
            if (mixed or not fam.dynamic_sampling.enable) and len(kept) < want * g:
                for row in group:
                    row.group = len(kept) // g
                    kept.append(row)
        if len(kept) == want * g:
            break
    return kept, needed


def reference_advantages(rows: list[Row], g: int, estimator) -> None:
    """GRPO's group-normalised advantage, then ACE's amplification of incorrect negative rollouts."""
    for k in range(len(rows) // g):
        group = rows[k * g : (k + 1) * g]
        mean = sum(r.reward for r in group) / g
        std = math.sqrt(sum((r.reward - mean) ** 2 for r in group) / (g - 1))
        for r in group:
            r.advantage = (r.reward - mean) / (std + STD_EPS)
            if estimator.name == "ace" and r.advantage < 0 and not r.correct:
                softplus = math.log1p(math.exp(r.confidence))
                r.advantage *= 1.0 + estimator.alpha * softplus


@dataclass
class Expected:
    rows: list[Row]
    batches: int
    pg: float
    kl: float
    grads: list[torch.Tensor]
    clipped: bool
    entropy: float  # token-mean entropy of the sampling policy over the response tokens


def reference_step(policy, ref_model, sampled, settings, tokenizer, verifier) -> Expected:
    h, fam = settings.hyper, settings.family
    rows, batches = reference_rows(sampled, settings, tokenizer, verifier)
    new, ref, entropies = [], [], []
    for r in rows:
        logprobs, entropy = row_logprobs(policy, r.prompt, r.response, h.temperature)
        new.append(logprobs)
        entropies.extend(entropy)
        with torch.no_grad():
            ref.append(row_logprobs(ref_model, r.prompt, r.response, h.temperature)[0])
        # log pi_old: the policy before the update; c_i over the response tokens, divided by T_i
        r.confidence = float((new[-1].detach() - ref[-1]).sum()) / len(r.response)
    reference_advantages(rows, h.group_size, settings.estimator)
    low, high, dual = fam.clip_ratio_low, fam.clip_ratio_high, fam.clip_ratio_c
    pg_sum = kl_sum = 0.0
    tokens = 0
    for r, lp, lr in zip(rows, new, ref, strict=True):
        old = lp.detach()
        for t in range(len(r.response)):
            ratio = torch.exp(lp[t] - old[t])
            a = r.advantage
            surrogate = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - low, 1 + high))
            if a < 0:
                surrogate = torch.minimum(surrogate, torch.tensor(-a * dual, dtype=surrogate.dtype))
            pg_sum = pg_sum + surrogate
            d = lr[t] - lp[t]  # k3 = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1 >= 0
            kl_sum = kl_sum + (torch.exp(d) - d - 1)
            tokens += 1
    pg, kl = pg_sum / tokens, kl_sum / tokens  # token-mean over the mini-batch
    loss = pg + settings.kl_loss_coef * kl
    params = list(policy.parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    grads = [torch.zeros_like(p) if gr is None else gr for p, gr in zip(params, grads, strict=True)]
    norm = math.sqrt(sum(float((gr.double() ** 2).sum()) for gr in grads))
    scale = min(1.0, h.grad_clip / (norm + 1e-6))
    return Expected(
        rows,
        batches,
        float(pg.detach()),
        float(kl.detach()),
        [gr * scale for gr in grads],
        scale < 1,
        sum(entropies) / len(entropies),
    )


def adamw_first_step(param: torch.Tensor, grad: torch.Tensor, lr: float, betas, weight_decay: float):
    """AdamW's first update (zero moments): bias-corrected ``m = g``, ``v = g^2``."""
    b1, b2 = betas
    m = (1 - b1) * grad / (1 - b1)
    v = (1 - b2) * grad * grad / (1 - b2)
    return param * (1 - lr * weight_decay) - lr * m / (v.sqrt() + ADAM_EPS)


# --------------------------------------------------------------------------------------------------------------
# The trainer's step, observed
# --------------------------------------------------------------------------------------------------------------


def _record_sampling(state, data, monkeypatch: pytest.MonkeyPatch) -> list:
    """Every batch the step samples, with its prompts and their gold answers (in sampling order)."""
    drawn: list[list[int]] = []
    for stream in (state.stream, state.fill_stream):
        original = stream.next
        monkeypatch.setattr(stream, "next", lambda n, f=original: drawn.append(f(n)) or drawn[-1])
    sampled = []
    original_sample = rollouts_module.sample_batch

    def sample(model, prompts, **kw):
        batch = original_sample(model, prompts, **kw)
        sampled.append(([list(p) for p in prompts], [data.answer(i) for i in drawn[len(sampled)]], batch))
        return batch

    monkeypatch.setattr(rollouts_module, "sample_batch", sample)
    return sampled


def _move_policy(model: torch.nn.Module, seed: int = 1) -> None:
    """Put the policy somewhere else than the reference (as after some training)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
@pytest.mark.parametrize("case", list(CASES))
def test_one_step_equals_the_hand_written_reference(case: str, tiny_root: Path, monkeypatch):
    method, overrides, trainer_kw = CASES[case]
    run = Run("tiny", method, 0)
    settings = resolve(make_config(*ONE_UPDATE, *overrides), run, **trainer_kw)
    state, data = init_state(tiny_root, run, settings, torch.device("cpu"))
    assert state.ref_model is not None
    _move_policy(state.model)
    policy0, ref0 = copy.deepcopy(state.model), copy.deepcopy(state.ref_model)
    sampled = _record_sampling(state, data, monkeypatch)
    captured: list[list[torch.Tensor]] = []
    step = state.optimizer.step

    def capture_then_step(*args, **kwargs):
        captured.append([p.grad.clone() for p in state.model.parameters()])
        return step(*args, **kwargs)

    monkeypatch.setattr(state.optimizer, "step", capture_then_step)
    verifier = DigitVerifier()
    metrics = train_step(state, settings, data, verifier)

    expected = reference_step(policy0, ref0, sampled, settings, state.tokenizer, DigitVerifier())
    rows, g = expected.rows, settings.hyper.group_size
    # grouping and rewards: the batches sampled, the groups kept, every row's reward
    assert len(rows) == g * metrics["train/groups"] and len(rows) > 0
    assert expected.batches == len(sampled) == metrics["train/gen_batches"]
    # the advantages and confidences behind the update
    adv = torch.tensor([r.advantage for r in rows], dtype=torch.float64)
    assert metrics["actor/advantage_mean"] == pytest.approx(float(adv.mean()), abs=1e-5)
    assert metrics["actor/advantage_min"] == pytest.approx(float(adv.min()), abs=1e-5)
    assert metrics["actor/advantage_max"] == pytest.approx(float(adv.max()), abs=1e-5)
    negative = [r for r in rows if r.advantage < 0 and not r.correct]
    assert negative and any(r.confidence != 0.0 for r in negative)  # the reference is apart from the policy
    conf_mean = sum(r.confidence for r in negative) / len(negative)
    assert metrics["ace/confidence_mean_neg"] == pytest.approx(conf_mean, abs=1e-5)
    oef = sum(r.confidence > 0 for r in negative) / len(negative)
    assert metrics["ace/overconfident_frac_neg"] == pytest.approx(oef)
    # the loss terms, their signs and the gradient of pg + beta * KL
    assert expected.kl > 0
    assert metrics["actor/pg_loss"] == pytest.approx(expected.pg, abs=1e-5)
    assert metrics["actor/kl_loss"] == pytest.approx(expected.kl, rel=1e-4)
    assert metrics["actor/kl_coef"] == settings.kl_loss_coef
    # the entropy diagnostic (the paper's entropy dynamics): the sampling policy's, over response tokens
    assert metrics["actor/entropy"] == pytest.approx(expected.entropy, rel=1e-5)
    # the logged norm is the one before clipping: the reference's, or above the clip where the step clipped
    grad_norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in expected.grads))
    if expected.clipped:
        assert metrics["actor/grad_norm"] > settings.hyper.grad_clip
        assert settings.hyper.grad_clip == pytest.approx(grad_norm, rel=1e-4)  # the clipped gradients' norm
    else:
        assert metrics["actor/grad_norm"] == pytest.approx(grad_norm, rel=1e-4)
    (grads,) = captured
    assert expected.clipped == (CLIPPED[0] in overrides)  # the clip case clips, the others do not
    for name_param, got, want in zip(state.model.named_parameters(), grads, expected.grads, strict=True):
        torch.testing.assert_close(got, want.float(), atol=2e-6, rtol=1e-3, msg=name_param[0])
    # one AdamW step from the gradient the trainer applied
    lr, betas, wd = settings.hyper.lr, settings.hyper.betas, settings.hyper.weight_decay
    for (name, p), p0, grad in zip(state.model.named_parameters(), policy0.parameters(), grads, strict=True):
        torch.testing.assert_close(p.detach(), adamw_first_step(p0.detach(), grad, lr, betas, wd), msg=name)
    # the reference: fixed, or an EMA of the updated policy
    decay = settings.ref_ema_decay if settings.reference == "ema" else 1.0
    for r, r0, p in zip(
        state.ref_model.parameters(), ref0.parameters(), state.model.parameters(), strict=True
    ):
        torch.testing.assert_close(r.detach(), decay * r0.detach() + (1 - decay) * p.detach())
