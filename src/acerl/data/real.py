"""Paper-scale data: DAPO-Math-17K (training), MATH-500 and AIME 2025 (evaluation), a held-out DAPO subset.

Each dataset comes from a local JSON Lines / parquet file (``data.real.<name>.path``, relative to the work
directory ``--root``) or, only when no path is configured, from the Hugging Face hub by id
(``datasets.load_dataset(hub_id, split=hub_split)``). Known column layouts are mapped to the project schema
``id`` / ``problem`` / ``answer`` (:data:`LAYOUTS`):

==========================  ==========================  ===========================  =====================
source                      problem                     answer                       id
==========================  ==========================  ===========================  =====================
project JSON Lines          ``problem``                 ``answer``                   ``id``
MATH-500 (hub)              ``problem``                 ``answer``                   ``unique_id``
AIME 2025 (hub)             ``problem``                 ``answer``                   ``id`` / ``problem_idx``
DAPO-Math-17k (hub)         ``prompt[0].content``       ``reward_model.ground_truth`` ``extra_info.index``
==========================  ==========================  ===========================  =====================

A problem text wrapped in DAPO's own instruction (:data:`acerl.prompts.DAPO_PREFIX` ... ``DAPO_SUFFIX``, as in
the hub parquet) is unwrapped, so every model sees its own template (:func:`acerl.prompts.build_prompt`).

Training data is de-duplicated by exact problem text: the hub parquet repeats its 17,917 prompts 100x, and
those prompts hold only 17,290 distinct texts, 11 of which repeat with conflicting answers. The first
occurrence of each text is kept; the counts are logged and written to
:func:`acerl.pipeline.paths.real_data_report_file`. A held-out subset (``heldout_size`` problems chosen by
``heldout_seed``) is removed from training for the diagnostics.

Outputs (:func:`prepare_real_data`):

- the project's JSON Lines ``data/<split>.jsonl`` (:func:`acerl.pipeline.paths.data_file`) for ``train``, each
  benchmark and ``heldout``; schema ``id``, ``problem``, ``answer``;
- verl's parquet per model (:func:`prepare_verl_data`): ``data/verl/<model>/train.parquet`` (training set) and
  ``val.parquet`` (the benchmarks, ``data_source`` = benchmark name), rows
  ``{data_source, prompt, ability, reward_model: {style: "rule", ground_truth}, extra_info: {index, id}}``.

How a prompt template maps to verl: verl applies the tokenizer's chat template itself to the ``prompt`` column
(a list of chat messages), with ``data.apply_chat_template_kwargs``. :func:`prompt_messages` therefore runs the
model's template from :mod:`acerl.prompts` against a recording stand-in for the tokenizer and stores the chat
messages it would render (and the keyword arguments, e.g. ``enable_thinking=False``), so verl renders exactly
the string :func:`acerl.prompts.build_prompt` renders with the real tokenizer. A template that does not use a
chat template (``plain``) is stored as one user message holding the finished prompt text, and the verl launcher
sets an identity chat template (:data:`IDENTITY_CHAT_TEMPLATE`) for it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acerl.errors import BadInputError, MissingInputError
from acerl.pipeline import paths
from acerl.pipeline.io import read_jsonl, write_json, write_jsonl, write_parquet
from acerl.prompts import DAPO_PREFIX, DAPO_SUFFIX, build_prompt

if TYPE_CHECKING:
    from acerl.config import Config, DatasetSource

logger = logging.getLogger(__name__)

__all__ = [
    "IDENTITY_CHAT_TEMPLATE",
    "LAYOUTS",
    "ChatPrompt",
    "ColumnLayout",
    "DataSourceError",
    "DedupeReport",
    "dedupe_problems",
    "detect_layout",
    "load_dataset_rows",
    "local_dataset_path",
    "missing_dataset_message",
    "missing_local_datasets",
    "normalize_rows",
    "prepare_real_data",
    "prepare_verl_data",
    "prompt_messages",
    "read_table",
    "split_heldout",
    "trained_models",
    "unwrap_dapo",
    "verl_rows",
]

TRAIN = "train"
HELDOUT = "heldout"
ABILITY = "math"
IDENTITY_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
"""Jinja chat template that renders the messages' text unchanged (for templates without a chat template)."""


class DataSourceError(BadInputError):
    """A dataset source cannot be read (missing file, hub unreachable, unknown columns, empty answers)."""


