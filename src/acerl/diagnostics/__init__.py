"""Diagnostics of paper Sec. 5.2-5.3: overconfident-error fraction, overconfidence magnitude, entropy.

:func:`diagnose_run` is the pipeline step (one training run, every diagnostic checkpoint); the pure metrics are
in :mod:`acerl.diagnostics.metrics`.
"""

from acerl.diagnostics.metrics import overconfidence_stats, pad_token_values, token_weighted_mean
from acerl.diagnostics.run import diagnose_checkpoint, diagnose_run, diagnostic_settings

__all__ = [
    "diagnose_checkpoint",
    "diagnose_run",
    "diagnostic_settings",
    "overconfidence_stats",
    "pad_token_values",
    "token_weighted_mean",
]
