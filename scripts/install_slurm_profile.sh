#!/usr/bin/env bash
# Install profiles/slurm-template/ as the user's Snakemake `slurm` profile, so that
#   snakemake --profile slurm --configfile=config/paper.yaml all
# submits every job to SLURM. See docs/cluster.md.
#
# Usage: scripts/install_slurm_profile.sh --partition P (--account A | --no-account) [options]
#   --partition P          SLURM partition (env ACERL_SLURM_PARTITION)
#   --account A            SLURM account (env ACERL_SLURM_ACCOUNT); --no-account submits without -A
#   --dest DIR             default ${XDG_CONFIG_HOME:-$HOME/.config}/snakemake/slurm
#   --force                overwrite an existing profile
#   --status-command C     sacct | squeue | auto (default auto: sacct if SLURM accounting answers here,
#                          squeue if sacct reports accounting disabled, sacct when SLURM is not installed here)
#   --init-seconds N       seconds before the first status check (template: 40)
#   --jobs N               SLURM jobs submitted at the same time (template: 100)
#   --retries N            resubmissions of a failed job (template: 3)
#   --latency-wait S       seconds to wait for outputs on a shared filesystem (template: 60)
#   --keep-logs            keep the SLURM logs of successful jobs too
#   --template FILE        default: profiles/slurm-template/config.yaml beside this script's repository
# Exit codes: 0 installed, 1 refused or failed, 2 usage error.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
template="$here/../profiles/slurm-template/config.yaml"
partition="${ACERL_SLURM_PARTITION:-}"
account="${ACERL_SLURM_ACCOUNT:-}"
no_account=0
account_given=0
dest="${XDG_CONFIG_HOME:-$HOME/.config}/snakemake/slurm"
force=0
status_command=auto
init_seconds=""
jobs=""
retries=""
latency_wait=""
keep_logs=0

die() { echo "install_slurm_profile: $*" >&2; exit 1; }
usage() { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

need_value() { [[ $# -ge 2 && -n "$2" ]] || { echo "install_slurm_profile: $1 needs a value" >&2; usage; }; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --partition) need_value "$@"; partition="$2"; shift 2 ;;
    --account) need_value "$@"; account="$2"; account_given=1; shift 2 ;;
    --no-account) no_account=1; shift ;;
    --dest) need_value "$@"; dest="$2"; shift 2 ;;
    --force) force=1; shift ;;
    --status-command) need_value "$@"; status_command="$2"; shift 2 ;;
    --init-seconds) need_value "$@"; init_seconds="$2"; shift 2 ;;
    --jobs) need_value "$@"; jobs="$2"; shift 2 ;;
    --retries) need_value "$@"; retries="$2"; shift 2 ;;
    --latency-wait) need_value "$@"; latency_wait="$2"; shift 2 ;;
    --keep-logs) keep_logs=1; shift ;;
    --template) need_value "$@"; template="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "install_slurm_profile: unknown argument '$1'" >&2; usage ;;
  esac
done

# ---- validate the values (they go into YAML and sbatch command lines: no quoting surprises) ----------------
name_re='^[A-Za-z0-9_.-]+$'
[[ -n "$partition" ]] || die "no partition: give --partition NAME (or set ACERL_SLURM_PARTITION); 'sinfo -s' lists them"
[[ "$partition" =~ $name_re ]] || die "partition '$partition' may only contain letters, digits, '_', '.', '-'"
if [[ $no_account -eq 1 ]]; then
  [[ $account_given -eq 0 ]] || die "give either --account or --no-account, not both"
  account=""
else
  [[ -n "$account" ]] || die "no account: give --account NAME (or --no-account on clusters without accounts); 'sacctmgr show assoc user=\$USER format=account' lists yours"
  [[ "$account" =~ $name_re ]] || die "account '$account' may only contain letters, digits, '_', '.', '-'"
fi
for pair in "init-seconds:$init_seconds" "jobs:$jobs" "retries:$retries" "latency-wait:$latency_wait"; do
  value="${pair#*:}"
  [[ -z "$value" || "$value" =~ ^[0-9]+$ ]] || die "--${pair%%:*} must be a non-negative integer, got '$value'"
done
[[ -z "$init_seconds" || "$init_seconds" -ge 1 ]] || die "--init-seconds must be at least 1"
[[ -z "$jobs" || "$jobs" -ge 1 ]] || die "--jobs must be at least 1"
[[ -f "$template" ]] || die "template not found: $template"

