"""The evaluation pipeline's parts (acerl.evaluate.pipeline) one by one: the shard seeds, the tokenizer and
prompt helpers, the sampler's loading and closing, and the messages of bad input. ``test_pipeline.py`` runs the
stages end to end with a sampler it passes in; these tests cover what that leaves out (the seeds' derivation
pinned, a sampler loaded from the configuration, the fixes named by errors)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_pipeline import Interrupted, Recording

from acerl.config import Run, load_config
from acerl.errors import BadInputError
from acerl.evaluate import pipeline
from acerl.evaluate.pipeline import (
    SCORED_COLUMNS,
    _relative,
    eval_shard_seed,
    generation_rows,
    grade_run,
    load_sampler,
    passk_run,
    problem_counts,
    render_prompts,
    rerun,
    sample_run,
    scored_frame,
    tokenizer_of,
)
from acerl.generate import make_sampler
from acerl.generate.base import Completion, SamplingParams
from acerl.grading import Verdict
from acerl.models.tiny import TinyModelConfig, build_tiny_model
from acerl.models.tokenizer import build_char_tokenizer
from acerl.pipeline import paths
from acerl.pipeline.io import read_jsonl, write_jsonl
from acerl.pipeline.provenance import software_stamp
from acerl.pipeline.records import read_json
from acerl.pipeline.seeds import EVAL_SEED_STREAM, name_part
from acerl.prompts import BOXED_INSTRUCTION

REPO = Path(__file__).resolve().parents[2]
RUN = Run("tiny", "grpo", 3)
PINNED = [510991538, 1895177159, 793177634]
"""The shard seeds of evaluation.seed 1234, synth_easy, run seed 0, shards 0-2 (every stored generation used them)."""


def _tiny_policy(root: Path, tok) -> Path:
    """A random 1-layer tiny Llama and ``tok`` saved as the policy folder of ``RUN`` under ``root``."""
    config = TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=32)
    policy = paths.policy_dir(root, RUN)
    build_tiny_model(config, tok, seed=0).save_pretrained(policy)
    tok.save_pretrained(policy)
    return policy


def test_eval_shard_seed_is_the_seed_sequence_of_all_its_parts_and_pinned():
    """The shard's seed mixes the stream, ``evaluation.seed``, the benchmark, the run's seed and the shard index
    (numpy's SeedSequence); a change to the derivation changes every evaluation draw, so values are pinned."""
    parts = [EVAL_SEED_STREAM, 1234, name_part("synth_easy"), 3, 2]
    by_hand = int(np.random.SeedSequence(parts).generate_state(1, dtype=np.uint32)[0])
    assert eval_shard_seed(1234, "synth_easy", 3, 2) == by_hand
    assert EVAL_SEED_STREAM == 0
    assert [eval_shard_seed(1234, "synth_easy", 0, i) for i in range(3)] == PINNED
    base = eval_shard_seed(1234, "synth_easy", 3, 2)
    others = {
        eval_shard_seed(1235, "synth_easy", 3, 2),
        eval_shard_seed(1234, "synth_hard", 3, 2),
        eval_shard_seed(1234, "synth_easy", 4, 2),
        eval_shard_seed(1234, "synth_easy", 3, 3),
    }
    assert base not in others and len(others) == 4  # every part matters


def test_tokenizer_of_prefers_the_sampler_s_and_loads_the_folder_s_otherwise(tmp_path):
    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)

    class WithTokenizer:
        tokenizer = object()

    assert tokenizer_of(WithTokenizer(), tmp_path / "nowhere") is WithTokenizer.tokenizer
    loaded = tokenizer_of(object(), tmp_path)
    assert loaded.encode("1+2=3", add_special_tokens=False) == tok.encode("1+2=3", add_special_tokens=False)
    with pytest.raises(Exception, match="nowhere"):
        tokenizer_of(object(), tmp_path / "nowhere")


