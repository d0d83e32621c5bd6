"""Grading: model responses against reference answers with math-verify (see docs/grading.md).

``Grader`` is the one grader for training rewards, evaluation and reports; ``extract_answer`` is the one
home of answer extraction; ``acerl.grading.reward.compute_score`` is the verl reward function.
"""

from acerl.grading.extract import extract_answer
from acerl.grading.fastpath import fast_verdict
from acerl.grading.grader import Grader, GraderStats, Verdict

__all__ = ["Grader", "GraderStats", "Verdict", "extract_answer", "fast_verdict"]
