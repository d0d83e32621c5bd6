"""The local trainer's run orchestration: init, resume, the step loop, checkpoints and signals.

:func:`train_run` takes the run's resolved :class:`acerl.config.settings.RunSettings`
(:func:`acerl.config.settings.resolve`), writes ``run_spec.json``, loads the base model (:func:`init_state`) or
resumes from the newest checkpoint whose spec matches, then calls :func:`acerl.train.algorithm.train_step` until ``total_steps``, logging metrics, saving
diagnostic snapshots and resumable checkpoints; SIGTERM / SIGUSR1 checkpoint at the next step boundary. The
algorithm itself is :mod:`acerl.train.algorithm`. See docs/training.md.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from acerl.config import Run, spec_json
from acerl.config.settings import RunSettings, local_run_spec
from acerl.errors import MissingInputError, fix_command
from acerl.models.loading import load_model_folder
from acerl.optim import build_optimizer
from acerl.pipeline import paths
from acerl.pipeline.io import read_jsonl, save_hf_folder, write_json
from acerl.pipeline.provenance import record_launch, software_stamp
from acerl.pipeline.runtime import configure_torch, job_threads, resolve_device
from acerl.pipeline.seeds import FILL_SEED_STREAM, GLOBAL_SEED_STREAM, derive_seed
from acerl.stage_versions import STAGE_VERSIONS
from acerl.train.algorithm import train_step
from acerl.train.checkpoint import (
    get_rng_states,
    latest_usable,
    load_checkpoint,
    read_trainer_state,
    remove_stale_temps,
    save_checkpoint,
    seed_rng_states,
    set_rng_states,
    supersede_stale_state,
)
from acerl.train.data import PromptStream, TrainingSet
from acerl.train.finished import FINAL_SPEC_FILE, check_final
from acerl.train.lock import run_lock
from acerl.train.metrics import MetricsLog
from acerl.train.rewards import Verifier
from acerl.train.signals import PreemptionFlag, TrainingPreempted
from acerl.train.state import TrainState
from acerl.train.tracker import Tracker, open_tracker

logger = logging.getLogger(__name__)

__all__ = ["init_state", "resume_state", "train_run"]


def _warn_short_mini_batch(settings: RunSettings) -> None:
    h = settings.hyper
    if h.prompts_per_step % h.mini_batch_size != 0:
        logger.warning(
            "models.%s.train.prompts_per_step (%d) is not a multiple of mini_batch_size (%d): "
            "the last mini-batch of each step is smaller",
            settings.run.model,
            h.prompts_per_step,
            h.mini_batch_size,
        )


def _comparable_spec(spec: dict[str, Any]) -> str:
    """What a checkpoint must match to be resumed: the run spec (less the diagnostic steps, which only add
    saved policies) and the trainer's result version (a checkpoint of older trainer code is superseded)."""
    kept = {k: v for k, v in spec.items() if k != "diagnostic_steps"}
    return spec_json({**kept, "code_version": STAGE_VERSIONS["train_policy"]})


def _final_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """What the final policy folder records (:data:`acerl.train.finished.FINAL_SPEC_FILE`): the run spec and the
    trainer's result version."""
    return {**spec, "code_version": STAGE_VERSIONS["train_policy"]}


def _trainer_state(state: TrainState, spec: str) -> dict[str, Any]:
    return {
        "scheduler": state.scheduler.state_dict(),
        "data": state.stream.state_dict(),
        "fill_data": state.fill_stream.state_dict(),
        "rng": get_rng_states(),
        "spec": spec,
        "software": software_stamp(),
    }