def test_render_prompts_hands_the_tokenizer_to_chat_templates():
    tok = build_char_tokenizer()
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    assert render_prompts(["1+1"], "llama_boxed", tok) == [
        "<user>1+1\nPlease reason step by step, and put your final answer within \\boxed{}."
    ]
    assert render_prompts(["1+1", "2+2"], "plain", None) == [
        "Problem: 1+1\nSolution:",
        "Problem: 2+2\nSolution:",
    ]


class _Closing:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_load_sampler_passes_the_rule_and_device_and_closes_what_it_loaded(monkeypatch, tmp_path):
    cfg = load_config(REPO / "config" / "config.yaml", ["compute.device=cpu"])
    calls: list[dict] = []
    made: list[_Closing] = []

    def factory(cfg_, model_dir, **kwargs):
        calls.append({"cfg": cfg_, "model_dir": model_dir, **kwargs})
        made.append(_Closing())
        return made[-1]

    monkeypatch.setattr(pipeline, "sampler_from_config", factory)
    with load_sampler(cfg, tmp_path, model="tiny", rule="diagnose", device="cuda:1") as smp:
        assert smp is made[0] and made[0].closed == 0
    assert made[0].closed == 1
    assert calls == [
        {"cfg": cfg, "model_dir": tmp_path, "model": "tiny", "rule": "diagnose", "device": "cuda:1"}
    ]
    given = _Closing()
    with load_sampler(cfg, tmp_path, model="tiny", rule="sample", device=None, sampler=given) as smp:
        assert smp is given
    assert given.closed == 0 and len(calls) == 1  # a sampler passed in is the caller's to close
    with pytest.raises(RuntimeError, match="inside"):
        with load_sampler(cfg, tmp_path, model="tiny", rule="sample", device=None):
            raise RuntimeError("inside")
    assert made[1].closed == 1  # closed on an error too


def test_sample_run_loads_the_run_s_policy_renders_chat_prompts_and_samples_with_the_shard_seed(
    monkeypatch, tmp_path
):
    """Without a sampler, ``sample_run`` loads ``paths.policy_dir`` with ``rule="sample"`` and the device asked
    for, through the configured backend (a real HF sampler on a random tiny model here); a chat template gets
    the policy's tokenizer; each shard is sampled with its own seed (:func:`eval_shard_seed`), which the row
    records and which reproduces its completions."""
    cfg = load_config(
        REPO / "config" / "config.yaml",
        [
            "evaluation.n=2",
            "evaluation.ks=[1,2]",
            "evaluation.shard_size=1",
            "models.tiny.train.max_response_length=4",
            "families.dapo.overlong.buffer=2",
            "models.tiny.template=llama_boxed",
            "compute.device=cpu",
        ],
    )
    tok = build_char_tokenizer()
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    policy = _tiny_policy(tmp_path, tok)
    problems = [{"id": "p0", "problem": "1+1", "answer": "2"}, {"id": "p1", "problem": "2+3", "answer": "5"}]
    write_jsonl(paths.data_file(tmp_path, "synth_easy"), problems)
    seen: list[tuple] = []
    real = pipeline.sampler_from_config

    def recording(cfg_, model_dir, **kwargs):
        seen.append((Path(model_dir), kwargs["rule"], kwargs["device"]))
        return real(cfg_, model_dir, **kwargs)

    monkeypatch.setattr(pipeline, "sampler_from_config", recording)
    out = sample_run(cfg, RUN, "synth_easy", tmp_path, progress=False, device="cpu")
    rows = read_jsonl(out, required=("prompt", "sampling", "completions"))
    assert seen == [(policy, "sample", "cpu")]
    assert rows[1]["prompt"] == "<user>2+3\n" + BOXED_INSTRUCTION
    sampler = make_sampler("hf", policy, device="cpu", batch_size=cfg.evaluation.batch_size)
    for shard, row in enumerate(rows):
        seed = eval_shard_seed(cfg.evaluation.seed, "synth_easy", RUN.seed, shard)
        assert row["sampling"]["seed"] == seed
        again = sampler.generate([row["prompt"]], SamplingParams(n=2, temperature=0.7, top_p=0.95,
                                                                  max_new_tokens=4, seed=seed))  # fmt: skip
        assert [c.text for c in again[0]] == [c["text"] for c in row["completions"]]
    other = sampler.generate([rows[0]["prompt"]], SamplingParams(n=2, temperature=0.7, top_p=0.95,
                                                                  max_new_tokens=4, seed=0))  # fmt: skip
    assert [c.text for c in other[0]] != [c["text"] for c in rows[0]["completions"]]  # the seed matters


