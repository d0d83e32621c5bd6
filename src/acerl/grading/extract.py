"""Answer extraction: the one place that decides which part of a model response is its final answer.

Policy (see docs/grading.md):

1. **Boxed.** The last *complete* ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced. Boxes written close
   together are one answer, with math-verify's own rule (``latex2sympy2_extended``'s ``extract_boxed_content``:
   walking left from the last box, a box joins if the text between is under 10 characters, or under 70
   characters holding ``and``/``or``/``,``/``;`` and a different content). The joined contents become a set,
   so ``\\boxed{2} or \\boxed{3}`` is ``{2, 3}``: wrong against ``3``, which stops a policy hedging with
   several boxes. A box left open by a truncated response is ignored (math-verify would take the rest of
   the text as its content). Only the last 64 complete boxes are looked at (a degenerate response with
   thousands of boxes would otherwise cost quadratic time); a chain that long is wrong either way.
2. **Answer line.** Otherwise the last ``Answer: X`` (case-insensitive, the pattern of DAPO's own reward,
   verl ``math_dapo``): ``X`` is the rest of that line, minus markdown bold, a trailing full stop and
   ``\\(..\\)``/``\\[..\\]`` delimiters; if it holds ``$..$`` math, the last math segment (with the ones
   before it that only ``,``/``and``/``or`` separate: a set). Where the line is a sentence (a bare variable as
   its last math, ``The largest $n$ is 34.``, or prose without ``$``), the value math-verify's own
   ``Answer:`` pattern takes: the value after the last ``=``, else the first value (a bare variable with no
   number after it gives way to the math segment before it). A value is a number or a group of numbers (an
   interval, a tuple, a set: ``(2, 5)``, graded whole); values joined by ``,``/``and``/``or`` are a set.
3. **No answer.** Otherwise ``None``: the grader reports ``no_answer``. math-verify's own fallback (the last
   number or formula anywhere in the text) is deliberately not used: it rewards responses that never
   state an answer, e.g. one cut off by the length limit whose last intermediate number happens to match.

The extracted string is graded as ``\\boxed{extracted}`` by math-verify, so the verdict depends only on
``(extracted, gold)``: that pair is the verdict cache key.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

_BRACE_TOKEN = re.compile(r"\\(?:boxed|fbox)\s*\{|\{|\}")
# The pattern of verl's math_dapo (DAPO's own reward): the text after the last "Answer:" up to the line end.
_ANSWER_LINE = re.compile(r"(?i)answer\s*:\s*([^\n]+)")
_DOLLAR = re.compile(r"(?<!\\)\$")  # an unescaped dollar (``\$`` is a literal dollar sign)
_DOLLAR_SEGMENT = re.compile(r"(?<!\\)\$\$?((?:[^$]|(?<=\\)\$)+?)(?<!\\)\$\$?")
_SEPARATOR = re.compile(r"\s*(?:,|;|,?\s*\b(?:and|or)\b)?\s*")
# A number as math-verify's ExprExtractionConfig finds one: after the line start, a space or ``=``; thousands
# separators, decimals, an operator chain (``3/4``, ``2^{10}`` is LaTeX and not matched) and a percent sign.
_VALUE = re.compile(
    r"(?:^|(?<=[\s=]))-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
    r"(?:\s*[-+*/^]\s*-?\d+(?:\.\d+)?)*(?:\s*\\?%)?"
)
# A math segment that names a quantity instead of stating it: one Latin letter or a Greek one, maybe subscripted.
_BARE_VARIABLE = re.compile(
    r"(?:[A-Za-z]|\\(?:alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|kappa|lambda|mu|nu|xi"
    r"|rho|sigma|tau|phi|varphi|chi|psi|omega|Gamma|Delta|Theta|Lambda|Xi|Sigma|Phi|Psi|Omega))"
    r"(?:_(?:\w|\{\w+\}))?"
)
# A group of numbers stated as one value: an interval, a tuple or a set (``(2, 5)``, ``[0, \infty)``,
# ``{1, 2, 3}``); math-verify reads it whole (its own extraction of ``$(2, 5)$`` is the interval).
_GROUP_ITEM = r"\s*[-+]?(?:\d+(?:\.\d+)?(?:/\d+)?|\\infty|infinity|inf|∞)\s*"
_GROUP = re.compile(rf"(?:\\\{{|[(\[{{])(?:{_GROUP_ITEM},)*{_GROUP_ITEM}(?:\\\}}|[)\]}}])")
# What joins the values of a list (``2 and 5``, ``1, 2, and 3``, ``x = 2 and x = 5``): a set, as joined boxes are.
_VALUE_LINK = re.compile(r"\s*(?:[,;]\s*(?:(?:and|or)\b)?|(?:and|or)\b)\s*(?:[A-Za-z]\w*\s*=\s*)?")
# The quantity a math segment names: a bare variable, or a tuple of them (``$(a, b)$ = (3, 4)``).
_NAMED = re.compile(
    rf"{_BARE_VARIABLE.pattern}|\(\s*{_BARE_VARIABLE.pattern}(?:\s*,\s*{_BARE_VARIABLE.pattern})+\s*\)"
)
_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{[^{}]*\}")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"(?<![A-Za-z])[A-Za-z]{2,}(?![A-Za-z(])")
MAX_CHAINED_BOXES = 64


def extract_answer(response: str) -> str | None:
    """The final answer of ``response`` (policy in the module docstring), or ``None`` if it states none.

    Examples: ``"... so $\\boxed{\\frac{3}{4}}$."`` -> ``"\\frac{3}{4}"``; ``"...\\nAnswer: $34$"`` -> ``"34"``;
    ``"$\\boxed{2}$ or $\\boxed{3}$"`` -> ``"2,3"``; ``"it is 34"`` -> ``None``.
    """
    boxed = last_boxed_answer(response)
    if boxed:
        return boxed
    line = answer_line(response)
    return line or None


def last_boxed_answer(response: str) -> str | None:
    """Contents of the last complete ``\\boxed{}``/``\\fbox{}`` and the boxes chained to it, joined by ``,``."""
    starts, end = _complete_boxes(response)
    if end is None:
        return None
    extract_boxed_content = math_normalization().extract_boxed_content
    # Cut after the last complete box so that an unclosed box after it (a truncated response) is ignored.
    begin = starts[-MAX_CHAINED_BOXES] if len(starts) > MAX_CHAINED_BOXES else 0
    return extract_boxed_content(response[begin : end + 1], mode="last").strip() or None


@functools.cache
def math_normalization() -> ModuleType:
    """math-verify's ``latex2sympy2_extended.math_normalization`` (the source of ``extract_boxed_content``).

    The package's own module where the package is already loaded (a math-verify worker); otherwise
    :func:`standalone_math_normalization`: the same file without the package's ``__init__``, which imports sympy
    and the LaTeX parser in every training, grading and diagnostics job, whose answers the fast path decides
    without them (the CPU that saves: docs/grading.md, "Extraction policy"). The module imports only the
    standard library, so both run the same code (tests/grading/test_extract.py).
    """
    loaded = sys.modules.get("latex2sympy2_extended.math_normalization")
    return loaded if loaded is not None else standalone_math_normalization()


def standalone_math_normalization() -> ModuleType:
    """``latex2sympy2_extended/math_normalization.py`` executed as a module of its own (found, not imported,
    through its package's spec), named ``acerl.grading._math_normalization``."""
    package = importlib.util.find_spec("latex2sympy2_extended")
    if package is None or package.origin is None:
        raise ModuleNotFoundError("latex2sympy2_extended (math-verify's dependency) is not installed")
    spec = importlib.util.spec_from_file_location(
        "acerl.grading._math_normalization", Path(package.origin).parent / "math_normalization.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def answer_line(response: str) -> str | None:
    """The cleaned answer after the last ``Answer:`` (DAPO's answer format), or ``None``.

    Markdown bold, a trailing full stop and ``\\(..\\)``/``\\[..\\]`` delimiters are removed; if the line
    holds ``$..$`` math, its last math segment is the answer, joined with the segments before it that
    only ``,``/``;``/``and``/``or`` separate (several answers are a set, as with boxes). A sentence is not
    graded whole: if the last segment is a bare variable followed by a number (``The largest $n$ is 34.``),
    or the line is prose without ``$`` (``The largest n is 34.``), the answer is :func:`stated_value`; a bare
    variable with no number after it gives way to the last segment before it that is not one.
    """
    matches = _ANSWER_LINE.findall(response)
    if not matches:
        return None
    text = matches[-1].strip().strip("*").strip().removesuffix(".").rstrip()
    if _DOLLAR.search(text):
        segments = list(_DOLLAR_SEGMENT.finditer(text))
        if not segments:
            return _DOLLAR.sub("", text).strip() or None
        last = segments[-1]
        if _NAMED.fullmatch(last.group(1).strip()):
            value = stated_value(text[last.end() :])
            if value is not None:
                return value
            stated = [m for m in segments if not _NAMED.fullmatch(m.group(1).strip())]
            if stated:  # "$34$ is the largest $n$": the variable names the quantity the segment before states
                segments = segments[: segments.index(stated[-1]) + 1]
                last = segments[-1]
        chain = [last]
        for before in reversed(segments[:-1]):
            if not _SEPARATOR.fullmatch(text[before.end() : chain[-1].start()]):
                break
            chain.append(before)
        text = ",".join(m.group(1).strip() for m in reversed(chain))
    else:
        for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
            if text.startswith(left) and text.endswith(right):
                text = text[len(left) : -len(right)]
                break
        if is_prose(text):
            return stated_value(text)
    return text.strip().rstrip(".").strip() or None


def stated_value(text: str) -> str | None:
    """The value a sentence states, as math-verify's ``Answer:`` pattern reads it: the first value after the
    last ``=`` if there is one, else the first value (``"is 34, not 35"`` -> ``"34"``); ``None`` if none.

    A value is a number or a group of them, an interval, a tuple or a set (``"is (2, 5)"`` -> ``"(2, 5)"``,
    not one of its numbers). Values the sentence joins with ``,``/``;``/``and``/``or`` are a set, as joined boxes
    are (``"are 2 and 5"``, ``"x = 2 and x = 5"`` -> ``"2,5"``)."""
    values = _values(text)
    if not values:
        return None
    equals = text.rfind("=")
    pick = next((i for i, v in enumerate(values) if v.start() > equals), 0) if equals >= 0 else 0
    first = last = pick
    while first > 0 and _VALUE_LINK.fullmatch(text[values[first - 1].end() : values[first].start()]):
        first -= 1
    while last + 1 < len(values) and _VALUE_LINK.fullmatch(
        text[values[last].end() : values[last + 1].start()]
    ):
        last += 1
    return ",".join(v.group().strip() for v in values[first : last + 1])


def _values(text: str) -> list[re.Match[str]]:
    """The numbers (:data:`_VALUE`) and groups of numbers (:data:`_GROUP`) of ``text``, left to right; a number
    inside a group is the group's."""
    groups = list(_GROUP.finditer(text))
    numbers = [m for m in _VALUE.finditer(text) if not any(g.start() <= m.start() < g.end() for g in groups)]
    return sorted([*groups, *numbers], key=lambda m: m.start())


def is_prose(text: str) -> bool:
    """Whether an answer without ``$`` is a sentence rather than a formula or a one-word answer.

    Words are runs of two or more letters outside LaTeX commands and ``\\text{..}``, not followed by ``(``
    (``sqrt(2)`` is a formula), other than ``and``/``or``: two words are a sentence (``it is Evelyn``), and so is
    one word of three letters or more beside a number (``34 apples``). ``Evelyn``, ``3 cm``, ``x = 3`` and
    ``\\text{Monday}`` are not.
    """
    bare = _LATEX_COMMAND.sub(" ", _TEXT_COMMAND.sub(" ", text))
    words = [word for word in _WORD.findall(bare) if word.lower() not in {"and", "or"}]
    return len(words) >= 2 or (any(len(word) >= 3 for word in words) and _VALUE.search(bare) is not None)


def _complete_boxes(text: str) -> tuple[list[int], int | None]:
    """Sorted start indices of the complete boxes, and the closing-brace index of the one closing last.

    One linear pass over the braces; a box is complete when its opening brace is matched.
    """
    open_box_starts: list[int | None] = []  # per open brace: the box command's start, or None
    starts: list[int] = []
    last_end = None
    for token in _BRACE_TOKEN.finditer(text):
        piece = token.group()
        if piece == "}":
            start = open_box_starts.pop() if open_box_starts else None
            if start is not None:
                starts.append(start)
                last_end = token.start()
        else:
            open_box_starts.append(None if piece == "{" else token.start())
    starts.sort()
    return starts, last_end
