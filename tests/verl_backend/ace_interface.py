"""Test helper: whether issue 13's ACE ``amplify`` interface is in ``acerl`` (the verl plugin calls it).

The verl plugin passes ``amplify`` and ``correct`` (verl's ``acc``) to
``acerl.algos.advantages.ace_advantages_with_stats`` and the launcher reads ``EstimatorConfig.amplify``; both
come from issue 13's change. Until it is merged, tests that run ACE through the plugin skip with a reason
naming it.
"""

from __future__ import annotations

import inspect

import pytest


def ace_amplify_merged() -> bool:
    """``ace_advantages_with_stats(..., amplify=, correct=)`` and ``EstimatorConfig.amplify`` exist."""
    from acerl.algos.advantages import ace_advantages_with_stats
    from acerl.config import EstimatorConfig

    params = inspect.signature(ace_advantages_with_stats).parameters
    return "correct" in params and "amplify" in params and "amplify" in EstimatorConfig.model_fields


def require_ace_amplify(method: str = "ace") -> None:
    """Skip an ACE test (``method`` starting with ``ace``) until the interface is merged."""
    if method.startswith("ace") and not ace_amplify_merged():
        pytest.skip("needs issue 13's ACE amplify interface: ace_advantages_with_stats(amplify=, correct=)")


def verl_overrides(cfg, run, root):
    """``acerl.verl_backend.launcher.verl_overrides`` for tests: an ACE run skips until the interface is merged
    (the launcher passes ``EstimatorConfig.amplify``)."""
    from acerl.verl_backend import launcher

    require_ace_amplify(run.method)
    return launcher.verl_overrides(cfg, run, root)