def test_sample_run_refuses_an_empty_benchmark_naming_its_file(tmp_path):
    cfg = load_config(REPO / "config" / "config.yaml")
    write_jsonl(paths.data_file(tmp_path, "synth_hard"), [])
    with pytest.raises(BadInputError, match=rf"^{paths.data_file(tmp_path, 'synth_hard')}: no problems .*"):
        sample_run(cfg, RUN, "synth_hard", tmp_path, progress=False)


def test_generation_rows_refuse_lists_of_different_lengths():
    done = [Completion(text="2", token_ids=[1], finish_reason="stop")]
    with pytest.raises(ValueError, match="^2 problems, 1 prompts, 2 completion lists$"):
        generation_rows([{"id": 1, "answer": 2}] * 2, ["p"], [done, done], {}, "m")
    rows = generation_rows([{"id": 1, "answer": 2}], ["p"], [done], {"n": 1}, "models/x")
    assert rows[0]["completions"] == [{"text": "2", "finish_reason": "stop", "num_tokens": 1}]
    assert (rows[0]["id"], rows[0]["answer"], rows[0]["model_dir"]) == ("1", "2", "models/x")


def test_relative_paths_inside_the_root_and_as_given_outside(tmp_path):
    assert _relative(tmp_path / "models" / "x", tmp_path) == "models/x"
    outside = tmp_path.parent / "elsewhere" / "model"
    assert _relative(outside, tmp_path) == str(outside)
    assert _relative(tmp_path / "a", str(tmp_path)) == "a"


def test_rerun_names_the_command_that_writes_the_output_again():
    assert rerun("sample", RUN, "synth_easy") == (
        "rerun `acerl sample --model tiny --method grpo --seed 3 --benchmark synth_easy` "
        "(or the workflow, which reruns the job)"
    )


@pytest.mark.parametrize("change", ["problem id", "evaluation seed", "model files", "nothing"])
def test_finished_shards_are_reused_only_for_the_same_items_seed_and_model(tmp_path, change):
    """A killed sampling job leaves its finished shards; the rerun keeps them only if the problems (ids and
    prompts), the sampling settings and the model folder are those the shards were made with."""
    overrides = ["evaluation.n=2", "evaluation.shard_size=1", "evaluation.ks=[1,2]",
                 "models.tiny.train.max_response_length=4", "families.dapo.overlong.buffer=2", "compute.device=cpu"]  # fmt: skip
    cfg = load_config(REPO / "config" / "config.yaml", overrides)
    policy = _tiny_policy(tmp_path, build_char_tokenizer())
    problems = [{"id": f"p{i}", "problem": f"{i}+1", "answer": str(i + 1)} for i in range(3)]
    write_jsonl(paths.data_file(tmp_path, "synth_easy"), problems)
    inner = make_sampler("hf", policy, device="cpu", batch_size=8)
    with pytest.raises(Interrupted):
        sample_run(cfg, RUN, "synth_easy", tmp_path, sampler=Recording(inner, fail_after=2), progress=False)
    if change == "problem id":
        problems[0]["id"] = "renamed"
        write_jsonl(paths.data_file(tmp_path, "synth_easy"), problems)
    elif change == "evaluation seed":
        cfg = load_config(REPO / "config" / "config.yaml", [*overrides, "evaluation.seed=99"])
    elif change == "model files":
        (policy / "generation_config.json").write_text('{"note": "another model"}', encoding="utf-8")
    rerun = Recording(inner)
    sample_run(cfg, RUN, "synth_easy", tmp_path, sampler=rerun, progress=False)
    assert len(rerun.calls) == (1 if change == "nothing" else 3)


