"""Every random stream's seed: :func:`derive_seed` and the stream numbers that keep the streams apart.

A seed is :func:`derive_seed` of integer parts whose first part names the stream, so evaluation, diagnostics and
training never draw the same uniforms from the same user seed (docs/evaluation.md, "Seeds").
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = [
    "DIAG_SEED_STREAM",
    "EVAL_SEED_STREAM",
    "FILL_SEED_STREAM",
    "GLOBAL_SEED_STREAM",
    "TRAIN_SEED_STREAM",
    "derive_seed",
    "name_part",
]

EVAL_SEED_STREAM = 0  # evaluation shards: (evaluation.seed, benchmark, run seed, shard index)
DIAG_SEED_STREAM = 1  # diagnostics sampling: (evaluation.seed, run seed)
TRAIN_SEED_STREAM = 2  # the rollout generator of (run seed, step, batch attempt)
FILL_SEED_STREAM = 3  # the order of the prompts dynamic sampling draws after a step's first batch
GLOBAL_SEED_STREAM = (
    4  # python's, numpy's and torch's global states at a training run's fresh start: (run seed)
)


def derive_seed(*parts: int) -> int:
    """A 32-bit seed that mixes integer ``parts`` (e.g. ``(evaluation.seed, run.seed, shard_index)``).

    Uses numpy's ``SeedSequence`` hash: the same parts always give the same seed (across processes and
    machines), and nearby parts (shard 3 vs 4, run seed 0 vs 1) give unrelated seeds. Negative parts are
    allowed (mapped to their 64-bit two's complement).

    The hash reads the parts as one string of 32-bit words, so trailing zero parts do not count
    (``derive_seed(s, 0) == derive_seed(s)``) and a part of 2**32 or more is two words
    (``derive_seed(5, 2**32) == derive_seed(5, 0, 1)``). Each stream mixes a fixed number of parts, small
    integers and :func:`name_part`'s 64-bit names, so its seeds differ whenever their parts do (but for a name
    whose part falls below 2**32, a 1 in 2**32 chance); keep it so when adding a stream (changing the hash would
    change every result).
    """
    if not parts:
        raise ValueError("derive_seed needs at least one integer part")
    entropy = [int(p) & 0xFFFFFFFFFFFFFFFF for p in parts]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint32)[0])


def name_part(name: str) -> int:
    """A 64-bit integer that stands for ``name`` as a :func:`derive_seed` part (e.g. a benchmark's name): the
    first 8 bytes of its SHA-256, the same on every machine and process (unlike ``hash``)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")
