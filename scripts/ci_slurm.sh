#!/usr/bin/env bash
# CI for the SLURM path: start the local one-node cluster, run the SLURM tests, always stop the cluster.
#
# Usage: scripts/ci_slurm.sh [PYTEST_ARGS...]
#   default: -m "slurm and not slow" tests/slurm (smoke job, preemption; about 7 min on a busy 2-core machine)
#   ACERL_CI_SLURM_FULL=1: -m slurm tests/slurm (adds the whole pipeline through SLURM vs a local run, ~30 min)
# Environment:
#   ACERL_SLURM_ACCOUNTING   default 1 here: slurmdbd + MariaDB, so the profile uses `sacct` like a production
#                            cluster (0: no accounting, squeue status command; see scripts/slurm_local.sh)
#   ACERL_CI_SLURM_TIMEOUT   seconds for the whole pytest run (default 900; 3600 with ACERL_CI_SLURM_FULL=1)
#   PYTHON                   interpreter with the package and pytest (default .venv/bin/python)
# Needs root (the cluster script installs Debian packages and runs the daemons as root).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
export ACERL_SLURM_ACCOUNTING="${ACERL_SLURM_ACCOUNTING:-1}"
python="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || { echo "ci_slurm: no Python at $python (run make setup, or set PYTHON)" >&2; exit 1; }

# shellcheck disable=SC2317  # called by the EXIT trap
stop_cluster() { "$here/slurm_local.sh" stop || echo "ci_slurm: stopping the cluster failed" >&2; }
trap stop_cluster EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start=$SECONDS
"$here/slurm_local.sh" start
cd "$repo"
args=("$@")
if [[ ${#args[@]} -eq 0 ]]; then
  if [[ "${ACERL_CI_SLURM_FULL:-0}" == 1 ]]; then args=(-m slurm tests/slurm); else args=(-m "slurm and not slow" tests/slurm); fi
fi
rc=0
default_timeout=900
[[ "${ACERL_CI_SLURM_FULL:-0}" != 1 ]] || default_timeout=3600
timeout -k 30 "${ACERL_CI_SLURM_TIMEOUT:-$default_timeout}" "$python" -m pytest -p no:cacheprovider "${args[@]}" || rc=$?
echo "ci_slurm: pytest exit code $rc after $((SECONDS - start)) s" >&2
exit "$rc"
