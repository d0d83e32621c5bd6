"""The synthetic task: determinism, disjoint splits, correct worked solutions, the mistake model."""

from __future__ import annotations

import ast
import operator
import random
import re
from collections import Counter

import pytest

from acerl.data.synthetic import (
    DIFFICULTIES,
    MISTAKE_TYPES,
    ArithProblem,
    LinearProblem,
    carry_error,
    generate_split,
    resolve_difficulty,
    worked_solution,
    write_splits,
)
from acerl.pipeline.io import read_jsonl

SMALL = {"synth_easy": 30, "synth_hard": 20, "heldout": 20, "train": 60, "sft": 200}
BOX = re.compile(r"\\boxed\{(-?\d+)\}$")
STEP = re.compile(r"(-?\d+)([+\-*/])(-?\d+)=(-?\d+)\.")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def reference_value(problem: str) -> int:
    """Independent check: evaluate the problem text with Python's grammar (integers, + - * and brackets only)."""
    if problem.startswith("Compute "):

        def walk(node: ast.AST) -> int:
            if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
                return _OPS[type(node.op)](walk(node.left), walk(node.right))
            if isinstance(node, ast.Constant) and isinstance(node.value, int):
                return node.value
            raise AssertionError(f"unexpected syntax in {problem!r}")

        return walk(ast.parse(problem.removeprefix("Compute ").removesuffix("."), mode="eval").body)
    a, sign, b, c = re.fullmatch(r"Solve (\d*)x([+-])(\d+)=(-?\d+)\.", problem).groups()
    a, b, c = int(a or 1), int(b), int(c)
    rest = c - b if sign == "+" else c + b
    assert rest % a == 0, problem
    return rest // a


def wrong_steps(solution: str) -> int:
    """Steps ``l op r = v.`` whose arithmetic is wrong (division steps: ``v != l / r``)."""
    bad = 0
    for left, op, right, value in STEP.findall(solution):
        left, right, value = int(left), int(right), int(value)
        if op == "/":
            bad += left != value * right
        else:
            bad += {"+": left + right, "-": left - right, "*": left * right}[op] != value
    return bad


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    paths = write_splits(out, seed=7, sizes=SMALL, mistake_rate=0.3)
    return {
        name: read_jsonl(path, required=("id", "problem", "answer", "solution"))
        for name, path in paths.items()
    }


def test_writes_every_split_with_the_schema(splits):
    assert {name: len(rows) for name, rows in splits.items()} == SMALL
    for name, rows in splits.items():
        assert [r["id"] for r in rows] == [f"{name}-{i:05d}" for i in range(len(rows))]
        for r in rows:
            assert set(r) == {"id", "problem", "answer", "solution", "mistake", "kind", "difficulty", "steps"}
            assert isinstance(r["answer"], str) and re.fullmatch(r"-?\d+", r["answer"])


def test_same_seed_gives_identical_files_and_other_seed_differs(tmp_path):
    a = write_splits(tmp_path / "a", seed=3, sizes=SMALL)
    b = write_splits(tmp_path / "b", seed=3, sizes=SMALL)
    c = write_splits(tmp_path / "c", seed=4, sizes=SMALL)
    for split in SMALL:
        assert a[split].read_bytes() == b[split].read_bytes()
        assert a[split].read_bytes() != c[split].read_bytes()


def test_evaluation_splits_do_not_depend_on_training_sizes(tmp_path):
    a = write_splits(tmp_path / "a", seed=3, sizes=SMALL)
    b = write_splits(tmp_path / "b", seed=3, sizes={**SMALL, "train": 10, "sft": 500})
    for split in ("synth_easy", "synth_hard", "heldout"):
        assert a[split].read_bytes() == b[split].read_bytes()


def test_splits_are_disjoint_and_duplicate_free(splits):
    seen: Counter[str] = Counter(r["problem"] for rows in splits.values() for r in rows)
    assert max(seen.values()) == 1


def test_answers_are_correct_and_clean_solutions_box_them(splits):
    for name, rows in splits.items():
        for r in rows:
            assert r["answer"] == str(reference_value(r["problem"])), r
            if r["mistake"] is None:
                assert BOX.search(r["solution"]).group(1) == r["answer"], r
                assert wrong_steps(r["solution"]) == 0, r
            else:
                assert name == "sft"


def test_solutions_are_short(splits):
    lengths = [len(r["solution"]) for rows in splits.values() for r in rows]
    assert max(lengths) <= 100
    assert 15 <= sum(lengths) / len(lengths) <= 60


def test_difficulty_orders_steps_and_length(splits):
    def mean(rows, key):
        return sum(key(r) for r in rows) / len(rows)

    easy, hard = splits["synth_easy"], splits["synth_hard"]
    assert {r["difficulty"] for r in easy} == {"easy"} and {r["difficulty"] for r in hard} == {"hard"}
    assert mean(easy, lambda r: len(r["solution"])) < mean(hard, lambda r: len(r["solution"]))
    assert mean(easy, lambda r: r["steps"]) < mean(hard, lambda r: r["steps"])
    assert {r["kind"] for r in easy} == {"arith", "linear"}


