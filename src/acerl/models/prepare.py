"""prepare_base: the base model folder of one model (``paths.base_model_dir(root, model)``).

- ``source: tiny`` -> build the character tokenizer and tiny Llama and SFT it on the synthetic ``sft`` split
  (:func:`acerl.models.sft.prepare_tiny_base`);
- ``source: hub`` -> a local folder (``path``) is linked, else the hub id is fetched into the Hugging Face
  cache with ``huggingface_hub.snapshot_download`` and its snapshot linked (paper scale only; never in tests or
  the default run, which use ``source: tiny``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from acerl.config import Config, ConfigError
from acerl.errors import SourceUnavailableError
from acerl.pipeline import paths

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
    """Link ``out`` to the model's local folder (``models.<key>.path``), else to its hub snapshot.

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
        return _link(out, src)
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
    return _link(out, Path(snapshot))


def _link(out: Path, src: Path) -> Path:
    """Make ``out`` a symlink to the model folder ``src`` (atomically; a non-link ``out`` is left alone)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not out.is_symlink():
        raise ConfigError(f"{out} exists and is not a link; remove it to link the model folder {src}")
    tmp = out.with_name(out.name + ".tmp-link")
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(src, target_is_directory=True)
    os.replace(tmp, out)
    logger.info("linked %s -> %s", out, src)
    return out
