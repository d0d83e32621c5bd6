"""docs/verl.md quotes the paper config's numbers: the override listing and the step / snapshot counts must be
what the launcher and ``config/paper.yaml`` give today (a stale 90-step schedule once survived a config fix)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from acerl.config import Run
from acerl.verl_backend.launcher import verl_overrides

DOC = Path(__file__).resolve().parents[2] / "docs" / "verl.md"
EXAMPLE = Run("qwen25_math_7b", "grpo", 0)
EXAMPLE_ROOT = Path("/example-root")  # the doc writes the work directory as `<root>`


def doc_listing(text: str, heading: str = "Full list for `qwen25_math_7b / grpo / seed0`") -> dict[str, str]:
    """``key -> value`` of the override listing (the ``text`` block after ``heading``), comments dropped."""
    start = text.index(heading)
    block = text[
        text.index("```text", start) + len("```text") : text.index("```", text.index("```text", start) + 7)
    ]
    out = {}
    for line in block.strip().splitlines():
        item = re.split(r"\s+#", line, maxsplit=1)[0].strip()
        key, value = item.split("=", 1)
        out[key] = value
    return out


def test_override_listing_is_what_the_launcher_builds(paper_cfg):
    ours = {
        key: value.replace(str(EXAMPLE_ROOT), "<root>")
        for key, value in (item.split("=", 1) for item in verl_overrides(paper_cfg, EXAMPLE, EXAMPLE_ROOT))
    }
    doc = doc_listing(DOC.read_text(encoding="utf-8"))
    assert sorted(doc) == sorted(ours), "docs/verl.md lists other keys than the launcher builds"
    stale = {k: (doc[k], ours[k]) for k in doc if doc[k] != ours[k]}
    assert not stale, f"docs/verl.md: (doc, launcher) values differ: {stale}"


def test_step_and_snapshot_numbers_follow_the_config(paper_cfg):
    text = DOC.read_text(encoding="utf-8")
    qwen25, qwen3 = (paper_cfg.models[m].train.total_steps for m in ("qwen25_math_7b", "qwen3_8b_base"))
    assert f"this is {qwen25} steps for Qwen2.5-Math-7B (batch 2048) and {qwen3} for Qwen3/Llama" in text
    steps = paper_cfg.diagnostic_steps("qwen25_math_7b")
    save_freq = math.gcd(paper_cfg.models["qwen25_math_7b"].train.save_every, *steps)
    schedule = ", ".join(str(s) for s in steps[:2]) + ", ..., " + ", ".join(str(s) for s in steps[4:])
    assert f"({save_freq} for the paper's schedule {schedule};" in text
    assert f"{qwen25 // save_freq} saves of a 7B model over {qwen25} steps" in text


def test_dapo_listing_and_cap_follow_the_config(paper_cfg):
    """The DAPO block's values (the dynamic-sampling cap among them) and the cap's prompt budget are the
    launcher's for ``qwen25_math_7b / dapo``."""
    text = DOC.read_text(encoding="utf-8")
    ours = dict(
        item.split("=", 1) for item in verl_overrides(paper_cfg, Run("qwen25_math_7b", "dapo", 0), "/w")
    )
    doc = doc_listing(text, "**DAPO** changes")
    stale = {k: (v, ours.get(k)) for k, v in doc.items() if ours.get(k) != v}
    assert not stale, f"docs/verl.md's DAPO block: (doc, launcher) values differ: {stale}"
    budget = int(ours["algorithm.filter_groups.max_num_gen_batches"]) * int(
        ours["+trainer.acerl.gen_batch_size"]
    )
    assert f"per step ({budget:,} for Qwen2.5-Math-7B" in text


def test_cost_numbers_are_the_estimates(paper_cfg):
    """docs/cluster.md, docs/verl.md and docs/deviations.md quote ``acerl estimate --config config/paper.yaml``: the
    grid's total with the configured attention (sdpa) and with flash attention 2, and the GPU-hours per run of
    each model's GRPO and DAPO family (attention included)."""
    from acerl.verl_backend.estimate import Assumptions, estimate_grid

    cells, evals = estimate_grid(paper_cfg, Assumptions())
    assert paper_cfg.compute.verl_attention == "sdpa"
    total = sum(c.gpu_hours for c in [*cells, *evals])
    flash = sum(c.other_gpu_hours or c.gpu_hours for c in [*cells, *evals])
    hundreds = [f"{round(x, -2):,.0f}" for x in (total, flash)]
    docs = {
        name: (DOC.parent / name).read_text(encoding="utf-8")
        for name in ("cluster.md", "verl.md", "deviations.md")
    }
    for name, text in docs.items():
        assert all(n in text for n in hundreds), (name, hundreds)
    names = {
        "qwen25_math_7b": "Qwen2.5-Math-7B",
        "qwen3_8b_base": "Qwen3-8B-Base",
        "llama31_8b_instruct": "Llama-3.1-8B-Instruct",
    }
    for model, display in names.items():
        per_run = {c.method: c for c in cells if c.model == model}
        grpo, dapo = per_run["grpo"], per_run["dapo"]
        row = (
            f"| {display} | {grpo.gpu_hours / grpo.runs:.0f} / {dapo.gpu_hours / dapo.runs:.0f} | "
            f"{sum(c.runs for c in cells if c.model == model)} | {grpo.wall_hours:.0f}-{dapo.wall_hours:.0f} h | "
            f"{grpo.other_gpu_hours / grpo.runs:.0f} / {dapo.other_gpu_hours / dapo.runs:.0f} |"
        )
        assert row in docs["cluster.md"], row
