"""Grader verdicts (acerl.grading.Grader) in-process: equivalent forms, wrong answers, no answer, caching."""

from __future__ import annotations

import re
import threading

import pytest

from acerl.grading import Grader, Verdict
from acerl.grading.pool import POOL_ERROR


@pytest.fixture(scope="module")
def grader():
    with Grader(timeout_s=20, workers=0) as g:
        yield g


EQUIVALENT = [
    ("\\boxed{0.5}", "\\frac{1}{2}"),
    ("$\\boxed{\\frac{1}{2}}$", "0.5"),
    ("\\boxed{\\frac{\\sqrt 2}{2}}", "\\sqrt{2}/2"),
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}"),
    ("\\boxed{5\\sqrt{2}}", "\\sqrt{50}"),
    ("\\boxed{\\pi/2}", "\\frac{\\pi}{2}"),
    ("\\boxed{0.75}", "\\dfrac{3}{4}"),
    ("\\boxed{(1, 2]}", "(1,2]"),
    ("\\boxed{(-\\infty, 0) \\cup (1, \\infty)}", "(-\\infty,0)\\cup(1,\\infty)"),
    ("\\boxed{x = 3}", "3"),
    ("\\boxed{3}", "x=3"),
    ("\\boxed{2x + 3}", "y=2x+3"),
    ("\\boxed{2x+1}", "1+2x"),
    ("\\boxed{90^\\circ}", "90"),
    ("\\boxed{\\$18.90}", "18.90"),
    ("\\boxed{1,000}", "1000"),
    ("\\boxed{\\{1,2\\}}", "2, 1"),
    ("$\\boxed{1}$ and $\\boxed{2}$", "1,2"),
    ("\\boxed{(3, \\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("\\boxed{\\text{Monday}}", "\\text{Monday}"),
    ("\\boxed{C}", "\\text{(C)}"),
    # AIME: integers with leading zeros, boxed and in DAPO's Answer: format
    ("\\boxed{034}", "34"),
    ("Reasoning...\nAnswer: 070", "70"),
    # DAPO's Answer: line with LaTeX
    ("**Answer:** $\\frac{3}{4}$", "0.75"),
    ("Answer: \\boxed{34}", "34"),
]

WRONG = [
    ("\\boxed{\\frac{1}{3}}", "0.5"),
    ("\\boxed{0.333}", "\\frac{1}{3}"),
    ("\\boxed{(1,2)}", "[1,2]"),
    ("\\boxed{x=4}", "3"),
    ("\\boxed{-7}", "7"),
    ("\\boxed{\\sqrt{3}}", "\\sqrt{2}"),
    ("\\boxed{2} or \\boxed{3}", "3"),  # several nearby boxes are a set: no hedging
    # the last box counts even when it does not parse (math-verify alone would fall back to the first one)
    (
        "\\boxed{(3,4]}.\n\nWait, I made a slip in the last step; redoing it carefully gives \\boxed{(3,4]+1}",
        "(3,4]",
    ),
    ("Answer: 35", "34"),
]


@pytest.mark.parametrize(("response", "gold"), EQUIVALENT)
def test_equivalent_forms_are_correct(grader, response, gold):
    verdict = grader.grade(response, gold)
    assert verdict == Verdict(True, "ok", verdict.extracted)


@pytest.mark.parametrize(("response", "gold"), WRONG)
def test_wrong_answers(grader, response, gold):
    verdict = grader.grade(response, gold)
    assert (verdict.correct, verdict.status) == (False, "ok")


@pytest.mark.parametrize("response", ["The answer is 34.", "34", "we get \\boxed{34", ""])
def test_no_anchor_is_no_answer(grader, response):
    assert grader.grade(response, "34") == Verdict(False, "no_answer", None)


def test_grade_many_keeps_order_and_uses_caches():
    items = [
        ("\\boxed{x+1}", "1+x"),
        ("\\boxed{3}", "3"),
        ("no answer", "3"),
        ("\\boxed{x+1}", "1+x"),
        ("\\boxed{4}", "3"),
    ]
    with Grader(workers=0) as g:
        first = g.grade_many(items)
        assert [v.correct for v in first] == [True, True, False, True, False]
        assert [v.status for v in first] == ["ok", "ok", "no_answer", "ok", "ok"]
        assert (g.stats.math_verify, g.stats.fast_path, g.stats.no_answer) == (1, 2, 1)
        assert g.grade_many(items) == first
        assert g.stats.cache_hits == 2  # the math-verify pair, twice; the fast path needs no cache


