"""An unreadable model folder (a truncated ``model.safetensors``) is exit 4 naming the file and the command that
writes it again, with the invocation's ``--config``/``--root``: the base model's ``acerl prepare-base``, a final
policy's ``acerl train`` (it was a ``SafetensorError`` traceback, exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acerl.cli import main
from acerl.config import Run
from acerl.errors import BadInputError, invocation_options
from acerl.models.loading import LEAN_ENV, load_model_folder
from acerl.models.tiny import TinyModelConfig, build_tiny_model
from acerl.models.tokenizer import build_char_tokenizer
from acerl.pipeline import paths

REPO = Path(__file__).resolve().parents[2]
ARCH = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=48)


def _truncated_model(folder: Path) -> Path:
    """A tiny Llama folder whose ``model.safetensors`` lost its second half (a killed copy or download)."""
    tokenizer = build_char_tokenizer(model_max_length=ARCH.max_position_embeddings)
    build_tiny_model(ARCH, tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return weights


@pytest.mark.parametrize("lean", ["1", "0"])
@pytest.mark.parametrize(
    ("run", "command"),
    [
        (Run("tiny", "base", 0), "acerl prepare-base --model tiny"),
        (Run("tiny", "ace_grpo", 3), "acerl train --model tiny --method ace_grpo --seed 3"),
    ],
)
def test_a_truncated_model_folder_names_the_file_and_the_command_that_remakes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Run, command: str, lean: str
) -> None:
    monkeypatch.setenv(LEAN_ENV, lean)  # both loaders: the lean Llama and transformers
    folder = paths.policy_dir(tmp_path, run)
    weights = _truncated_model(folder)
    with invocation_options(["--config", "my.yaml", "--root", str(tmp_path)]):
        with pytest.raises(BadInputError) as e:
            load_model_folder(folder)
    message = str(e.value)
    assert e.value.exit_code == 4
    assert message.startswith(f"{weights} is unreadable (truncated or corrupt")
    assert message.endswith(f"delete {folder} and rerun `{command} --config my.yaml --root {tmp_path}`")


def test_acerl_train_on_a_truncated_base_model_is_exit_4_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    weights = _truncated_model(paths.base_model_dir(tmp_path, "tiny"))
    capsys.readouterr()  # transformers' progress bar while saving
    argv = ["train", "--model", "tiny", "--method", "grpo", "--root", str(tmp_path), "--no-progress"]
    assert main(argv) == 4
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"acerl train: bad input: {weights} is unreadable")
    assert f"rerun `acerl prepare-base --model tiny --root {tmp_path}`" in err
