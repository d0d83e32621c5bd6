"""The exact fast path never disagrees with math-verify (acerl.grading.fastpath vs acerl.grading.backend)."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from acerl.grading.backend import grade_answer
from acerl.grading.fastpath import fast_verdict, simple_number


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("34", Fraction(34)),
        ("-7", Fraction(-7)),
        ("034", Fraction(34)),
        ("-0", Fraction(0)),
        (" 3/4 ", Fraction(3, 4)),
        ("-3 / 4", Fraction(-3, 4)),
        ("\\frac{3}{4}", Fraction(3, 4)),
        ("\\dfrac{6}{8}", Fraction(3, 4)),
        ("\\tfrac{-3}{4}", Fraction(-3, 4)),
        ("-\\frac{-3}{4}", Fraction(3, 4)),
        ("12345678901234567890123", Fraction(12345678901234567890123)),
    ],
)
def test_simple_numbers(text, value):
    assert simple_number(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "0.5",
        "1,000",
        "+3",
        "3/0",
        "\\frac{3}{0}",
        "3/-4",
        "\\frac34",
        "x",
        "3x",
        "2^3",
        "10\\%",
        "1" * 51,
        "٣",
        "",
    ],
)
def test_not_simple_falls_through(text):
    assert simple_number(text) is None
    assert fast_verdict(text, "3") is None
    assert fast_verdict("3", text) is None


def test_identical_strings_are_correct():
    assert (
        fast_verdict(" \\left( 3, \\frac{\\pi}{2} \\right)", "\\left( 3, \\frac{\\pi}{2} \\right) ") is True
    )
    assert fast_verdict("x", "x") is True
    assert fast_verdict("", "") is None  # an empty gold is an error, not a match


def _forms(num: int, den: int) -> list[str]:
    """Ways to write num/den that the fast path accepts."""
    forms = [
        f"{num}/{den}",
        f"\\frac{{{num}}}{{{den}}}",
        f"\\dfrac{{{num}}}{{{den}}}",
        f"\\tfrac{{{num}}}{{{den}}}",
    ]
    forms += [f"-\\frac{{{num}}}{{{den}}}", f"{num} / {den}"]
    if den == 1:
        forms += [str(num), f"-0{-num}" if num < 0 else f"0{num}"]
    if num < 0:
        forms += [f"-\\frac{{{-num}}}{{{den}}}"]
    return forms


def _generated_pairs(n_pairs: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    values = [
        (0, 1),
        (1, 1),
        (-1, 1),
        (34, 1),
        (-7, 1),
        (3, 4),
        (-3, 4),
        (6, 8),
        (6, 2),
        (0, 5),
        (1, 3),
        (2, 6),
    ]
    values += [(10, 5), (7, 7), (100, 10), (12345678901234567890123, 1), (-5, 15)]
    values += [(rng.randint(-60, 60), rng.randint(1, 12)) for _ in range(25)]
    texts = sorted({text for num, den in values for text in _forms(num, den)})
    pairs = [(a, b) for a in texts for b in texts]
    # keep every equal-valued pair type represented: half equal values, half random
    equal = [p for p in pairs if simple_number(p[0]) == simple_number(p[1])]
    rng.shuffle(equal)
    rng.shuffle(pairs)
    return equal[: n_pairs // 2] + pairs[: n_pairs - n_pairs // 2]


def _disagreements(pairs: list[tuple[str, str]]) -> list[tuple[str, str, bool, tuple]]:
    out = []
    for pred, gold in pairs:
        fast = fast_verdict(pred, gold)
        assert fast is not None, (pred, gold)
        outcome = grade_answer(pred, gold, 10)
        if outcome != (fast, "ok", None):
            out.append((pred, gold, fast, outcome))
    return out


def test_fast_path_agrees_with_math_verify():
    """300 generated pairs (half of them equal in value) through math-verify itself, in-process."""
    pairs = _generated_pairs(300)
    assert sum(fast_verdict(*p) for p in pairs) >= 150
    assert _disagreements(pairs) == []


@pytest.mark.slow
def test_fast_path_agrees_with_math_verify_many():
    pairs = _generated_pairs(4000, seed=1)
    assert _disagreements(pairs) == []


def _math500_answers(shared_data, every: int) -> list[str]:
    import json

    lines = (shared_data / "math500.jsonl").read_text(encoding="utf-8").splitlines()
    answers = [json.loads(line)["answer"] for line in lines]
    return [a for a in answers if simple_number(a) is None][::every]


def test_identical_math500_answers_agree_with_math_verify(shared_data):
    """math-verify finds each MATH-500 answer (not a simple number) equal to itself: a sample of 30."""
    answers = _math500_answers(shared_data, every=5)
    assert len(answers) >= 25
    assert _disagreements([(a, a) for a in answers]) == []


@pytest.mark.slow
def test_identical_math500_answers_agree_with_math_verify_all(shared_data):
    assert _disagreements([(a, a) for a in _math500_answers(shared_data, every=1)]) == []
