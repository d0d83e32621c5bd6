"""Tables print the settings the study used: Table 5 of a local (CPU) study has no verl-only row, and Table 4's
columns follow the study's largest k."""

from __future__ import annotations

from support.report_synthetic import REPO_ROOT

from acerl.config import load_config
from acerl.report.study import VERL_ONLY_ROWS, hyperparameters_from_config, report_spec

CONFIGS = [REPO_ROOT / "config" / "config.yaml", REPO_ROOT / "config" / "test.yaml"]


def test_table_5_lists_only_what_the_backend_reads():
    """A CPU study printed "Validation samples 128" (verl's validation rollouts) and vLLM's GPU memory share."""
    local = load_config(CONFIGS)
    assert local.compute.backend == "local"
    for rows in hyperparameters_from_config(local).values():
        assert not set(VERL_ONLY_ROWS) & set(rows)
        assert rows["Pass@k samples per problem"] == local.evaluation.n
    verl = load_config(CONFIGS, ["compute.backend=verl"])
    for key, rows in hyperparameters_from_config(verl).items():
        assert rows["Validation samples"] == verl.models[key].train.val_samples
        assert set(VERL_ONLY_ROWS) <= set(rows)


def test_table_4_takes_the_study_s_largest_k():
    """Table 4 hard-coded Pass@32: every cell "-" in a study whose largest k is 8."""
    cfg = load_config(CONFIGS)
    sweep = report_spec(cfg).alpha_sweep
    assert max(cfg.evaluation.ks) == 8 and sweep is not None and sweep.ks == (1, 8)
    paper_scale = load_config(CONFIGS, ["evaluation.n=32", "evaluation.ks=[1,2,4,8,16,32]"])
    assert report_spec(paper_scale).alpha_sweep.ks == (1, 32)
