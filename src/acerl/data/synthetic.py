"""The embedded default's task: procedurally generated integer math with short worked solutions.

Two problem families (see docs/tiny_task.md):

- ``arith``: a left-to-right chain of ``+``, ``-``, ``*`` written with the fewest parentheses,
  ``"Compute (3+4)*2-5."`` -> ``"3+4=7. 7*2=14. 14-5=9. \\boxed{9}"``;
- ``linear``: ``"Solve 3x+4=19."`` -> ``"3x=19-4=15. x=15/3=5. \\boxed{5}"``.

A :class:`Difficulty` sets the number of steps and the size of the numbers; the splits play the roles of the
paper's data (``synth_easy`` ~ MATH-500, ``synth_hard`` ~ AIME 2025, ``train`` ~ DAPO-Math-17K prompts,
``heldout`` for diagnostics) plus ``sft``, the worked solutions the tiny base model is fine-tuned on.

The mistake model: in the ``sft`` split a fraction ``mistake_rate`` of the worked solutions carries exactly one
plausible error (:data:`MISTAKE_TYPES`), after which the solution continues consistently from the wrong
value, so its ``\\boxed{}`` answer is wrong (``answer`` always holds the correct value). The SFT'd model thus
errs in a few systematic ways, which RL can either correct or reinforce into overconfident errors.

Everything is deterministic from ``seed``: each split draws from its own ``random.Random`` seeded with
``"<seed>:<split>"`` (string seeding is hashed with SHA-512, stable across processes), and splits are
generated in a fixed order with every problem text used at most once over all splits, so the evaluation
splits do not change when the training sizes do.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from acerl.config.sections import SyntheticParams
from acerl.pipeline.io import write_jsonl

logger = logging.getLogger(__name__)

MISTAKE_TYPES: tuple[str, ...] = ("off_by_one", "carry", "wrong_op", "copy", "sign", "early_stop")
"""``off_by_one``: a step's result is 1 too high or too low. ``carry``: a dropped carry or borrow
(``27+15=32``; ``42-17=35``; ``14*3=32``). ``wrong_op``: the written step applies another operator
(``7*2=9``; ``9-4=13``; ``x=15/3=45``). ``copy``: a stale number is copied in place of the previous result
(``3+4=7. 3*2=6.``; ``x=19/3`` instead of ``15/3``). ``sign``: a constant moved across ``=`` keeps its sign
(``3x=19+4``). ``early_stop``: the solution boxes an intermediate value and skips the remaining steps
(``3+4=7. \\boxed{7}``; ``3x=19-4=15. \\boxed{15}``)."""

DEFAULT_MISTAKE_WEIGHTS: dict[str, float] = {
    "off_by_one": 1.0,
    "carry": 1.0,
    "wrong_op": 1.0,
    "copy": 2.0,
    "sign": 1.0,
    "early_stop": 3.0,
}
"""Relative frequency of each mistake type (among the types that apply to a problem). Structural mistakes weigh
more: the tiny model learns ``early_stop`` and ``copy`` as distinct modes, whereas digit-level mistakes blur
into its own arithmetic slips (docs/tiny_task.md)."""

_WRONG_OP = {"+": "-", "-": "+", "*": "+"}

# Generation order: earlier splits are never influenced by the sizes of later ones.
SPLIT_ORDER: tuple[str, ...] = ("synth_easy", "synth_hard", "heldout", "train", "sft")


@dataclass(frozen=True)
class Difficulty:
    """How hard a problem is: steps of the ``arith`` chain and the size of every number."""

    min_steps: int = 1  # operations in an arith chain, drawn uniformly from [min_steps, max_steps]
    max_steps: int = 2
    max_operand: int = 20  # operands of + and -: 1..max_operand
    max_factor: int = 9  # operands of *: 2..max_factor
    max_value: int = 200  # bound on |every intermediate value|; draws beyond it are redrawn
    allow_negative: bool = False  # negative intermediates, results and roots allowed
    linear_share: float = 0.4  # probability that a problem is a linear equation
    max_coef: int = 5  # linear: a in 1..max_coef
    max_root: int = 10  # linear: x in 0..max_root (-max_root..max_root if allow_negative)
    max_const: int = 20  # linear: b in 1..max_const

    def __post_init__(self) -> None:
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError(
                f"Difficulty needs 1 <= min_steps <= max_steps, got {self.min_steps}, {self.max_steps}"
            )
        if self.max_operand < 1 or self.max_factor < 2 or self.max_coef < 1 or self.max_const < 1:
            raise ValueError(f"Difficulty bounds too small: {self}")
        if self.max_value < max(self.max_operand, self.max_factor):
            raise ValueError(f"Difficulty.max_value must be >= every operand bound: {self}")
        if not 0.0 <= self.linear_share <= 1.0:
            raise ValueError(f"Difficulty.linear_share must be in [0, 1], got {self.linear_share}")


DIFFICULTIES: dict[str, Difficulty] = {
    "easy": Difficulty(
        min_steps=1,
        max_steps=2,
        max_operand=12,
        max_factor=6,
        max_value=60,
        allow_negative=False,
        linear_share=0.4,
        max_coef=5,
        max_root=10,
        max_const=12,
    ),
    "medium": Difficulty(
        min_steps=2,
        max_steps=3,
        max_operand=15,
        max_factor=6,
        max_value=100,
        allow_negative=False,
        linear_share=0.4,
        max_coef=6,
        max_root=12,
        max_const=15,
    ),
    "hard": Difficulty(
        min_steps=3,
        max_steps=4,
        max_operand=30,
        max_factor=9,
        max_value=300,
        allow_negative=True,
        linear_share=0.4,
        max_coef=9,
        max_root=12,
        max_const=30,
    ),
}
"""Named presets; a split's difficulty is a preset name or a list of names (an equal mixture)."""

