"""Loading a config: read YAML files, merge them and ``key=value`` overrides, validate the result into a
:class:`acerl.config.Config` with errors that name the file (or the override) and every bad key path.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from acerl.config.root import Config
from acerl.config.schema import ESTIMATORS, POLICY_LOSSES
from acerl.errors import ConfigError


def deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base`` (mappings merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class DuplicateKeyError(yaml.YAMLError):
    """A key written twice in one YAML mapping (``line``: 1-based, of the second one)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping: PyYAML keeps the last one silently,
    so a second ``alpha:`` further down a file would quietly replace the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in first_line:
                raise DuplicateKeyError(
                    f"key {key!r} is given twice in one mapping (first on line {first_line[key]}): keep one",
                    line,
                )
            if isinstance(key, (str, int, float, bool)):
                first_line[key] = line
        return super().construct_mapping(node, deep=deep)


def _yaml_position(error: yaml.YAMLError) -> str:
    """``:line:column`` of a YAML error (1-based), or ``""``."""
    mark = getattr(error, "problem_mark", None)
    return "" if mark is None else f":{mark.line + 1}:{mark.column + 1}"


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error as one line: what went wrong, without PyYAML's multi-line excerpt."""
    problem = getattr(error, "problem", None)
    context = getattr(error, "context", None)
    text = ", ".join(str(p) for p in (context, problem) if p) or str(error)
    return " ".join(text.split())


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(
            f"{path} is a folder, not a config file: give a YAML file, e.g. config/test.yaml"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} cannot be read: {e}") from None
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader) or {}
    except DuplicateKeyError as e:
        raise ConfigError(f"{path}:{e.line}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}{_yaml_position(e)}: not valid YAML: {_yaml_problem(e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


def parse_override(item: str) -> dict[str, Any]:
    """``'a.b.c=value'`` -> ``{'a': {'b': {'c': value}}}`` (value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.path=value")
    key, raw = item.split("=", 1)
    value: Any = yaml.safe_load(raw) if raw != "" else ""
    for part in reversed(key.strip().split(".")):
        if not part:
            raise ConfigError(f"override {item!r} has an empty key part")
        value = {part: value}
    return value


def merged_dict(paths: Iterable[str | Path], overrides: Iterable[str] = ()) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for p in paths:
        data = deep_merge(data, read_yaml(p))
    for item in overrides:
        data = deep_merge(data, parse_override(item))
    return data


def validate(data: Mapping[str, Any], source: str = "<config>") -> Config:
    """Validate a config mapping; errors name ``source`` and every bad key path."""
    try:
        return Config.model_validate(dict(data))
    except ValidationError as e:
        lines = []
        for err in e.errors():
            parts = [str(x) for x in err["loc"]]
            loc = ".".join(parts) or "<root>"
            msg = err["msg"].removeprefix("Value error, ")
            variant = _variant_at(data, parts) if err["type"] == "extra_forbidden" else None
            if variant is not None:
                kind, cls = variant
                valid = ", ".join(cls.model_fields)
                hint = _did_you_mean(parts[-1], list(cls.model_fields))
                msg = f"not a key of the {cls.model_fields['name'].default!r} {kind} ({hint or 'misspelt? '}valid: {valid})"
            elif err["type"] == "extra_forbidden":
                msg = f"unknown key ({_did_you_mean(parts[-1], _keys_at(parts[:-1]))}see docs/config.md)"
            lines.append(f"{loc}: {msg}" if err["loc"] else msg)
        if len(lines) == 1:
            raise ConfigError(f"{source}: invalid config: {lines[0]}") from None
        raise ConfigError(f"{source}: invalid config\n" + "\n".join(f"  {line}" for line in lines)) from None


def _did_you_mean(key: str, valid: Iterable[str]) -> str:
    """``"did you mean 'x'? "`` for the valid key closest to a misspelt ``key``, or ``"misspelt? "``."""
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else "misspelt? "


def _keys_at(parts: Sequence[str]) -> list[str]:
    """The keys the config mapping at key path ``parts`` takes (its schema class's fields; ``[]`` if unknown).
    A ``dict[str, X]`` level (``models.<name>``) consumes the name."""
    annotation: Any = Config
    for part in [*parts, None]:
        annotation = _unwrap(annotation)
        if get_origin(annotation) in (dict, Mapping):
            if part is None:
                return []
            annotation = get_args(annotation)[1]
            continue
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        if part is None:
            return list(annotation.model_fields)
        field = annotation.model_fields.get(part)
        if field is None:
            return []
        annotation = field.annotation
    return []


def _unwrap(annotation: Any) -> Any:
    """``X`` from ``Annotated[X, ...]`` and ``X | None`` (a union of several types is left as it is)."""
    while True:
        if get_origin(annotation) is Annotated:
            annotation = get_args(annotation)[0]
            continue
        args = [a for a in get_args(annotation) if a is not type(None)]
        if get_origin(annotation) in (Union, UnionType) and len(args) == 1:
            annotation = args[0]
            continue
        return annotation


_VARIANT_KEYS: dict[str, tuple[str, dict[str, Any], str]] = {
    "estimator": ("estimator", ESTIMATORS, "grpo"),
    "policy_loss": ("policy loss", POLICY_LOSSES, "vanilla"),
}
"""Keys whose value is a registered variant picked by ``name``: (kind, registry, default name)."""


def _variant_at(data: Mapping[str, Any], parts: list[str]) -> tuple[str, type[BaseModel]] | None:
    """The registered variant whose key an error at ``parts`` is (``methods.x.estimator.alpah`` -> the class
    of ``methods.x.estimator``'s ``name``), with its kind; ``None`` elsewhere."""
    if len(parts) < 2 or parts[-2] not in _VARIANT_KEYS:
        return None
    node: Any = data
    for part in parts[:-1]:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    kind, table, default = _VARIANT_KEYS[parts[-2]]
    name = node.get("name", default) if isinstance(node, Mapping) else node
    cls = table.get(str(name))
    return None if cls is None else (kind, cls)


def load_config(paths: str | Path | Iterable[str | Path], overrides: Iterable[str] = ()) -> Config:
    """Read, merge (later files and ``key=value`` overrides win) and validate config files."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise ConfigError("no config file given")
    source = " + ".join(str(p) for p in paths)
    overrides = list(overrides)
    try:
        return validate(merged_dict(paths, overrides), source=source)
    except ConfigError:
        if not overrides:
            raise
        validate(merged_dict(paths), source=source)  # the files alone are invalid: the error names them
        # the files are valid, so an override broke them: name the overrides, not the files
        return validate(merged_dict(paths, overrides), source=" ".join(f"--set {o}" for o in overrides))
