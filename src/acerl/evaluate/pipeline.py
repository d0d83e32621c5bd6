"""The evaluation steps of one run on one benchmark: sample -> grade -> Pass@k (paper Sec. 5.1, "Metrics").

Each step reads the previous step's file and writes its own atomically (paths from :mod:`acerl.pipeline.paths`):

1. :func:`sample_run` -> ``generations/<benchmark>/<run>.jsonl.gz``: ``evaluation.n`` completions per problem
   from the run's policy (temperature 0.7, top-p 0.95 in the paper), sampled in resumable shards
   (:mod:`acerl.generate.shards`); a killed job continues from its last finished shard.
2. :func:`grade_run` -> ``scored/<benchmark>/<run>.parquet``: one math-verify verdict per completion. Re-grading
   stored generations (e.g. after a grader fix) is just rerunning this step; nothing is resampled.
3. :func:`passk_run` -> ``metrics/<benchmark>/<run>.json``: per-problem ``n`` and ``c`` and the unbiased Pass@k
   for ``evaluation.ks`` (:func:`acerl.pipeline.records.passk_record`), and the curve as rows
   ``k, pass_at_k`` (``paths.passk_curve_file``, what ``dvc plots`` draws).

Seeds: shard ``s`` of run seed ``r`` on benchmark ``b`` samples with :func:`eval_shard_seed`
(:func:`~acerl.pipeline.seeds.derive_seed` of ``evaluation.seed``, the benchmark's name, ``r`` and ``s``), so
results depend only on the config, never on interruptions. Two benchmarks never share uniforms (their
Pass@k estimates are independent given the policies); a method and its baseline of the same seed do (common
random numbers, docs/reports.md).
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from acerl.config import Config, Run
from acerl.errors import BadInputError, MissingInputError, fix_command, reading
from acerl.generate import Sampler, SamplingParams, sampler_from_config
from acerl.generate.shards import (
    SOFTWARE_KEY,
    folder_stamp,
    remove_shards,
    run_sharded,
)
from acerl.pipeline import paths
from acerl.pipeline.io import DataFormatError, atomic_path, read_jsonl, write_jsonl, write_text
from acerl.pipeline.provenance import software_stamp, stamps_in
from acerl.pipeline.records import passk_record, write_passk_record
from acerl.pipeline.seeds import EVAL_SEED_STREAM, derive_seed, name_part
from acerl.prompts import build_prompt

__all__ = [
    "SCORED_COLUMNS",
    "eval_shard_seed",
    "evaluation_sampling",
    "generation_rows",
    "grade_run",
    "load_sampler",
    "passk_run",
    "problem_counts",
    "read_scored_columns",
    "render_prompts",
    "rerun",
    "sample_run",
    "scored_frame",
    "tokenizer_of",
]

if TYPE_CHECKING:  # pandas loads only in the stages that build or read tables (grade, passk), not in sampling
    import pandas as pd

logger = logging.getLogger(__name__)

SCORED_COLUMNS: tuple[str, ...] = (
    "id",
    "sample",
    "correct",
    "status",
    "extracted",
    "num_tokens",
    "finish_reason",
)


# ---------------------------------------------------------------------------------------------- helpers
def rerun(step: str, run: Run, benchmark: str) -> str:
    """The fix for a broken output of ``step`` (``sample``, ``grade``): the command that writes it again."""
    return f"rerun {step_command(step, run, benchmark)} (or the workflow, which reruns the job)"


def step_command(step: str, run: Run, benchmark: str) -> str:
    """```acerl <step> --model .. --method .. --seed .. --benchmark ..```, with the invocation's options."""
    return fix_command(
        step, "--model", run.model, "--method", run.method, "--seed", str(run.seed), "--benchmark", benchmark
    )


