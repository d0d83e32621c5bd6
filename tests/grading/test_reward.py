"""verl reward function (acerl.grading.reward.compute_score): scores, DAPO +1/-1, threads, verl's loader."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from acerl.grading import reward
from acerl.grading.reward import compute_score


@pytest.fixture(autouse=True, scope="module")
def _close_shared_grader():
    yield
    reward.close_grader()


def test_scores_and_fields():
    kwargs = {"grader_workers": 1}
    assert compute_score("math", "so $\\boxed{\\frac{1}{2}}$", "0.5", None, **kwargs) == {
        "score": 1.0,
        "acc": True,
        "pred": "\\frac{1}{2}",
    }
    assert compute_score("math", "\\boxed{0.6}", "\\frac{1}{2}", {}, **kwargs) == {
        "score": 0.0,
        "acc": False,
        "pred": "0.6",
    }
    assert compute_score("aime", "no answer here", "34", {}, **kwargs) == {
        "score": 0.0,
        "acc": False,
        "pred": "",
    }
    assert compute_score("aime", "\\boxed{034}", 34, {}, **kwargs)["acc"] is True  # non-str ground truth


def test_dapo_style_plus_minus_one():
    dapo = {"grader_workers": 1, "incorrect_score": -1.0}
    assert compute_score("math_dapo", "...\nAnswer: 34", "34", {}, **dapo)["score"] == 1.0
    assert compute_score("math_dapo", "...\nAnswer: 35", "34", {}, **dapo)["score"] == -1.0
    assert compute_score("math_dapo", "no answer", "34", {}, **dapo)["score"] == -1.0
    # the same option per sample, from extra_info
    assert (
        compute_score("math_dapo", "Answer: 3", "34", {"incorrect_score": -1.0}, grader_workers=1)["score"]
        == -1.0
    )


def test_zero_workers_becomes_one_worker_in_threads():
    """grading.workers=0 (in-process) cannot serve verl's reward threads: one worker is used instead."""
    with ThreadPoolExecutor(max_workers=2) as executor:
        result = executor.submit(compute_score, "math", "\\boxed{x+1}", "1+x", {}, grader_workers=0).result()
    assert result["acc"] is True
    assert reward.get_grader(1).workers == 1


def test_many_threads_like_verls_reward_loop():
    cases = [
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt 2}", 1.0),
        ("\\boxed{x+1}", "1+x", 1.0),
        ("\\boxed{x+2}", "1+x", 0.0),
        ("Answer: 70", "70", 1.0),
        ("nothing", "70", 0.0),
    ] * 10
    with ThreadPoolExecutor(max_workers=16) as executor:
        results = list(
            executor.map(lambda c: compute_score("math", c[0], c[1], {"index": 0}, grader_workers=1), cases)
        )
    assert [r["score"] for r in results] == [c[2] for c in cases]


@pytest.mark.slow
@pytest.mark.verl
def test_loaded_by_verl_from_hydra_config():
    """verl's own loader, with the documented hydra keys (imports verl: slow)."""
    import os

    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.reward import get_custom_reward_fn

    overrides = [
        "reward.custom_reward_function.path=pkg://acerl.grading.reward",
        "reward.custom_reward_function.name=compute_score",
        "+reward.custom_reward_function.reward_kwargs.incorrect_score=-1.0",
        "+reward.custom_reward_function.reward_kwargs.grader_workers=1",
    ]
    with initialize_config_dir(
        config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"), version_base=None
    ):
        config = compose("ppo_trainer", overrides=overrides)
    fn = get_custom_reward_fn(config)
    assert (
        fn(data_source="math_dapo", solution_str="Answer: 35", ground_truth="34", extra_info={})["score"]
        == -1.0
    )
    assert (
        fn(data_source="math_dapo", solution_str="Answer: 34", ground_truth="34", extra_info={})["score"]
        == 1.0
    )


def test_close_grader_releases_the_grader_and_lets_the_next_call_start_anew():
    """``close_grader`` drops the shared grader and its exit hook (a closed grader is not kept alive until the
    process exits), is idempotent, and the next call starts a new grader, with other settings if asked."""
    import gc
    import weakref

    reward.close_grader()
    first = weakref.ref(reward.get_grader(workers=1))
    assert reward.get_grader(workers=1) is first()
    reward.close_grader()
    gc.collect()
    assert first() is None
    reward.close_grader()
    second = reward.get_grader(workers=2)
    assert second.workers == 2
