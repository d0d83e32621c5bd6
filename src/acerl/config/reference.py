"""The key reference (docs/config.md): every key of the schema with its type, default and description, one
table per section in the order of the tree."""

from __future__ import annotations

import functools
import operator
import re
import types
import typing
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel

from acerl.config.plugins import load_builtin_plugins
from acerl.config.root import Config
from acerl.config.schema import registered_variants


def reference_markdown() -> str:
    """docs/config.md: every key with its type, default and description, generated from the schema."""
    lines = [
        "# Config reference",
        "",
        "Generated from `acerl.config` by `acerl config reference > docs/config.md` (a test checks it is current).",
        "Config files merge in order (later files and `--set key=value` win; mappings merge, lists replace).",
        "Unknown keys are errors. Shipped configs: `config/config.yaml` (embedded default), `config/test.yaml`",
        "(CI scale, merged over the default), `config/paper.yaml` (the paper's grid, merged over the default),",
        "`config/power.yaml` (the power study: main grid, primary endpoint, sequential; docs/reports.md).",
        "",
    ]
    load_builtin_plugins()  # acerl's own methods' keys are listed; plugins of one's own are not
    seen: set[type] = set()

    def table(model: type[BaseModel], prefix: str) -> None:
        if model in seen:
            return
        seen.add(model)
        lines.append(f"## `{prefix}` ({model.__name__})")
        lines.append("")
        if model.__doc__:
            lines.append(" ".join(model.__doc__.split()))
            lines.append("")
        lines.append("| key | type | default | description |")
        lines.append("|---|---|---|---|")
        nested: list[tuple[type[BaseModel], str]] = []
        for name, field in model.model_fields.items():
            ann = field.annotation
            tname = _type_name(ann)
            if field.is_required():
                default = "required"
            elif field.default_factory is not None:
                default = (
                    "(see below)" if _submodels(ann) else repr(field.get_default(call_default_factory=True))
                )
            else:
                default = repr(field.default)
            desc = (field.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | `{tname}` | `{default}` | {desc} |".replace("``", "` `"))
            key = f"{prefix}.{name}" + (".<name>" if _is_mapping(ann) else "")
            nested += [(sub, key) for sub in _submodels(ann)]
        lines.append("")
        for sub, key in nested:
            table(sub, key)

    table(Config, "<root>")
    return "\n".join(lines).rstrip() + "\n"


_MODULE_PATH = re.compile(r"\bacerl\.config\.(?:\w+\.)*")
"""The module path of a config class in a type's text (``acerl.config.schema.ModelConfig`` -> ``ModelConfig``)."""


def _type_name(ann: Any) -> str:
    if getattr(ann, "__origin__", None) is Literal:
        return " \\| ".join(str(a) for a in ann.__args__)
    variants = _submodels(ann)
    if isinstance(ann, type) and registered_variants(ann) != [ann]:
        return " \\| ".join(v.__name__ for v in variants)  # an open registry of config models
    if getattr(ann, "__origin__", None) is typing.Union and len(variants) == len(ann.__args__):
        return " \\| ".join(v.__name__ for v in variants)  # a tagged union of config models
    ann = _without_metadata(ann)
    name = getattr(ann, "__name__", None) if not getattr(ann, "__args__", None) else None
    text = name or str(ann)
    return _MODULE_PATH.sub("", text.replace("typing.", "")).replace("|", "\\|")


def _without_metadata(ann: Any) -> Any:
    """``ann`` without its ``Annotated`` checks (``Optional[list[Annotated[int, Ge]]]`` -> ``Optional[list[int]]``):
    the checks' text holds memory addresses, and the description states them."""
    if get_origin(ann) is Annotated:
        return _without_metadata(get_args(ann)[0])
    args, origin = get_args(ann), get_origin(ann)
    if not args or origin is Literal:
        return ann
    plain = tuple(_without_metadata(a) for a in args)
    if plain == args:
        return ann
    if origin is typing.Union or origin is types.UnionType:
        return functools.reduce(operator.or_, plain)
    return origin[plain]


def _is_mapping(ann: Any) -> bool:
    return getattr(ann, "__origin__", None) is dict


def _shipped(model: type[BaseModel]) -> bool:
    """A config model of acerl's own (a plugin's parameters, registered in this process, are not listed)."""
    return model.__module__.split(".")[0] == "acerl"


def _submodels(ann: Any) -> list[type[BaseModel]]:
    """The config model types inside an annotation (``X``, ``X | None``, ``dict[str, X]``, a union of variants)."""
    out: list[type[BaseModel]] = []
    for c in [ann, *getattr(ann, "__args__", ())]:
        for inner in (c, *getattr(c, "__args__", ())):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                out += [v for v in registered_variants(inner) if v not in out and _shipped(v)]
    return out
