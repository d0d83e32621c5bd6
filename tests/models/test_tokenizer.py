"""Character tokenizer: exact round trips, special tokens, and reload from a Llama model folder."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from acerl.models.tiny import TinyModelConfig, build_tiny_model
from acerl.models.tokenizer import BOS, CHARSET, EOS, PAD, UNK, build_char_tokenizer
from acerl.prompts import build_prompt

TEXTS = [
    build_prompt("Compute (3+4)*2-5.", "plain") + " 3+4=7. 7*2=14. 14-5=9. \\boxed{9}",
    "  two  spaces, a tab-free line\nand ~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./ ",
    CHARSET,
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def test_special_token_ids(tokenizer):
    assert [tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token] == [
        PAD,
        BOS,
        EOS,
        UNK,
    ]
    assert [
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.unk_token_id,
    ] == [0, 1, 2, 3]
    assert len(tokenizer) == 4 + len(CHARSET) == 100


@pytest.mark.parametrize("text", TEXTS)
def test_one_token_per_character_and_exact_round_trip(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and len(ids) == len(text) + 1
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids[1:]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.decode(ids[1:]) == text


def test_concatenation_is_additive(tokenizer):
    prompt, response = TEXTS[0].split("Solution:")
    prompt += "Solution:"
    joined = tokenizer(prompt)["input_ids"] + tokenizer(response, add_special_tokens=False)["input_ids"]
    assert joined == tokenizer(prompt + response)["input_ids"]


def test_unknown_character_maps_to_unk(tokenizer):
    assert tokenizer("é\t", add_special_tokens=False)["input_ids"] == [tokenizer.unk_token_id] * 2


def test_reload_from_llama_folder_is_exact(tokenizer, tmp_path):
    build_tiny_model(TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2,
                                     intermediate_size=32), tokenizer).save_pretrained(tmp_path)  # fmt: skip
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS:
        ids = tokenizer(text)["input_ids"]
        assert loaded(text)["input_ids"] == ids
        assert loaded.decode(ids, skip_special_tokens=True) == text
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (0, 1, 2)
    batch = loaded(["ab", "abcd"], padding=True, padding_side="left")
    assert batch["input_ids"][0] == [0, 0, 1, *loaded("ab", add_special_tokens=False)["input_ids"]]
    assert batch["attention_mask"][0] == [0, 0, 1, 1, 1]