def eval_shard_seed(eval_seed: int, benchmark: str, run_seed: int, shard_index: int) -> int:
    """The sampling seed of one evaluation shard: ``derive_seed(EVAL_SEED_STREAM, evaluation.seed,
    name_part(benchmark), run_seed, shard_index)``. The benchmark is part of it so that problem ``i`` of two
    benchmarks does not draw the same uniforms; the run's method is not, so a method and its baseline of the same
    seed share them."""
    return derive_seed(EVAL_SEED_STREAM, eval_seed, name_part(benchmark), run_seed, shard_index)


def tokenizer_of(sampler: Any, model_dir: Path | str) -> Any:
    """The sampler's tokenizer (``sampler.tokenizer``), else the one saved in ``model_dir``."""
    tok = getattr(sampler, "tokenizer", None)
    if tok is not None:
        return tok
    from acerl.models.loading import load_tokenizer

    return load_tokenizer(model_dir)


def render_prompts(problems: Sequence[str], template: str, tokenizer: Any) -> list[str]:
    """Every problem through :func:`acerl.prompts.build_prompt` (the one prompt home)."""
    return [build_prompt(p, template, tokenizer) for p in problems]


@contextmanager
def load_sampler(
    cfg: Config, model_dir: Path, *, model: str, rule: str, device: str | None, sampler: Sampler | None = None
) -> Iterator[Sampler]:
    """Yield ``sampler`` if given (left open), else load ``model_dir`` with the configured backend and close it
    (``close()`` where the backend has one, then free the reference) on exit."""
    if sampler is not None:
        yield sampler
        return
    loaded = sampler_from_config(cfg, model_dir, model=model, rule=rule, device=device)
    try:
        yield loaded
    finally:
        close = getattr(loaded, "close", None)
        if callable(close):
            close()
        del loaded
        gc.collect()


def _relative(path: Path, root: Path | str) -> str:
    """``path`` relative to ``root`` when inside it (portable files), else as given."""
    try:
        return Path(path).relative_to(Path(root)).as_posix()
    except ValueError:
        return str(path)


def evaluation_sampling(cfg: Config, run: Run) -> dict[str, Any]:
    """The sampling settings of the evaluation (paper Sec. 5.1): n, temperature, top_p, max_new_tokens (which
    defaults to the model's ``train.max_response_length``)."""
    ev = cfg.evaluation
    return {
        "n": ev.n,
        "temperature": ev.temperature,
        "top_p": ev.top_p,
        "max_new_tokens": ev.max_new_tokens or cfg.models[run.model].train.max_response_length,
    }


def generation_rows(
    problems: Sequence[dict[str, Any]],
    prompts: Sequence[str],
    completions: Sequence[Sequence[Any]],
    sampling: dict[str, Any],
    model_dir: str,
) -> list[dict[str, Any]]:
    """One generations-file row per problem.

    Row: ``{"id", "prompt", "answer" (gold), "completions": [{"text", "finish_reason", "num_tokens"}],
    "sampling": {n, temperature, top_p, max_new_tokens, seed, backend}, "model_dir", "software"}``;
    ``num_tokens`` counts the generated tokens including a final EOS; ``software`` is the sampling process's
    :func:`acerl.pipeline.provenance.software_stamp` (a resumed job keeps each finished shard's own).
    """
    if not len(problems) == len(prompts) == len(completions):
        raise ValueError(
            f"{len(problems)} problems, {len(prompts)} prompts, {len(completions)} completion lists"
        )
    return [
        {
            "id": str(p["id"]),
            "prompt": prompt,
            "answer": str(p["answer"]),
            "completions": [
                {"text": c.text, "finish_reason": c.finish_reason, "num_tokens": len(c.token_ids)}
                for c in group
            ],
            "sampling": dict(sampling),
            "model_dir": model_dir,
            "software": software_stamp(),
        }
        for p, prompt, group in zip(problems, prompts, completions, strict=True)
    ]


