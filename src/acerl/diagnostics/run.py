"""The diagnose step of one training run: OEF, overconfidence magnitude and entropy per checkpoint (Sec. 5.2-5.3).

For every diagnostic checkpoint ``paths.diag_step_dir(root, run, step)``, ``step`` in
``cfg.diagnostic_steps(run.model)`` (step 0 is the base model), :func:`diagnose_checkpoint`:

1. samples ``K = study.diagnostics.rollouts_per_prompt`` rollouts for each of the first
   ``study.diagnostics.num_prompts`` held-out prompts (``paths.data_file(root, "heldout")``) at the diagnostics
   temperature, top-p 1, seed :func:`~acerl.pipeline.seeds.derive_seed` ``(1, evaluation.seed, run.seed)``, the
   same at every checkpoint (common random numbers: checkpoints with equal weights get equal rollouts, so the
   curves over steps carry less sampling noise);
2. grades them with the pipeline's grader (one :class:`acerl.grading.Grader` for the whole run);
3. scores the sampled token sequences (EOS included) with teacher forcing under the checkpoint policy and under
   the reference (the base model, ``paths.base_model_dir``), both with ``Sampler.score`` at the diagnostics
   temperature, and computes ``c_i`` with :func:`acerl.algos.advantages.confidence_scores`: Def. 1's
   ``c_i = sum_t [log pi_theta(y_t) - log pi_ref(y_t)]``, or with ``study.diagnostics.length_normalize`` the
   ``c_i / T_i`` ACE trains with (the OEF is the same either way; the magnitude's scale is not);
4. ``OEF``, magnitude (:func:`~acerl.diagnostics.metrics.overconfidence_stats`) over the incorrect rollouts and
   ``H(t)``, the full-vocabulary entropy of the policy averaged over every rollout token
   (:func:`~acerl.diagnostics.metrics.token_weighted_mean` of the sampler's ``mean_token_entropy``).

Only one model is in memory at a time (policy, then reference), so the step also fits a GPU serving vLLM.
Finished checkpoints are kept in a hidden partial file beside the output; a rerun after a kill continues with
the next checkpoint. The result (:func:`acerl.pipeline.records.diagnostics_record`) replaces
``paths.diagnostics_file(root, run)`` atomically; ``entropy_early`` repeats ``H(t)`` for steps <=
``study.diagnostics.early_steps`` (paper Fig. 4).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from tqdm.auto import tqdm

from acerl.algos.advantages import confidence_scores
from acerl.config import Config, ConfigError, Run
from acerl.diagnostics.metrics import overconfidence_stats, pad_token_values, token_weighted_mean
from acerl.errors import MissingInputError, fix_command
from acerl.evaluate.pipeline import render_prompts, tokenizer_of
from acerl.generate import Sampler, SamplingParams, make_sampler, sampler_from_config
from acerl.generate.shards import folder_stamp
from acerl.pipeline import paths
from acerl.pipeline.io import read_jsonl, write_json
from acerl.pipeline.records import diagnostics_record, write_diagnostics_record
from acerl.pipeline.runtime import resolve_device
from acerl.pipeline.seeds import DIAG_SEED_STREAM, derive_seed

__all__ = [
    "CheckpointDiagnostics",
    "DiagnosticSettings",
    "EntropySampler",
    "SamplerFactory",
    "diagnose_checkpoint",
    "diagnose_run",
    "diagnostic_settings",
]

logger = logging.getLogger(__name__)

SamplerFactory = Callable[[Path], Sampler]


@runtime_checkable
class EntropySampler(Protocol):
    """A sampler that can also compute mean per-token full-vocabulary entropies (the HF backend), alone or
    with the log-probs in the same pass."""

    def mean_token_entropy(
        self, prompts: list[str], responses: list[list[int]], temperature: float = 1.0
    ) -> list[float]: ...

    def score_with_entropy(
        self, prompts: list[str], responses: list[list[int]], temperature: float = 1.0
    ) -> tuple[list[list[float]], list[float]]: ...


@dataclass(frozen=True)
class DiagnosticSettings:
    """Everything a checkpoint's diagnostics depend on besides the weights (recorded in the partial file)."""

    rollouts_per_prompt: int
    temperature: float
    max_new_tokens: int
    seed: int
    run_seed: int
    template: str
    prompt_ids: tuple[str, ...]
    length_normalize: bool = (
        False  # c_i of Def. 1 (the sum); True: c_i / T_i (study.diagnostics.length_normalize)
    )


