"""Methods of one's own: the modules that register estimators and policy losses, imported before a config's
methods and families are validated (docs/extending.md).

Three sources, each imported once per process:

- the config's ``plugins`` list (module names importable from ``PYTHONPATH``), imported when the config is read;
- installed packages' entry points in the group :data:`ENTRY_POINT_GROUP`, loaded when a config names an
  estimator or loss that is not registered yet;
- the methods shipped with acerl beyond GRPO and ACE (:data:`BUILTIN_PLUGINS`), loaded the same way, so a
  config that names none of them never imports torch to validate.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from importlib.metadata import entry_points

from acerl.errors import ConfigError

__all__ = [
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "import_plugins",
    "load_builtin_plugins",
    "load_registered_plugins",
]

ENTRY_POINT_GROUP = "acerl.methods"
"""The entry-point group of installed method packages: ``[project.entry-points."acerl.methods"]``."""

BUILTIN_PLUGINS: tuple[str, ...] = ("acerl.algos.decomposed", "acerl.algos.covariance")
"""acerl's own methods beyond GRPO and ACE, written as a user writes a plugin: PSR / NSR / W-REINFORCE and
Clip-Cov / KL-Cov (docs/algorithms.md)."""

_loaded = False


def import_plugins(modules: Sequence[str]) -> None:
    """Import each module of ``modules`` (its import registers its methods); a module that cannot be imported
    is a :class:`~acerl.config.ConfigError` naming the ``plugins`` entry."""
    for i, name in enumerate(modules):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(
                f"plugins[{i}]: cannot import {name!r} ({e}); put its folder on PYTHONPATH "
                f"(PYTHONPATH=path/to/dir acerl config) or install its package"
            ) from None


def load_builtin_plugins() -> None:
    """Import acerl's own method modules (:data:`BUILTIN_PLUGINS`)."""
    import_plugins(BUILTIN_PLUGINS)


def load_registered_plugins() -> None:
    """Import acerl's own method modules and every installed ``acerl.methods`` entry point, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    load_builtin_plugins()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()