@pytest.mark.parametrize(
    ("response", "gold", "verdict"),
    [
        ("\\boxed{1/2006!}", "1/2004!", True),  # wrong: numeric comparison at 15 digits
        ("\\boxed{1/2^{98}}", "1/2^{99}", True),  # wrong, same cause
        ("\\boxed{0.333333}", "\\frac{1}{3}", True),  # by design: float_rounding=6
        ("\\boxed{0.333}", "\\frac{1}{3}", False),
        ("\\boxed{4\\sqrt(2)}", "4", False),
        ("\\boxed{3x-y+13=0}", "3x+4y+14=0", False),
    ],
)
def test_known_math_verify_verdicts(grader, response, gold, verdict):
    """math-verify 0.9.0's verdicts listed in docs/grading.md (some wrong); a change here means updating it."""
    assert grader.grade(response, gold).correct is verdict


# math-verify 0.9.0 with latex2sympy2_extended 1.11.0 and antlr4 4.13.2 (the parser its authors test), on
# \\boxed{pred} against \\boxed{gold}: under the pinned antlr4 4.9.3 its parser fails on every percent sign.
PERCENT_VERDICTS_UNDER_ANTLR4_13 = [
    ("28\\%", "28\\%", True),
    ("28\\%", "28", True),
    ("28", "28\\%", True),
    ("28 \\%", "28\\%", True),
    ("0.28", "28\\%", True),
    ("10\\%", "10", True),
    ("28%", "28\\%", True),
    ("28 percent", "28\\%", True),
    ("\\frac{1}{2}\\%", "0.5\\%", True),
    ("12.5\\%", "12.5", False),
    ("0.125", "12.5\\%", True),
    ("12.5", "12.5\\%", False),
    ("\\frac{1}{8}", "12.5\\%", True),
    ("29\\%", "28\\%", False),
    ("28", "0.28", False),
    ("x\\%", "x", False),
    ("50\\%", "\\frac{1}{2}", True),
]


@pytest.mark.parametrize(("pred", "gold", "verdict"), PERCENT_VERDICTS_UNDER_ANTLR4_13)
def test_percentages_get_math_verify_s_verdict_under_the_parser_it_was_built_for(grader, pred, gold, verdict):
    result = grader.grade(f"\\boxed{{{pred}}}", gold)
    assert (result.correct, result.status) == (verdict, "ok")


def test_a_sentence_on_the_answer_line_is_graded_by_its_value(grader):
    assert grader.grade("Answer: The largest $n$ is 34.", "34") == Verdict(True, "ok", "34")
    assert grader.grade("Answer: The largest n is 34.", "34") == Verdict(True, "ok", "34")
    assert grader.grade("Answer: The largest n is 35.", "34") == Verdict(False, "ok", "35")
    assert grader.grade("Answer: the largest n", "34") == Verdict(False, "no_answer", None)


@pytest.mark.parametrize(
    ("response", "gold", "verdict"),
    [
        ("Answer: The interval is (2, 5).", "(2,5)", True),
        ("Answer: The interval is (2, 5).", "5", False),
        ("Answer: The interval is (2, 5).", "[2,5]", False),
        ("Answer: the interval [2, 5] contains it", "[2,5]", True),
        ("Answer: The ordered pair is (3, 4).", "(3,4)", True),
        ("Answer: The ordered pair is (3, 4).", "4", False),
        ("Answer: x lies in (-\\infty, 2]", "(-\\infty,2]", True),
        ("Answer: the set is {1, 2, 3}", "\\{1,2,3\\}", True),
        ("Answer: The solutions are 2 and 5.", "2, 5", True),
        ("Answer: The solutions are 2 and 5.", "5", False),
        ("Answer: the solutions are x = 2 and x = 5", "2,5", True),
        ("Answer: The values are 1, 2, and 3.", "3", False),
    ],
)
def test_a_sentence_stating_several_numbers_is_graded_whole(grader, response, gold, verdict):
    """An interval, a tuple or a set stated in prose was graded by one of its numbers (``(2, 5)`` right against
    the gold ``5``): math-verify grades the whole group, as its own extraction reads ``$(2, 5)$``."""
    result = grader.grade(response, gold)
    assert (result.correct, result.status) == (verdict, "ok"), result


def test_gold_that_does_not_parse_is_an_error(grader):
    verdict = grader.grade("\\boxed{3}", " ")
    assert not verdict.correct and verdict.status == "error" and "gold" in verdict.error