@dataclass(frozen=True)
class CheckpointDiagnostics:
    """Per-rollout quantities of one checkpoint (``B = num_prompts * K`` rollouts, prompt-major).

    Attributes:
        step: training step (0 = base model).
        confidence: (B,) float64 ``c_i`` of every rollout (Def. 1's sum, or ``c_i / T_i`` with
            ``settings.length_normalize``).
        incorrect: (B,) bool, ``r_i = 0``.
        entropy_means: (B,) float64 mean full-vocabulary entropy over each rollout's tokens.
        lengths: (B,) int64 response tokens per rollout (EOS included).
    """

    step: int
    confidence: np.ndarray
    incorrect: np.ndarray
    entropy_means: np.ndarray
    lengths: np.ndarray

    def record(self) -> dict[str, Any]:
        """``{"step", "oef", "overconf_magnitude", "entropy", "n_incorrect", "n_total"}`` (diagnostics schema;
        ``oef`` / ``overconf_magnitude`` are ``None`` without incorrect / overconfident rollouts)."""
        oef, magnitude = overconfidence_stats(self.confidence, self.incorrect)
        return {
            "step": self.step,
            "oef": oef,
            "overconf_magnitude": magnitude,
            "entropy": token_weighted_mean(self.entropy_means, self.lengths),
            "n_incorrect": int(self.incorrect.sum()),
            "n_total": int(self.incorrect.size),
        }


def diagnostic_settings(cfg: Config, run: Run, prompt_ids: Sequence[str]) -> DiagnosticSettings:
    """Resolve ``study.diagnostics`` for ``run`` (``max_new_tokens`` defaults to ``train.max_response_length``)."""
    d = cfg.study.diagnostics
    if d is None:
        raise ValueError("study.diagnostics is not configured; add it to the config to run the diagnose step")
    model = cfg.models[run.model]
    return DiagnosticSettings(
        rollouts_per_prompt=d.rollouts_per_prompt,
        temperature=d.temperature,
        max_new_tokens=d.max_new_tokens or model.train.max_response_length,
        seed=cfg.evaluation.seed,
        run_seed=run.seed,
        template=model.template,
        prompt_ids=tuple(str(i) for i in prompt_ids),
        length_normalize=d.length_normalize,
    )


def _load_partial(path: Path, key: dict[str, Any]) -> dict[int, dict[str, Any]]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        logger.warning("%s: unreadable partial diagnostics; starting over", path)
        return {}
    if data.get("key") != key:
        logger.warning("%s: partial diagnostics from other settings or checkpoints; starting over", path)
        return {}
    return {int(step): rec for step, rec in data.get("records", {}).items()}


def _save_partial(path: Path, key: dict[str, Any], done: dict[int, dict[str, Any]]) -> None:
    write_json(path, {"key": key, "records": {str(s): r for s, r in sorted(done.items())}})


