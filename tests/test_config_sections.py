"""``models.<m>.tiny``, ``models.<m>.sft`` and ``data.synthetic.params`` are typed sections of the schema
(:mod:`acerl.config.sections`, below the config layer): a typo or a bad value fails when the config loads, naming the key,
rather than a ``prepare_base`` / ``prepare_data`` job minutes later; their dumps (run specs, the stages' params)
hold the keys the file wrote, not the defaults, so they are what they were when the sections were mappings."""

from __future__ import annotations

from pathlib import Path

import pytest

from acerl.config import ConfigError, load_config
from acerl.config.sections import SFTConfig, SyntheticParams, TinyModelConfig
from acerl.data.synthetic import write_splits
from acerl.pipeline.io import read_jsonl

CONFIG = Path(__file__).resolve().parents[1] / "config" / "config.yaml"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "models.tiny.tiny.hiden_size=64",
            r"^--set models\.tiny\.tiny\.hiden_size=64: invalid config: models\.tiny\.tiny\.hiden_size: unknown key",
        ),
        (
            "models.tiny.tiny.num_heads=3",
            r"models\.tiny\.tiny: hidden_size 128 is not divisible by num_heads 3",
        ),
        ("models.tiny.sft.stepz=3", r"models\.tiny\.sft\.stepz: unknown key"),
        ("models.tiny.sft.lr=fast", r"models\.tiny\.sft\.lr: Input should be a valid number"),
        ("models.tiny.sft.warmup_steps=1000", r"models\.tiny\.sft: warmup_steps must be in \[0, steps\]"),
        ("data.synthetic.params.sizez={train: 8}", r"data\.synthetic\.params\.sizez: unknown key"),
        (
            "data.synthetic.params.mistake_rate=often",
            r"data\.synthetic\.params\.mistake_rate: Input should be",
        ),
        (
            "data.synthetic.params.sizes={train: -1}",
            r"data\.synthetic\.params\.sizes: split size\(s\) of \['train'\] below 0",
        ),
    ],
)
def test_typo_fails_at_load(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        load_config(CONFIG, [override])
    assert "\n" not in str(err.value)  # one line


def test_sections_are_typed_and_dump_as_written() -> None:
    cfg = load_config(CONFIG, ["models.tiny.sft.steps=500", "data.synthetic.params.mistake_rate=0.25"])
    model = cfg.models["tiny"]
    assert isinstance(model.sft, SFTConfig) and isinstance(model.tiny, TinyModelConfig)
    assert (model.sft.steps, model.sft.batch_size, model.tiny.num_heads) == (500, 64, 4)  # defaults filled in
    assert cfg.data.synthetic.params.mistake_rate == 0.25
    dumped = cfg.model_dump(mode="json")  # what run specs and the stages' params read: as written
    assert dumped["models"]["tiny"]["sft"] == {"steps": 500}
    assert dumped["models"]["tiny"]["tiny"] == {}
    assert dumped["data"]["synthetic"]["params"] == {"mistake_rate": 0.25}
    assert load_config(CONFIG).model_dump(mode="json")["data"]["synthetic"]["params"] == {}


def test_synthetic_params_are_write_splits_arguments(tmp_path: Path) -> None:
    """write_splits takes exactly SyntheticParams' fields (one home for their names, defaults and checks)."""
    with pytest.raises(ValueError, match="sizez"):
        write_splits(tmp_path, sizez={"train": 1})
    with pytest.raises(ValueError, match="mistake_rate"):
        write_splits(tmp_path, mistake_rate=1.5)
    sizes = {"synth_easy": 2, "synth_hard": 0, "heldout": 0, "train": 0, "sft": 4}
    for rate in (0.0, 1.0):
        out = write_splits(
            tmp_path / str(rate), seed=1, **dict(SyntheticParams(sizes=sizes, mistake_rate=rate))
        )
        assert sorted(out) == ["sft", "synth_easy"]
        mistakes = [r["mistake"] for r in read_jsonl(out["sft"])]
        assert len(mistakes) == 4 and any(mistakes) == (rate == 1.0)