target="$dest/config.yaml"
if [[ -e "$target" && $force -eq 0 ]]; then
  die "$target exists; pass --force to overwrite it"
fi

# ---- the status command -------------------------------------------------------------------------------------
min_job_age() {  # MinJobAge in seconds from the running cluster, empty when unknown
  timeout -k 2 10 scontrol show config 2>/dev/null | awk -F= '/^MinJobAge/ {gsub(/[^0-9]/, "", $2); print $2}'
}
case "$status_command" in
  sacct|squeue) ;;
  auto)
    if ! command -v sacct >/dev/null 2>&1; then
      status_command=sacct
      echo "install_slurm_profile: SLURM is not installed here; using the sacct status command (needs accounting on the cluster)" >&2
    elif err="$(timeout -k 2 20 sacct -n -X -o JobID -S now-1hour 2>&1 >/dev/null)"; then
      status_command=sacct
    elif grep -qi "accounting storage is disabled" <<<"$err"; then
      status_command=squeue
      echo "install_slurm_profile: SLURM accounting is disabled here: using the squeue status command" >&2
    else
      status_command=sacct
      echo "install_slurm_profile: sacct failed ('${err//$'\n'/ }'); keeping the sacct status command" >&2
    fi
    ;;
  *) die "--status-command must be sacct, squeue or auto, got '$status_command'" ;;
esac
if [[ "$status_command" == squeue ]]; then
  age="$(min_job_age || true)"
  wait_s="${init_seconds:-$(awk '/^slurm-init-seconds-before-status-checks:/ {print $2}' "$template")}"
  if [[ -n "$age" && "$age" -lt $((3 * wait_s)) ]]; then
    echo "install_slurm_profile: warning: MinJobAge=$age s < 3 x $wait_s s: finished jobs may vanish from squeue" \
      "before Snakemake sees them; ask for a larger MinJobAge or pass a smaller --init-seconds" >&2
  fi
fi

# ---- fill in the template -----------------------------------------------------------------------------------
# set_key FILE KEY VALUE: replace the value of the one line `<indent>KEY: ...` (keeping a trailing comment).
set_key() {
  local file="$1" key="$2" value="$3" n
  n="$(grep -cE "^[[:space:]]*${key}:" "$file" || true)"
  [[ "$n" -eq 1 ]] || die "template $template must contain exactly one '$key:' line (found $n)"
  sed -E -i "s/^([[:space:]]*${key}:)[[:space:]]*(\"[^\"]*\"|[^#[:space:]]+)?([[:space:]]*#.*)?\$/\\1 ${value}\\3/" "$file"
}

mkdir -p "$dest"
tmp="$(mktemp "$dest/.config.yaml.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
{
  echo "# Installed by scripts/install_slurm_profile.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(cd "$(dirname "$template")" && pwd)/$(basename "$template")"
  cat "$template"
} >"$tmp"
set_key "$tmp" slurm_partition "\"$partition\""
if [[ $no_account -eq 1 ]]; then
  sed -i -E '/^[[:space:]]*slurm_account:/d' "$tmp"
  set_key "$tmp" slurm-no-account true
else
  set_key "$tmp" slurm_account "\"$account\""
fi
set_key "$tmp" slurm-status-command "$status_command"
[[ -z "$init_seconds" ]] || set_key "$tmp" slurm-init-seconds-before-status-checks "$init_seconds"
[[ -z "$jobs" ]] || set_key "$tmp" jobs "$jobs"
[[ -z "$retries" ]] || set_key "$tmp" retries "$retries"
[[ -z "$latency_wait" ]] || set_key "$tmp" latency-wait "$latency_wait"
[[ $keep_logs -eq 0 ]] || set_key "$tmp" slurm-keep-successful-logs true

if left="$(grep -nE '"<[^">]+>"' "$tmp")"; then
  die "placeholders left in the profile (not installed):"$'\n'"$left"
fi
chmod 644 "$tmp"
mv -f "$tmp" "$target"
trap - EXIT
echo "installed $target (partition=$partition, account=${account:-<none>}, status command=$status_command)"
echo "run from the repository root:  snakemake --profile slurm --configfile=config/paper.yaml all"
if [[ "$dest" != "${XDG_CONFIG_HOME:-$HOME/.config}/snakemake/slurm" ]]; then
  echo "note: $dest is not where 'snakemake --profile slurm' looks; use: snakemake --profile $dest ..."
fi