# ------------------------------------------------------------------------------------------- reading
def read_table(path: Path | str) -> list[dict[str, Any]]:
    """Rows of a local ``.jsonl`` / ``.jsonl.gz`` / ``.parquet`` file as dicts (no column check here)."""
    path = Path(path)
    if not path.is_file():
        raise DataSourceError(f"dataset file not found: {path} (working directory: {Path.cwd()})")
    name = path.name.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if name.endswith(".jsonl") or name.endswith(".jsonl.gz"):
        return read_jsonl(path, required=())
    raise DataSourceError(f"{path}: unsupported file type; use .jsonl, .jsonl.gz or .parquet")


def load_dataset_rows(
    source: DatasetSource, name: str, root: Path | str = "."
) -> tuple[Iterable[Mapping[str, Any]], str]:
    """Raw rows of one configured dataset and a label naming where they came from (for error messages).

    A local ``path`` (relative to the work directory ``root``) wins; a missing one is a
    :class:`~acerl.errors.MissingInputError` naming the file and its key. Otherwise
    ``datasets.load_dataset(hub_id, split=hub_split)`` is called. A hub failure (offline, unknown id, gated)
    raises :class:`DataSourceError` telling the user to set ``data.real.<name>.path``.
    """
    if source.path is not None:
        path = local_dataset_path(source, root)
        if not path.is_file():
            raise MissingInputError(missing_dataset_message(name, source, root))
        return read_table(path), str(path)
    assert source.hub_id is not None  # DatasetSource guarantees path or hub_id
    label = f"hub dataset {source.hub_id!r} (split {source.hub_split!r})"
    try:
        import datasets

        ds = datasets.load_dataset(source.hub_id, split=source.hub_split)
    except Exception as err:  # offline, unknown id, gated dataset, ...: all mean "give a local file"
        raise DataSourceError(
            f"data.real {name}: could not load {label}: {type(err).__name__}: {err}. "
            f"Set data.real.{_config_key(name)}.path to a local .jsonl or .parquet file."
        ) from err
    return ds, label


def local_dataset_path(source: DatasetSource, root: Path | str) -> Path:
    """A dataset's local file: ``path`` as written if absolute, else under the work directory ``root``."""
    assert source.path is not None
    return Path(root) / source.path


def missing_dataset_message(name: str, source: DatasetSource, root: Path | str) -> str:
    """What to say about a dataset whose local file is absent: the file, its key and the way out."""
    return (
        f"dataset file not found: {local_dataset_path(source, root)} (data.real.{_config_key(name)}.path: "
        f"{source.path!r}, relative to the work directory --root {root}); fix the path, or remove it to read "
        "the hub_id"
    )


def missing_local_datasets(cfg: Config, root: Path | str) -> list[str]:
    """:func:`missing_dataset_message` for every configured local dataset file that is absent."""
    real = cfg.data.real
    if cfg.data.kind != "real" or real is None:
        return []
    sources = {TRAIN: real.train, **real.benchmarks}
    return [
        missing_dataset_message(name, source, root)
        for name, source in sources.items()
        if source.path is not None and not local_dataset_path(source, root).is_file()
    ]


def _config_key(name: str) -> str:
    return "train" if name == TRAIN else f"benchmarks.{name}"


# ------------------------------------------------------------------------------------------- columns
@dataclass(frozen=True)
class ColumnLayout:
    """Where ``problem``, ``answer`` and ``id`` live in a source row.

    Fields are dotted paths with optional list indices, e.g. ``prompt[0].content``; ``id=None`` means the
    source has no id column and ids are made from the dataset name and the row number.
    """

    label: str
    problem: str
    answer: str
    id: str | None

    @property
    def top_level(self) -> tuple[str, ...]:
        return tuple(_root_key(p) for p in (self.problem, self.answer, self.id) if p is not None)


LAYOUTS: tuple[ColumnLayout, ...] = (
    ColumnLayout("project JSON Lines (id/problem/answer)", "problem", "answer", "id"),
    ColumnLayout("MATH-500 (problem/answer/unique_id)", "problem", "answer", "unique_id"),
    ColumnLayout("AIME (problem/answer/problem_idx)", "problem", "answer", "problem_idx"),
    ColumnLayout(
        "DAPO-Math-17k (prompt/reward_model/extra_info)",
        "prompt[0].content",
        "reward_model.ground_truth",
        "extra_info.index",
    ),
    ColumnLayout(
        "DAPO-Math-17k without extra_info (prompt/reward_model)",
        "prompt[0].content",
        "reward_model.ground_truth",
        None,
    ),
    ColumnLayout("problem/answer without ids", "problem", "answer", None),
)
"""Known layouts, tried in order; the first whose top-level columns all exist in the first row is used."""