def test_in_process_grading_refuses_other_threads():
    errors = []

    def run():
        try:
            Grader(workers=0).grade("\\boxed{x+1}", "1+x")
        except RuntimeError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors and "main thread" in errors[0]


def test_bad_arguments():
    with pytest.raises(ValueError, match="mv_timeout_s"):
        Grader(timeout_s=2, mv_timeout_s=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="workers"):
        Grader(workers=-1)
    with pytest.raises(TypeError, match="item 0"):
        Grader(workers=0).grade_many([("\\boxed{3}", 3)])  # type: ignore[list-item]


def test_math500_gold_solutions_agree_with_answers(shared_data, grader):
    """Every MATH-500 reference solution, graded against its own answer: measured 500/500 on 2026-11."""
    import json

    rows = [
        json.loads(line) for line in (shared_data / "math500.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    verdicts = grader.grade_many([(row["solution"], row["answer"]) for row in rows])
    wrong = [(row["id"], row["answer"], v) for row, v in zip(rows, verdicts, strict=True) if not v.correct]
    rate = 1 - len(wrong) / len(rows)
    print(f"MATH-500 solution/answer agreement: {rate:.4f} ({len(rows) - len(wrong)}/{len(rows)}); {wrong}")
    assert len(rows) == 500
    assert rate >= 0.998, wrong


def test_math_verify_timeout_counter_counts_each_timeout_and_detaches():
    """math-verify reports its own timeouts as log warnings, not exceptions: the counter counts each
    "Timeout during ..." record (not other warnings) and leaves math-verify's logger as it found it (a handler
    left behind per graded answer would pile up over a run)."""
    import logging

    from acerl.grading.backend import _count_math_verify_timeouts

    logger = logging.getLogger("math_verify")
    before = list(logger.handlers)
    with _count_math_verify_timeouts() as counter:
        logger.warning("Timeout during parsing: %s", "x")
        logger.warning("something else")
        logger.warning("Timeout during comparison")
        assert counter in logger.handlers
    assert counter.count == 2
    assert logger.handlers == before


def test_grading_off_the_main_thread_in_process_is_refused_with_the_fix():
    from acerl.grading.backend import _check_main_thread

    errors: list[BaseException] = []

    def run() -> None:
        try:
            _check_main_thread()
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert [str(e) for e in errors] == [
        "math-verify's timeouts use signal.alarm, which only works in the main thread; grade in-process "
        "(Grader(workers=0)) only from the main thread, or use workers >= 1"
    ]


@pytest.mark.parametrize("bad", [0, 2.5, "5"])
def test_grade_answer_needs_a_whole_number_of_seconds(bad):
    from acerl.grading.backend import grade_answer

    with pytest.raises(
        ValueError, match=f"^mv_timeout_s must be a whole number of seconds >= 1, got {bad!r}$"
    ):
        grade_answer("1", "1", bad)


def test_gold_parses_are_cached_lru_with_math_verify_s_timeout_and_a_timed_out_parse_is_not(monkeypatch):
    """``parse_gold`` parses each gold once, with the LaTeX extraction only and the grader's timeout; a parse
    during which math-verify logged a timeout is reported and retried next time; the least recently used gold
    is evicted first. math-verify's ``parse`` is wrapped to record its calls (and, for one gold, to log a
    timeout the way math-verify does)."""
    import logging

    import math_verify

    from acerl.grading import backend

    real = math_verify.parse
    calls: list[tuple[str, list[str], int]] = []

    def parse(text, configs, parsing_timeout):
        calls.append((text, [type(c).__name__ for c in configs], parsing_timeout))
        if "slow" in text:
            logging.getLogger("math_verify").warning("Timeout during parsing")
        return real(text, configs, parsing_timeout=parsing_timeout)

    monkeypatch.setattr(math_verify, "parse", parse)
    monkeypatch.setattr(backend, "_gold_cache", type(backend._gold_cache)())
    monkeypatch.setattr(backend, "GOLD_CACHE_SIZE", 2)
    parsed, timed_out = backend.parse_gold("3", 7)
    assert parsed and not timed_out
    assert calls == [("\\boxed{3}", ["LatexExtractionConfig"], 7)]
    assert backend.parse_gold("3", 7) == (parsed, False) and len(calls) == 1  # cached
    assert backend.parse_gold("slow", 7)[1] is True
    assert backend.parse_gold("slow", 7)[1] is True and len(calls) == 3  # not cached: parsed again
    backend.parse_gold("4", 7)
    backend.parse_gold("3", 7)  # "3" is now the most recently used of {"3", "4"}
    backend.parse_gold("5", 7)  # evicts "4"
    assert list(backend._gold_cache) == ["3", "5"]
    # grade_answer: the grader's timeout reaches both parses; a gold whose parse timed out is a timeout
    calls.clear()
    assert backend.grade_answer("2", "6", 1) == (False, "ok", None)  # one second is a valid timeout
    assert [timeout for _, _, timeout in calls] == [1, 1]  # the gold "6", then the answer
    assert [configs for _, configs, _ in calls] == [
        ["LatexExtractionConfig"],
        ["ExprExtractionConfig", "LatexExtractionConfig"],
    ]
    assert backend.grade_answer("1", "slow", 3) == (
        False,
        "timeout",
        "math-verify timed out parsing gold 'slow'",
    )
    # the comparison: the grader's timeout reaches verify; its own (logged) timeout and its errors are reported
    real_verify = math_verify.verify
    verify_timeouts: list[int] = []

    def verify(gold, answer, timeout_seconds):
        verify_timeouts.append(timeout_seconds)
        if "7" in str(answer):
            logging.getLogger("math_verify").warning("Timeout during comparison")
            return False
        if "8" in str(answer):
            raise RuntimeError("boom")
        return real_verify(gold, answer, timeout_seconds=timeout_seconds)

    monkeypatch.setattr(math_verify, "verify", verify)
    assert backend.grade_answer("6", "6", 4) == (True, "ok", None) and verify_timeouts == [4]
    assert backend.grade_answer("7", "6", 4) == (False, "timeout", "math-verify's own timeout fired")
    assert backend.grade_answer("8", "6", 4) == (False, "error", "RuntimeError: boom")


def test_grader_settings_defaults_and_their_checks():
    """Defaults: 10 s per answer, 2 workers, no progress bar, math-verify's own timeout half the wall time
    (whole seconds, at least 1); the checks name the setting and the value."""
    with Grader(workers=0) as g:
        assert (g.timeout_s, g.workers, g.mv_timeout_s, g.progress) == (10.0, 0, 5, False)
    assert Grader.__init__.__defaults__ == (10.0, 2)
    assert Grader(timeout_s=7, workers=0).mv_timeout_s == 3
    assert Grader(timeout_s=1, workers=0, mv_timeout_s=1).mv_timeout_s == 1
    assert Grader(timeout_s=0.5, workers=0).mv_timeout_s == 1
    assert Grader(timeout_s=3, workers=0, progress=True).progress is True
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match=f"^timeout_s must be > 0, got {bad}$"):
            Grader(timeout_s=bad, workers=0)
    with pytest.raises(ValueError, match=r"^mv_timeout_s must be an int >= 1 \(signal.alarm"):
        Grader(workers=0, mv_timeout_s=0)


def test_grader_passes_its_start_method_to_the_pool():
    with Grader(timeout_s=5, workers=1, mp_context="spawn") as g:
        assert g._pool is not None and g._pool._ctx.get_start_method() == "spawn"


def _bar_lines(err: str) -> list[str]:
    """tqdm's ``grading`` bar states on stderr (it redraws with carriage returns)."""
    return [
        part.strip() for part in err.replace("\r", "\n").splitlines() if part.strip().startswith("grading")
    ]


def _in_items(bar: str) -> bool:
    """The bar's rate is in items (``12.3item/s``, ``?item/s`` or ``1.25s/item``)."""
    return re.search(r"[ ?.0-9](item/s|s/item)\]$", bar) is not None


def test_progress_bar_counts_the_answered_items_and_follows_the_call_s_choice(capsys):
    """The bar starts at the items answered without math-verify (no answer, fast path, cache) and ends at all
    of them; ``progress`` of the call overrides the grader's, and :meth:`Grader.grade` never shows one."""
    items = [("\\boxed{x+1}", "1+x"), ("\\boxed{3}", "3"), ("no answer", "3"), ("\\boxed{2x}", "x+x")]
    with Grader(workers=0, progress=True) as g:
        capsys.readouterr()
        g.grade_many(items)
        bars = _bar_lines(capsys.readouterr().err)
        assert bars and bars[0].startswith("grading:") and "2/4" in bars[0] and "4/4" in bars[-1]
        assert _in_items(bars[-1])  # (tqdm redraws at most every 0.1 s: no state between is certain)
        g.clear_cache()
        g.grade_many(items, progress=False)
        g.grade("\\boxed{y+1}", "1+y")  # a math-verify item
        assert _bar_lines(capsys.readouterr().err) == []
    with Grader(workers=0) as g:
        g.grade_many(items)
        assert _bar_lines(capsys.readouterr().err) == []
        g.grade_many(items[:1] + [("\\boxed{z^2}", "z*z")], progress=True)
        bars = _bar_lines(capsys.readouterr().err)
        assert bars and "1/2" in bars[0] and "2/2" in bars[-1]  # the cached pair counts as done


def test_worker_pids_of_an_in_process_grader_are_none():
    with Grader(workers=0) as g:
        g.grade("\\boxed{x+1}", "1+x")
        assert g.worker_pids() == []


def test_a_bad_item_names_its_types():
    with Grader(workers=0) as g:
        with pytest.raises(
            TypeError, match=r"^item 1: expected \(response: str, gold: str\), got \(int, str\)$"
        ):
            g.grade_many([("\\boxed{3}", "3"), (3, "3")])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=r"got \(str, NoneType\)$"):
            g.grade_many([("\\boxed{3}", None)])  # type: ignore[list-item]


