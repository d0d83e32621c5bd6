#!/usr/bin/env bash
# Start a Ray cluster over the current SLURM allocation, run one command on the head node, stop the cluster.
#
# Usage (inside an sbatch job / salloc with N nodes, one task per node):
#   scripts/ray_on_slurm.sh [--] COMMAND [ARG...]
# acerl's verl launcher (acerl.verl_backend.launcher.train_run_verl) calls it for multi-node training with
# COMMAND = `python -m verl.trainer.main_ppo ...`; ray.init() in that command finds the running cluster.
#
# Steps: node list from `scontrol show hostnames "$SLURM_JOB_NODELIST"` (one host per array element); the
# first node is the head: `ray start --head` there, then `ray start --address=<head>:<port>` on every other
# node (`srun --nodes=1 --ntasks=1 -w <node>`, in the background, `--block`); wait until all nodes are alive;
# run COMMAND on the head (`srun --overlap`) with RAY_ADDRESS set; on exit stop the background steps.
#
# Environment:
#   RAY_PORT             head port (default 6379)
#   RAY_NUM_CPUS         CPUs Ray may use per node (default $SLURM_CPUS_PER_TASK, else $SLURM_CPUS_ON_NODE)
#   RAY_NUM_GPUS         GPUs per node (default $SLURM_GPUS_ON_NODE, else the count of $CUDA_VISIBLE_DEVICES)
#   ACERL_EXPECT_NODES   nodes to wait for (default: all nodes of the allocation)
#   ACERL_RAY_WAIT       seconds to wait for the nodes (default 600)
#   ACERL_RAY_HEAD_IP    the head's address the other nodes and NCCL's bootstrap reach (default: the first IPv4
#                        address of `hostname --ip-address` on the head, which may be a management network; set it
#                        to the head's address on the fast fabric, with NCCL_SOCKET_IFNAME; docs/cluster.md)
#   RAY_SRUN_GPU_FLAG    how the `ray start` steps request their node's GPUs (default `--gres=gpu:$RAY_NUM_GPUS`
#                        when RAY_NUM_GPUS > 0; e.g. `--gpus-per-node=8`; empty: request none). Since Slurm 20.11
#                        a step gets only the GRES it asks for: without it, CUDA_VISIBLE_DEVICES is empty inside
#                        the step and Ray's --num-gpus advertises GPUs its workers cannot see.
#   RAY_AUTH_MODE        Ray token authentication (Ray 2.60 in our lock). Unset: this script turns it on with a fresh random
#                        token for this job (RAY_AUTH_TOKEN, 256 bits, exported to every step and to COMMAND).
#                        Set it (token with your own RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH, or disabled) to
#                        choose yourself. Without one token shared by head, workers and COMMAND, Ray 2.60's
#                        head enables token auth on its own and nothing else can join it.
#   ACERL_DRY_RUN=1      print every command (prefixed "+ ") instead of running it; no waiting
# Environment variables of this shell reach COMMAND on the head; the verl launcher also forwards
# VERL_USE_EXTERNAL_MODULES to every Ray worker through +ray_kwargs.ray_init.runtime_env.env_vars.
set -euo pipefail