DEFAULT_SIZES: dict[str, int] = {
    "synth_easy": 100,
    "synth_hard": 50,
    "heldout": 100,
    "train": 1000,
    "sft": 8000,
}
DEFAULT_DIFFICULTIES: dict[str, str | list[str]] = {
    "synth_easy": "easy",
    "synth_hard": "hard",
    "heldout": ["easy", "medium", "hard"],
    "train": ["easy", "medium", "hard"],
    "sft": ["easy", "medium", "hard"],
}


# ---------------------------------------------------------------------------------------------- problems
def _apply(op: str, a: int, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise ValueError(f"unknown operator {op!r}")


def _digits(n: int) -> list[int]:
    """Least-significant digit first."""
    return [int(d) for d in reversed(str(n))]


def _from_digits(ds: list[int]) -> int:
    return sum(d * 10**i for i, d in enumerate(ds))


def carry_error(op: str, a: int, b: int) -> int | None:
    """The result of ``a op b`` with every carry (or borrow) dropped; ``None`` if it does not apply.

    ``27+15 -> 32`` (digit sums mod 10), ``42-17 -> 35`` (digit-wise absolute differences), ``14*3 -> 32``
    (digit products mod 10; one factor must be a single digit). Needs ``a, b >= 0`` (and ``a >= b`` for ``-``).
    """
    if a < 0 or b < 0:
        return None
    if op == "+":
        da, db = _digits(a), _digits(b)
        n = max(len(da), len(db))
        da, db = da + [0] * (n - len(da)), db + [0] * (n - len(db))
        return _from_digits([(x + y) % 10 for x, y in zip(da, db, strict=True)])
    if op == "-":
        if a < b:
            return None
        da, db = _digits(a), _digits(b)
        db = db + [0] * (len(da) - len(db))
        return _from_digits([abs(x - y) for x, y in zip(da, db, strict=True)])
    if op == "*":
        if b > 9 and a <= 9:
            a, b = b, a
        if b > 9:
            return None
        return _from_digits([(x * b) % 10 for x in _digits(a)])
    raise ValueError(f"unknown operator {op!r}")


@dataclass(frozen=True)
class ArithProblem:
    """``start op1 n1 op2 n2 ...`` evaluated left to right."""

    start: int
    ops: tuple[tuple[str, int], ...]
    kind: Literal["arith"] = "arith"

    @property
    def text(self) -> str:
        expr, last = str(self.start), None
        for op, n in self.ops:
            if op == "*" and last in ("+", "-"):
                expr = f"({expr})"
            expr, last = f"{expr}{op}{n}", op
        return f"Compute {expr}."

    @property
    def answer(self) -> int:
        value = self.start
        for op, n in self.ops:
            value = _apply(op, value, n)
        return value

    @property
    def num_steps(self) -> int:
        return len(self.ops)

    def solve(self, mistake: tuple[int, str] | None = None, offset: int = 1) -> tuple[str, int] | None:
        """Worked solution and its final value, with an optional ``(step, type)`` mistake.

        ``offset`` (+1 or -1) is the direction of an ``off_by_one`` mistake. Returns ``None`` if the mistake
        does not apply at that step or leaves the step's result unchanged.
        """
        left, prev_left = self.start, self.start
        parts: list[str] = []
        for i, (op, n) in enumerate(self.ops):
            kind = mistake[1] if mistake is not None and mistake[0] == i else None
            if kind == "early_stop":
                if i == 0:
                    return None
                break
            shown = left
            if kind == "copy":
                if i == 0 or prev_left == left:
                    return None
                shown = prev_left
            result = _apply(op, shown, n)
            if kind == "off_by_one":
                result += offset
            elif kind == "carry":
                wrong = carry_error(op, shown, n)
                if wrong is None or wrong == result:
                    return None
                result = wrong
            elif kind == "wrong_op":
                result = _apply(_WRONG_OP[op], shown, n)
            elif kind == "sign":
                return None
            if kind == "wrong_op" and result == _apply(op, shown, n):
                return None
            parts.append(f"{shown}{op}{n}={result}.")
            prev_left, left = shown, result
        parts.append(f"\\boxed{{{left}}}")
        return " ".join(parts), left


@dataclass(frozen=True)
class LinearProblem:
    """``a*x + b = c`` (``sign='+'``) or ``a*x - b = c`` (``sign='-'``) with an integer root ``x``."""

    a: int
    sign: str
    b: int
    c: int
    kind: Literal["linear"] = "linear"

    @property
    def text(self) -> str:
        lhs = "x" if self.a == 1 else f"{self.a}x"
        return f"Solve {lhs}{self.sign}{self.b}={self.c}."

    @property
    def answer(self) -> int:
        return (self.c - self.b if self.sign == "+" else self.c + self.b) // self.a

    @property
    def num_steps(self) -> int:
        return 1 if self.a == 1 else 2

    def solve(self, mistake: tuple[int, str] | None = None, offset: int = 1) -> tuple[str, int] | None:
        """Worked solution and its final value; see :meth:`ArithProblem.solve`."""
        step, kind = mistake if mistake is not None else (-1, None)
        a, b, c = self.a, self.b, self.c
        inv = "-" if self.sign == "+" else "+"
        lhs = "x" if a == 1 else f"{a}x"
        correct_v = _apply(inv, c, b)
        # step 0: move the constant
        if step == 0:
            if kind == "sign":
                inv = self.sign
                v = _apply(inv, c, b)
            elif kind == "off_by_one":
                v = correct_v + offset
            elif kind == "carry":
                wrong = carry_error(inv, c, b)
                if wrong is None or wrong == correct_v:
                    return None
                v = wrong
            else:
                return None
            if v % a != 0 or v == correct_v:
                return None
        else:
            v = correct_v
        parts = [f"{lhs}={c}{inv}{b}={v}."]
        x = v // a
        if a != 1:
            shown = v
            if step == 1 and kind == "early_stop":
                parts.append(f"\\boxed{{{v}}}")
                return " ".join(parts), v
            if step == 1:
                if kind == "off_by_one":
                    x = v // a + offset
                elif kind == "wrong_op":
                    x = v * a
                elif kind == "copy":
                    if c % a != 0 or c == v:
                        return None
                    shown, x = c, c // a
                else:
                    return None
                if x == v // a:
                    return None
            parts.append(f"x={shown}/{a}={x}.")
        elif step == 1:
            return None
        parts.append(f"\\boxed{{{x}}}")
        return " ".join(parts), x


Problem = ArithProblem | LinearProblem


def _sample_arith(rng: random.Random, d: Difficulty) -> ArithProblem | None:
    n_steps = rng.randint(d.min_steps, d.max_steps)
    start = rng.randint(1, d.max_operand)
    value, ops = start, []
    for _ in range(n_steps):
        for _attempt in range(20):
            op = rng.choice("+-*")
            n = rng.randint(2, d.max_factor) if op == "*" else rng.randint(1, d.max_operand)
            new = _apply(op, value, n)
            if abs(new) <= d.max_value and (d.allow_negative or new >= 0):
                break
        else:
            return None
        ops.append((op, n))
        value = new
    return ArithProblem(start=start, ops=tuple(ops))


def _sample_linear(rng: random.Random, d: Difficulty) -> LinearProblem | None:
    a = rng.randint(1, d.max_coef)
    x = rng.randint(-d.max_root if d.allow_negative else 0, d.max_root)
    b = rng.randint(1, d.max_const)
    sign = rng.choice("+-")
    c = a * x + b if sign == "+" else a * x - b
    if not d.allow_negative and c < 0:
        return None
    return LinearProblem(a=a, sign=sign, b=b, c=c)


def sample_problem(rng: random.Random, difficulty: Difficulty) -> Problem:
    """Draw one problem (a linear equation with probability ``difficulty.linear_share``)."""
    for _ in range(1000):
        if rng.random() < difficulty.linear_share:
            problem: Problem | None = _sample_linear(rng, difficulty)
        else:
            problem = _sample_arith(rng, difficulty)
        if problem is not None:
            return problem
    raise RuntimeError(f"could not draw a problem within the bounds of {difficulty}")


# ------------------------------------------------------------------------------------------ mistake model
def worked_solution(
    problem: Problem,
    rng: random.Random,
    mistake_rate: float = 0.0,
    mistake_weights: Mapping[str, float] | None = None,
) -> tuple[str, str | None]:
    """The worked solution of ``problem``, carrying one mistake with probability ``mistake_rate``.

    A mistake type is drawn by ``mistake_weights`` (default :data:`DEFAULT_MISTAKE_WEIGHTS`) among the types
    that apply to the problem, at a uniformly drawn step where it applies and changes the final answer. Returns
    ``(solution, mistake_type or None)``; the solution ends in ``\\boxed{<final value>}``.
    """
    if not 0.0 <= mistake_rate <= 1.0:
        raise ValueError(f"mistake_rate must be in [0, 1], got {mistake_rate}")
    weights = dict(mistake_weights if mistake_weights is not None else DEFAULT_MISTAKE_WEIGHTS)
    unknown = sorted(set(weights) - set(MISTAKE_TYPES))
    if unknown:
        raise ValueError(f"unknown mistake type(s) {unknown}; valid: {', '.join(MISTAKE_TYPES)}")
    clean = problem.solve()
    assert clean is not None
    if mistake_rate == 0.0 or rng.random() >= mistake_rate:
        return clean[0], None
    offset = rng.choice((-1, 1))
    candidates = [t for t in MISTAKE_TYPES if weights.get(t, 0.0) > 0]
    while candidates:
        kind = rng.choices(candidates, weights=[weights[t] for t in candidates])[0]
        steps = list(range(problem.num_steps))
        rng.shuffle(steps)
        for step in steps:
            solved = problem.solve((step, kind), offset=offset)
            if solved is not None and solved[1] != problem.answer:
                return solved[0], kind
        candidates.remove(kind)
    return clean[0], None


# ------------------------------------------------------------------------------------------------ splits
def resolve_difficulty(
    spec: str | Sequence[str] | Difficulty | Mapping[str, Any],
) -> list[tuple[str, Difficulty]]:
    """A split's difficulty spec -> ``[(name, Difficulty), ...]`` (problems draw uniformly from the list).

    ``spec`` is a preset name (:data:`DIFFICULTIES`), a list of preset names, a :class:`Difficulty`, or a
    mapping of :class:`Difficulty` fields (a custom level, named ``custom``).
    """
    if isinstance(spec, Difficulty):
        return [("custom", spec)]
    if isinstance(spec, Mapping):
        valid = {f.name for f in fields(Difficulty)}
        unknown = sorted(set(spec) - valid)
        if unknown:
            raise ValueError(f"unknown Difficulty field(s) {unknown}; valid: {', '.join(sorted(valid))}")
        return [("custom", Difficulty(**spec))]
    names = [spec] if isinstance(spec, str) else list(spec)
    if not names:
        raise ValueError("a difficulty list must not be empty")
    for name in names:
        if name not in DIFFICULTIES:
            raise ValueError(f"unknown difficulty {name!r}; valid: {', '.join(DIFFICULTIES)}")
    return [(name, DIFFICULTIES[name]) for name in names]


def generate_split(
    split: str,
    size: int,
    seed: int,
    difficulty: str | Sequence[str] | Difficulty | Mapping[str, Any],
    mistake_rate: float = 0.0,
    mistake_weights: Mapping[str, float] | None = None,
    exclude: set[str] | None = None,
    max_tries_per_problem: int = 1000,
) -> list[dict[str, Any]]:
    """``size`` rows of a split, none of whose problem texts is in ``exclude`` (which is updated in place).

    Row schema: ``id``, ``problem``, ``answer`` (correct, as a string), ``solution`` (worked solution ending in
    ``\\boxed{}``; wrong when ``mistake`` is set), ``mistake`` (a :data:`MISTAKE_TYPES` entry or ``None``),
    ``kind`` (``arith`` | ``linear``), ``difficulty`` (preset name), ``steps``.
    """
    if size < 0:
        raise ValueError(f"split {split!r}: size must be >= 0, got {size}")
    levels = resolve_difficulty(difficulty)
    seen = exclude if exclude is not None else set()
    rng = random.Random(f"{seed}:{split}")
    rows: list[dict[str, Any]] = []
    for i in range(size):
        level, diff = levels[rng.randrange(len(levels))]
        for _ in range(max_tries_per_problem):
            problem = sample_problem(rng, diff)
            if problem.text not in seen:
                break
        else:
            raise RuntimeError(
                f"split {split!r}: no new distinct problem after {max_tries_per_problem} draws at row {i}; "
                f"difficulty {level!r} has too few distinct problems for the requested sizes"
            )
        seen.add(problem.text)
        solution, mistake = worked_solution(problem, rng, mistake_rate, mistake_weights)
        rows.append(
            {
                "id": f"{split}-{i:05d}",
                "problem": problem.text,
                "answer": str(problem.answer),
                "solution": solution,
                "mistake": mistake,
                "kind": problem.kind,
                "difficulty": level,
                "steps": problem.num_steps,
            }
        )
    return rows


def write_splits(out_dir: Path | str, seed: int = 0, **params: Any) -> dict[str, Path]:
    """Generate every split and write ``<out_dir>/<split>.jsonl`` atomically; returns ``{split: path}``.

    ``params`` are the fields of :class:`acerl.config.sections.SyntheticParams` (``data.synthetic.params``): ``sizes``
    and ``difficulties`` override :data:`DEFAULT_SIZES` / :data:`DEFAULT_DIFFICULTIES` key by key (a split of
    size 0 is skipped; a new split name needs both a size and a difficulty); worked solutions in
    ``mistake_splits`` carry a mistake with probability ``mistake_rate``. Splits are disjoint in problem text.
    """
    p = SyntheticParams(**params)
    size_of = {**DEFAULT_SIZES, **(p.sizes or {})}
    diff_of = {**DEFAULT_DIFFICULTIES, **(p.difficulties or {})}
    missing = sorted(set(size_of) - set(diff_of))
    if missing:
        raise ValueError(f"split(s) {missing} have a size but no difficulty; add them to 'difficulties'")
    unknown_mistake = sorted(set(p.mistake_splits) - set(size_of))
    if unknown_mistake:
        raise ValueError(
            f"mistake_splits names unknown split(s) {unknown_mistake}; splits: {sorted(size_of)}"
        )
    order = [s for s in SPLIT_ORDER if s in size_of] + sorted(set(size_of) - set(SPLIT_ORDER))
    seen: set[str] = set()
    paths: dict[str, Path] = {}
    for split in order:
        if size_of[split] == 0:
            continue
        rate = p.mistake_rate if split in p.mistake_splits else 0.0
        rows = generate_split(
            split, size_of[split], seed, diff_of[split], rate, p.mistake_weights, exclude=seen
        )
        paths[split] = write_jsonl(Path(out_dir) / f"{split}.jsonl", rows)
        n_wrong = sum(r["mistake"] is not None for r in rows)
        logger.info("wrote %s: %d problems (%d with an injected mistake)", paths[split], len(rows), n_wrong)
    return paths
