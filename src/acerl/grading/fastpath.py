"""Exact fast path: identical strings, plain integers and simple fractions, decided without math-verify.

- An extracted answer that is the gold string itself (up to surrounding whitespace) is correct:
  math-verify parses both alike and, failing that, compares its fallback strings, so it says True as
  well (unless one of its timeouts fires on the pair).
- When both are plain integers or simple fractions (``34``, ``-7``, ``034``, ``3/4``, ``-3/4``,
  ``\\frac{3}{4}``, ``\\dfrac{-3}{4}``, ``-\\tfrac{6}{8}``) the verdict is exact :class:`fractions.Fraction`
  equality. Anything else (decimals, thousands separators, ``+3``, units, a zero denominator, more than
  50 digits) falls through to math-verify.

It runs in the calling process. tests/grading/test_fastpath.py checks on thousands of generated pairs, and
on the MATH-500 answers, that it never disagrees with math-verify's verdict on ``\\boxed{pred}`` against
``\\boxed{gold}``.
"""

from __future__ import annotations

import re
from fractions import Fraction

_DIGITS = r"[0-9]{1,50}"
_SIMPLE = re.compile(
    rf"""\s*(?:
        (?P<int>-?{_DIGITS})
      | (?P<snum>-?{_DIGITS})\s*/\s*(?P<sden>{_DIGITS})
      | (?P<fsign>-)?\\[dt]?frac\{{(?P<fnum>-?{_DIGITS})\}}\{{(?P<fden>{_DIGITS})\}}
    )\s*""",
    re.VERBOSE,
)


def simple_number(text: str) -> Fraction | None:
    """The exact value of ``text`` if it is a plain integer or simple fraction, else ``None``."""
    match = _SIMPLE.fullmatch(text)
    if match is None:
        return None
    if match["int"] is not None:
        return Fraction(int(match["int"]))
    if match["snum"] is not None:
        num, den = int(match["snum"]), int(match["sden"])
        sign = 1
    else:
        num, den = int(match["fnum"]), int(match["fden"])
        sign = -1 if match["fsign"] else 1
    if den == 0:
        return None
    return sign * Fraction(num, den)


def fast_verdict(extracted: str, gold: str) -> bool | None:
    """The verdict when the strings are identical or both simple numbers; ``None`` means "ask math-verify"."""
    if extracted.strip() == gold.strip() and gold.strip():
        return True
    pred_value = simple_number(extracted)
    if pred_value is None:
        return None
    gold_value = simple_number(gold)
    if gold_value is None:
        return None
    return pred_value == gold_value