def test_scored_frame_by_hand_and_its_checks():
    rows = [
        {"id": 7, "completions": [{"num_tokens": 3, "finish_reason": "stop"}, {"num_tokens": 4, "finish_reason": "length"}]},
        {"id": "b", "completions": [{"num_tokens": 1, "finish_reason": "stop"}]},
    ]  # fmt: skip
    verdicts = [Verdict(True, "ok", "2"), Verdict(False, "no_answer", None), Verdict(False, "timeout", "x")]
    df = scored_frame(rows, verdicts)
    assert list(df.columns) == list(SCORED_COLUMNS)
    assert df.astype(object).where(df.notna(), None).to_dict("records") == [
        {"id": "7", "sample": 0, "correct": True, "status": "ok", "extracted": "2", "num_tokens": 3, "finish_reason": "stop"},
        {"id": "7", "sample": 1, "correct": False, "status": "no_answer", "extracted": None, "num_tokens": 4, "finish_reason": "length"},
        {"id": "b", "sample": 0, "correct": False, "status": "timeout", "extracted": "x", "num_tokens": 1, "finish_reason": "stop"},
    ]  # fmt: skip
    empty = scored_frame([], [])
    assert list(empty.columns) == list(SCORED_COLUMNS) and len(empty) == 0
    assert str(empty["num_tokens"].dtype) == "int64" and str(empty["id"].dtype) == "string"
    with pytest.raises(ValueError, match="^more verdicts than completions$"):
        scored_frame(rows, [*verdicts, Verdict(True, "ok", "2")])
    with pytest.raises(StopIteration):
        scored_frame(rows, verdicts[:2])


def test_broken_stage_files_name_the_command_that_writes_them_again(tmp_path):
    """A truncated generations file (grade) or an unreadable scored file (passk) is bad input whose message
    names the file and the command of the step that writes it."""
    cfg = load_config(REPO / "config" / "config.yaml", ["grading.workers=0"])
    gen = paths.generations_file(tmp_path, "synth_easy", RUN)
    gen.parent.mkdir(parents=True)
    gen.write_bytes(gzip.compress(b'{"id": "p0", "answer": "2", "completions": []}\n')[:-6])
    with pytest.raises(BadInputError) as err:
        grade_run(cfg, RUN, "synth_easy", tmp_path)
    assert str(gen) in str(err.value) and rerun("sample", RUN, "synth_easy") in str(err.value)
    scored = paths.scored_file(tmp_path, "synth_easy", RUN)
    scored.parent.mkdir(parents=True, exist_ok=True)
    scored.write_bytes(b"PAR1 not a parquet file")
    with pytest.raises(BadInputError) as err:
        passk_run(cfg, RUN, "synth_easy", tmp_path)
    assert str(scored) in str(err.value) and rerun("grade", RUN, "synth_easy") in str(err.value)


def test_problem_counts_keep_the_order_of_first_appearance_as_pandas_groupby_does():
    scored = pd.DataFrame({"id": ["b", "a", "b", "a", "c"], "correct": [True, False, True, True, False]})
    ids, n, c = problem_counts(scored["id"].tolist(), scored["correct"].tolist())
    assert ids == ["b", "a", "c"] and n.tolist() == [2, 2, 1] and c.tolist() == [2, 1, 0]
    assert n.dtype == np.int64 and c.dtype == np.int64
    grouped = scored.groupby("id", sort=False)["correct"].agg(["size", "sum"])  # the counts pandas gives
    assert ids == list(grouped.index) and n.tolist() == grouped["size"].tolist() == [2, 2, 1]
    assert c.tolist() == grouped["sum"].tolist()
    empty = problem_counts([], [])
    assert empty[0] == [] and empty[1].shape == empty[2].shape == (0,)
    with pytest.raises(ValueError, match="2 ids but 1 verdicts"):
        problem_counts(["a", "b"], [True])


