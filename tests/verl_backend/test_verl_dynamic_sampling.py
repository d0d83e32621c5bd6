"""The plugin's dynamic-sampling cap inside verl 0.9.1's real V1 sampling loop.

verl's own ``ReplayBuffer.sample`` (built by the V1 trainer's ``_build_replay_buffer`` from the launcher's
overrides) and the trainer's own ``prepare_step`` / ``_add_prompts_to_generate`` / ``_next_train_batch`` /
``_submit_batch_to_rollout`` (as the plugin wraps them) run against an in-memory TransferQueue and a
rollout engine whose prompts finish after long-tailed delays, each group usable (mixed ``acc``) or filtered
(all-equal ``acc``) as a fixed outcome stream says. The test compares every step with the DAPO recipe's rule
on the same stream: the recipe stops the run iff the step's first ``max_num_gen_batches * gen_batch_size``
prompts hold fewer than ``train_batch_size`` usable groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from support.ci_inputs import import_or_skip

pytestmark = pytest.mark.verl

trainer_sync = import_or_skip("verl.trainer.ppo.v1.trainer_sync")
trainer_base = import_or_skip("verl.trainer.ppo.v1.trainer_base")
replay_buffer = import_or_skip("verl.trainer.ppo.v1.replay_buffer")

from acerl.config import Run, load_config  # noqa: E402
from acerl.verl_backend import plugin  # noqa: E402
from acerl.verl_backend.launcher import verl_overrides  # noqa: E402

GROUP_SIZE = 4
PAPER_CONFIGS = [Path(__file__).resolve().parents[2] / "config" / n for n in ("config.yaml", "paper.yaml")]


class FakeTransferQueue:
    """The ``transfer_queue`` calls the V1 trainer and replay buffer make (``kv_list``, ``kv_batch_put``,
    ``kv_batch_get``, ``kv_clear``), in memory, plus the rollout engine: each ``kv_list`` is one poll and one
    tick of the clock; a prompt finishes ``delay`` ticks after dispatch with ``GROUP_SIZE`` trajectories."""

    def __init__(self, usable: Sequence[bool], delays: Sequence[int]) -> None:
        self.usable, self.delays = list(usable), list(delays)
        self.clock = 0
        self.tags: dict[str, dict[str, dict]] = {"train": {}}
        self.values: dict[str, dict] = {}
        self.due: dict[str, tuple[int, int]] = {}  # uid -> (finish tick, stream position)
        self.position: dict[str, int] = {}  # uid -> stream position
        self.dispatched = 0  # prompts dispatched since the last reset (one step)

    # rollout engine (agent_loop_manager.generate_sequences)
    def generate_sequences(self, batch) -> None:
        for uid, pos in zip(list(batch["uid"]), batch["index"].tolist(), strict=True):
            self.due[uid] = (self.clock + self.delays[pos], pos)
            self.position[uid] = pos
            self.tags["train"][uid]["status"] = "running"
            self.dispatched += 1

    def _tick(self) -> None:
        self.clock += 1
        for uid, (tick, pos) in list(self.due.items()):
            if tick > self.clock:
                continue
            del self.due[uid]
            if uid not in self.tags["train"]:
                continue  # cleared while running
            self.tags["train"][uid]["status"] = "finished"
            accs = [1.0, 0.0, 1.0, 1.0] if self.usable[pos] else [1.0] * GROUP_SIZE
            for j, acc in enumerate(accs):
                key = f"{uid}_{j}_0"
                self.tags["train"][key] = {"status": "finished"}
                self.values[key] = {"reward_extra_info": {"acc": acc}}

    # transfer_queue API
    def kv_list(self):
        self._tick()
        return {p: dict(items) for p, items in self.tags.items()}

    def kv_batch_put(self, keys, partition_id, tags=None, fields=None):
        for key, tag in zip(keys, tags or [{}] * len(keys), strict=True):
            self.tags[partition_id][key] = dict(tag)

    def kv_batch_get(self, keys, partition_id, select_fields):
        assert select_fields == ["extra_fields"]
        return {"extra_fields": [self.values[k] for k in keys]}

    def kv_clear(self, partition_id, keys):
        for key in keys:
            self.tags[partition_id].pop(key, None)
            self.values.pop(key, None)


class PromptStream:
    """The train dataloader: batches of ``data.gen_batch_size`` prompts whose ``index`` is the stream
    position (the outcome stream's index)."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size, self.position = batch_size, 0

    def __iter__(self):
        while True:
            idx = list(range(self.position, self.position + self.batch_size))
            self.position += self.batch_size
            yield {
                "raw_prompt": np.array([f"problem {i}" for i in idx], dtype=object),
                "index": torch.tensor(idx),
            }


def _trainer(config, tq: FakeTransferQueue, monkeypatch):
    """verl's ``PPOTrainerSync`` (its own sampling methods, wrapped by the plugin) over the fake queue."""
    from omegaconf import open_dict

    monkeypatch.setattr(trainer_base, "tq", tq)
    monkeypatch.setattr(replay_buffer, "tq", tq)
    trainer = object.__new__(trainer_sync.PPOTrainerSync)
    with open_dict(config):
        config.data.gen_batch_size = 1  # what V1's _init_dataloader sets under filter_groups
    trainer.config, trainer.global_steps = config, 1
    trainer.trainer_mode = "sync"
    trainer.train_dataloader = PromptStream(1)
    trainer.train_dataloader_it = None
    trainer.agent_loop_manager = SimpleNamespace(generate_sequences=tq.generate_sequences)
    trainer.replay_buffer = trainer._build_replay_buffer()  # verl's ReplayBuffer with the refill_fn
    trainer.replay_buffer.poll_interval = 0.0
    assert type(trainer.replay_buffer) is replay_buffer.ReplayBuffer
    return trainer


def _run_steps(trainer, tq: FakeTransferQueue, steps: int) -> list[tuple[int, int, str | None]]:
    """Per step: (stream position at its start, prompts dispatched, error or None)."""
    out = []
    batch = trainer.config.data.train_batch_size
    for step in range(1, steps + 1):
        trainer.global_steps = step
        start, tq.dispatched = trainer.train_dataloader.position, 0
        trainer.prepare_step()
        try:
            meta, _ = trainer.replay_buffer.sample(global_steps=step, partition_id="train", batch_size=batch)
        except RuntimeError as err:
            out.append((start, tq.dispatched, str(err)))
            tq.tags["train"].clear()
            tq.due.clear()
            continue
        uids = {k.split("_")[0] for k in meta.keys}
        assert len(uids) == batch and all(tq.usable[tq.position[uid]] for uid in uids)
        tq.kv_clear("train", list(tq.tags["train"]))  # the trainer clears the step's data after the update
        tq.due.clear()
        out.append((start, tq.dispatched, None))
    return out


def _recipe_trips(usable: Sequence[bool], start: int, batches: int, gen_batch: int, batch: int) -> bool:
    """The DAPO recipe's rule on the same stream: ``batches`` generation batches of ``gen_batch`` prompts
    from ``start`` hold fewer than ``batch`` usable groups."""
    return sum(usable[start : start + batches * gen_batch]) < batch


@pytest.fixture
def dapo_config(verl_base_config, apply_overrides):
    """verl's config from the launcher's overrides for a paper DAPO run with ``prompts_per_step=batch`` and
    the dynamic-sampling keys given."""

    def make(batch: int, max_batches: int, factor: int):
        cfg = load_config(
            PAPER_CONFIGS,
            [
                f"models.qwen25_math_7b.train.prompts_per_step={batch}",
                f"models.qwen25_math_7b.train.mini_batch_size={batch}",
                f"models.qwen25_math_7b.train.group_size={GROUP_SIZE}",
                f"families.dapo.dynamic_sampling.max_batches={max_batches}",
                f"families.dapo.dynamic_sampling.gen_batch_factor={factor}",
            ],
        )
        return apply_overrides(verl_base_config, verl_overrides(cfg, Run("qwen25_math_7b", "dapo", 0), "/w"))

    return make


def _stream(n: int, usable_rate: float, seed: int) -> tuple[list[bool], list[int]]:
    rng = np.random.default_rng(seed)
    usable = (rng.random(n) < usable_rate).tolist()
    delays = (1 + np.floor(rng.pareto(1.2, n) * 3)).astype(int).clip(max=200).tolist()  # long tail
    return usable, delays


def test_launcher_passes_the_recipes_cap(dapo_config) -> None:
    config = dapo_config(2048, 10, 3)
    cap = plugin.refill_cap(config)
    assert (cap.max_num_gen_batches, cap.gen_batch_size, cap.budget) == (10, 6144, 61440)
    config.trainer.acerl.gen_batch_size = 100
    with pytest.raises(
        ValueError, match=r"^trainer.acerl.gen_batch_size=100 is below data.train_batch_size=2048"
    ):
        plugin.refill_cap(config)
    config.algorithm.filter_groups.max_num_gen_batches = 0
    assert plugin.refill_cap(config) is None  # no cap, as in the recipe


@pytest.mark.parametrize(
    ("max_batches", "factor", "usable_rate", "steps", "trips"),
    [(3, 1, 0.5, 20, "none"), (2, 1, 0.5, 12, "some"), (10, 3, 0.5, 6, "none"), (10, 3, 0.02, 2, "all")],
    ids=["old-paper-cap", "tight", "recipe", "recipe-hard-data"],
)
def test_cap_trips_exactly_where_the_recipe_does(
    dapo_config, monkeypatch, max_batches, factor, usable_rate, steps, trips
):
    """Long-tail completions, batch 64, n = 4 (the review's pattern: 20 steps at filter rate 0.5): a step stops iff the recipe's rule stops it on the same prompt
    stream, never dispatches more than the recipe generates, and the error names the config key. Before the
    fix, the cap counted V1's speculative refills (2 per filtered group) and stopped steps that 3 generation
    batches would have filled (the review's 9 of 20 at filter rate 0.5)."""
    batch = 64
    config = dapo_config(batch, max_batches, factor)
    usable, delays = _stream(batch * steps * max_batches * factor * 2, usable_rate, seed=max_batches)
    tq = FakeTransferQueue(usable, delays)
    trainer = _trainer(config, tq, monkeypatch)
    results = _run_steps(trainer, tq, steps)
    gen = factor * batch
    for start, dispatched, error in results:
        expected = _recipe_trips(usable, start, max_batches, gen, batch)
        assert (error is not None) == expected, (start, dispatched, error)
        assert dispatched <= max_batches * gen
        if error is not None:
            assert "\n" not in error and f"algorithm.filter_groups.max_num_gen_batches={max_batches}" in error
    stopped = sum(error is not None for _, _, error in results)
    # none: 3+ batches of 64 at rate 0.5 hold ~96+ usable groups; some: 2 batches hold ~64, either way;
    # all: ~1.3 usable groups per 64 prompts, 30 x 64 prompts hold ~38 < 64
    assert {"none": stopped == 0, "some": 0 < stopped < steps, "all": stopped == steps}[trips], stopped


@pytest.mark.parametrize("short", [0, 1])
def test_cap_boundary(dapo_config, monkeypatch, short: int) -> None:
    """2 generation batches of 8 prompts, batch 8: exactly 8 usable groups among the first 16 prompts fill the
    step (the last usable one is prompt 16, finishing last); 7 stop it, with every prompt long-tailed."""
    batch = 8
    config = dapo_config(batch, 2, 1)
    usable = [i % 2 == 1 for i in range(16)] + [True] * 64  # usable: prompts 1, 3, ..., 15
    if short:
        usable[15] = False  # 7 usable in the budget; prompt 16 onwards would fill it, but the recipe stops
    delays = [1 + (7 * i) % 11 for i in range(len(usable))]
    delays[15] = 50
    tq = FakeTransferQueue(usable, delays)
    trainer = _trainer(config, tq, monkeypatch)
    [(start, dispatched, error)] = _run_steps(trainer, tq, 1)
    assert start == 0 and dispatched <= 16
    if short:
        assert error is not None and "max_num_gen_batches=2" in error
    else:
        assert error is None