def train_run(
    settings: RunSettings,
    root: Path | str,
    *,
    device: str = "cpu",
    threads: int = 1,
    progress: bool = True,
    verifier: Verifier | None = None,
    check_inputs: Callable[[], None] | None = None,
) -> Path:
    """Train ``settings.run`` with the local backend; returns its final policy folder (``paths.policy_dir``).

    Resumes from the newest checkpoint under ``paths.checkpoints_dir`` if there is one; a run whose final
    policy exists is not touched when the run spec recorded with it equals the requested one, and is a
    :class:`acerl.train.finished.StaleFinalError` (exit 4) naming what differs otherwise. SIGTERM / SIGUSR1
    checkpoint at the next step boundary and raise :class:`acerl.train.signals.TrainingPreempted` (exit code 75;
    Ctrl-C does the same with exit code 130). The run's lock (:func:`acerl.train.lock.run_lock`) is held
    throughout: a second trainer of the same run gets a :class:`acerl.train.lock.RunLockedError`.

    Args:
        settings: the resolved run (:func:`acerl.config.settings.resolve`, which applies the local trainer's
            ``reference``, ``ref_ema_decay`` and ``old_logprobs`` overrides).
        root: work directory (``data/``, ``models/``, ``runs/``).
        device: ``cpu``, ``cuda`` or ``auto``; threads: ``torch.set_num_threads`` for a run on a GPU (on CPU
            one: :func:`acerl.pipeline.runtime.job_threads`; restored after; denormals are flushed to zero from
            then on, :func:`acerl.pipeline.runtime.configure_torch`).
        progress: show a tqdm bar.
        verifier: grader for rewards (default: an :class:`acerl.grading.Grader` from ``settings.grading``).
        check_inputs: called under the lock before a new training starts (not when the final policy is
            returned): ``acerl train`` passes the stage table's check that ``data/`` and the base model were made
            for the config (:func:`acerl.pipeline.reuse.check_reused_inputs`).
    """
    dev = torch.device(resolve_device(device))  # a CUDA device without a GPU fails before anything is written
    root, run = Path(root), settings.run
    final = paths.policy_dir(root, run)
    spec = local_run_spec(settings)
    with run_lock(root, run):
        if final.is_dir() and (final / "config.json").is_file():
            check_final(final, paths.run_spec_file(root, run), _final_spec(spec), run.id)
            logger.info("%s: final policy %s exists; nothing to do", run.id, final)
            return final
        if check_inputs is not None:
            check_inputs()
        return _train_locked(root, settings, spec, dev, threads, progress, verifier)


def _train_locked(
    root: Path,
    settings: RunSettings,
    spec: dict[str, Any],
    dev: torch.device,
    threads: int,
    progress: bool,
    verifier: Verifier | None,
) -> Path:
    """:func:`train_run` under the run's lock, once it is known that there is no finished run to return."""
    run = settings.run
    final = paths.policy_dir(root, run)
    _warn_short_mini_batch(settings)
    spec_text = _comparable_spec(spec)
    run_dir, ckpt_dir = paths.run_dir(root, run), paths.checkpoints_dir(root, run)
    for folder in (run_dir, ckpt_dir, paths.diag_dir(root, run)):
        remove_stale_temps(folder)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(paths.run_spec_file(root, run), spec, indent=2, sort_keys=True)

    ckpt = latest_usable(ckpt_dir)
    saved_state = read_trainer_state(ckpt) if ckpt is not None else {}
    if ckpt is not None and saved_state.get("spec") != spec_text:
        supersede_stale_state(root, run, ckpt)
        ckpt = None
    record_launch(
        paths.software_file(root, run),
        resuming=ckpt is not None,
        what=f"{run.id}: checkpoint {ckpt}",
        previous=saved_state.get("software", {}),
    )

    previous_threads = torch.get_num_threads()
    configure_torch(job_threads(threads, dev.type))
    try:
        if ckpt is None:
            seed_rng_states(derive_seed(GLOBAL_SEED_STREAM, run.seed))
        state, data = init_state(root, run, settings, dev)
        if ckpt is not None:
            resume_state(state, ckpt, settings, dev)
        elif 0 in settings.diagnostic_steps:
            save_hf_folder(paths.diag_step_dir(root, run, 0), state.model, state.tokenizer)
        with _grader(settings, verifier) as grader:
            _train_loop(
                state, settings, data, run, root, spec_text, grader, progress, _tracker(settings, root)
            )
        save_hf_folder(
            final,
            state.model,
            state.tokenizer,
            {FINAL_SPEC_FILE: json.dumps(_final_spec(spec), indent=2, sort_keys=True)},
        )
        logger.info("%s: final policy written to %s", run.id, final)
        return final
    finally:
        torch.set_num_threads(previous_threads)


def init_state(
    root: Path, run: Run, settings: RunSettings, device: torch.device
) -> tuple[TrainState, TrainingSet]:
    """The step-0 state of ``run``: policy and reference loaded from the base model folder, a fresh AdamW,
    the prompt streams seeded from the run seed, the sampling generator (which every batch reseeds from the run
    seed, step and attempt, :func:`acerl.train.rollouts.collect_rollouts`) and the training set."""
    base = paths.base_model_dir(root, run.model)
    if not (base / "config.json").is_file():
        raise MissingInputError(
            f"base model folder {base} is missing (run {fix_command('prepare-base', '--model', run.model)} first)"
        )
    model, tokenizer = load_model_folder(base, device=device, dtype=torch.float32)
    # The reference keeps requires_grad=True although it is only ever run under no_grad: ATen folds 3-D matmuls
    # differently when a weight requires grad, so this keeps its numerics identical to the policy's (at step 1
    # log pi_ref == log pi_old bit for bit and every c_i is exactly 0). No gradient is ever computed for it.
    ref_model = copy.deepcopy(model).eval() if settings.needs_reference else None
    if settings.gradient_checkpointing:  # the policy only: the reference never runs a backward pass
        # a method of both model kinds (the lean Llama's and transformers'), not of nn.Module
        policy: Any = model
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    train_file = paths.data_file(root, "train")
    rows = read_jsonl(train_file, required=("problem", "answer"))
    data = TrainingSet(rows, tokenizer, settings.template, settings.hyper.max_prompt_length, train_file)
    optimizer, scheduler = build_optimizer(model.parameters(), settings.hyper)
    state = TrainState(
        model=model,
        ref_model=ref_model,
        tokenizer=tokenizer,
        optimizer=optimizer,
        scheduler=scheduler,
        generator=torch.Generator(device=device),
        stream=PromptStream(len(data), seed=run.seed),
        fill_stream=PromptStream(len(data), seed=derive_seed(FILL_SEED_STREAM, run.seed)),
    )
    return state, data


