"""Real-data preparation (acerl.data.real): shared JSON Lines, hub layouts, de-duplication, errors, verl parquet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from transformers import PreTrainedTokenizerFast

from acerl.config import load_config
from acerl.data.real import (
    IDENTITY_CHAT_TEMPLATE,
    DataSourceError,
    dedupe_problems,
    normalize_rows,
    prepare_real_data,
    prepare_verl_data,
    prompt_messages,
    read_table,
    split_heldout,
    unwrap_dapo,
)
from acerl.models.tokenizer import build_char_tokenizer
from acerl.pipeline import paths
from acerl.pipeline.io import read_jsonl, write_jsonl, write_parquet
from acerl.prompts import BOXED_INSTRUCTION, DAPO_PREFIX, DAPO_SUFFIX, build_prompt, template_names

REPO = Path(__file__).resolve().parents[2]
CONFIGS = [REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"]


def _paper_cfg(train: str, math500: str, aime: str, *extra: str):
    """The paper config reading local files, one trained model, a small held-out set."""
    return load_config(
        CONFIGS,
        overrides=[
            f"data.real.train={{path: '{train}'}}",
            f"data.real.benchmarks.math500={{path: '{math500}'}}",
            f"data.real.benchmarks.aime2025={{path: '{aime}'}}",
            "data.real.heldout_size=64",
            "study.main.models=[qwen3_8b_base]",
            "study.alpha_sweep=null",
            "study.ablation=null",
            "study.diagnostics=null",
            *extra,
        ],
    )


# ------------------------------------------------------------------------------------- shared data
@pytest.fixture(scope="module")
def prepared(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("real")
    cfg = _paper_cfg(
        str(shared_data / "dapo_math_17k.jsonl"),
        str(shared_data / "math500.jsonl"),
        str(shared_data / "aime2025.jsonl"),
    )
    return cfg, root, prepare_real_data(cfg, root)


def test_shared_data_counts_and_dedupe(prepared) -> None:
    cfg, root, out = prepared
    report = json.loads(paths.real_data_report_file(root).read_text())
    # SOURCES.md: 17,917 distinct prompts, 17,290 distinct texts, 11 texts with conflicting answers
    assert report["train"]["rows"] == 17917
    assert report["train"]["kept"] == 17290
    assert report["train"]["dropped"] == 627
    assert report["train"]["conflicting"] == 11
    assert {"id": "dapo17k-00035", "answers": ["64", "6"]} in report["train"]["conflict_examples"]
    train, heldout = read_jsonl(out["train"]), read_jsonl(out["heldout"])
    assert len(heldout) == 64 and len(train) == 17290 - 64
    assert len(read_jsonl(out["math500"])) == 500 and len(read_jsonl(out["aime2025"])) == 30
    for split in ("train", "heldout", "math500", "aime2025"):
        assert out[split] == paths.data_file(root, split)
        assert set(read_jsonl(out[split])[0]) == {"id", "problem", "answer"}
    texts = [r["problem"] for r in train]
    assert len(set(texts)) == len(texts)
    assert not {r["id"] for r in train} & {r["id"] for r in heldout}
    assert not set(texts) & {r["problem"] for r in heldout}


def test_heldout_is_fixed_by_seed(prepared, shared_data: Path, tmp_path: Path) -> None:
    cfg, root, out = prepared
    rows, _ = dedupe_problems(read_jsonl(shared_data / "dapo_math_17k.jsonl"))
    _, again = split_heldout(rows, 64, cfg.data.real.heldout_seed)
    assert [r["id"] for r in again] == [r["id"] for r in read_jsonl(out["heldout"])]
    _, other = split_heldout(rows, 64, cfg.data.real.heldout_seed + 1)
    assert [r["id"] for r in other] != [r["id"] for r in again]


def test_shared_data_verl_parquet(prepared) -> None:
    cfg, root, out = prepared
    assert not any(k.startswith("verl/") for k in out)  # the prepare_verl_data stage's files
    verl = prepare_verl_data(cfg, root)
    assert set(verl) == {"verl/qwen3_8b_base/train", "verl/qwen3_8b_base/val"}
    train = pq.read_table(paths.verl_train_file(root, "qwen3_8b_base")).to_pylist()
    jsonl = read_jsonl(out["train"])
    assert len(train) == len(jsonl)
    first = train[0]
    assert set(first) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert first["data_source"] == "dapo_math_17k" and first["ability"] == "math"
    assert first["prompt"] == [{"role": "user", "content": f"{jsonl[0]['problem']}\n{BOXED_INSTRUCTION}"}]
    assert first["reward_model"] == {"style": "rule", "ground_truth": jsonl[0]["answer"]}
    assert first["extra_info"] == {"index": 0, "id": jsonl[0]["id"]}
    val = pq.read_table(paths.verl_val_file(root, "qwen3_8b_base")).to_pylist()
    assert [r["data_source"] for r in val] == ["math500"] * 500 + ["aime2025"] * 30
    assert [r["extra_info"]["index"] for r in val] == list(range(530))


# --------------------------------------------------------------------------------- prompt -> verl chat
def _chat_tokenizer() -> PreTrainedTokenizerFast:
    tok = build_char_tokenizer()
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if enable_thinking is defined and not enable_thinking %}<nothink>{% endif %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    return tok


@pytest.mark.parametrize("template", template_names())
def test_verl_chat_renders_like_build_prompt(template: str) -> None:
    """verl applies the chat template to the stored messages: it must give build_prompt's exact text."""
    tok = _chat_tokenizer()
    problem = "Compute 3+4.\nGive an integer."
    chat = prompt_messages(problem, template)
    if chat.raw:
        tok.chat_template = IDENTITY_CHAT_TEMPLATE
    rendered = tok.apply_chat_template(
        chat.messages, tokenize=False, add_generation_prompt=True, **chat.chat_template_kwargs
    )
    assert rendered == build_prompt(problem, template, _chat_tokenizer() if not chat.raw else None)


