"""Answer extraction policy (acerl.grading.extract): last box chain, else last Answer: line, else None."""

from __future__ import annotations

import pytest

from acerl.grading import extract_answer
from acerl.grading.extract import answer_line, last_boxed_answer


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("so $x = \\boxed{\\frac{3}{4}}$.", "\\frac{3}{4}"),
        (
            "first \\boxed{1}. Much later, after a long argument that checks every case once more by hand, we get \\boxed{2}",
            "2",
        ),
        ("\\boxed{1}, then, since it must be odd, \\boxed{2}", "1,2"),
        ("nested braces \\boxed{\\frac{\\sqrt{2}}{2}} done", "\\frac{\\sqrt{2}}{2}"),
        ("\\fbox{7}", "7"),
        ("\\boxed {12}", "12"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        # boxes close together are one answer: a set (math-verify's rule)
        ("$\\boxed{2}$ or $\\boxed{3}$", "2,3"),
        ("\\boxed{2} \\boxed{3}", "2,3"),
        ("\\boxed{3} and \\boxed{3}", "3"),
        # an unclosed box (truncated response) is ignored
        ("we get \\boxed{5}. Check: \\boxed{6", "5"),
        ("the answer is \\boxed{\\frac{1}{2}", None),
        ("\\boxed{}", None),
    ],
)
def test_boxed(response, expected):
    assert extract_answer(response) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Step 1 ...\nAnswer: 34", "34"),
        ("Answer: $34$", "34"),
        ("**Answer:** $\\frac{3}{4}$.", "\\frac{3}{4}"),
        ("answer: \\(x = 3\\)", "x = 3"),
        ("Answer: 12\nsome more thinking\nAnswer: 13", "13"),
        ("Answer:\n70", "70"),
        ("Final Answer: The final answer is $3$. I hope it is correct.", "3"),
    ],
)
def test_answer_line(response, expected):
    assert extract_answer(response) == expected
    assert answer_line(response) == expected


def test_box_wins_over_answer_line():
    assert extract_answer("\\boxed{4}\nAnswer: 5") == "4"
    assert extract_answer("Answer: \\boxed{5}") == "5"


@pytest.mark.parametrize(
    "response", ["The answer is 34.", "x = 3", "", "I do not know", "Answer:", "Answer: $$"]
)
def test_no_anchor_is_no_answer(response):
    assert extract_answer(response) is None


def test_many_boxes_stay_cheap():
    """A degenerate response with 20,000 boxes: identical ones collapse, a distinct chain is capped at 64."""
    same = " ".join(["\\boxed{3}"] * 20000)
    distinct = " ".join(f"\\boxed{{{i}}}" for i in range(20000))
    assert last_boxed_answer(same) == "3"
    chained = last_boxed_answer(distinct)
    assert chained is not None and chained.endswith("19998,19999")
    assert chained.count(",") < 64