def diagnose_checkpoint(
    step: int,
    policy_dir: Path,
    ref_dir: Path,
    problems: Sequence[dict[str, Any]],
    settings: DiagnosticSettings,
    grader: Any,
    factory: SamplerFactory,
    entropy_factory: SamplerFactory | None = None,
) -> CheckpointDiagnostics:
    """Sample, grade and score the rollouts of one checkpoint (see the module docstring).

    Args:
        step: training step of the checkpoint (0 = base model).
        policy_dir: the checkpoint's HF folder; ref_dir: the reference (base) model's HF folder.
        problems: held-out rows with ``problem`` and ``answer``.
        settings: :func:`diagnostic_settings`.
        grader: an open :class:`acerl.grading.Grader`.
        factory: loads a sampler for a model folder (policy and reference).
        entropy_factory: loads an :class:`EntropySampler` for the policy when ``factory``'s sampler cannot
            compute entropies (e.g. vLLM); default: the HF backend on CPU.

    Returns:
        The per-rollout quantities; :meth:`CheckpointDiagnostics.record` turns them into the metrics.
    """
    k = settings.rollouts_per_prompt
    params = SamplingParams(
        n=k,
        temperature=settings.temperature,
        top_p=1.0,
        max_new_tokens=settings.max_new_tokens,
        seed=derive_seed(DIAG_SEED_STREAM, settings.seed, settings.run_seed),
    )
    temperature = settings.temperature
    entropies: list[float] | None = None
    smp = factory(policy_dir)
    try:
        prompts = render_prompts(
            [p["problem"] for p in problems], settings.template, tokenizer_of(smp, policy_dir)
        )
        groups = smp.generate(prompts, params)
        flat_prompts = [q for q, group in zip(prompts, groups, strict=True) for _ in group]
        rollouts = [c for group in groups for c in group]
        responses = [list(c.token_ids) for c in rollouts]
        if isinstance(smp, EntropySampler):  # log-probs and entropies from one pass
            policy_lp, entropies = smp.score_with_entropy(flat_prompts, responses, temperature)
        else:
            policy_lp = smp.score(flat_prompts, responses, temperature)
    finally:
        _close(smp)
    if entropies is None:
        ent_smp = (entropy_factory or _hf_cpu)(policy_dir)
        try:
            if not isinstance(ent_smp, EntropySampler):
                raise TypeError(f"{type(ent_smp).__name__} has no mean_token_entropy method")
            entropies = ent_smp.mean_token_entropy(flat_prompts, responses, temperature)
        finally:
            _close(ent_smp)
    ref = factory(ref_dir)
    try:
        ref_lp = ref.score(flat_prompts, responses, temperature)
    finally:
        _close(ref)

    golds = [str(p["answer"]) for p, group in zip(problems, groups, strict=True) for _ in group]
    verdicts = grader.grade_many([(c.text, g) for c, g in zip(rollouts, golds, strict=True)])
    incorrect = np.array([not v.correct for v in verdicts], dtype=bool)

    lp, mask = pad_token_values(policy_lp)
    ref_pad, ref_mask = pad_token_values(ref_lp)
    if not bool((mask == ref_mask).all()):
        raise RuntimeError(f"step {step}: policy and reference scored different numbers of tokens")
    c = confidence_scores(lp, ref_pad, mask, length_normalize=settings.length_normalize)
    return CheckpointDiagnostics(
        step=int(step),
        confidence=c.numpy().astype(np.float64),
        incorrect=incorrect,
        entropy_means=np.asarray(entropies, dtype=np.float64),
        lengths=np.array([len(r) for r in responses], dtype=np.int64),
    )


def _hf_cpu(path: Path) -> Sampler:
    return make_sampler("hf", path, device="cpu")


def _close(sampler: Any) -> None:
    close = getattr(sampler, "close", None)
    if callable(close):
        close()