def test_the_cache_keeps_verdicts_of_the_pair_but_not_the_pool_s_failures():
    """A gold that does not parse is an ``error`` of the pair (cached: the next call is a hit); an ``error`` that
    the pool reports (``POOL_ERROR``: closed mid-item, a worker that died) is not about the pair and is graded
    again next time."""
    with Grader(workers=0) as g:
        first = g.grade("\\boxed{3}", " ")
        assert first.status == "error" and g.stats.cache_hits == 0
        assert g.grade("\\boxed{3}", " ") == first and g.stats.cache_hits == 1
        g._cache_put(("2x", "x+x"), (False, "error", POOL_ERROR + "worker process died"))
        g._cache_put(("3x", "x+x"), (False, "error", "gold: no parse"))
        g._cache_put(("4x", "x+x"), (False, "timeout", POOL_ERROR + "a timeout, not a pool failure"))
        assert g._cache_get(("2x", "x+x")) is None
        assert g._cache_get(("3x", "x+x")) == (False, "error", "gold: no parse")
        assert g._cache_get(("4x", "x+x")) == (False, "timeout", POOL_ERROR + "a timeout, not a pool failure")


def test_the_cache_evicts_the_least_recently_used_verdict():
    with Grader(workers=0, cache_size=2) as g:
        for pair in (("a", "1"), ("b", "1"), ("c", "1")):
            g._cache_put(pair, (False, "ok", None))
        assert g._cache_get(("a", "1")) is None  # the oldest went
        g._cache_get(("b", "1"))  # b used: c is now the oldest
        g._cache_put(("d", "1"), (True, "ok", None))
        assert g._cache_get(("c", "1")) is None
        assert g._cache_get(("b", "1")) == (False, "ok", None) and g._cache_get(("d", "1")) == (
            True,
            "ok",
            None,
        )