def resume_state(state: TrainState, ckpt: Path, settings: RunSettings, dev: torch.device) -> None:
    """Restore ``state`` from checkpoint ``ckpt``: weights (and an EMA reference), AdamW, LR schedule, prompt
    streams, random state and step."""
    ref = state.ref_model if settings.reference == "ema" else None
    saved = load_checkpoint(ckpt, state.model, state.optimizer, ref_model=ref, device=dev)
    state.scheduler.load_state_dict(saved["scheduler"])
    state.stream.load_state_dict(saved["data"])
    state.fill_stream.load_state_dict(saved["fill_data"])
    set_rng_states(saved["rng"])
    state.step = int(saved["step"])
    logger.info("resuming from %s (step %d)", ckpt, state.step)


def _grader(settings: RunSettings, verifier: Verifier | None) -> AbstractContextManager[Verifier]:
    """The run's grader: ``verifier`` when given, else a :class:`acerl.grading.Grader` from ``settings.grading``."""
    if verifier is not None:
        return nullcontext(verifier)
    from acerl.grading import Grader

    return Grader(timeout_s=settings.grading.timeout_s, workers=settings.grading.workers)


def _tracker(settings: RunSettings, root: Path) -> Tracker | None:
    """``compute.tracker`` of the run (:mod:`acerl.train.tracker`), writing under ``paths.tracker_dir``."""
    run = settings.run
    return open_tracker(settings.tracker, paths.tracker_dir(root, run), project=settings.project, name=run.id)


def step_line(run_id: str, step: int, total: int, metrics: Mapping[str, float]) -> str:
    """The job log's line for one training step: reward, batch accuracy, entropy, KL and step time (a metric
    the step did not log shows as ``-``)."""

    def fmt(key: str, spec: str = ".3f") -> str:
        value = metrics.get(key)
        return "-" if value is None or not math.isfinite(value) else format(value, spec)

    return (
        f"{run_id}: step {step}/{total} reward {fmt('train/reward_mean')} acc {fmt('train/pass_rate')} "
        f"entropy {fmt('actor/entropy')} kl {fmt('actor/kl_loss', '.4f')} ({fmt('timing/step', '.1f')} s)"
    )


def _train_loop(
    state: TrainState,
    settings: RunSettings,
    data: TrainingSet,
    run: Run,
    root: Path,
    spec_text: str,
    grader: Verifier,
    progress: bool,
    tracker: Tracker | None = None,
) -> None:
    h = settings.hyper
    ckpt_dir = paths.checkpoints_dir(root, run)
    live_dir = paths.live_dir(root, run)

    def checkpoint() -> None:
        ref = state.ref_model if settings.reference == "ema" else None
        save_checkpoint(
            ckpt_dir,
            state.step,
            state.model,
            state.optimizer,
            _trainer_state(state, spec_text),
            h.keep_checkpoints,
            ref,
        )

    with (
        PreemptionFlag() as flag,
        MetricsLog(paths.train_metrics_file(root, run), state.step, live_dir, tracker) as log,
    ):
        bar = tqdm(total=h.total_steps, initial=state.step, desc=run.id, unit="step", disable=not progress)
        try:
            while state.step < h.total_steps:
                metrics = train_step(state, settings, data, grader)
                log.log(state.step, metrics)
                if state.step in settings.diagnostic_steps:
                    save_hf_folder(paths.diag_step_dir(root, run, state.step), state.model, state.tokenizer)
                # read once: a signal landing between the checkpoint and the stop must not stop an unsaved step
                stop = flag.requested
                if state.step % h.save_every == 0 or state.step == h.total_steps or stop:
                    checkpoint()
                bar.update(1)
                bar.set_postfix(
                    reward=f"{metrics['train/reward_mean']:.3f}", acc=f"{metrics['train/pass_rate']:.3f}"
                )
                if not progress:  # job logs (the rules run --no-progress): one line per step for `tail -f`
                    logger.info("%s", step_line(run.id, state.step, h.total_steps, metrics))
                if stop and state.step < h.total_steps:
                    raise TrainingPreempted(state.step, flag.signum or 0)
        finally:
            bar.close()
