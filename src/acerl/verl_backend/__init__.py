"""Paper-scale training with verl 0.9.1 + Ray (see ``docs/verl.md``).

- :mod:`acerl.verl_backend.plugin`: registers ACE in verl without a fork (loaded in every Ray process through
  ``VERL_USE_EXTERNAL_MODULES=acerl.verl_backend.plugin``; importing it imports verl).
- :mod:`acerl.verl_backend.launcher`: a run of the study -> a verl command line, multi-node launch on SLURM,
  checkpoint export to Hugging Face folders.
- :mod:`acerl.verl_backend.checkpoints`: the diagnostic-snapshot checkpoint callback and model-merger calls.

Importing this package does not import verl. verl and Ray are the ``verl`` extra (``pip install -e .[verl]``; with
vLLM on a GPU cluster: the GPU lock, ``requirements/gpu.txt``). The core and the embedded default install without
them, and :func:`require_verl` turns a verl run without them into a one-line error.
"""

import importlib.util
import sys
from collections.abc import Callable
from typing import Any

from acerl.errors import UserError

PLUGIN_MODULE = "acerl.verl_backend.plugin"
GEN_BATCH_KEY = "trainer.acerl.gen_batch_size"
"""The DAPO recipe's generation batch in prompts (its ``data.gen_batch_size``, which verl's V1 trainer resets
to 1 under dynamic sampling): written by the launcher, read by the plugin's dynamic-sampling cap."""

VERL_BUILTIN_ESTIMATORS: frozenset[str] = frozenset({"grpo"})
"""acerl estimators that are verl's own: the launcher renders them as verl's and the plugin leaves them alone;
every other registered estimator runs through the plugin (docs/extending.md)."""


class VerlMissingError(UserError):
    """``compute.backend: verl`` in an environment without verl (the core install, ``pip install -e .``)."""

    kind = "verl not installed"


def require_verl(find_spec: Callable[[str], Any] | None = None) -> None:
    """Raise :class:`VerlMissingError`, naming the fix, unless verl is importable (found without importing it)."""
    find = find_spec or importlib.util.find_spec
    try:
        found = find("verl") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise VerlMissingError(
            f"compute.backend: verl needs verl 0.9.1, which {sys.executable} cannot import: install the verl "
            "layer with `pip install -e .[verl]` (on a GPU cluster the GPU lock: `python scripts/install_lock.py "
            ".venv requirements/gpu.txt`), or `make setup`, or set compute.backend: local"
        )


TYPED_PARAMS_SECTIONS: dict[str, str] = {"ace": "ace"}
"""acerl estimators whose keys have a typed section of their own in verl's ``algorithm`` config (``ace``:
``AceAlgoConfig.ace``); every other one's keys go to ``algorithm.estimator_params``."""


def estimator_params_key(name: str) -> str:
    """Where the keys of the acerl estimator ``name`` sit in verl's config (``algorithm.<section>``): one home
    for the launcher, which writes them, and the plugin, which reads them."""
    return f"algorithm.{TYPED_PARAMS_SECTIONS.get(name, 'estimator_params')}"


__all__ = [
    "GEN_BATCH_KEY",
    "PLUGIN_MODULE",
    "TYPED_PARAMS_SECTIONS",
    "VERL_BUILTIN_ESTIMATORS",
    "VerlMissingError",
    "estimator_params_key",
    "require_verl",
]
