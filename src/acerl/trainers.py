"""Training: one :class:`Trainer` signature, two backends, one registry.

- ``local`` (:mod:`acerl.train`): the in-repo single-process trainer, CPU or one GPU.
- ``verl`` (:mod:`acerl.verl_backend`): verl + Ray on GPUs, one node or several under SLURM.

``compute.backend`` names the backend; callers (``acerl train``, which the Snakemake rule and the DVC stage run)
never branch on it: they call :func:`train_from_config`. As with the samplers (:func:`acerl.generate.make_sampler`),
each backend is imported when it is called, so importing this module loads neither torch nor verl.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from acerl.algos.registry import Registry
from acerl.config import Config, ConfigError, Run

if TYPE_CHECKING:
    from acerl.config.settings import OldLogprobs, ReferenceKind

__all__ = ["TRAINERS", "TrainOptions", "Trainer", "train_from_config"]


@dataclass(frozen=True)
class TrainOptions:
    """One invocation's options (``acerl train`` flags); ``None``: the config's value.

    ``progress`` (a progress bar) is read by every backend; the others are the local trainer's per-run overrides
    (``device``, torch ``threads``, ``reference``, ``ref_ema_decay``, ``old_logprobs``: see
    :func:`acerl.train.train_run`), which another backend refuses rather than ignores.
    """

    progress: bool = True
    device: str | None = None
    threads: int | None = None
    reference: ReferenceKind | None = None
    ref_ema_decay: float | None = None
    old_logprobs: OldLogprobs | None = None

    def local_only(self) -> list[str]:
        """The local-trainer options that were given, by name."""
        return [f.name for f in fields(self) if f.name != "progress" and getattr(self, f.name) is not None]


class Trainer(Protocol):
    """Train ``run`` of ``cfg`` in work directory ``root`` (resuming where a previous attempt stopped); returns
    the final policy folder (``acerl.pipeline.paths.policy_dir``)."""

    def __call__(self, cfg: Config, run: Run, root: Path, options: TrainOptions) -> Path: ...


TRAINERS: Registry[Trainer] = Registry("trainer backend")
"""``compute.backend`` -> :class:`Trainer` (its names are the schema's choices; a test checks they agree)."""


@TRAINERS.register("local")
def train_local(cfg: Config, run: Run, root: Path, options: TrainOptions) -> Path:
    """The in-repo trainer (:func:`acerl.train.train_run`, which resolves the device and configures torch) on
    the run's :class:`~acerl.config.settings.RunSettings` (the options' overrides applied), on ``options.device``
    (default ``compute.device``) with ``options.threads`` torch threads (default ``compute.torch_threads``). The
    stage table's check of the reused ``data/`` and base model
    (:func:`acerl.pipeline.reuse.check_reused_inputs`) is handed to it, to run before a new training starts."""
    from acerl.config.settings import resolve
    from acerl.pipeline.reuse import check_reused_inputs
    from acerl.train import train_run

    settings = resolve(
        cfg,
        run,
        reference=options.reference,
        ref_ema_decay=options.ref_ema_decay,
        old_logprobs=options.old_logprobs,
    )
    return train_run(
        settings,
        root,
        device=options.device or cfg.compute.device,
        threads=options.threads if options.threads is not None else cfg.compute.threads(),
        progress=options.progress,
        check_inputs=partial(check_reused_inputs, cfg, root, run),
    )


@TRAINERS.register("verl")
def train_verl(cfg: Config, run: Run, root: Path, options: TrainOptions) -> Path:
    """verl (:func:`acerl.verl_backend.launcher.train_run_verl`); the local trainer's options are refused (verl
    takes its device and threads from ``compute.resources``)."""
    given = options.local_only()
    if given:
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in given)
        raise ConfigError(
            f"{flags}: local-trainer options, not read by compute.backend: verl; drop them "
            "(verl takes its device and threads from compute.resources)"
        )
    from acerl.verl_backend import require_verl

    require_verl()  # the core install has no verl: one line naming the fix, before anything is written
    from acerl.verl_backend.launcher import train_run_verl

    return train_run_verl(cfg, run, root)


def train_from_config(cfg: Config, run: Run, root: Path | str, options: TrainOptions | None = None) -> Path:
    """Train ``run`` with the backend ``compute.backend`` names; an unknown name is a :class:`ConfigError`."""
    try:
        trainer = TRAINERS.get(cfg.compute.backend)
    except ValueError as e:
        raise ConfigError(f"compute.backend: {e}") from None
    return trainer(cfg, run, Path(root), options or TrainOptions())
