#!/usr/bin/env bash
# The whole test suite (what `make test` runs after lint, and so what CI runs): unit tests, the CI-scale study end
# to end (whole DAG, DVC stories, SIGKILL resume), the SLURM tests against a real one-node cluster on localhost
# (scripts/slurm_local.sh), which this script starts and stops when it may, then the `vllm` tests.
#
# With no PYTEST_ARGS the main suite runs as parallel pytest sessions, one per lane (below), because in one session
# the cores idle much of the time (single-threaded torch, dvc, sbatch polling): `dvc` (tests/dvc), `workflow`
# (tests/workflow tests/report), `slurm` (tests/slurm), `rest` (every other test folder), and verl 0.9.1's whole
# trainer loop on CPU (the `verl_loop` tests: four methods with kill and resume, NSR, the export through
# sample/grade/Pass@k/report; docs/verl.md) in two lanes: `verl` (the GRPO family's runs) and `verl_dapo` (the DAPO
# family's); the vLLM session starts as a seventh lane when the first of them ends.
# The four other pytest lanes select -m "not gpu and not vllm and not verl_loop" (the rest lane is `tests` minus
# the other lanes' folders), so the six together run exactly the tests of one session with -m "not gpu and not
# vllm" (ACERL_TEST_LANES=serial). Under CI=true the verl lanes fail, not skip, when verl or TransferQueue is
# missing. The lanes share one CI-scale study through ACERL_TEST_SHARED_DIR (tests/support/study.py, shared_once). The
# rest and vllm lanes run niced (`nice -n 5`), so that they take the cores the others leave idle. The slurm lane
# runs at normal priority, like its SLURM jobs (the local cluster's PropagatePrioProcess): a Ray head it starts
# (ray_on_slurm.sh, the canary's main_ppo) must register its raylet within Ray's fixed 30 s, and beside the two
# verl lanes' Ray actors at normal priority a niced lane starved past it ("The current node timed out during
# startup"; docs/benchmarks.md).
# Each lane's report is printed when it ends, then one line per lane.
#
# Usage: scripts/run_tests.sh [PYTEST_ARGS...]      default: the lanes above
#                                                   with PYTEST_ARGS: one session with those arguments
#                                                   (verl's loop alone: `make test-verl-loop`)
# Environment:
#   ACERL_TEST_LANES      parallel (default without PYTEST_ARGS): the lanes above; serial: one session of every
#                         CPU test (verl's loop included), then the vLLM session (the reference for timing, and
#                         simpler to debug)
#   ACERL_TEST_SLURM      auto (default): use a running cluster; else start one when running as root with apt-get
#                         (CI machines), else the SLURM tests skip with the reason. 1: start one or fail.
#                         0: never start one (the SLURM tests skip unless a cluster is already running).
#   ACERL_SLURM_ACCOUNTING  default 1 here: slurmdbd + MariaDB, so the profile polls with `sacct` like a
#                         production cluster (0: no accounting, squeue status command; see scripts/slurm_local.sh)
#   ACERL_SLURM_PROCTRACK default linuxproc here (not the last start's): SIGTERM then reaches the trainer, so the
#                         preemption test can prove the checkpoint-on-SIGTERM path (cgroup skips it; docs/cluster.md)
#   ACERL_TEST_TIMEOUT    seconds for each pytest session (default 3000); SIGKILL 30 s after SIGTERM
#   PYTHON                interpreter with the package and pytest (default .venv/bin/python)
#   ACERL_TEST_VLLM       auto (default): after the main suite, run the `vllm` tests (real vLLM engine on CPU)
#                         in a second session with VLLM_PYTHON when it exists and no PYTEST_ARGS were given;
#                         1: run them or fail (what `make test` sets after building it); 0: never.
#   VLLM_PYTHON           interpreter of the vLLM CPU environment (default .venv-vllm/bin/python; make vllm-cpu-env)
#   ACERL_TEST_VLLM_TIMEOUT  seconds for that second session (default 1800)
# A cluster this script started is stopped on exit (success, failure, Ctrl-C), by pid; one it found running is
# left alone. Lanes still running when the script ends early (Ctrl-C, SIGTERM, a CI timeout) are stopped with it.
# The lanes' scratch folder (the shared study, each lane's log and temporary files) is removed after a green run
# and kept after a red one (its path is printed).
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
lanes_mode="${ACERL_TEST_LANES:-parallel}"
[[ $lanes_mode == parallel || $lanes_mode == serial ]] \
  || { log "ACERL_TEST_LANES must be parallel or serial, not '$lanes_mode'"; exit 2; }

