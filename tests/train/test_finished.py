"""A finished run is returned only for the settings it was trained with (``acerl.train.finished``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from trainer_fixtures import REPO, TRAIN_OVERRIDES, DigitVerifier, make_config

from acerl.cli import main
from acerl.config import Run
from acerl.config.settings import resolve
from acerl.pipeline import paths
from acerl.pipeline.stages import Job, record_params
from acerl.train import train_run
from acerl.train.finished import FINAL_SPEC_FILE, StaleFinalError, StaleInputError, spec_differences
from acerl.trainers import TrainOptions, train_from_config

RUN = Run("tiny", "grpo", 0)


def _train(root: Path, verifier: DigitVerifier, *extra: str) -> Path:
    return train_run(resolve(make_config(*extra), RUN), root, verifier=verifier, progress=False)


def test_a_final_policy_of_other_settings_is_not_the_requested_run(tiny_root: Path, verifier: DigitVerifier):
    """The CI-scale policy (fewer steps) is not answered for a run of the default length: exit-0 "nothing to
    do" before; now a one-line error naming the folder, the key that differs (old vs new) and the fix."""
    final = _train(tiny_root, verifier, "models.tiny.train.total_steps=1")
    weights = (final / "model.safetensors").read_bytes()
    recorded = json.loads((final / FINAL_SPEC_FILE).read_text())
    assert recorded["train"]["total_steps"] == 1 and "code_version" in recorded
    calls = verifier.calls
    with pytest.raises(StaleFinalError) as e:
        _train(tiny_root, verifier, "models.tiny.train.total_steps=2")
    msg = str(e.value)
    assert msg.startswith(f"{final} was trained with other settings than the requested run tiny/grpo/seed0")
    assert "(final/run_spec.json: diagnostic_steps: [0, 1] vs [0, 2]; train.total_steps: 1 vs 2)" in msg
    assert f"delete {final} and rerun the same command" in msg
    assert "\n" not in msg and e.value.exit_code == 4
    assert verifier.calls == calls and (final / "model.safetensors").read_bytes() == weights
    # the same settings are still a finished run
    assert _train(tiny_root, verifier, "models.tiny.train.total_steps=1") == final and verifier.calls == calls


def test_an_older_final_folder_is_checked_against_its_run_spec(tiny_root: Path, verifier: DigitVerifier):
    """A final folder without its own record (written before it held one) is checked against the run folder's
    ``run_spec.json`` (its code version is then not compared)."""
    final = _train(tiny_root, verifier, "models.tiny.train.total_steps=1")
    (final / FINAL_SPEC_FILE).unlink()
    assert _train(tiny_root, verifier, "models.tiny.train.total_steps=1") == final
    with pytest.raises(StaleFinalError, match=r"\(run_spec.json: family\.clip_ratio_high: 0\.2 vs 0\.3\)"):
        _train(tiny_root, verifier, "models.tiny.train.total_steps=1", "families.grpo.clip_ratio_high=0.3")


def test_cli_train_of_a_stale_final_exits_4(tiny_root: Path, verifier: DigitVerifier, capsys, monkeypatch):
    """``acerl train`` in a folder whose run was trained by another config: exit 4, one line, no policy."""
    _train(tiny_root, verifier, "models.tiny.train.total_steps=1")
    monkeypatch.chdir(REPO)
    argv = ["train", "--model", "tiny", "--method", "grpo", "--seed", "0", "--root", os.fspath(tiny_root)]
    for item in TRAIN_OVERRIDES:
        argv += ["--set", item]
    capsys.readouterr()
    assert main(argv) == 4
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("acerl train: bad input: ") and err.count("\n") == 1
    assert "train.total_steps: 1 vs 3" in err


def test_spec_differences_name_each_leaf():
    old = {"a": 1, "b": {"c": [1, 2], "d": "x"}, "e": 0}
    new = {"a": 1, "b": {"c": [1, 3], "d": "x"}, "f": True}
    assert spec_differences(old, new) == ["b.c: [1, 2] vs [1, 3]", "e: 0 vs (absent)", "f: (absent) vs true"]


def test_data_or_a_base_model_made_for_another_config_is_not_reused(tiny_root: Path, verifier: DigitVerifier):
    """``data/`` and ``models/base/<model>/`` made by another config used to be trained on without a word; the
    params their preparation recorded are now checked (folders without a record, as older code made, are not).
    The check reads the stage table, so the trainer does not make it: ``acerl train``'s dispatcher
    (:func:`acerl.trainers.train_from_config`) hands it to :func:`acerl.train.train_run`."""
    made = make_config()
    record_params(made, tiny_root, Job("prepare_data"))
    record_params(made, tiny_root, Job("prepare_base", "tiny"))
    other_data = make_config("models.tiny.train.total_steps=1", "data.synthetic.seed=7")
    options = TrainOptions(progress=False, device="cpu")
    with pytest.raises(StaleInputError) as e:
        train_from_config(other_data, RUN, tiny_root, options)
    assert str(e.value) == (
        f"{tiny_root / 'data'} was made for another config than the requested run tiny/grpo/seed0 (acerl_params.json: "
        "data.synthetic.seed: 0 vs 7): rebuild it with `acerl prepare-data`, or give the config that made it"
    )
    other_base = make_config("models.tiny.train.total_steps=1", "models.tiny.sft.lr=0.01")
    with pytest.raises(
        StaleInputError, match=r"models/base/tiny was made .*models\.tiny\.sft\.lr: \(absent\) vs 0\.01\)"
    ):
        train_from_config(other_base, RUN, tiny_root, options)
    assert verifier.calls == 0 and not paths.policy_dir(tiny_root, RUN).exists()
    assert _train(
        tiny_root, verifier, "models.tiny.train.total_steps=1"
    ).is_dir()  # the config that made them