def test_scored_columns_and_stamps_read_without_pandas_are_what_pandas_reads(tmp_path):
    """read_scored_columns (pyarrow alone) gives the columns and DataFrame.attrs that pandas reads back from a
    file grade_run wrote; a file without a column names it and the step to rerun."""
    cfg = load_config(REPO / "config" / "config.yaml", ["grading.workers=0"])
    rows = [
        {
            "id": f"p{i}",
            "answer": "4",
            "software": {"acerl": {"commit": "abc", "dirty": False}},
            "completions": [
                {"text": f"\\boxed{{{j}}}", "num_tokens": 3, "finish_reason": "stop"} for j in (4, 5)
            ],
        }
        for i in range(3)
    ]
    write_jsonl(paths.generations_file(tmp_path, "synth_easy", RUN), rows)
    scored_path = grade_run(cfg, RUN, "synth_easy", tmp_path)
    remake = rerun("grade", RUN, "synth_easy")
    columns, attrs = pipeline.read_scored_columns(scored_path, ("id", "correct"), remake)
    frame = pd.read_parquet(scored_path)
    assert columns == {"id": frame["id"].tolist(), "correct": frame["correct"].tolist()}
    assert columns["correct"] == [True, False] * 3
    assert attrs == frame.attrs and len(attrs["software"]) == 2  # the sampler's stamp and the grader's
    frame[["id"]].to_parquet(scored_path, index=False)
    with pytest.raises(BadInputError, match=r"lacks column\(s\) \['correct'\]; delete it and rerun"):
        pipeline.read_scored_columns(scored_path, ("id", "correct"), remake)


def test_passk_names_a_scored_file_with_fewer_samples_than_the_largest_k(tmp_path):
    """A scored file sampled under a smaller evaluation.n is bad input with a one-line fix, not a traceback."""
    cfg = load_config(REPO / "config" / "config.yaml", ["grading.workers=0", "evaluation.ks=[1,2]"])
    completions = [{"text": "\\boxed{4}", "num_tokens": 1, "finish_reason": "stop"}]
    rows = [
        {"id": "q", "answer": "4", "completions": completions * 2},
        {"id": "r", "answer": "4", "completions": completions},
    ]
    write_jsonl(paths.generations_file(tmp_path, "synth_easy", RUN), rows)
    scored = grade_run(cfg, RUN, "synth_easy", tmp_path)
    with pytest.raises(BadInputError) as err:
        passk_run(cfg, RUN, "synth_easy", tmp_path)
    message = str(err.value)
    assert str(scored) in message and "problem 'r' has 1 graded samples (1 problem(s) fewer than" in message
    assert (
        "largest k, 2," in message and rerun("sample", RUN, "synth_easy") in message and "\n" not in message
    )
    assert not paths.passk_file(tmp_path, "synth_easy", RUN).exists()