def _root_key(dotted: str) -> str:
    return dotted.split(".", 1)[0].split("[", 1)[0]


def _get_path(row: Mapping[str, Any], dotted: str) -> Any:
    """``row['prompt'][0]['content']`` for ``'prompt[0].content'``; raises KeyError/IndexError/TypeError."""
    value: Any = row
    for part in dotted.split("."):
        key, *indices = part.split("[")
        value = value[key]
        for idx in indices:
            value = value[int(idx.rstrip("]"))]
    return value


def detect_layout(columns: Iterable[str], where: str) -> ColumnLayout:
    """The first :data:`LAYOUTS` entry whose top-level columns are all in ``columns``; else a clear error."""
    cols = set(columns)
    for layout in LAYOUTS:
        if all(c in cols for c in layout.top_level):
            return layout
    expected = "; ".join(layout.label for layout in LAYOUTS)
    raise DataSourceError(
        f"{where}: no known column layout; columns found: {sorted(cols) or '(none)'}; expected one of: {expected}"
    )


def unwrap_dapo(text: str) -> str:
    """Strip DAPO-Math-17K's instruction wrapper (``DAPO_PREFIX + problem + DAPO_SUFFIX``) if present."""
    if (
        text.startswith(DAPO_PREFIX)
        and text.endswith(DAPO_SUFFIX)
        and len(text) >= len(DAPO_PREFIX + DAPO_SUFFIX)
    ):
        return text[len(DAPO_PREFIX) : len(text) - len(DAPO_SUFFIX)]
    return text


def _answer_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def normalize_rows(rows: Iterable[Mapping[str, Any]], name: str, where: str) -> list[dict[str, str]]:
    """Map source rows to ``{id, problem, answer}`` (strings) with the detected :class:`ColumnLayout`.

    ``problem`` is unwrapped from DAPO's instruction (:func:`unwrap_dapo`); ``answer`` is stripped of
    surrounding whitespace (integers stay integers: ``34.0`` -> ``"34"``). Ids missing from the source are
    ``<name>-<row:06d>``.

    Raises:
        DataSourceError: no known layout (names ``where`` and the columns found), a row lacking a field of the
            layout (names the 1-based row), or empty problems/answers (names every offending row).
    """
    out: list[dict[str, str]] = []
    layout: ColumnLayout | None = None
    empty_answer: list[int] = []
    empty_problem: list[int] = []
    unwrapped = 0
    for rownum, row in enumerate(rows, start=1):
        if layout is None:
            layout = detect_layout(row.keys(), where)
            logger.info("%s: column layout %s", where, layout.label)
        try:
            raw_problem = _get_path(row, layout.problem)
            raw_answer = _get_path(row, layout.answer)
            raw_id = _get_path(row, layout.id) if layout.id is not None else None
        except (KeyError, IndexError, TypeError) as err:
            raise DataSourceError(
                f"{where}: row {rownum} lacks a field of layout {layout.label} ({type(err).__name__}: {err}); "
                f"row keys: {sorted(row.keys())}"
            ) from None
        problem = unwrap_dapo(raw_problem) if isinstance(raw_problem, str) else ""
        unwrapped += problem != raw_problem
        answer = _answer_text(raw_answer)
        if not problem.strip():
            empty_problem.append(rownum)
        if not answer:
            empty_answer.append(rownum)
        rid = str(raw_id) if raw_id is not None and str(raw_id) != "" else f"{name}-{rownum:06d}"
        out.append({"id": rid, "problem": problem, "answer": answer})
    if layout is None:
        raise DataSourceError(f"{where}: no rows")
    for what, bad in (("answer", empty_answer), ("problem", empty_problem)):
        if bad:
            shown = ", ".join(map(str, bad[:20])) + (f", ... ({len(bad)} rows)" if len(bad) > 20 else "")
            raise DataSourceError(f"{where}: empty {what} in row(s) {shown} (1-based, in file order)")
    if unwrapped:
        logger.info("%s: removed DAPO's instruction wrapper from %d problem texts", where, unwrapped)
    return out


# ------------------------------------------------------------------------------------ dedupe, heldout
@dataclass
class DedupeReport:
    """What :func:`dedupe_problems` did.

    Attributes:
        rows: input rows; kept: distinct problem texts kept (first occurrence); dropped: ``rows - kept``;
        conflicting: distinct texts whose repeats carry more than one answer (the first answer is kept);
        conflict_examples: up to 10 ``{id, answers}`` of such texts.
    """

    rows: int
    kept: int
    dropped: int
    conflicting: int
    conflict_examples: list[dict[str, Any]] = field(default_factory=list)


