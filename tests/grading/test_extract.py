"""Answer extraction policy (acerl.grading.extract): last box chain, else last Answer: line, else None."""

from __future__ import annotations

import subprocess
import sys

import pytest

from acerl.grading import extract_answer
from acerl.grading.extract import (
    answer_line,
    last_boxed_answer,
    math_normalization,
    standalone_math_normalization,
)

BOXED_CASES = [
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
]


@pytest.mark.parametrize(("response", "expected"), BOXED_CASES)
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


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        # a bare variable as the last math segment names the quantity; the value after it is the answer
        ("Answer: The largest $n$ is 34.", "34"),
        ("Answer: the value of $k$ = 12, so we are done", "12"),
        ("Answer: $x_1$ equals 5", "5"),
        ("Answer: $\\theta$ is 30 degrees", "30"),
        ("Answer: $34$ is the largest $n$", "34"),
        # neighbours that keep their math segment
        ("Answer: $x$", "x"),
        ("Answer: $\\pi$", "\\pi"),
        ("Answer: $n = 34$", "n = 34"),
        ("Answer: the largest is $34$", "34"),
        ("Answer: $3$, $4$ are the values of $x$", "3,4"),
        ("Answer: $x = 3$ and $y = 4$", "x = 3,y = 4"),
        # prose without $: the number it states (after the last "=", else the first), never the whole sentence
        ("Answer: The largest n is 34.", "34"),
        ("Answer: we get 3 + 4 = 7", "7"),
        ("Answer: 34 apples", "34"),
        ("Answer: 1,234 ways", "1,234"),
        ("Answer: The rate is 28%.", "28%"),
        ("Answer: it is Evelyn", None),
        ("Answer: the triangle is equilateral", None),
        # formulas and one-word answers without $ stay whole
        ("Answer: Evelyn", "Evelyn"),
        ("Answer: \\text{Monday}", "\\text{Monday}"),
        ("Answer: x = 3", "x = 3"),
        ("Answer: 3 cm", "3 cm"),
        ("Answer: sqrt(2)", "sqrt(2)"),
        ("Answer: 3 and 4", "3 and 4"),
        ("Answer: \\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}"),
    ],
)
def test_an_answer_line_sentence_is_graded_by_the_value_it_states(response, expected):
    assert extract_answer(response) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        # an interval, a tuple or a set stated in prose is the whole group, never its last number
        ("Answer: The interval is (2, 5).", "(2, 5)"),
        ("Answer: The ordered pair is (3, 4).", "(3, 4)"),
        ("Answer: the interval [2, 5] contains it", "[2, 5]"),
        ("Answer: the answer is [2, 5)", "[2, 5)"),
        ("Answer: the set is {1, 2, 3}", "{1, 2, 3}"),
        ("Answer: x lies in (-\\infty, 2]", "(-\\infty, 2]"),
        ("Answer: $x$ lies in (2, 5)", "(2, 5)"),
        ("Answer: $(a, b)$ = (3, 4)", "(3, 4)"),
        # several numbers the sentence joins with , / and / or are a set, as several boxes or $..$ segments are
        ("Answer: The solutions are 2 and 5.", "2,5"),
        ("Answer: The values are 1, 2, and 3.", "1,2,3"),
        ("Answer: $x$ is 2 or 5", "2,5"),
        ("Answer: the solutions are x = 2 and x = 5", "2,5"),
        # neighbours that stay one number
        ("Answer: it is 34, not 35", "34"),
        ("Answer: 1,234 ways", "1,234"),
    ],
)
def test_a_sentence_stating_several_numbers_is_graded_by_all_of_them(response, expected):
    """A sentence whose value is more than one number was graded by one of them (``The interval is (2, 5).`` as
    ``5``): math-verify reads ``(2, 5)`` as an interval, ``2,5`` as a set."""
    assert extract_answer(response) == expected


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


def test_boxes_are_found_without_importing_sympy():
    """Extraction loads math-verify's normalisation module on its own: a job whose answers the fast path decides
    never imports sympy or the LaTeX parser (0.4-0.5 s of CPU per process)."""
    code = (
        "import sys\n"
        "from acerl.grading import Grader, extract_answer\n"
        "with Grader(workers=0) as g:\n"
        "    verdicts = g.grade_many([(r'so \\boxed{3}.', '3'), (r'\\boxed{\\frac{6}{8}}', '3/4')])\n"
        "print(extract_answer(r'\\boxed{3} and \\boxed{4}'), [v.correct for v in verdicts])\n"
        "print(sorted(m for m in ('sympy', 'latex2sympy2_extended', 'math_verify') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["3,4 [True, True]", "[]"]


def test_standalone_normalisation_module_is_math_verifys():
    """The file loaded on its own is the package's module: same source, same answers on the extraction cases;
    once the package is imported (a math-verify worker), the package's module itself is used."""
    import latex2sympy2_extended.math_normalization as package_module

    standalone = standalone_math_normalization()
    assert standalone is not package_module and standalone.__file__ == package_module.__file__
    texts = [case[0] for case in BOXED_CASES] + ["\\boxed{1} or \\boxed{2}", "\\boxed{a}, text \\boxed{b}"]
    for text in texts:
        expected = package_module.extract_boxed_content(text, mode="last")
        assert standalone.extract_boxed_content(text, mode="last") == expected
    assert math_normalization.__wrapped__() is package_module  # past the cache: the package's, once loaded
