#!/usr/bin/env bash
# CI for the SLURM path: start the local one-node cluster, run the SLURM tests, always stop the cluster.
#
# Usage: scripts/ci_slurm.sh [PYTEST_ARGS...]      (default: the tests marked `slurm` under tests/slurm/)
# Environment:
#   ACERL_SLURM_ACCOUNTING   default 1 here: slurmdbd + MariaDB, so the profile uses `sacct` like a production
#                            cluster (0: no accounting, squeue status command; see scripts/slurm_local.sh)
#   ACERL_CI_SLURM_TIMEOUT   seconds for the whole pytest run (default 900)
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
[[ ${#args[@]} -gt 0 ]] || args=(-m slurm tests/slurm)
rc=0
timeout -k 30 "${ACERL_CI_SLURM_TIMEOUT:-900}" "$python" -m pytest -p no:cacheprovider "${args[@]}" || rc=$?
echo "ci_slurm: pytest exit code $rc after $((SECONDS - start)) s" >&2
exit "$rc"