started=0
declare -A lane_of_pid=()  # running lanes: subshell pid -> lane name
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local pid
  for pid in "${!lane_of_pid[@]}"; do pkill -TERM -P "$pid" 2>/dev/null || true; done
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
marks="not gpu and not vllm and not verl_loop"
timeout_s="${ACERL_TEST_TIMEOUT:-3000}"
vllm_python="${VLLM_PYTHON:-$repo/.venv-vllm/bin/python}"
run_vllm=0
if [[ "$vllm_mode" == 1 ]] || { [[ "$vllm_mode" == auto ]] && [[ $# -eq 0 ]] && [[ -x "$vllm_python" ]]; }; then
  [[ -x "$vllm_python" ]] || { log "no vLLM environment at $vllm_python (make vllm-cpu-env)"; exit 1; }
  run_vllm=1
fi

# The real vLLM engine runs in its own environment (vllm-cpu needs a transformers outside verl's pin), so its
# tests are a second session there: the `vllm` mark in the test folders that hold them.
vllm_session() {
  if [[ $run_vllm == 0 ]]; then
    log "vLLM tests not run (ACERL_TEST_VLLM=$vllm_mode, $vllm_python)"
    return 0
  fi
  local vstart=$SECONDS vrc=0
  nice -n "${1:-0}" timeout -k 30 "${ACERL_TEST_VLLM_TIMEOUT:-1800}" "$vllm_python" -m pytest -m vllm \
    tests/generate tests/evaluate || vrc=$?
  log "vLLM pytest exit code $vrc after $((SECONDS - vstart)) s"
  return "$vrc"
}

if [[ ${#args[@]} -gt 0 || $lanes_mode == serial ]]; then
  [[ ${#args[@]} -gt 0 ]] || args=(-m "not gpu and not vllm")  # the lanes' tests, verl's loop included
  rc=0
  timeout -k 30 "$timeout_s" "$python" -m pytest --durations=30 "${args[@]}" || rc=$?
  log "pytest exit code $rc after $((SECONDS - start)) s"
  vrc=0
  vllm_session || vrc=$?
  [[ $rc != 0 ]] || rc=$vrc
  exit "$rc"
fi

# The lanes: parallel pytest sessions over disjoint folders (see the header).
scratch="$(mktemp -d "${TMPDIR:-/tmp}/acerl-tests.XXXXXX")"
export ACERL_TEST_SHARED_DIR="$scratch/shared"
lane_names=(dvc workflow slurm rest verl verl_dapo)
declare -A lane_args=(
  [dvc]="tests/dvc"
  [workflow]="tests/workflow tests/report"
  [slurm]="tests/slurm"
  [rest]="tests --ignore=tests/dvc --ignore=tests/workflow --ignore=tests/report --ignore=tests/slurm"
  [verl]="tests/verl_backend/test_verl_cpu_loop.py tests/verl_backend/test_verl_cpu_loop_nsr.py"
  [verl_dapo]="tests/verl_backend/test_verl_cpu_loop.py"
)
# The two verl lanes are the only ones that select `verl_loop` (verl's whole trainer loop on CPU, docs/verl.md);
# the others deselect it, so together the lanes run every CPU test once. The loop trains only the runs its selected
# tests read: `verl` the GRPO family's (the killed and resumed GRPO, its ACE-GRPO twin, NSR), `verl_dapo` the DAPO
# family's (the `verl_dapo` mark), so the two halves share the cores with the other lanes instead of one long tail.
declare -A lane_marks=([verl]="verl_loop and not verl_dapo" [verl_dapo]="verl_dapo")
declare -A lane_nice=([dvc]=0 [workflow]=0 [slurm]=0 [rest]=5 [verl]=0 [verl_dapo]=0 [vllm]=5)
run_lane() {  # NAME: its pytest session (vllm: the vLLM session), report in $scratch/NAME.log
  local name=$1 t0=$SECONDS rc=0
  if [[ $name == vllm ]]; then
    vllm_session "${lane_nice[vllm]}" >"$scratch/$name.log" 2>&1 || rc=$?
  else
    # shellcheck disable=SC2086  # the lane's folders and options are words
    nice -n "${lane_nice[$name]}" timeout -k 30 "$timeout_s" "$python" -m pytest --durations=15 \
      --basetemp="$scratch/tmp-$name" -m "${lane_marks[$name]:-$marks}" ${lane_args[$name]} \
      >"$scratch/$name.log" 2>&1 || rc=$?
    # nothing collected because the loop's module skipped (no verl outside CI; under CI=true it fails instead)
    if [[ $name == verl* && $rc == 5 ]] && grep -q "verl / TransferQueue not installed" "$scratch/$name.log"; then
      rc=0
    fi
    echo "lane $name: pytest exit code $rc after $((SECONDS - t0)) s" >>"$scratch/$name.log"
  fi
  echo "$rc $((SECONDS - t0))" >"$scratch/$name.rc"
  return "$rc"
}
start_lane() {
  run_lane "$1" &
  lane_of_pid[$!]=$1
}
for name in "${lane_names[@]}"; do start_lane "$name"; done
log "${#lane_names[@]} parallel pytest sessions (lanes ${lane_names[*]}; the vLLM session starts when the first ends;" \
  "scratch $scratch)"
rc=0
while ((${#lane_of_pid[@]})); do
  finished=""
  wait -n -p finished "${!lane_of_pid[@]}" || true
  [[ -n $finished ]] || continue
  name=${lane_of_pid[$finished]}
  unset "lane_of_pid[$finished]"
  if [[ ! " ${lane_names[*]} " =~ " vllm " ]]; then  # a core is free: the vLLM session takes it
    lane_names+=(vllm)
    start_lane vllm
  fi
  echo "======================== lane $name ========================"
  cat "$scratch/$name.log"
done
summary=()
for name in "${lane_names[@]}"; do
  read -r lrc secs <"$scratch/$name.rc" || { lrc=1 secs=?; }
  summary+=("lane $name: exit code $lrc after $secs s")
  [[ $rc != 0 ]] || rc=$lrc
done
printf 'run_tests: %s\n' "${summary[@]}" >&2
log "all lanes done after $((SECONDS - start)) s, exit code $rc"
if [[ $rc == 0 ]]; then rm -rf "$scratch"; else log "kept the lanes' scratch folder $scratch"; fi
exit "$rc"