def dedupe_problems(rows: Iterable[Mapping[str, str]]) -> tuple[list[dict[str, str]], DedupeReport]:
    """Keep the first occurrence of each distinct problem text (exact string match), in input order.

    Returns the kept rows and a :class:`DedupeReport`; texts repeated with different answers are counted
    in ``conflicting`` (their first answer is kept).
    """
    first: dict[str, int] = {}
    answers: dict[str, list[str]] = {}
    kept: list[dict[str, str]] = []
    n = 0
    for row in rows:
        n += 1
        text = row["problem"]
        if text in first:
            seen = answers[text]
            if row["answer"] not in seen:
                seen.append(row["answer"])
            continue
        first[text] = len(kept)
        answers[text] = [row["answer"]]
        kept.append(dict(row))
    conflicts = [(kept[first[t]]["id"], a) for t, a in answers.items() if len(a) > 1]
    report = DedupeReport(
        rows=n,
        kept=len(kept),
        dropped=n - len(kept),
        conflicting=len(conflicts),
        conflict_examples=[{"id": i, "answers": a} for i, a in conflicts[:10]],
    )
    return kept, report


def split_heldout(
    rows: Sequence[Mapping[str, str]], size: int, seed: int
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Split off ``size`` rows chosen by ``random.Random(seed)``: returns ``(train, heldout)``, both in input
    order and disjoint (by position; texts are disjoint too after :func:`dedupe_problems`)."""
    if size < 0 or size >= len(rows):
        raise DataSourceError(
            f"data.real.heldout_size={size} must be >= 0 and smaller than the training set ({len(rows)} problems)"
        )
    chosen = set(random.Random(seed).sample(range(len(rows)), size))
    train = [dict(r) for i, r in enumerate(rows) if i not in chosen]
    heldout = [dict(r) for i, r in enumerate(rows) if i in chosen]
    return train, heldout


def _check_unique_ids(rows: Sequence[Mapping[str, str]], where: str) -> None:
    seen: dict[str, int] = {}
    for i, row in enumerate(rows, start=1):
        if row["id"] in seen:
            raise DataSourceError(
                f"{where}: id {row['id']!r} repeats (rows {seen[row['id']]} and {i} after de-duplication)"
            )
        seen[row["id"]] = i


# --------------------------------------------------------------------------------------------- verl
@dataclass(frozen=True)
class ChatPrompt:
    """A problem as verl consumes it: chat ``messages`` plus the chat template's keyword arguments.

    ``raw`` is true for templates that render without a chat template (``plain``): ``messages`` is then one
    user message holding the finished prompt and verl must use :data:`IDENTITY_CHAT_TEMPLATE`.
    """

    messages: list[dict[str, str]]
    chat_template_kwargs: dict[str, Any]
    raw: bool


class _RecordingTokenizer:
    """Stands in for a tokenizer: records what a prompt template passes to ``apply_chat_template``."""

    chat_template = "<recording>"

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, str]], dict[str, Any]]] = []

    def apply_chat_template(
        self,
        messages: list[dict[str, str]],
        tokenize: bool = False,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        if tokenize or not add_generation_prompt:
            raise ValueError(
                "prompt templates must call apply_chat_template(tokenize=False, add_generation_prompt=True)"
            )
        self.calls.append(([dict(m) for m in messages], dict(kwargs)))
        return ""


def prompt_messages(problem: str, template: str) -> ChatPrompt:
    """verl's chat form of ``build_prompt(problem, template, tokenizer)`` (see the module docstring)."""
    recorder = _RecordingTokenizer()
    text = build_prompt(problem, template, recorder)
    if not recorder.calls:
        return ChatPrompt(messages=[{"role": "user", "content": text}], chat_template_kwargs={}, raw=True)
    if len(recorder.calls) != 1:
        raise ValueError(
            f"prompt template {template!r} called apply_chat_template {len(recorder.calls)} times"
        )
    messages, kwargs = recorder.calls[0]
    return ChatPrompt(messages=messages, chat_template_kwargs=kwargs, raw=False)


def verl_rows(rows: Iterable[Mapping[str, str]], template: str, data_source: str) -> Iterator[dict[str, Any]]:
    """verl parquet rows for project rows ``{id, problem, answer}`` (``extra_info.index`` = position)."""
    for index, row in enumerate(rows):
        yield {
            "data_source": data_source,
            "prompt": prompt_messages(row["problem"], template).messages,
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": row["answer"]},
            "extra_info": {"index": index, "id": row["id"]},
        }


def prepare_verl_data(cfg: Config, root: Path | str, models: Sequence[str] | None = None) -> dict[str, Path]:
    """Write verl's ``train.parquet`` / ``val.parquet`` for each model from the project's JSON Lines.

    Reads ``data/train.jsonl`` and every benchmark file (written by :func:`prepare_real_data` or the synthetic
    task); ``val.parquet`` concatenates the benchmarks with ``data_source`` = benchmark name. Works for both
    ``data.kind`` values.

    Returns:
        ``{"verl/<model>/train": path, "verl/<model>/val": path, ...}`` for ``models`` (default: every model
        that a training run uses, :func:`trained_models`).
    """
    root = Path(root)
    train = read_jsonl(paths.data_file(root, TRAIN))
    benches = {b: read_jsonl(paths.data_file(root, b)) for b in cfg.benchmark_names}
    train_source = _train_data_source(cfg)
    out: dict[str, Path] = {}
    for model in models if models is not None else trained_models(cfg):
        template = cfg.models[model].template
        out[f"verl/{model}/train"] = write_parquet(
            paths.verl_train_file(root, model), verl_rows(train, template, train_source)
        )
        val: list[dict[str, Any]] = []
        for bench, rows in benches.items():
            val.extend(verl_rows(rows, template, bench))
        for i, row in enumerate(val):
            row["extra_info"]["index"] = i
        out[f"verl/{model}/val"] = write_parquet(paths.verl_val_file(root, model), val)
        logger.info(
            "verl data for %s (template %s): %d train, %d val rows", model, template, len(train), len(val)
        )
    return out


def trained_models(cfg: Config) -> list[str]:
    """Models that some training run uses (the ones verl needs parquet files for), in config order."""
    used = {run.model for run in cfg.runs()}
    return [m for m in cfg.models if m in used]


def _train_data_source(cfg: Config) -> str:
    if cfg.data.kind != "real" or cfg.data.real is None:
        return "synthetic"
    src = cfg.data.real.train
    return Path(src.path).stem if src.path else str(src.hub_id).rsplit("/", 1)[-1]


# ----------------------------------------------------------------------------------------- entry point
def prepare_real_data(cfg: Config, root: Path | str) -> dict[str, Path]:
    """Read, normalise, de-duplicate and split the real datasets; write JSON Lines (verl's parquet files are
    the ``prepare_verl_data`` stage's, :func:`prepare_verl_data`, written only for the verl backend).

    Returns:
        Paths by key: ``train``, each benchmark name, ``heldout`` (JSON Lines) and ``report``
        (:func:`acerl.pipeline.paths.real_data_report_file`).
    """
    if cfg.data.kind != "real" or cfg.data.real is None:
        raise DataSourceError("prepare_real_data needs data.kind: real with a data.real section")
    real = cfg.data.real
    root = Path(root)
    raw, where = load_dataset_rows(real.train, TRAIN, root)
    rows = normalize_rows(raw, TRAIN, where)
    unique, dedupe = dedupe_problems(rows)
    logger.info(
        "%s: %d rows -> %d distinct problem texts (%d duplicates dropped, %d texts with conflicting answers)",
        where,
        dedupe.rows,
        dedupe.kept,
        dedupe.dropped,
        dedupe.conflicting,
    )
    _check_unique_ids(unique, where)
    train, heldout = split_heldout(unique, real.heldout_size, real.heldout_seed)
    out: dict[str, Path] = {
        TRAIN: write_jsonl(paths.data_file(root, TRAIN), train),
        HELDOUT: write_jsonl(paths.data_file(root, HELDOUT), heldout),
    }
    bench_counts: dict[str, dict[str, Any]] = {}
    for bench, source in real.benchmarks.items():
        raw_b, where_b = load_dataset_rows(source, bench, root)
        rows_b = normalize_rows(raw_b, bench, where_b)
        _check_unique_ids(rows_b, where_b)
        out[bench] = write_jsonl(paths.data_file(root, bench), rows_b)
        bench_counts[bench] = {"source": where_b, "rows": len(rows_b)}
    report = {
        "train": {"source": where, **asdict(dedupe), "heldout": len(heldout), "train": len(train)},
        "heldout": {"size": real.heldout_size, "seed": real.heldout_seed},
        "benchmarks": bench_counts,
    }
    out["report"] = write_json(paths.real_data_report_file(root), report, indent=2, ensure_ascii=False)
    return out