def test_qwen3_template_disables_thinking() -> None:
    assert prompt_messages("x", "qwen3_boxed_nothink").chat_template_kwargs == {"enable_thinking": False}
    assert prompt_messages("x", "plain").raw


# ------------------------------------------------------------------------------------ source layouts
def _hub_dapo_rows() -> list[dict]:
    """DAPO-Math-17k's hub layout: wrapped prompt, repeats, one text repeated with a conflicting answer."""

    def row(uid: str, problem: str, answer: str) -> dict:
        return {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": DAPO_PREFIX + problem + DAPO_SUFFIX}],
            "ability": "MATH",
            "reward_model": {"style": "rule-lighteval/MATH_v2", "ground_truth": answer},
            "extra_info": {"index": uid},
        }

    base = [row("u1", "Find 1+1.", "2"), row("u2", "Find 2+2.", "4"), row("u3", "Find 1+1.", "3")]
    return base * 3


def test_hub_dapo_parquet_layout(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "dapo.parquet", _hub_dapo_rows())
    rows = normalize_rows(read_table(path), "train", str(path))
    assert rows[0] == {"id": "u1", "problem": "Find 1+1.", "answer": "2"}
    kept, report = dedupe_problems(rows)
    assert [r["id"] for r in kept] == ["u1", "u2"]
    assert (report.rows, report.kept, report.dropped, report.conflicting) == (9, 2, 7, 1)
    assert report.conflict_examples == [{"id": "u1", "answers": ["2", "3"]}]


def test_math500_and_aime_hub_layouts(tmp_path: Path) -> None:
    m = write_jsonl(
        tmp_path / "math.jsonl",
        [
            {
                "problem": "p",
                "solution": "s",
                "answer": " 1/2 ",
                "subject": "x",
                "level": 1,
                "unique_id": "test/a/1.json",
            }
        ],
    )
    assert normalize_rows(read_table(m), "math500", str(m)) == [
        {"id": "test/a/1.json", "problem": "p", "answer": "1/2"}
    ]
    a = write_parquet(tmp_path / "aime.parquet", [{"problem_idx": 7, "problem": "q", "answer": 70}])
    assert normalize_rows(read_table(a), "aime2025", str(a)) == [{"id": "7", "problem": "q", "answer": "70"}]


def test_unwrap_dapo_only_when_fully_wrapped() -> None:
    assert unwrap_dapo(DAPO_PREFIX + "x" + DAPO_SUFFIX) == "x"
    assert unwrap_dapo(DAPO_PREFIX + "x") == DAPO_PREFIX + "x"
    assert unwrap_dapo("x") == "x"


# -------------------------------------------------------------------------------------------- errors
def test_missing_columns_name_file_and_columns(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "solution": "s"}])
    with pytest.raises(DataSourceError, match=r"bad\.jsonl.*columns found: \['question', 'solution'\]"):
        normalize_rows(read_table(path), "math500", str(path))


def test_empty_answers_name_rows(tmp_path: Path) -> None:
    rows = [{"id": str(i), "problem": f"p{i}", "answer": "" if i in (2, 5) else "1"} for i in range(1, 7)]
    path = write_jsonl(tmp_path / "empty.jsonl", rows)
    with pytest.raises(DataSourceError, match=r"empty\.jsonl: empty answer in row\(s\) 2, 5"):
        normalize_rows(read_table(path), "train", str(path))


def test_row_missing_nested_field(tmp_path: Path) -> None:
    rows = _hub_dapo_rows()[:2]
    rows[1] = {**rows[1], "prompt": []}
    path = write_parquet(tmp_path / "dapo.parquet", rows)
    with pytest.raises(DataSourceError, match=r"dapo\.parquet: row 2 lacks a field"):
        normalize_rows(read_table(path), "train", str(path))