# ---------------------------------------------------------------------------------------------- sample
def sample_run(
    cfg: Config,
    run: Run,
    benchmark: str,
    root: Path | str,
    *,
    sampler: Sampler | None = None,
    progress: bool = True,
    device: str | None = None,
) -> Path:
    """Sample ``evaluation.n`` completions per problem of ``benchmark`` from the run's policy; resumable.

    Problems come from ``paths.data_file(root, benchmark)``, prompts from the model's template. Shards of
    ``evaluation.shard_size`` problems go to ``paths.generations_shard_dir`` (finished shards are reused by a
    rerun); the merged gzip JSON Lines file (:func:`generation_rows`) replaces ``paths.generations_file``
    atomically, then the shards are removed.

    Args:
        cfg, run, benchmark, root: what to evaluate and the work directory.
        sampler: an already loaded sampler (tests, notebooks); default: ``paths.policy_dir(root, run)`` loaded
            with ``evaluation.backend``.
        progress: tqdm bar over shards.
        device: overrides ``compute.device`` for the HF backend.

    Returns:
        The generations file.
    """
    problems = read_jsonl(paths.data_file(root, benchmark))
    if not problems:
        raise BadInputError(
            f"{paths.data_file(root, benchmark)}: no problems (an empty benchmark file); delete it and run "
            f"{fix_command('prepare-data')}"
        )
    model_dir = paths.policy_dir(root, run)
    settings = evaluation_sampling(cfg, run)
    ev = cfg.evaluation
    out = paths.generations_file(root, benchmark, run)
    shard_dir = paths.generations_shard_dir(root, benchmark, run)
    model_rel = _relative(model_dir, root)
    with load_sampler(cfg, model_dir, model=run.model, rule="sample", device=device, sampler=sampler) as smp:
        prompts = render_prompts(
            [p["problem"] for p in problems], cfg.models[run.model].template, tokenizer_of(smp, model_dir)
        )
        items = list(zip(problems, prompts, strict=True))

        def work(index: int, shard: Sequence[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
            seed = eval_shard_seed(ev.seed, benchmark, run.seed, index)
            params = SamplingParams(seed=seed, **settings)
            completions = smp.generate([prompt for _, prompt in shard], params)
            sampling = {**settings, "seed": seed, "backend": ev.backend}
            return generation_rows(
                [p for p, _ in shard], [q for _, q in shard], completions, sampling, model_rel
            )

        manifest = {
            "run": run.id,
            "benchmark": benchmark,
            "model_dir": model_rel,
            "model_files": folder_stamp(model_dir),
            "backend": ev.backend,
            "seed": ev.seed,
            **settings,
            "items": [[str(p["id"]), q] for p, q in items],
            SOFTWARE_KEY: software_stamp(),
        }
        rows = run_sharded(
            items,
            ev.shard_size,
            shard_dir,
            manifest,
            work,
            progress=progress,
            desc=f"sample {benchmark} {run.id}",
        )
    write_jsonl(out, rows)
    remove_shards(shard_dir)
    logger.info("%s: %d problems x %d samples -> %s", run.id, len(rows), settings["n"], out)
    return out


# ----------------------------------------------------------------------------------------------- grade
MODEL_DIR_ATTR = "model_dir"
"""The scored file's ``DataFrame.attrs`` key naming the policy folder that sampled its generations."""

COMPLETION_KEYS = ("text", "finish_reason", "num_tokens")
"""What grading reads of each completion of a generations row."""


def check_completions(rows: Sequence[dict[str, Any]], path: Path, remake: str) -> None:
    """Every row's ``completions`` is a list of objects holding :data:`COMPLETION_KEYS`; else a one-line
    :class:`~acerl.pipeline.io.DataFormatError` naming the file, the row's id and the completion, and ``remake``."""
    for row in rows:
        completions = row["completions"]
        if not isinstance(completions, list):
            kind = type(completions).__name__
            raise DataFormatError(
                f"{path}: row id {row['id']!r}: 'completions' is a {kind}, expected a list; {remake}"
            )
        for j, comp in enumerate(completions):
            missing = [key for key in COMPLETION_KEYS if not isinstance(comp, dict) or key not in comp]
            if missing:
                raise DataFormatError(
                    f"{path}: row id {row['id']!r}, completion {j}: missing key(s) "
                    f"{', '.join(map(repr, missing))}; {remake}"
                )


def check_provenance(
    made_by: Iterable[tuple[str, Any]], path: Path, run: Run, root: Path | str, remake: str
) -> None:
    """Each ``(what, model_dir)`` of ``made_by`` (a generations row, a scored file) that names the policy it was
    sampled from names the policy of ``run``: another run's samples copied in under this run's name are a
    :class:`BadInputError` naming the file, both policies and ``remake``. ``None`` (a file written by hand, or
    before the key existed) is taken as it is."""
    expected = _relative(paths.policy_dir(root, run), root)
    for what, model_dir in made_by:
        if model_dir is not None and str(model_dir) != expected:
            raise BadInputError(
                f"{path}: {what}: sampled from {model_dir}, not from run {run.id}'s policy {expected}: it "
                f"holds another run's samples; delete it and {remake}"
            )


def benchmark_ids(root: Path | str, benchmark: str) -> list[str] | None:
    """The problem ids of ``benchmark`` (``paths.data_file``), or ``None`` where that file is absent (a
    generations file graded outside a study's folder)."""
    data = paths.data_file(root, benchmark)
    if not data.is_file():
        return None
    return [
        str(row["id"])
        for row in read_jsonl(data, required=("id",), remake=f"run {fix_command('prepare-data')}")
    ]


def check_problem_set(ids: Sequence[str], path: Path, root: Path | str, benchmark: str, remake: str) -> None:
    """``path`` (a run's generations or scored file) holds every problem of ``benchmark`` and no other: a run's
    Pass@k is a mean over the benchmark's problems, all of them (over a subset it is another benchmark's number).
    An empty file, or one missing problems, is a :class:`BadInputError` naming the file, how many problems are
    missing and ``remake``."""
    if not ids:
        raise BadInputError(f"{path}: no problems (an empty file); delete it and {remake}")
    expected = benchmark_ids(root, benchmark)
    if expected is None:
        return
    present = set(ids)
    missing = [i for i in expected if i not in present]
    if missing:
        raise BadInputError(
            f"{path}: {len(expected) - len(missing)} of {benchmark}'s {len(expected)} problems ({len(missing)} "
            f"missing, e.g. {missing[0]!r}): a run's Pass@k is over all of them; delete it and {remake}"
        )
    known = set(expected)
    other = [i for i in dict.fromkeys(ids) if i not in known]
    if other:
        raise BadInputError(
            f"{path}: {len(other)} problem(s) not in {paths.data_file(root, benchmark)} (e.g. {other[0]!r}): "
            f"it holds another benchmark's samples; delete it and {remake}"
        )


def scored_frame(rows: Sequence[dict[str, Any]], verdicts: Sequence[Any]) -> pd.DataFrame:
    """One row per sample (:data:`SCORED_COLUMNS`) from generation rows and their verdicts in flattened order
    (problem-major, then sample index)."""
    records: list[dict[str, Any]] = []
    it = iter(verdicts)
    for row in rows:
        for j, comp in enumerate(row["completions"]):
            v = next(it)
            records.append(
                {
                    "id": str(row["id"]),
                    "sample": j,
                    "correct": bool(v.correct),
                    "status": str(v.status),
                    "extracted": None if v.extracted is None else str(v.extracted),
                    "num_tokens": int(comp["num_tokens"]),
                    "finish_reason": str(comp["finish_reason"]),
                }
            )
    if next(it, None) is not None:
        raise ValueError("more verdicts than completions")
    import pandas as pd

    df = pd.DataFrame.from_records(records, columns=list(SCORED_COLUMNS))
    return df.astype(
        {
            "id": "string",
            "sample": "int64",
            "correct": "bool",
            "status": "string",
            "extracted": "string",
            "num_tokens": "int64",
            "finish_reason": "string",
        }
    )


def grade_run(cfg: Config, run: Run, benchmark: str, root: Path | str) -> Path:
    """Grade every stored completion against its gold answer; writes ``paths.scored_file`` atomically.

    One :class:`acerl.grading.Grader` (``grading.timeout_s``, ``grading.workers``) grades all completions in a
    single :meth:`~acerl.grading.Grader.grade_many` call. Timeouts, unparseable answers and grader errors count as
    incorrect (their ``status`` says which). The generations file is only read, so deleting the scored file and
    rerunning this step re-grades without resampling.

    Returns:
        The scored parquet file (:data:`SCORED_COLUMNS`).
    """
    from acerl.grading import Grader

    gen_file = paths.generations_file(root, benchmark, run)
    if not gen_file.is_file():
        raise MissingInputError(
            f"generations file not found: {gen_file} (run the sample step first: "
            f"{step_command('sample', run, benchmark)})"
        )
    remake = rerun("sample", run, benchmark)
    rows = read_jsonl(gen_file, required=("id", "answer", "completions"), remake=remake)
    check_completions(rows, gen_file, remake)
    made_by = [(f"row id {row['id']!r}", row.get("model_dir")) for row in rows]
    check_provenance(made_by, gen_file, run, root, remake)
    check_problem_set([str(row["id"]) for row in rows], gen_file, root, benchmark, remake)
    items = [(str(c["text"]), str(row["answer"])) for row in rows for c in row["completions"]]
    with Grader(timeout_s=cfg.grading.timeout_s, workers=cfg.grading.workers) as grader:
        verdicts = grader.grade_many(items)
    if len(verdicts) != len(items):
        raise RuntimeError(
            f"grader returned {len(verdicts)} verdicts for {len(items)} completions of {gen_file}"
        )
    df = scored_frame(rows, verdicts)
    # What made the samples and the verdicts (parquet keeps DataFrame.attrs); passk_run carries it on.
    df.attrs["software"] = stamps_in([*(row.get("software") for row in rows), software_stamp()])
    if any("model_dir" in row for row in rows):  # the policy that sampled them, which passk_run checks
        df.attrs[MODEL_DIR_ATTR] = _relative(paths.policy_dir(root, run), root)
    out = paths.scored_file(root, benchmark, run)
    with atomic_path(out) as tmp:
        df.to_parquet(tmp, index=False)
    counts = df["status"].value_counts().to_dict()
    logger.info(
        "%s on %s: %d/%d correct; status %s -> %s",
        run.id,
        benchmark,
        int(df["correct"].sum()),
        len(df),
        ", ".join(f"{k}={v}" for k, v in sorted(counts.items())),
        out,
    )
    return out


# ----------------------------------------------------------------------------------------------- passk
def problem_counts(ids: Sequence[Any], correct: Sequence[Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per-problem ``(ids, n, c)`` from a scored file's ``id`` and ``correct`` columns, problems in order of first
    appearance.

    Returns:
        ids ``(P,)`` as strings, ``n`` ``(P,)`` int64 samples, ``c`` ``(P,)`` int64 correct samples.
    """
    if len(ids) != len(correct):
        raise ValueError(f"{len(ids)} ids but {len(correct)} verdicts")
    counts: dict[str, list[int]] = {}
    for problem, ok in zip(ids, correct, strict=True):
        entry = counts.setdefault(str(problem), [0, 0])
        entry[0] += 1
        entry[1] += bool(ok)
    n_c = np.array(list(counts.values()), dtype=np.int64).reshape(-1, 2)
    return list(counts), n_c[:, 0].copy(), n_c[:, 1].copy()


PANDAS_ATTRS_KEY = b"PANDAS_ATTRS"
"""Where pandas (>= 2.1) keeps a DataFrame's ``attrs``, as JSON, in the schema metadata of a parquet file."""


def read_scored_columns(
    path: Path, columns: Sequence[str], remake: str
) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """``columns`` of the scored parquet file ``path`` as lists, and its ``DataFrame.attrs`` (the software
    stamps), read with pyarrow alone: the Pass@k step imports no pandas (what that saves per job:
    docs/benchmarks.md, "Imports a job does not need").
    An unreadable file, or one without a column, is a :class:`~acerl.errors.BadInputError` naming the file,
    the column and the fix (delete it and ``remake``)."""
    import pyarrow.parquet as pq

    with reading(path, remake):
        with pq.ParquetFile(path) as file:  # not pq.read_table: its pyarrow.dataset imports pandas
            schema = file.schema_arrow
            missing = [c for c in columns if c not in schema.names]
            if missing:
                raise BadInputError(f"scored file {path} lacks column(s) {missing}; delete it and {remake}")
            table = file.read(columns=list(columns))
        attrs = json.loads((schema.metadata or {}).get(PANDAS_ATTRS_KEY, b"{}"))
    return {c: table.column(c).to_pylist() for c in columns}, attrs


def passk_run(cfg: Config, run: Run, benchmark: str, root: Path | str) -> Path:
    """Pass@k for ``evaluation.ks`` from the scored samples; writes ``paths.passk_file`` atomically.

    The record is :func:`acerl.pipeline.records.passk_record` (mean over problems of the unbiased
    estimator ``1 - C(n-c, k) / C(n, k)``, paper Sec. 5.1); ``seed`` is ``None`` for the untrained base model.
    Logs ``pass@1`` and ``pass@<largest k>``.
    """
    scored_path = paths.scored_file(root, benchmark, run)
    if not scored_path.is_file():
        raise MissingInputError(
            f"scored file not found: {scored_path} (run the grade step first: {step_command('grade', run, benchmark)})"
        )
    remake = rerun("grade", run, benchmark)
    scored, attrs = read_scored_columns(scored_path, ("id", "correct", "status"), remake)
    ids, n, c = problem_counts(scored["id"], scored["correct"])
    check_provenance([("every row", attrs.get(MODEL_DIR_ATTR))], scored_path, run, root, remake)
    check_problem_set(ids, scored_path, root, benchmark, remake)
    k_max = max(cfg.evaluation.ks)
    short = [(i, int(m)) for i, m in zip(ids, n, strict=True) if m < k_max]
    if short:  # a scored file of an older config (evaluation.n smaller than the largest k now)
        raise BadInputError(
            f"{scored_path}: problem {short[0][0]!r} has {short[0][1]} graded samples ({len(short)} problem(s) "
            f"fewer than the largest k, {k_max}, of evaluation.ks); it was sampled with a smaller evaluation.n: "
            f"{rerun('sample', run, benchmark)}, then grade"
        )
    record = passk_record(
        benchmark, run.model, run.method, None if run.is_base else run.seed, ids, n, c, cfg.evaluation.ks
    )
    # samples the grader could not decide even with a retry at twice its limits: scored incorrect, and counted
    record["grader_timeouts"] = sum(status == "timeout" for status in scored["status"])
    record["software"] = stamps_in([*attrs.get("software", []), software_stamp()])
    out = write_passk_record(record, paths.passk_file(root, benchmark, run))
    ks = record["ks"]
    curve = "".join(f"{k}\t{record['pass_at_k'][str(k)]!r}\n" for k in ks)
    write_text(paths.passk_curve_file(root, benchmark, run), "k\tpass_at_k\n" + curve)
    logger.info(
        "%s on %s (%d problems): pass@%d %.4f, pass@%d %.4f; %d grader timeout(s)",
        run.id,
        benchmark,
        record["num_problems"],
        ks[0],
        record["pass_at_k"][str(ks[0])],
        ks[-1],
        record["pass_at_k"][str(ks[-1])],
        record["grader_timeouts"],
    )
    return out
