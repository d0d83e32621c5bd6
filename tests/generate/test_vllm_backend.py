"""The vLLM backend is import-guarded (vLLM is GPU-only and not installed on CPU machines)."""

from __future__ import annotations

import importlib.util

import pytest

import acerl.generate.vllm_backend as vb
from acerl.generate import make_sampler

no_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")


def test_module_imports_without_vllm():
    assert vb.VLLMSampler.__name__ == "VLLMSampler"  # importing the module never needs vLLM


@no_vllm
def test_missing_vllm_says_install_the_gpu_extra(tmp_path):
    with pytest.raises(ImportError, match=r"pip install 'acerl\[gpu\]'"):
        vb.VLLMSampler.from_pretrained(tmp_path)
    with pytest.raises(ImportError, match="gpu"):
        make_sampler("vllm", tmp_path)


def test_factory_rejects_unknown_backend_and_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="valid: hf, vllm"):
        make_sampler("tgi", tmp_path)
    with pytest.raises(FileNotFoundError, match="model folder not found"):
        make_sampler("hf", tmp_path / "absent")