if [[ "${1:-}" == "--" ]]; then shift; fi
if [[ $# -eq 0 ]]; then
  echo "usage: $0 [--] COMMAND [ARG...]" >&2
  exit 2
fi
: "${SLURM_JOB_NODELIST:?not inside a SLURM allocation (SLURM_JOB_NODELIST is unset)}"

DRY_RUN="${ACERL_DRY_RUN:-0}"
PORT="${RAY_PORT:-6379}"
NUM_CPUS="${RAY_NUM_CPUS:-${SLURM_CPUS_PER_TASK:-${SLURM_CPUS_ON_NODE:-}}}"
if [[ -n "${RAY_NUM_GPUS:-}" ]]; then
  NUM_GPUS="$RAY_NUM_GPUS"
elif [[ -n "${SLURM_GPUS_ON_NODE:-}" ]]; then
  NUM_GPUS="$SLURM_GPUS_ON_NODE"
elif [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
  IFS=',' read -r -a _gpus <<<"$CUDA_VISIBLE_DEVICES"
  NUM_GPUS="${#_gpus[@]}"
else
  NUM_GPUS=""
fi
WAIT_S="${ACERL_RAY_WAIT:-600}"

# run CMD...: execute, or print it in dry-run mode
run() {
  if [[ "$DRY_RUN" == "1" ]]; then
    printf '+'; printf ' %q' "$@"; printf '\n'
  else
    "$@"
  fi
}

# A real bash array, one host per element (`nodes_array=("$nodes")` would hold one element with all hosts).
mapfile -t nodes_array < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
if [[ ${#nodes_array[@]} -eq 0 ]]; then
  echo "scontrol listed no hosts for SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST" >&2
  exit 1
fi
EXPECT="${ACERL_EXPECT_NODES:-${#nodes_array[@]}}"
if (( EXPECT > ${#nodes_array[@]} )); then
  echo "need $EXPECT nodes but the allocation has ${#nodes_array[@]}: ${nodes_array[*]}" >&2
  exit 1
fi
head_node="${nodes_array[0]}"

if [[ -n "${ACERL_RAY_HEAD_IP:-}" ]]; then
  head_ip="$ACERL_RAY_HEAD_IP"
elif [[ "$DRY_RUN" == "1" ]]; then
  head_ip="$head_node"
else
  # first IPv4 address of the head node (hostname --ip-address may list several, IPv6 included)
  head_ip="$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | tr ' ' '\n' | grep -m1 -E '^[0-9.]+$' || true)"
  [[ -n "$head_ip" ]] || head_ip="$head_node"
fi
address="$head_ip:$PORT"
echo "ray_on_slurm: ${#nodes_array[@]} node(s): ${nodes_array[*]}; head $head_node ($address)" >&2

# One token for the whole job: `ray start --head` in recent Ray (2.60 in our lock) enables token authentication by default and
# rejects workers and drivers that do not carry the head's token. srun exports this shell's environment to
# every step, so head, workers and COMMAND share it; the token never appears on a command line.
if [[ -z "${RAY_AUTH_MODE:-}" ]]; then
  export RAY_AUTH_MODE=token
  if [[ -z "${RAY_AUTH_TOKEN:-}" && -z "${RAY_AUTH_TOKEN_PATH:-}" ]]; then
    RAY_AUTH_TOKEN="$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
    export RAY_AUTH_TOKEN
  fi
fi

resources=()
[[ -n "$NUM_CPUS" ]] && resources+=("--num-cpus=$NUM_CPUS")
[[ -n "$NUM_GPUS" ]] && resources+=("--num-gpus=$NUM_GPUS")
# the GPUs each `ray start` step must hold (see RAY_SRUN_GPU_FLAG above)
gpu_request=()
if [[ -n "${RAY_SRUN_GPU_FLAG+set}" ]]; then
  [[ -n "$RAY_SRUN_GPU_FLAG" ]] && gpu_request+=("$RAY_SRUN_GPU_FLAG")
elif [[ -n "$NUM_GPUS" && "$NUM_GPUS" != "0" ]]; then
  gpu_request+=("--gres=gpu:$NUM_GPUS")
fi

pids=()
tmp_files=()
# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -f "${tmp_files[@]}"
}
trap cleanup EXIT

start_bg() {
  if [[ "$DRY_RUN" == "1" ]]; then
    run "$@"
  else
    "$@" &
    pids+=("$!")
  fi
}

# SLURM sets ROCR_VISIBLE_DEVICES beside CUDA_VISIBLE_DEVICES in a GPU step when gres.conf names no vendor, and
# verl's workers (started by these raylets) refuse both; the GPU path is CUDA (docs/cluster.md, "GPUs")
start_bg srun --nodes=1 --ntasks=1 --overlap -w "$head_node" "${gpu_request[@]}" \
  env -u ROCR_VISIBLE_DEVICES ray start --head --node-ip-address="$head_ip" --port="$PORT" "${resources[@]}" --block
[[ "$DRY_RUN" == "1" ]] || sleep 10

for ((i = 1; i < ${#nodes_array[@]}; i++)); do
  node="${nodes_array[$i]}"
  start_bg srun --nodes=1 --ntasks=1 --overlap -w "$node" "${gpu_request[@]}" \
    env -u ROCR_VISIBLE_DEVICES ray start --address="$address" "${resources[@]}" --block
done

export RAY_ADDRESS="$address"
if [[ "$DRY_RUN" != "1" ]]; then
  deadline=$((SECONDS + WAIT_S))
  probe_err="$(mktemp)"
  tmp_files+=("$probe_err")
  while :; do
    # a probe can block when the head is not up yet: bound it so the deadline is checked; its stderr is kept
    # so that a timeout says why (an authentication error reads differently from a head still starting)
    alive="$(timeout -k 5 60 python -c 'import ray; ray.init(address="auto", logging_level="ERROR"); print(sum(n["Alive"] for n in ray.nodes()))' 2>"$probe_err" || echo 0)"
    alive="${alive##*$'\n'}"
    (( alive >= EXPECT )) && break
    if (( SECONDS >= deadline )); then
      echo "ray_on_slurm: only $alive of $EXPECT nodes joined within ${WAIT_S}s; the last probe said:" >&2
      grep -E 'Error|error' "$probe_err" | tail -n 3 >&2 || tail -n 3 "$probe_err" >&2
      exit 1
    fi
    sleep 5
  done
  echo "ray_on_slurm: $alive node(s) alive" >&2
fi

status=0
run srun --nodes=1 --ntasks=1 --overlap -w "$head_node" --export=ALL "$@" || status=$?
exit "$status"
