"""``acerl report`` with result files missing says how to make them: run the study, or, beside a ``dvc.yaml``
that has no stage writing them (written before the config grew), ``acerl dvc write`` first."""

from __future__ import annotations

from pathlib import Path

import pytest

from acerl.config import load_config
from acerl.errors import MissingInputError
from acerl.report.study import report_study

REPO = Path(__file__).resolve().parents[2]
FILES = ("config/config.yaml", "config/test.yaml")


@pytest.mark.parametrize("dvc_yaml", [None, "stages: {}\n"])
def test_missing_results_name_the_command_that_makes_them(tmp_path: Path, dvc_yaml: str | None) -> None:
    cfg = load_config([REPO / f for f in FILES])
    if dvc_yaml is not None:
        (tmp_path / "dvc.yaml").write_text(dvc_yaml)
    with pytest.raises(MissingInputError) as err:
        report_study(cfg, tmp_path, config_files=FILES)
    message = str(err.value)
    assert message.endswith("or give --partial to report the runs present")
    if dvc_yaml is None:
        assert "run the study first (snakemake, or make run)" in message
    else:
        stale = f"{tmp_path / 'dvc.yaml'} has no stage that writes it (stale): run "
        assert (
            f"{stale}`acerl dvc write --config config/config.yaml --config config/test.yaml`, then `dvc repro`"
            in message
        )
