"""The random streams' seeds (acerl.pipeline.seeds)."""

from __future__ import annotations

import pytest

from acerl.pipeline import seeds
from acerl.pipeline.seeds import derive_seed, name_part


def test_derive_seed_is_deterministic_and_mixes_parts():
    assert derive_seed(1234, 0, 3) == derive_seed(1234, 0, 3)
    seeds = {derive_seed(1234, r, s) for r in range(3) for s in range(50)}
    assert len(seeds) == 150  # nearby parts give distinct seeds
    assert all(0 <= s < 2**32 for s in seeds)
    assert derive_seed(1, 2) != derive_seed(2, 1)
    assert derive_seed(-1) == derive_seed(2**64 - 1)
    with pytest.raises(ValueError, match="at least one"):
        derive_seed()


def test_the_streams_are_distinct():
    streams = [
        seeds.EVAL_SEED_STREAM,
        seeds.DIAG_SEED_STREAM,
        seeds.TRAIN_SEED_STREAM,
        seeds.FILL_SEED_STREAM,
    ]
    assert streams == [0, 1, 2, 3]  # a changed number changes every seed of its stream


def test_name_part_is_stable():
    assert name_part("synth_easy") == name_part("synth_easy") != name_part("synth_hard")
    assert 0 <= name_part("x") < 2**64
