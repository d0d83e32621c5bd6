"""Changing one config value at a time: the helpers of the tests that sweep every key of a config (the stage
table's rerun test, the run spec's deciding keys)."""

from __future__ import annotations

from typing import Any

STRINGS = (  # other values tried for a string key (each key's own value + "x" too); invalid ones are skipped
    "relu",
    "token",
    "negative_advantage",
    "k1",
    "signed",
    "cosine",
    "rollout",
    "seq-mean-token-sum",
    "t",
    "ema",
    "bf16",
)


def nest(key: str, value: Any) -> dict[str, Any]:
    """``nest("a.b", 1) == {"a": {"b": 1}}``: an override setting one key path."""
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def leaves(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(key path, value)`` of every leaf under ``data`` (an empty mapping is a leaf), paths below ``prefix``."""
    if isinstance(data, dict) and data:
        return [leaf for k, v in data.items() for leaf in leaves(v, f"{prefix}.{k}" if prefix else str(k))]
    return [(prefix, data)]


def candidates(value: Any) -> list[Any]:
    """Other values of ``value``'s kind to try (none for ``None``, floats' lists and empty containers)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int | float):
        return [value + 1, value / 2 if value else 0.5, value * 2]
    if isinstance(value, str):
        return [*STRINGS, value + "x"]
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return [[*value, value[-1] * 2], value[:-1]]
    return []