def test_missing_file_and_bad_suffix(tmp_path: Path) -> None:
    with pytest.raises(DataSourceError, match="dataset file not found"):
        read_table(tmp_path / "nope.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DataSourceError, match="unsupported file type"):
        read_table(tmp_path / "x.csv")


def test_heldout_too_large() -> None:
    with pytest.raises(DataSourceError, match="heldout_size=3"):
        split_heldout([{"id": "a", "problem": "p", "answer": "1"}] * 3, 3, 0)


def test_duplicate_ids_rejected(tmp_path: Path) -> None:
    rows = [{"id": "same", "problem": "p1", "answer": "1"}, {"id": "same", "problem": "p2", "answer": "2"}]
    train = write_jsonl(tmp_path / "train.jsonl", rows + [{"id": "c", "problem": "p3", "answer": "3"}])
    bench = write_jsonl(tmp_path / "b.jsonl", [{"id": "b", "problem": "q", "answer": "1"}])
    cfg = _paper_cfg(str(train), str(bench), str(bench), "data.real.heldout_size=1")
    with pytest.raises(DataSourceError, match="id 'same' repeats"):
        prepare_real_data(cfg, tmp_path / "root")


def test_offline_hub_says_which_path_to_set(tmp_path: Path) -> None:
    """No local path and no hub access: the error names the config key to set (run offline, no network)."""
    bench = write_jsonl(tmp_path / "b.jsonl", [{"id": "b", "problem": "q", "answer": "1"}])
    overrides = [
        f"data.real.train={{path: '{bench}'}}",
        f"data.real.benchmarks.aime2025={{path: '{bench}'}}",
        "data.real.benchmarks.math500={path: null, hub_id: HuggingFaceH4/MATH-500, hub_split: test}",
        "data.real.heldout_size=0",
    ]
    code = f"""
from acerl.config import load_config
from acerl.data.real import DataSourceError, prepare_real_data
cfg = load_config({[str(p) for p in CONFIGS]!r}, overrides={overrides!r})
try:
    prepare_real_data(cfg, {str(tmp_path / "root")!r})
except DataSourceError as e:
    print(e)
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "HuggingFaceH4/MATH-500" in proc.stdout, proc.stderr[-2000:]
    assert "Set data.real.benchmarks.math500.path" in proc.stdout


def test_a_relative_dataset_path_is_read_under_the_work_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``data.real.<name>.path`` is relative to ``--root`` (docs/config.md), not to the directory acerl runs in."""
    root = tmp_path / "work"
    rows = [{"id": str(i), "problem": f"p{i}", "answer": str(i)} for i in range(4)]
    write_jsonl(root / "inputs" / "train.jsonl", rows)
    write_jsonl(root / "inputs" / "bench.jsonl", rows[:1])
    monkeypatch.chdir(tmp_path)  # the working directory holds no inputs/
    cfg = _paper_cfg(
        "inputs/train.jsonl", "inputs/bench.jsonl", "inputs/bench.jsonl", "data.real.heldout_size=1"
    )
    out = prepare_real_data(cfg, root)
    assert len(read_jsonl(out["train"])) == 3 and len(read_jsonl(out["math500"])) == 1


def test_a_missing_dataset_file_is_exit_3_naming_file_key_and_work_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was exit 4 naming the path only, resolved against the working directory; ``acerl config`` said ok."""
    from acerl.cli import main
    from acerl.errors import MissingInputError

    root = tmp_path / "work"
    bench = write_jsonl(tmp_path / "b.jsonl", [{"id": "b", "problem": "q", "answer": "1"}])
    cfg = _paper_cfg("inputs/train.jsonl", str(bench), str(bench), "data.real.heldout_size=0")
    with pytest.raises(MissingInputError) as e:
        prepare_real_data(cfg, root)
    assert e.value.exit_code == 3
    assert str(e.value).startswith(
        f"dataset file not found: {root / 'inputs' / 'train.jsonl'} (data.real.train.path: 'inputs/train.jsonl', "
        f"relative to the work directory --root {root})"
    )
    monkeypatch.chdir(REPO)
    argv = ["--config", "config/paper.yaml", "--set", "data.real.train={path: inputs/train.jsonl}"]
    assert main(["config", *argv, "--root", str(root)]) == 0  # a warning: the study may run elsewhere
    out, err = capsys.readouterr()
    assert out.startswith("ok: ")
    assert err.startswith(f"acerl config: warning: dataset file not found: {root / 'inputs' / 'train.jsonl'}")
    assert main(["prepare-data", *argv, "--root", str(root)]) == 3
    assert "acerl prepare-data: missing input: dataset file not found" in capsys.readouterr().err