def diagnose_run(
    cfg: Config,
    run: Run,
    root: Path | str,
    *,
    progress: bool = True,
    device: str | None = None,
    factory: SamplerFactory | None = None,
) -> Path:
    """Diagnostics of a training run at every diagnostic checkpoint; writes ``paths.diagnostics_file``.

    Args:
        cfg, run, root: the run (not the base model) and the work directory.
        progress: tqdm bar over checkpoints.
        device: overrides ``compute.device`` for the HF backend.
        factory: model folder -> sampler (tests); default: the configured backend
            (:func:`acerl.generate.sampler_from_config`, rule ``diagnose``).

    Returns:
        The diagnostics JSON file (the report's schema).
    """
    from acerl.grading import Grader

    if run.is_base:
        raise ValueError(f"{run.id}: diagnostics need a training run (checkpoints), not the base model")
    d = cfg.study.diagnostics
    if d is None:
        raise ConfigError(
            "study.diagnostics is not configured; add it to the config to run the diagnose step"
        )
    train = fix_command("train", "--model", run.model, "--method", run.method, "--seed", str(run.seed))
    if run not in cfg.diagnostic_runs():
        raise ConfigError(
            f"{run.id} is not in study.diagnostics (models {d.models}, methods {d.methods}, seeds {d.seeds}), so "
            f"its training wrote no diagnostic checkpoints: list it there, delete {paths.run_dir(root, run)} and "
            f"retrain it with {train}"
        )
    heldout_file = paths.data_file(root, "heldout")
    problems = read_jsonl(heldout_file)[: d.num_prompts]
    if len(problems) < d.num_prompts:
        logger.warning(
            "%s has %d prompts, fewer than num_prompts=%d", heldout_file, len(problems), d.num_prompts
        )
    settings = diagnostic_settings(cfg, run, [p["id"] for p in problems])
    steps = cfg.diagnostic_steps(run.model)
    ref_dir = paths.base_model_dir(root, run.model)
    step_dirs = {s: paths.diag_step_dir(root, run, s) for s in steps}
    if not ref_dir.is_dir():
        raise MissingInputError(
            f"{run.id}: base model folder not found: {ref_dir} (run {fix_command('prepare-base', '--model', run.model)})"
        )
    for folder in step_dirs.values():
        if not folder.is_dir():
            raise MissingInputError(
                f"{run.id}: diagnostic checkpoint not found: {folder} (train the run: {train})"
            )
    dev = resolve_device(device or cfg.compute.device)
    if factory is None:
        factory = _configured_factory(cfg, run, dev)

    def entropy_factory(path: Path) -> Sampler:
        return make_sampler("hf", path, device=dev, batch_size=cfg.evaluation.batch_size)

    key = {
        "settings": asdict(settings),
        "backend": cfg.evaluation.backend,
        "checkpoints": {str(s): folder_stamp(f) for s, f in [(-1, ref_dir), *step_dirs.items()]},
    }
    key = json.loads(json.dumps(key))
    partial = paths.diagnostics_partial_file(root, run)
    done = _load_partial(partial, key)
    with Grader(timeout_s=cfg.grading.timeout_s, workers=cfg.grading.workers) as grader:
        for step in tqdm(steps, desc=f"diagnose {run.id}", unit="ckpt", disable=not progress):
            if step in done:
                continue
            rec = diagnose_checkpoint(
                step, step_dirs[step], ref_dir, problems, settings, grader, factory, entropy_factory
            ).record()
            logger.info(
                "%s step %d: OEF %s, magnitude %s, entropy %.4f (%d/%d incorrect)",
                run.id,
                step,
                rec["oef"],
                rec["overconf_magnitude"],
                rec["entropy"],
                rec["n_incorrect"],
                rec["n_total"],
            )
            done[step] = rec
            _save_partial(partial, key, done)
    records = [done[s] for s in steps]
    early = [{"step": r["step"], "entropy": r["entropy"]} for r in records if r["step"] <= d.early_steps]
    record = diagnostics_record(run.model, run.method, run.seed, records, early)
    out = write_diagnostics_record(record, paths.diagnostics_file(root, run))
    partial.unlink(missing_ok=True)
    return out


def _configured_factory(cfg: Config, run: Run, device: str) -> SamplerFactory:
    def factory(path: Path) -> Sampler:
        return sampler_from_config(cfg, path, model=run.model, rule="diagnose", device=device)

    return factory