def test_mistakes_give_a_wrong_box_at_the_configured_rate():
    rows = generate_split("sft", 3000, seed=1, difficulty=["easy", "medium", "hard"], mistake_rate=0.25)
    wrong = [r for r in rows if BOX.search(r["solution"]).group(1) != r["answer"]]
    assert [r["mistake"] is not None for r in rows] == [r in wrong for r in rows]
    assert abs(len(wrong) / len(rows) - 0.25) < 0.03
    kinds = Counter(r["mistake"] for r in wrong)
    assert set(kinds) == set(MISTAKE_TYPES)  # every error mode occurs
    for r in wrong:  # exactly one wrong computation for the step-level mistakes
        if r["mistake"] in ("off_by_one", "carry", "wrong_op"):
            assert wrong_steps(r["solution"]) == 1, r
        else:  # copy / sign / early_stop: arithmetic right; wrong operand, sign, or a step skipped
            assert wrong_steps(r["solution"]) == 0, r


def test_mistake_rate_extremes_and_weights():
    clean = generate_split("sft", 200, seed=2, difficulty="easy", mistake_rate=0.0)
    assert all(r["mistake"] is None for r in clean)
    only_carry = generate_split("sft", 300, seed=2, difficulty="medium", mistake_rate=1.0,
                                mistake_weights={"carry": 1.0})  # fmt: skip
    kinds = Counter(r["mistake"] for r in only_carry)
    assert set(kinds) <= {"carry", None} and kinds["carry"] > 150  # None only where no carry or borrow occurs


def test_worked_examples():
    arith = ArithProblem(start=3, ops=(("+", 4), ("*", 2), ("-", 5)))
    assert arith.text == "Compute (3+4)*2-5."
    assert arith.solve() == ("3+4=7. 7*2=14. 14-5=9. \\boxed{9}", 9)
    assert arith.solve((1, "copy")) == ("3+4=7. 3*2=6. 6-5=1. \\boxed{1}", 1)
    assert arith.solve((1, "wrong_op")) == ("3+4=7. 7*2=9. 9-5=4. \\boxed{4}", 4)
    assert arith.solve((0, "off_by_one"), offset=-1) == ("3+4=6. 6*2=12. 12-5=7. \\boxed{7}", 7)
    assert arith.solve((2, "early_stop")) == ("3+4=7. 7*2=14. \\boxed{14}", 14)
    assert arith.solve((0, "copy")) is None and arith.solve((0, "sign")) is None
    assert arith.solve((0, "early_stop")) is None
    assert ArithProblem(start=12, ops=(("-", 3), ("-", 4))).text == "Compute 12-3-4."
    linear = LinearProblem(a=3, sign="+", b=4, c=19)
    assert linear.text == "Solve 3x+4=19." and linear.answer == 5
    assert linear.solve() == ("3x=19-4=15. x=15/3=5. \\boxed{5}", 5)
    assert linear.solve((1, "wrong_op")) == ("3x=19-4=15. x=15/3=45. \\boxed{45}", 45)
    assert linear.solve((1, "early_stop")) == ("3x=19-4=15. \\boxed{15}", 15)
    assert LinearProblem(a=1, sign="-", b=4, c=9).solve() == ("x=9+4=13. \\boxed{13}", 13)
    assert LinearProblem(a=1, sign="-", b=4, c=9).solve((0, "sign")) == ("x=9-4=5. \\boxed{5}", 5)
    assert LinearProblem(a=2, sign="+", b=4, c=10).solve((1, "copy")) == (
        "2x=10-4=6. x=10/2=5. \\boxed{5}",
        5,
    )


def test_carry_error():
    assert carry_error("+", 27, 15) == 32
    assert carry_error("-", 42, 17) == 35
    assert carry_error("*", 14, 3) == 32 and carry_error("*", 3, 14) == 32
    assert (
        carry_error("-", 3, 14) is None
        and carry_error("*", 14, 13) is None
        and carry_error("+", -1, 2) is None
    )


def test_boxed_answers_verify_with_math_verify(splits):
    """The generated solutions verify against their answers. math-verify's 5-second time limits are raised: its
    first parse in a process builds the LaTeX parser, which a loaded 2-core machine can take longer than that
    for (a timed-out parse returns ``[]``, which would read as a wrong answer)."""
    math_verify = pytest.importorskip("math_verify")

    def parse(text: str) -> list:
        return math_verify.parse(text, parsing_timeout=300, raise_on_error=True)

    for r in splits["synth_hard"][:10] + splits["synth_easy"][:10]:
        gold = parse(f"${r['answer']}$")
        assert gold, r
        assert math_verify.verify(gold, parse(r["solution"]), timeout_seconds=300), r
        assert not math_verify.verify(gold, parse(f"\\boxed{{{int(r['answer']) + 1}}}"), timeout_seconds=300)


def test_worked_solution_is_seeded():
    problem = LinearProblem(a=1, sign="+", b=27, c=42)
    a = [worked_solution(problem, random.Random(5), mistake_rate=0.5) for _ in range(3)]
    assert a[0] == a[1] == a[2]


def test_bad_arguments_raise_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown difficulty 'nightmare'"):
        resolve_difficulty("nightmare")
    with pytest.raises(ValueError, match="unknown Difficulty field"):
        resolve_difficulty({"max_step": 3})
    assert resolve_difficulty({"max_steps": 3, "max_value": 500})[0][1].max_steps == 3
    with pytest.raises(ValueError, match="no difficulty"):
        write_splits(tmp_path, sizes={"extra": 5})
    with pytest.raises(ValueError, match="unknown mistake type"):
        worked_solution(ArithProblem(1, (("+", 2),)), random.Random(0), 1.0, {"typo": 1.0})
    with pytest.raises(RuntimeError, match="too few distinct problems"):
        generate_split("tiny", 50, seed=0, difficulty={"max_steps": 1, "max_operand": 2, "max_factor": 2,
                                                       "max_value": 4, "linear_share": 0.0})  # fmt: skip
    assert set(DIFFICULTIES) == {"easy", "medium", "hard"}
