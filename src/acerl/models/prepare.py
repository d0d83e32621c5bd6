"""prepare_base: the base model folder of one model (``paths.base_model_dir(root, model)``).

- ``source: tiny`` -> build the character tokenizer and tiny Llama and SFT it on the synthetic ``sft`` split
  (:func:`acerl.models.sft.prepare_tiny_base`);
- ``source: hub`` -> a local folder (``path``), else the hub id fetched into the Hugging Face cache with
  ``huggingface_hub.snapshot_download`` (paper scale only; never in tests or the default run, which use
  ``source: tiny``). Its files are hard-linked into the project's folder (copied across filesystems), never
  linked as a folder: a Hugging Face cache on one node's local disk is not on the training nodes
  (docs/cluster.md, "The base model"). :func:`check_base_folder` names a folder made by older code as a link
  that this node cannot follow.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from acerl.config import Config, ConfigError
from acerl.errors import MissingInputError, SourceUnavailableError, fix_command
from acerl.pipeline import paths
from acerl.pipeline.io import link_folder

logger = logging.getLogger(__name__)


def prepare_base(cfg: Config, model: str, root: Path | str, *, progress: bool = True) -> Path:
    """Make ``paths.base_model_dir(root, model)`` a loadable HF folder; returns it."""
    mc = cfg.models[model]
    out = paths.base_model_dir(root, model)
    if mc.source == "tiny":
        from acerl.models.sft import prepare_tiny_base
        from acerl.pipeline.runtime import job_threads, resolve_device

        sft = (
            mc.sft
            if "template" in mc.sft.model_fields_set
            else mc.sft.model_copy(update={"template": mc.template})
        )
        device = resolve_device(cfg.compute.device)
        evals = {
            b: paths.data_file(root, b)
            for b in cfg.evaluation.benchmarks
            if paths.data_file(root, b).exists()
        }
        return prepare_tiny_base(
            out,
            paths.data_file(root, "sft"),
            mc.tiny,
            sft,
            seed=cfg.data.synthetic.seed if mc.sft.seed is None else mc.sft.seed,
            threads=job_threads(cfg.compute.threads(), device),
            eval_data=evals,
            progress=progress,
            device=device,
        )
    return _fetch_hub_model(mc.hub_id, mc.path, out, key=model)


HUB_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.txt")
"""Files fetched from the hub: config, tokenizer and safetensors weights (no pickled ``*.bin``)."""


def _fetch_hub_model(hub_id: str | None, local: str | None, out: Path, key: str = "<model>") -> Path:
    """Fill ``out`` with the model's local folder (``models.<key>.path``), else with its hub snapshot.

    The hub snapshot lives in the Hugging Face cache (``HF_HOME`` / ``HF_HUB_CACHE``), so a model already
    cached is used offline (``HF_HUB_OFFLINE=1``) and shared with other projects. A hub that cannot be reached
    with nothing cached raises :class:`~acerl.errors.SourceUnavailableError` naming ``models.<key>.path``.
    """
    if local is not None:
        src = Path(local).resolve()
        if not (src / "config.json").is_file():
            raise ConfigError(
                f"models.{key}.path: {src} is not a Hugging Face model folder (no config.json); "
                "point it at the folder holding config.json and the weights"
            )
        return _materialize(out, src)
    assert hub_id is not None, "a hub model without a path has a hub_id (ModelConfig checks it)"
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    logger.info("fetching %s from the hub (or the local Hugging Face cache)", hub_id)
    try:
        snapshot = snapshot_download(repo_id=hub_id, allow_patterns=list(HUB_PATTERNS))
    except (LocalEntryNotFoundError, HfHubHTTPError) as err:
        raise SourceUnavailableError(
            f"models.{key}: hub model {hub_id!r} is neither reachable nor in the Hugging Face cache "
            f"({type(err).__name__}); set models.{key}.path to a local model folder "
            f"(--set models.{key}.path=DIR or a config file), or download it once with network access"
        ) from err
    return _materialize(out, Path(snapshot))


def _materialize(out: Path, src: Path) -> Path:
    """Make ``out`` a folder of the model folder ``src``'s files: hard links into it (a copy across filesystems),
    atomically; a link that older code left at ``out`` is replaced."""
    link_folder(src, out)
    logger.info("prepared %s from %s (hard links, or a copy across filesystems)", out, src)
    return out


def check_base_folder(root: Path | str, model: str) -> Path:
    """``paths.base_model_dir(root, model)`` if this node can read it, else :class:`MissingInputError` naming the
    link and the fix (older code linked the folder into the Hugging Face cache of the node that prepared it)."""
    out = paths.base_model_dir(root, model)
    if (out / "config.json").is_file():
        return out
    rebuild = fix_command("prepare-base", "--model", model)
    if out.is_symlink():
        raise MissingInputError(
            f"{out} links to {os.readlink(out)}, which this node cannot read (a Hugging Face cache on another "
            f"node's local disk?): rerun {rebuild} to put the model's files into the project"
        )
    raise MissingInputError(f"{out}/config.json is missing: run {rebuild} first")
