"""``models.<m>.tiny``, ``models.<m>.sft`` and ``data.synthetic.params`` are checked when the config loads
(keys against the dataclass / function they configure, values against its annotations, and the dataclass's own
checks), so a typo fails ``acerl config`` rather than a ``prepare_base`` / ``prepare_data`` job minutes later;
their dumps (run specs) stay as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from acerl.config import ConfigError, load_config

CONFIG = Path(__file__).resolve().parents[1] / "config" / "config.yaml"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "models.tiny.tiny.hiden_size=64",
            r"models\.tiny\.tiny: unknown key 'hiden_size'.*valid: hidden_size",
        ),
        (
            "models.tiny.tiny.num_heads=3",
            r"models\.tiny\.tiny: hidden_size 128 is not divisible by num_heads 3",
        ),
        ("models.tiny.sft.stepz=3", r"models\.tiny\.sft: unknown key 'stepz'.*valid: steps"),
        ("models.tiny.sft.lr=fast", r"models\.tiny\.sft: lr: Input should be a valid number"),
        (
            "data.synthetic.params.sizez={train: 8}",
            r"data\.synthetic\.params: unknown key 'sizez'.*valid: sizes",
        ),
        (
            "data.synthetic.params.mistake_rate=often",
            r"data\.synthetic\.params: mistake_rate: Input should be",
        ),
    ],
)
def test_typo_fails_at_load(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(CONFIG, [override])


def test_sections_dump_as_written() -> None:
    cfg = load_config(CONFIG, ["models.tiny.sft.steps=500", "data.synthetic.params.mistake_rate=0.25"])
    assert cfg.models["tiny"].sft == {"steps": 500}  # no defaults filled in: run specs unchanged
    assert cfg.data.synthetic.params["mistake_rate"] == 0.25
