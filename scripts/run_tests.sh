#!/usr/bin/env bash
# The whole test suite in one pytest session (what `make test` runs after lint, and so what CI runs): unit tests,
# the CI-scale study end to end (whole DAG, DVC stories, SIGKILL resume) and the SLURM tests against a real
# one-node cluster on localhost (scripts/slurm_local.sh), which this script starts and stops when it may.
#
# Usage: scripts/run_tests.sh [PYTEST_ARGS...]      default: -m "not gpu and not vllm and not verl_loop"
#                                                   (every CPU test; verl's whole loop: `make test-verl-loop`)
# Environment:
#   ACERL_TEST_SLURM      auto (default): use a running cluster; else start one when running as root with apt-get
#                         (CI machines), else the SLURM tests skip with the reason. 1: start one or fail.
#                         0: never start one (the SLURM tests skip unless a cluster is already running).
#   ACERL_SLURM_ACCOUNTING  default 1 here: slurmdbd + MariaDB, so the profile polls with `sacct` like a
#                         production cluster (0: no accounting, squeue status command; see scripts/slurm_local.sh)
#   ACERL_SLURM_PROCTRACK default linuxproc here (not the last start's): SIGTERM then reaches the trainer, so the
#                         preemption test can prove the checkpoint-on-SIGTERM path (cgroup skips it; docs/cluster.md)
#   ACERL_TEST_TIMEOUT    seconds for the whole pytest run (default 3000); SIGKILL 30 s after SIGTERM
#   PYTHON                interpreter with the package and pytest (default .venv/bin/python)
#   ACERL_TEST_VLLM       auto (default): after the main session, run the `vllm` tests (real vLLM engine on CPU)
#                         in a second session with VLLM_PYTHON when it exists and no PYTEST_ARGS were given;
#                         1: run them or fail (what `make test` sets after building it); 0: never.
#   VLLM_PYTHON           interpreter of the vLLM CPU environment (default .venv-vllm/bin/python; make vllm-cpu-env)
#   ACERL_TEST_VLLM_TIMEOUT  seconds for that second session (default 1800)
# A cluster this script started is stopped on exit (success, failure, Ctrl-C), by pid; one it found running is
# left alone.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || { echo "run_tests: no Python at $python (run make setup, or set PYTHON)" >&2; exit 1; }
export PATH="$(dirname "$python"):$PATH"
export ACERL_SLURM_ACCOUNTING="${ACERL_SLURM_ACCOUNTING:-1}"
export ACERL_SLURM_PROCTRACK="${ACERL_SLURM_PROCTRACK:-linuxproc}"
mode="${ACERL_TEST_SLURM:-auto}"
log() { echo "run_tests: $*" >&2; }

started=0
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [[ $started == 1 ]]; then "$here/slurm_local.sh" stop || log "stopping the SLURM cluster failed"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start=$SECONDS
if [[ "$mode" != 0 ]] && timeout -k 2 10 sinfo -h >/dev/null 2>&1; then
  log "using the running SLURM cluster (sinfo answers); it is left running"
elif [[ "$mode" == 1 ]] || { [[ "$mode" == auto ]] && [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null; }; then
  log "starting a local one-node SLURM cluster (scripts/slurm_local.sh start; stopped at exit)"
  started=1
  timeout -k 10 900 "$here/slurm_local.sh" start
  log "SLURM cluster up after $((SECONDS - start)) s"
else
  log "no SLURM cluster and not starting one (ACERL_TEST_SLURM=$mode, uid $(id -u)): the SLURM tests will skip"
fi

cd "$repo"
args=("$@")
vllm_mode="${ACERL_TEST_VLLM:-auto}"
[[ ${#args[@]} -gt 0 ]] || args=(-m "not gpu and not vllm and not verl_loop")
rc=0
timeout -k 30 "${ACERL_TEST_TIMEOUT:-3000}" "$python" -m pytest --durations=30 "${args[@]}" || rc=$?
log "pytest exit code $rc after $((SECONDS - start)) s"

# The real vLLM engine runs in its own environment (vllm-cpu needs a transformers outside verl's pin), so its
# tests are a second session there: the `vllm` mark in the test folders that hold them.
vllm_python="${VLLM_PYTHON:-$repo/.venv-vllm/bin/python}"
if [[ "$vllm_mode" == 1 ]] || { [[ "$vllm_mode" == auto ]] && [[ $# -eq 0 ]] && [[ -x "$vllm_python" ]]; }; then
  [[ -x "$vllm_python" ]] || { log "no vLLM environment at $vllm_python (make vllm-cpu-env)"; exit 1; }
  vstart=$SECONDS
  vrc=0
  timeout -k 30 "${ACERL_TEST_VLLM_TIMEOUT:-1800}" "$vllm_python" -m pytest -m vllm tests/generate tests/evaluate \
    || vrc=$?
  log "vLLM pytest exit code $vrc after $((SECONDS - vstart)) s"
  [[ $rc != 0 ]] || rc=$vrc
else
  log "vLLM tests not run (ACERL_TEST_VLLM=$vllm_mode, $vllm_python)"
fi
exit "$rc"
