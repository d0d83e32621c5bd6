"""The CPU rollout server's sampler (:mod:`fakes.cpu_sampling`): a request's tokens depend on the request, not on
the batch it arrived in, so verl's CPU loop samples the same rollouts on a quiet and on a loaded machine."""

from __future__ import annotations

import pytest
import torch
from fakes import cpu_sampling

transformers = pytest.importorskip("transformers")

EOS = 1


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=24,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        eos_token_id=EOS,
    )
    return transformers.LlamaForCausalLM(config).eval()


PROMPTS = [[2, 3, 4], [5, 6, 7, 8, 9], [2, 3, 4], [10, 11], [12, 13, 14, 15], [2, 3, 4]]
IDS = [f"det-{i}" for i in range(len(PROMPTS))]


def _seeds(order: list[int], version: int = 3) -> dict[int, int]:
    return {i: cpu_sampling.request_seed(7, version, IDS[i], PROMPTS[i], 0) for i in order}


def _sample(model: torch.nn.Module, batches: list[list[int]], top_p: float = 0.9) -> dict[int, tuple]:
    """Rows sampled in the given batches (row indices, in arrival order), keyed by row."""
    out = {}
    for batch in batches:
        seeds = _seeds(batch)
        rows = cpu_sampling.sample_rows(
            model,
            [PROMPTS[i] for i in batch],
            [12] * len(batch),
            [seeds[i] for i in batch],
            temperature=1.0,
            top_p=top_p,
            eos_ids={EOS},
        )
        out.update(zip(batch, rows, strict=True))
    return out


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_a_row_samples_the_same_tokens_in_any_batch_and_order(model: torch.nn.Module, top_p: float) -> None:
    together = _sample(model, [[0, 1, 2, 3, 4, 5]], top_p)
    reordered = _sample(model, [[5, 3, 1], [4], [2, 0]], top_p)
    alone = _sample(model, [[i] for i in range(len(PROMPTS))], top_p)
    for row in range(len(PROMPTS)):
        assert together[row][0] == reordered[row][0] == alone[row][0], row
        assert together[row][1] == pytest.approx(reordered[row][1], abs=1e-5)
        assert together[row][1] == pytest.approx(alone[row][1], abs=1e-5)
    # the rows of one prompt (a group) still differ: each has its own stream
    assert len({tuple(together[i][0]) for i in (0, 2, 5)}) > 1


def test_the_seed_names_the_request_not_its_arrival() -> None:
    seed = cpu_sampling.request_seed
    assert seed(7, 3, "det-4", [2, 3], 0) == seed(7, 3, "det-4", [2, 3], 0)
    distinct = {
        seed(7, 3, "det-4", [2, 3], 0),
        seed(8, 3, "det-4", [2, 3], 0),  # another run seed
        seed(7, 4, "det-4", [2, 3], 0),  # another step's weights
        seed(7, 3, "det-5", [2, 3], 0),  # another row
        seed(7, 3, "det-4", [2, 4], 0),  # another prompt
        seed(7, 3, "det-4", [2, 3], 1),  # the same request again within the step
    }
    assert len(distinct) == 6
    # a fresh uuid per call (no full_determinism) does not count: identical requests differ by their repeat only
    assert seed(7, 3, "0f3a9c", [2, 3], 0) == seed(7, 3, "77b1e2", [2, 3], 0)
    assert 0 <= seed(7, 3, "det-4", [2, 3], 0) < 2**63


def test_the_draw_inverts_the_cumulative_distribution() -> None:
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3]] * 4, dtype=torch.float64)
    u = torch.tensor([0.05, 0.1, 0.69, 0.95], dtype=torch.float64)
    assert cpu_sampling._pick(probs, u).tolist() == [0, 2, 2, 3]