def test_a_passk_job_imports_no_pandas(tmp_path):
    """The Pass@k step reads its scored file with pyarrow (pandas' import is a third of the job's CPU)."""
    cfg = load_config(REPO / "config" / "config.yaml", ["grading.workers=0"])
    n = max(cfg.evaluation.ks)  # the job reads the default config: as many samples as its largest k
    completions = [{"text": "\\boxed{4}", "num_tokens": 1, "finish_reason": "stop"}] * n
    rows = [{"id": "q", "answer": "4", "completions": completions}]
    write_jsonl(paths.generations_file(tmp_path, "synth_easy", RUN), rows)
    grade_run(cfg, RUN, "synth_easy", tmp_path)
    code = (
        "import sys\n"
        "from acerl.cli import main\n"
        f"main(['passk', '--config', {str(REPO / 'config' / 'config.yaml')!r}, '--root', {str(tmp_path)!r},"
        f" '--model', {RUN.model!r}, '--method', {RUN.method!r}, '--seed', '{RUN.seed}',"
        " '--benchmark', 'synth_easy'])\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "False", out.stderr
    assert read_json(paths.passk_file(tmp_path, "synth_easy", RUN))["problems"] == [
        {"id": "q", "n": n, "c": n}
    ]


def test_grade_and_passk_records_by_hand(tmp_path):
    """grade_run keeps the stamps of what sampled (an older version here) beside its own; passk_run's record
    names the benchmark, model, method and seed and holds each problem's counts and Pass@k by hand."""
    cfg = load_config(REPO / "config" / "config.yaml", ["grading.workers=0", "evaluation.ks=[1,2]"])
    old = {"acerl": "0.0.1", "git": "0" * 40}
    rows = [
        {"id": "q2", "answer": "4", "software": old,
         "completions": [{"text": "\\boxed{4}", "num_tokens": 3, "finish_reason": "stop"},
                         {"text": "\\boxed{5}", "num_tokens": 3, "finish_reason": "stop"}]},
        {"id": "q1", "answer": "1", "software": old,
         "completions": [{"text": "no", "num_tokens": 2, "finish_reason": "length"},
                         {"text": "\\boxed{2}", "num_tokens": 3, "finish_reason": "stop"}]},
    ]  # fmt: skip
    write_jsonl(paths.generations_file(tmp_path, "synth_hard", RUN), rows)
    scored = pd.read_parquet(grade_run(cfg, RUN, "synth_hard", tmp_path))
    assert scored.attrs["software"] == [old, software_stamp()]
    assert scored["correct"].tolist() == [True, False, False, False]
    assert scored["status"].tolist() == ["ok", "ok", "no_answer", "ok"]
    record = read_json(passk_run(cfg, RUN, "synth_hard", tmp_path))
    assert {k: record[k] for k in ("benchmark", "model", "method", "seed", "ks", "num_problems")} == {
        "benchmark": "synth_hard", "model": "tiny", "method": "grpo", "seed": 3, "ks": [1, 2], "num_problems": 2
    }  # fmt: skip
    assert record["problems"] == [{"id": "q2", "n": 2, "c": 1}, {"id": "q1", "n": 2, "c": 0}]
    assert record["pass_at_k"] == {"1": pytest.approx(0.25), "2": pytest.approx(0.5)}
    assert record["software"] == [old, software_stamp()]
    curve = paths.passk_curve_file(tmp_path, "synth_hard", RUN).read_text(encoding="utf-8")
    assert curve == f"k\tpass_at_k\n1\t{record['pass_at_k']['1']!r}\n2\t{record['pass_at_k']['2']!r}\n"
    base = read_json(passk_run(cfg, Run("tiny", "base", 0), "synth_hard", _copy_scored(tmp_path, RUN)))
    assert base["seed"] is None and base["method"] == "base"


def _copy_scored(root: Path, run: Run) -> Path:
    """The scored file of ``run`` copied to the base model's place (what passk_run of the base reads)."""
    target = paths.scored_file(root, "synth_hard", Run("tiny", "base", 0))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(paths.scored_file(root, "synth_hard", run).read_bytes())
    return root


def test_grade_run_grades_with_the_configured_grader_and_passk_reads_a_scored_file_without_stamps(
    monkeypatch, tmp_path
):
    import acerl.grading

    built: list[dict] = []

    class Recording(acerl.grading.Grader):
        def __init__(self, *args, **kwargs):
            built.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(acerl.grading, "Grader", Recording)
    cfg = load_config(
        REPO / "config" / "config.yaml", ["grading.workers=0", "grading.timeout_s=7", "evaluation.ks=[1]"]
    )
    rows = [
        {
            "id": "q",
            "answer": "4",
            "completions": [{"text": "\\boxed{4}", "num_tokens": 3, "finish_reason": "stop"}],
        }
    ]
    write_jsonl(paths.generations_file(tmp_path, "synth_easy", RUN), rows)
    scored_path = grade_run(cfg, RUN, "synth_easy", tmp_path)
    assert built == [{"timeout_s": 7.0, "workers": 0}]
    plain = pd.read_parquet(scored_path)
    plain.attrs.clear()  # a scored file written before stamps were kept
    plain.to_parquet(scored_path, index=False)
    record = read_json(passk_run(cfg, RUN, "synth_easy", tmp_path))
    assert record["software"] == [software_stamp()] and record["problems"] == [{"id": "q", "n": 1, "c": 1}]


def _answered(ids: list[str], model_dir: str | None = None) -> list[dict]:
    """Generations rows of ``ids``: two completions each, one right; ``model_dir`` names the policy that sampled
    them (as sample_run writes it), or is left out (a file written by hand)."""
    completions = [
        {"text": "\\boxed{4}", "num_tokens": 3, "finish_reason": "stop"},
        {"text": "\\boxed{5}", "num_tokens": 3, "finish_reason": "stop"},
    ]
    made_by = {} if model_dir is None else {"model_dir": model_dir}
    return [{"id": i, "answer": "4", "completions": completions, **made_by} for i in ids]


def test_a_run_s_samples_of_part_of_the_benchmark_are_refused_by_grade_and_passk(tmp_path):
    """Generations of 2 of the benchmark's 4 problems were graded and scored with exit 0, and the report printed
    their Pass@k beside runs scored on every problem: grade and passk name the file, the count missing and the
    command that writes it again."""
    cfg = load_config(REPO / "config" / "config.yaml", ["grading.workers=0", "evaluation.ks=[1,2]"])
    ids = ["q0", "q1", "q2", "q3"]
    write_jsonl(
        paths.data_file(tmp_path, "synth_easy"), [{"id": i, "problem": "2+2", "answer": "4"} for i in ids]
    )
    gen = paths.generations_file(tmp_path, "synth_easy", RUN)
    write_jsonl(gen, _answered(ids[:2]))
    with pytest.raises(BadInputError) as err:
        grade_run(cfg, RUN, "synth_easy", tmp_path)
    assert str(err.value) == (
        f"{gen}: 2 of synth_easy's 4 problems (2 missing, e.g. 'q2'): a run's Pass@k is over all of them; "
        f"delete it and {rerun('sample', RUN, 'synth_easy')}"
    )
    assert not paths.scored_file(tmp_path, "synth_easy", RUN).exists()

    write_jsonl(gen, _answered(ids))  # a scored file of part of the benchmark (copied in): passk refuses it
    scored = grade_run(cfg, RUN, "synth_easy", tmp_path)
    frame = pd.read_parquet(scored)
    frame[frame["id"] != "q3"].to_parquet(scored, index=False)
    with pytest.raises(BadInputError) as err:
        passk_run(cfg, RUN, "synth_easy", tmp_path)
    assert str(err.value).startswith(f"{scored}: 3 of synth_easy's 4 problems (1 missing, e.g. 'q3'): ")
    assert str(err.value).endswith(f"delete it and {rerun('grade', RUN, 'synth_easy')}")
    assert not paths.passk_file(tmp_path, "synth_easy", RUN).exists()

    write_jsonl(gen, _answered([*ids, "z9"]))  # a problem the benchmark does not hold
    with pytest.raises(BadInputError, match=r"1 problem\(s\) not in .*synth_easy\.jsonl \(e\.g\. 'z9'\)"):
        grade_run(cfg, RUN, "synth_easy", tmp_path)


def test_another_run_s_samples_under_a_run_s_name_are_refused_by_grade_and_passk(tmp_path):
    """GRPO's generations copied in as another method's were graded and reported as that method: every row names
    the policy that sampled it, and grade and passk check it against the run asked for."""
    cfg = load_config(REPO / "config" / "config.yaml", ["grading.workers=0", "evaluation.ks=[1,2]"])
    grpo, other = Run("tiny", "grpo", 0), Run("tiny", "ace_grpo", 0)
    write_jsonl(
        paths.generations_file(tmp_path, "synth_easy", grpo), _answered(["q0"], "runs/tiny/grpo/seed0/final")
    )
    grade_run(cfg, grpo, "synth_easy", tmp_path)
    copied = paths.generations_file(tmp_path, "synth_easy", other)
    copied.parent.mkdir(parents=True, exist_ok=True)
    copied.write_bytes(paths.generations_file(tmp_path, "synth_easy", grpo).read_bytes())
    with pytest.raises(BadInputError) as err:
        grade_run(cfg, other, "synth_easy", tmp_path)
    assert str(err.value) == (
        f"{copied}: row id 'q0': sampled from runs/tiny/grpo/seed0/final, not from run tiny/ace_grpo/seed0's "
        f"policy runs/tiny/ace_grpo/seed0/final: it holds another run's samples; delete it and "
        f"{rerun('sample', other, 'synth_easy')}"
    )
    scored = paths.scored_file(tmp_path, "synth_easy", other)
    scored.parent.mkdir(parents=True, exist_ok=True)
    scored.write_bytes(paths.scored_file(tmp_path, "synth_easy", grpo).read_bytes())
    with pytest.raises(BadInputError, match=r"every row: sampled from runs/tiny/grpo/seed0/final, not from"):
        passk_run(cfg, other, "synth_easy", tmp_path)
    assert not paths.passk_file(tmp_path, "synth_easy", other).exists()


def test_empty_generations_and_scored_files_are_refused_naming_the_step(tmp_path):
    """An empty generations file was graded with exit 0, and passk of its scored file crashed in pass@k."""
    cfg = load_config(REPO / "config" / "config.yaml", ["grading.workers=0"])
    gen = paths.generations_file(tmp_path, "synth_easy", RUN)
    write_jsonl(gen, [])
    with pytest.raises(BadInputError) as err:
        grade_run(cfg, RUN, "synth_easy", tmp_path)
    assert (
        str(err.value)
        == f"{gen}: no problems (an empty file); delete it and {rerun('sample', RUN, 'synth_easy')}"
    )
    scored = paths.scored_file(tmp_path, "synth_easy", RUN)
    scored.parent.mkdir(parents=True)
    scored_frame([], []).to_parquet(scored, index=False)
    with pytest.raises(
        BadInputError, match=rf"^{scored}: no problems \(an empty file\); delete it and rerun `"
    ):
        passk_run(cfg, RUN, "synth_easy", tmp_path)


def test_passk_counts_the_grader_s_timeouts_and_the_report_names_them(tmp_path):
    """A sample the grader could not decide (``timeout`` after its retry) is scored incorrect and counted: the
    Pass@k record holds the count, and the study report's Grading paragraph names the run with it."""
    from acerl.report.study import grader_timeouts_note

    cfg = load_config(REPO / "config" / "config.yaml", ["grading.workers=0", "evaluation.ks=[1,2]"])
    write_jsonl(paths.generations_file(tmp_path, "synth_hard", RUN), _answered(["q1", "q2"]))
    scored_path = grade_run(cfg, RUN, "synth_hard", tmp_path)
    frame = pd.read_parquet(scored_path)
    assert read_json(passk_run(cfg, RUN, "synth_hard", tmp_path))["grader_timeouts"] == 0
    frame.loc[1, ["correct", "status"]] = [False, "timeout"]  # what a timeout after the retry leaves
    frame.to_parquet(scored_path, index=False)
    out = passk_run(cfg, RUN, "synth_hard", tmp_path)
    assert read_json(out)["grader_timeouts"] == 1
    note = grader_timeouts_note([out])
    assert "tiny/grpo/seed3 on synth_hard: 1 of 4" in note and "1 of 1 Pass@k files" in note
    old = read_json(out)
    del old["grader_timeouts"]  # a file written before the count
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert "none in 0 Pass@k files" in grader_timeouts_note([tmp_path / "old.json"])
    assert "1 Pass@k file(s) predate the count" in grader_timeouts_note([tmp_path / "old.json"])
