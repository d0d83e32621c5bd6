"""prepare_data: write every split the study reads (``paths.data_file(root, split)`` for ``cfg.data_splits``).

- ``data.kind: synthetic`` -> :func:`acerl.data.synthetic.write_splits` with ``data.synthetic.params``;
- ``data.kind: real`` -> :func:`acerl.data.real.prepare_real_data` (DAPO-Math-17K, MATH-500, AIME 2025).
"""

from __future__ import annotations

from pathlib import Path

from acerl.config import Config, ConfigError
from acerl.pipeline import paths


def prepare_data(cfg: Config, root: Path | str) -> dict[str, Path]:
    """Write the data splits; returns ``{split: path}``. Every split in ``cfg.data_splits`` must be written."""
    if cfg.data.kind == "synthetic":
        from acerl.data.synthetic import write_splits

        synthetic = cfg.data.synthetic
        out = write_splits(paths.data_file(root, "x").parent, seed=synthetic.seed, **dict(synthetic.params))
    else:
        from acerl.data.real import prepare_real_data

        out = prepare_real_data(cfg, root)
    missing = [s for s in cfg.data_splits if s not in out]
    if missing:
        raise ConfigError(f"data preparation wrote no {missing}; check the split sizes in the data section")
    return out