def test_progress_bar_of_a_pool_grader_ends_at_every_item(capsys):
    items = [("\\boxed{3}", "3"), ("\\boxed{x+1}", "1+x"), ("\\boxed{2x}", "x+x")]
    with Grader(timeout_s=20, workers=1, progress=True) as g:
        capsys.readouterr()
        assert [v.correct for v in g.grade_many(items)] == [True, True, True]
        bars = _bar_lines(capsys.readouterr().err)
        assert bars and "1/3" in bars[0] and "3/3" in bars[-1] and _in_items(bars[-1])


def test_stats_add_up_over_calls():
    """Every counter accumulates over the grader's lifetime, one count per item of its kind."""
    items = [("\\boxed{x+1}", "1+x"), ("\\boxed{3}", "3"), ("none", "3"), ("\\boxed{3}", " ")]
    with Grader(workers=0) as g:
        g.grade_many(items)
        g.grade_many(items)
        s = g.stats
        assert (s.items, s.no_answer, s.fast_path, s.math_verify, s.cache_hits) == (8, 2, 2, 2, 2)
        assert (s.errors, s.timeouts) == (2, 0)  # the gold " " does not parse, twice (cached the second time)
        g._count(
            [Verdict(False, "timeout", "x", "t"), Verdict(True, "ok", "3"), Verdict(False, "timeout", "y")],
            0,
            0,
            2,
        )
        g._count([Verdict(False, "timeout", "z", "t")], 1, 0, 0)
        assert (s.items, s.timeouts, s.errors, s.no_answer, s.math_verify, s.cache_hits) == (
            12,
            3,
            2,
            2,
            4,
            3,
        )
