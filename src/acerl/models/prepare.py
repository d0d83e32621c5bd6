"""prepare_base: the base model folder of one model (``paths.base_model_dir(root, model)``).

- ``source: tiny`` -> build the character tokenizer and tiny Llama and SFT it on the synthetic ``sft`` split
  (:func:`acerl.models.sft.prepare_tiny_base`);
- ``source: hub`` -> a local folder (``path``) is linked, else the hub id is downloaded with
  ``huggingface_hub.snapshot_download`` (paper scale only; never in tests or the default run).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from acerl import paths
from acerl.config import Config, ConfigError

logger = logging.getLogger(__name__)


def prepare_base(cfg: Config, model: str, root: Path | str, *, progress: bool = True) -> Path:
    """Make ``paths.base_model_dir(root, model)`` a loadable HF folder; returns it."""
    mc = cfg.models[model]
    out = paths.base_model_dir(root, model)
    if mc.source == "tiny":
        from acerl.generate import resolve_device
        from acerl.models.sft import SFTConfig, prepare_tiny_base
        from acerl.models.tiny import TinyModelConfig

        try:
            model_cfg = TinyModelConfig(**mc.tiny)
            sft_cfg = SFTConfig(**{"template": mc.template, **mc.sft})
        except TypeError as e:
            raise ConfigError(f"models.{model}.tiny / models.{model}.sft: {e}") from None
        evals = {
            b: paths.data_file(root, b)
            for b in cfg.evaluation.benchmarks
            if paths.data_file(root, b).exists()
        }
        return prepare_tiny_base(
            out,
            paths.data_file(root, "sft"),
            model_cfg,
            sft_cfg,
            seed=cfg.data.synthetic.seed,
            threads=cfg.compute.threads(),
            eval_data=evals,
            progress=progress,
            device=resolve_device(cfg.compute.device),
        )
    return _fetch_hub_model(mc.hub_id, mc.path, out)


def _fetch_hub_model(hub_id: str | None, local: str | None, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    if local is not None:
        src = Path(local).resolve()
        if not (src / "config.json").is_file():
            raise ConfigError(f"models.*.path: {src} is not a Hugging Face model folder (no config.json)")
        if out.exists() and not out.is_symlink():
            raise ConfigError(f"{out} exists and is not a link; remove it to link the local model {src}")
        tmp = out.with_name(out.name + ".tmp-link")
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(src, target_is_directory=True)
        os.replace(tmp, out)
        logger.info("linked %s -> %s", out, src)
        return out
    from huggingface_hub import snapshot_download

    logger.info("downloading %s from the hub into %s", hub_id, out)
    snapshot_download(
        repo_id=hub_id, local_dir=out, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt"]
    )
    return out
