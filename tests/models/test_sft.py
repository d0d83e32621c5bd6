"""SFT of the tiny base model: examples, schedule, teacher-forced greedy check, save/reload, determinism."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from acerl.data.synthetic import write_splits
from acerl.models.sft import (
    IGNORE_INDEX,
    METRICS_FILE,
    SFTConfig,
    collate,
    encode_example,
    lr_at,
    pack_examples,
    prepare_tiny_base,
    response_token_stats,
    save_hf_folder,
    train_sft,
)
from acerl.models.tiny import TinyModelConfig, build_tiny_model
from acerl.models.tokenizer import build_char_tokenizer
from acerl.pipeline.io import read_jsonl
from acerl.prompts import build_prompt

SMALL = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64,
                        max_position_embeddings=128)  # fmt: skip
QUICK = SFTConfig(steps=40, batch_size=16, lr=1e-2, warmup_steps=4, log_every=10, eval_rows=8)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    sizes = {"synth_easy": 8, "synth_hard": 0, "heldout": 0, "train": 0, "sft": 96}
    return write_splits(out, seed=0, sizes=sizes, mistake_rate=0.3)


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer(model_max_length=128)


def test_encode_example_masks_the_prompt(tokenizer):
    ids, labels = encode_example(tokenizer, "Compute 1+2.", "1+2=3. \\boxed{3}")
    prompt_ids = tokenizer(build_prompt("Compute 1+2.", "plain"))["input_ids"]
    n = len(prompt_ids)
    assert ids[:n] == prompt_ids and labels[:n] == [IGNORE_INDEX] * n
    assert ids[n:] == labels[n:] and ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids[n:-1]) == " 1+2=3. \\boxed{3}"
    batch = collate([(ids, labels), (ids[:5], labels[:5])], tokenizer.pad_token_id)
    assert batch["input_ids"].shape == (2, len(ids))
    assert batch["attention_mask"][1].tolist() == [1] * 5 + [0] * (len(ids) - 5)
    assert (batch["labels"][1] == IGNORE_INDEX).all()


def packed_segments(packed: dict[str, torch.Tensor]) -> dict[tuple[int, ...], tuple[int, int]]:
    """``{token ids of a packed example: (row, start)}``, read back from the position restarts."""
    out = {}
    for r, (ids, pos) in enumerate(
        zip(packed["input_ids"].tolist(), packed["position_ids"].tolist(), strict=True)
    ):
        starts = [c for c, p in enumerate(pos) if p == 0] + [len(pos)]
        for start, end in zip(starts[:-1], starts[1:], strict=True):
            out[tuple(ids[start:end])] = (r, start)
    return out


def test_packed_batch_gives_the_padded_loss_and_logits(tokenizer, data):
    rows = read_jsonl(data["sft"], required=("problem", "solution"))[:12]
    examples = [encode_example(tokenizer, r["problem"], r["solution"]) for r in rows]
    packed = pack_examples(examples, tokenizer.pad_token_id)
    assert packed["input_ids"].shape[0] < len(examples)  # several examples share a row
    assert packed["input_ids"].shape[1] <= 2 * max(len(ids) for ids, _ in examples)
    n_labels = sum(sum(x != IGNORE_INDEX for x in labels) for _, labels in examples)
    assert int((packed["labels"] != IGNORE_INDEX).sum()) == n_labels
    segments = packed_segments(packed)
    model = build_tiny_model(SMALL, tokenizer, seed=0).eval()
    with torch.no_grad():
        inputs = {
            "input_ids": packed["input_ids"],
            "position_ids": packed["position_ids"],
            "use_cache": False,
        }
        packed_logits = model(**inputs).logits
        for ids, _ in examples:  # an example's logits in its packed row equal a forward pass on it alone
            row, start = segments[tuple(ids)]
            alone = model(input_ids=torch.tensor([ids])).logits[0]
            torch.testing.assert_close(
                packed_logits[row, start : start + len(ids)], alone, atol=1e-5, rtol=1e-4
            )
        loss_packed = model(**packed, use_cache=False).loss
        loss_padded = model(**collate(examples, tokenizer.pad_token_id), use_cache=False).loss
    torch.testing.assert_close(loss_packed, loss_padded, atol=1e-5, rtol=1e-5)


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    cfg = SFTConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(99, cfg) == pytest.approx(0.1, abs=1e-3)
    values = [lr_at(s, cfg) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))
    with pytest.raises(ValueError, match="warmup_steps"):
        SFTConfig(steps=5, warmup_steps=6)


def test_all_argmax_flags_exactly_what_greedy_decoding_reproduces(tokenizer):
    model = build_tiny_model(SMALL, tokenizer, seed=3).eval()
    prompt = tokenizer(build_prompt("Compute 2+2.", "plain"), return_tensors="pt")
    greedy = model.generate(**prompt, do_sample=False, max_new_tokens=12, min_new_tokens=12)[0]
    n = prompt["input_ids"].shape[1]
    labels = greedy.clone()
    labels[:n] = IGNORE_INDEX
    altered = labels.clone()
    altered[-1] = (int(labels[-1]) + 1) % len(tokenizer)
    batch = {
        "input_ids": torch.stack([greedy, greedy]),
        "attention_mask": torch.ones(2, len(greedy), dtype=torch.long),
        "labels": torch.stack([labels, altered]),
    }
    with torch.no_grad():
        nll_sum, n_tokens, all_argmax = response_token_stats(model, batch)
    assert all_argmax.tolist() == [True, False]
    assert n_tokens.tolist() == [12, 12] and (nll_sum > 0).all()


def test_sft_lowers_the_loss_and_the_saved_folder_reloads_exactly(tokenizer, data, tmp_path):
    rows = read_jsonl(data["sft"], required=("problem", "solution"))
    model = build_tiny_model(SMALL, tokenizer, seed=0)
    curve = train_sft(model, tokenizer, rows, QUICK, seed=0, progress=False)
    assert [step for step, _ in curve] == [10, 20, 30, 40]
    assert curve[-1][1] < 0.6 * curve[0][1]
    out = save_hf_folder(tmp_path / "base", model, tokenizer, {"note": "test"})
    assert (out / "model.safetensors").is_file() and json.loads((out / METRICS_FILE).read_text()) == {
        "note": "test"
    }
    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    loaded_tok = AutoTokenizer.from_pretrained(out)
    texts = [build_prompt(r["problem"], "plain") + " " + r["solution"] for r in rows[:4]]
    batch = loaded_tok(texts, return_tensors="pt", padding=True)
    assert torch.equal(batch["input_ids"], tokenizer(texts, return_tensors="pt", padding=True)["input_ids"])
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, model.eval()(**batch).logits)
    # replacing an existing folder is atomic and leaves no temporary sibling
    save_hf_folder(out, model, tokenizer, {"note": "again"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]


def test_prepare_tiny_base_is_deterministic_and_records_metrics(data, tmp_path):
    threads = torch.get_num_threads()
    kwargs = dict(model_cfg=SMALL, sft_cfg=SFTConfig(steps=6, batch_size=8, warmup_steps=2, log_every=3,
                                                     eval_rows=4), seed=1, threads=1,
                  eval_data={"synth_easy": data["synth_easy"]}, progress=False)  # fmt: skip
    a = prepare_tiny_base(tmp_path / "a", data["sft"], **kwargs)
    b = prepare_tiny_base(tmp_path / "b", data["sft"], **kwargs)
    assert torch.get_num_threads() == threads
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    metrics = json.loads((a / METRICS_FILE).read_text())
    assert metrics["num_rows"] == 96 and 0.15 < metrics["mistake_fraction"] < 0.45
    assert [s for s, _ in metrics["loss_curve"]] == [3, 6]
    assert metrics["model"]["hidden_size"] == 32 and metrics["sft"]["steps"] == 6
    assert set(metrics["eval"]["synth_easy"]) == {"greedy_exact", "response_nll", "n"}
    assert metrics["eval"]["synth_easy"]["n"] == 4
    assert AutoTokenizer.from_pretrained(a).eos_token_id == 2


def test_sft_data_without_solutions_is_rejected(tmp_path):
    bad = tmp_path / "sft.jsonl"
    bad.write_text('{"id": "1", "problem": "Compute 1+1.", "answer": "2"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"sft\.jsonl:1: missing required key\(s\) 'solution'"):
        prepare_tiny_base(tmp_path / "out", bad, SMALL, QUICK, progress=False)


def test_sft_on_a_model_device_keeps_its_batches_there(data, tmp_path):
    """SFT with the model on a device (the stand-in ``cpu:0`` of tests/device_mixing.py): every batch is
    moved to it, so no op mixes host and device tensors (which would fail on a GPU)."""
    from support.device_mixing import MODEL_DEVICE, DeviceMixingMode

    cfg = SFTConfig(steps=2, batch_size=8, warmup_steps=1, log_every=1, eval_rows=4)
    with DeviceMixingMode() as mode:
        out = prepare_tiny_base(tmp_path / "base", data["sft"], SMALL, cfg, eval_data={"synth_easy": data["synth_easy"]},
                                progress=False, device=str(MODEL_DEVICE))  # fmt: skip
    assert (out / "model.safetensors").is_file() and mode.checked > 100
