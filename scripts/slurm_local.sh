#!/usr/bin/env bash
# A single-node SLURM cluster on localhost, for trying the `slurm` profile and for tests/slurm/.
#
# Usage: scripts/slurm_local.sh start|stop|status|restart
#   start    install the Debian packages if missing (munge, slurmctld, slurmd, slurm-client; with accounting
#            also slurmdbd + MariaDB), start the daemons directly (no systemd), wait until the node is idle and
#            write a Snakemake profile for this cluster from profiles/slurm-template/. Idempotent.
#   stop     cancel the cluster's jobs and stop exactly the daemons `start` started (by pid; SIGKILL after a
#            grace period), remove the /etc/slurm/slurm.conf symlink.
#   status   print the daemons, the node state and the profile; exit 0 when the cluster answers, 3 otherwise.
#
# Environment:
#   ACERL_SLURM_DIR         scratch directory holding all state (default /tmp/acerl-slurm)
#   ACERL_SLURM_ACCOUNTING  1: real accounting (slurmdbd + MariaDB; `sacct` works, profile uses the sacct status
#                           command, like a production cluster); 0 (default): no accounting, squeue status command
#   ACERL_SLURM_PROCTRACK   linuxproc (default) or cgroup (cgroup v1 freezer, as most production clusters)
#   ACERL_SLURM_GPUS        GPUs the node advertises (default 2): a job asking --gres=gpu:N is scheduled as on a GPU
#                           cluster, with no GPU behind it (the canary test's verl run uses the CPU stand-ins)
#   Unset, both keep the values of the last `start` in ACERL_SLURM_DIR.
#
# Then:  XDG_CONFIG_HOME=$ACERL_SLURM_DIR/xdg snakemake --profile slurm ...
#   (or: snakemake --profile $ACERL_SLURM_DIR/xdg/snakemake/slurm ...)
# Needs root (apt-get, daemons running as root). slurm.conf must be at /etc/slurm/slurm.conf (a symlink here):
# the executor plugin's job step strips SLURM_CONF before its inner `srun`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR="${ACERL_SLURM_DIR:-/tmp/acerl-slurm}"
saved_setting() { sed -n "s/.*\b$1=\([a-z0-9]*\).*/\1/p" "$DIR/settings" 2>/dev/null || true; }
# Unset variables keep the settings of the last `start` (so `start` is idempotent); defaults on a fresh start.
ACCOUNTING="${ACERL_SLURM_ACCOUNTING:-$(saved_setting accounting)}"
ACCOUNTING="${ACCOUNTING:-0}"
ETC_CONF=/etc/slurm/slurm.conf
MARKER=".acerl-slurm-local"
HOST="$(hostname -s)"
PARTITION=debug
CLUSTER=acerl
DB_PORT="${ACERL_SLURM_DB_PORT:-3307}"
START_TIMEOUT=90  # seconds for the node to become idle
# How slurmd tracks job processes. linuxproc (default): by parentage; a signal reaches every process of a job
# step (the trainer under `python -m snakemake` and bash too). cgroup: cgroup v1 freezer, as most production
# clusters do; SLURM then signals only a step's task process (with Snakemake's executor, the inner
# `python -m snakemake`) and SIGKILLs the rest when the step ends (see docs/cluster.md, "Preemption").
PROCTRACK="${ACERL_SLURM_PROCTRACK:-$(saved_setting proctrack)}"
PROCTRACK="${PROCTRACK:-linuxproc}"
SETTINGS="accounting=$ACCOUNTING proctrack=$PROCTRACK"

log() { echo "slurm_local: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ------------------------------------------------------------------------------------------- safety checks
check_dir() {
  [[ "$DIR" =~ ^/[^/]+/[^/]+ ]] || die "ACERL_SLURM_DIR must be an absolute path at least two levels deep, got '$DIR'"
  if [[ -e "$DIR" && ! -e "$DIR/$MARKER" && -n "$(ls -A "$DIR" 2>/dev/null)" ]]; then
    die "$DIR exists, is not empty and was not created by this script (no $MARKER): refusing to use it"
  fi
}

need_root() { [[ "$(id -u)" -eq 0 ]] || die "needs root (apt-get; the daemons run as root): run with sudo"; }

# ------------------------------------------------------------------------------------------------ install
packages() {
  local pkgs=(munge slurmctld slurmd slurm-client)
  [[ "$ACCOUNTING" != 1 ]] || pkgs+=(slurmdbd slurm-wlm-mysql-plugin mariadb-server)
  echo "${pkgs[@]}"
}

missing_packages() {
  local p
  for p in $(packages); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

install_packages() {
  local missing
  missing="$(missing_packages | tr '\n' ' ')"
  [[ -n "${missing// /}" ]] || return 0
  log "installing Debian packages: $missing"
  # shellcheck disable=SC2086  # word splitting of the package list is intended
  if ! DEBIAN_FRONTEND=noninteractive timeout -k 10 600 apt-get install -y -q --no-install-recommends $missing \
    >"/tmp/acerl-slurm-apt.log" 2>&1; then
    log "apt-get install failed; running apt-get update and retrying"
    timeout -k 10 300 apt-get update -q >>"/tmp/acerl-slurm-apt.log" 2>&1 || true
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive timeout -k 10 600 apt-get install -y -q --no-install-recommends $missing \
      >>"/tmp/acerl-slurm-apt.log" 2>&1 || die "apt-get install failed: see /tmp/acerl-slurm-apt.log"
  fi
}

# ----------------------------------------------------------------------------------------------- pid files
# Every daemon we start has a pid file under $DIR/run; `stop` signals only those pids, and only while
# /proc/<pid>/comm still names the daemon we started (pid reuse).
pidfile() { echo "$DIR/run/$1.pid"; }

daemon_pid() {  # daemon_pid NAME COMM -> the live pid or nothing
  local f pid comm
  f="$(pidfile "$1")"
  [[ -s "$f" ]] || return 0
  pid="$(tr -dc '0-9' <"$f")"
  [[ -n "$pid" && -r "/proc/$pid/comm" ]] || return 0
  comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
  [[ "$comm" == "$2"* ]] && echo "$pid"
  return 0
}

# name:comm of each daemon, in start order (comm is truncated to 15 characters by the kernel)
daemons() {
  echo "munged:munged"
  [[ "$ACCOUNTING" != 1 ]] || { echo "mariadbd:mariadbd"; echo "slurmdbd:slurmdbd"; }
  echo "slurmctld:slurmctld"
  echo "slurmd:slurmd"
}

all_daemons() { echo "munged:munged mariadbd:mariadbd slurmdbd:slurmdbd slurmctld:slurmctld slurmd:slurmd"; }

stop_pid() {  # stop_pid NAME COMM: SIGTERM, wait up to 15 s, then SIGKILL (our own pid only)
  local pid i
  pid="$(daemon_pid "$1" "$2")"
  if [[ -z "$pid" ]]; then rm -f "$(pidfile "$1")"; return 0; fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 30; i++)); do
    [[ -n "$(daemon_pid "$1" "$2")" ]] || break
    sleep 0.5
  done
  if [[ -n "$(daemon_pid "$1" "$2")" ]]; then
    log "$1 (pid $pid) ignored SIGTERM for 15 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do [[ -n "$(daemon_pid "$1" "$2")" ]] || break; sleep 0.25; done
  fi
  log "stopped $1 (pid $pid)"
  rm -f "$(pidfile "$1")"
}

# --------------------------------------------------------------------------------------------- the config
real_memory_mb() {  # 90 % of MemTotal, leaving room for the OS; slurmd drains a node that reports less
  awk '/^MemTotal:/ {printf "%d\n", $2 / 1024 * 0.9}' /proc/meminfo
}

write_munge_key() {
  mkdir -p "$DIR/munge"
  chmod 755 "$DIR" "$DIR/munge"  # munged refuses a socket directory others cannot traverse
  if [[ ! -s "$DIR/munge/munge.key" ]]; then
    if command -v mungekey >/dev/null 2>&1; then
      mungekey -c -k "$DIR/munge/munge.key" >/dev/null
    else
      dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    fi
  fi
  chmod 600 "$DIR/munge/munge.key"
}

write_slurm_conf() {
  local cpus mem acct gpus
  cpus="$(nproc)"
  mem="$(real_memory_mb)"
  gpus="${ACERL_SLURM_GPUS:-2}"
  if [[ "$ACCOUNTING" == 1 ]]; then
    # slurmctld authenticates to slurmdbd through munge; it ignores AuthInfo for that connection and takes the
    # socket from AccountingStoragePass instead.
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePass=$DIR/munge/munge.socket
JobAcctGatherType=jobacct_gather/linux
AccountingStoreFlags=job_comment"
  else
    acct="AccountingStorageType=accounting_storage/none"
  fi
  mkdir -p "$DIR/etc"
  if [[ "$PROCTRACK" == cgroup ]]; then
    # cgroup v1 freezer: every process of a job step is tracked (and killed when the step ends), as on a
    # production cluster; no resource constraints.
    cat >"$DIR/etc/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainSwapSpace=no
ConstrainDevices=no
EOF
  fi
  # GPUs to schedule, no GPU behind them: slurmd counts a gpu only with a device file, so each is a character
  # device with /dev/null's numbers (1, 3) under $DIR/dev
  local gres_line="" i
  echo "# Written by scripts/slurm_local.sh: GPUs to schedule (device files behave as /dev/null)" >"$DIR/etc/gres.conf"
  if ((gpus > 0)); then
    mkdir -p "$DIR/dev"
    for ((i = 0; i < gpus; i++)); do
      [[ -c "$DIR/dev/gpu$i" ]] || mknod "$DIR/dev/gpu$i" c 1 3
    done
    echo "Name=gpu File=$DIR/dev/gpu[0-$((gpus - 1))]" >>"$DIR/etc/gres.conf"
    gres_line=" Gres=gpu:$gpus"
  fi
  cat >"$DIR/etc/slurm.conf.tmp" <<EOF
# Written by scripts/slurm_local.sh: a one-node cluster on localhost for tests (state under $DIR).
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/d
SlurmctldPidFile=$(pidfile slurmctld)
SlurmdPidFile=$(pidfile slurmd)
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/$PROCTRACK
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
# Finished jobs stay visible to squeue for 30 minutes: the squeue status mode needs MinJobAge >= 3 x the
# profile's slurm-init-seconds-before-status-checks, and tests list a whole run's jobs.
MinJobAge=1800
# Seconds between SIGTERM and SIGKILL at a time limit or scancel (the trainer checkpoints in between).
KillWait=30
# Jobs run at the niceness of the sbatch that submitted them (scripts/run_tests.sh runs its SLURM lane niced, so
# that its jobs take the cores the other test sessions leave idle).
PropagatePrioProcess=1
GresTypes=gpu
$acct
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem$gres_line State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  mv -f "$DIR/etc/slurm.conf.tmp" "$DIR/etc/slurm.conf"
  if [[ "$ACCOUNTING" == 1 ]]; then
    cat >"$DIR/etc/slurmdbd.conf" <<EOF
# Written by scripts/slurm_local.sh
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=$(pidfile slurmdbd)
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$DIR/etc/slurmdbd.conf"
  fi
}

link_etc_conf() {
  mkdir -p /etc/slurm
  if [[ -L "$ETC_CONF" ]]; then
    local current
    current="$(readlink "$ETC_CONF")"
    if [[ "$current" != "$DIR"/etc/* && -e "$current" ]]; then
      die "$ETC_CONF links to another cluster's $current: stop that one first (ACERL_SLURM_DIR=$(dirname "$(dirname "$current")") $0 stop)"
    fi
    ln -sfn "$DIR/etc/slurm.conf" "$ETC_CONF"
  elif [[ -e "$ETC_CONF" ]]; then
    die "$ETC_CONF exists and is not a symlink made by this script: move it away to use the local cluster"
  else
    ln -s "$DIR/etc/slurm.conf" "$ETC_CONF"
  fi
  # slurmd reads gres.conf next to slurm.conf
  [[ ! -e /etc/slurm/gres.conf || -L /etc/slurm/gres.conf ]] || die "/etc/slurm/gres.conf exists and is not our symlink"
  ln -sfn "$DIR/etc/gres.conf" /etc/slurm/gres.conf
  if [[ "$PROCTRACK" == cgroup ]]; then
    [[ ! -e /etc/slurm/cgroup.conf || -L /etc/slurm/cgroup.conf ]] \
      || die "/etc/slurm/cgroup.conf exists and is not our symlink"
    ln -sfn "$DIR/etc/cgroup.conf" /etc/slurm/cgroup.conf
  fi
  if [[ "$ACCOUNTING" == 1 ]]; then
    # slurmdbd reads slurmdbd.conf next to slurm.conf
    [[ ! -e /etc/slurm/slurmdbd.conf || -L /etc/slurm/slurmdbd.conf ]] \
      || die "/etc/slurm/slurmdbd.conf exists and is not our symlink"
    ln -sfn "$DIR/etc/slurmdbd.conf" /etc/slurm/slurmdbd.conf
  fi
}

unlink_etc_conf() {
  local f
  for f in "$ETC_CONF" /etc/slurm/slurmdbd.conf /etc/slurm/cgroup.conf /etc/slurm/gres.conf; do
    if [[ -L "$f" && "$(readlink "$f")" == "$DIR"/etc/* ]]; then rm -f "$f"; fi
  done
}

# ------------------------------------------------------------------------------------------------ daemons
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: poll every 0.5 s
  local deadline=$((SECONDS + $1)) what="$2"
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { log "timed out after the deadline waiting for $what"; return 1; }
    sleep 0.5
  done
}

start_munged() {
  [[ -z "$(daemon_pid munged munged)" ]] || return 0
  munged --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$(pidfile munged)" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" \
    || die "munged failed to start: see $DIR/log/munged.log"
  wait_for 10 "munged" test -S "$DIR/munge/munge.socket" || die "munged did not create its socket"
}

start_mariadb() {
  [[ -z "$(daemon_pid mariadbd mariadbd)" ]] || return 0
  local datadir="$DIR/mysql" sock="$DIR/run/mysqld.sock"
  if [[ ! -d "$datadir/mysql" ]]; then
    timeout -k 5 120 mariadb-install-db --user=root --datadir="$datadir" --auth-root-authentication-method=socket \
      >"$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: see $DIR/log/mariadb-install.log"
  fi
  # mariadbd stays in the foreground: run it detached; it writes its own pid file
  setsid mariadbd --user=root --datadir="$datadir" --socket="$sock" --port="$DB_PORT" --bind-address=127.0.0.1 \
    --pid-file="$(pidfile mariadbd)" --log-error="$DIR/log/mariadbd.log" --skip-log-bin \
    --innodb-buffer-pool-size=64M --innodb-log-file-size=16M </dev/null >/dev/null 2>&1 &
  wait_for 60 "MariaDB" timeout -k 2 5 mariadb --socket="$sock" -e "SELECT 1" \
    || die "MariaDB did not start: see $DIR/log/mariadbd.log"
  timeout -k 2 20 mariadb --socket="$sock" -e "
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" || die "could not create the MariaDB user for slurmdbd"
}

start_slurmdbd() {
  [[ -z "$(daemon_pid slurmdbd slurmdbd)" ]] || return 0
  slurmdbd || die "slurmdbd failed to start: see $DIR/log/slurmdbd.log"
  wait_for 30 "slurmdbd" bash -c "exec 3<>/dev/tcp/127.0.0.1/6819" || die "slurmdbd is not listening: see $DIR/log/slurmdbd.log"
}

start_slurm() {
  if [[ -z "$(daemon_pid slurmctld slurmctld)" ]]; then
    slurmctld || die "slurmctld failed to start: see $DIR/log/slurmctld.log"
  fi
  wait_for 30 "slurmctld" timeout -k 2 5 scontrol ping || die "slurmctld does not answer: see $DIR/log/slurmctld.log"
  if [[ -z "$(daemon_pid slurmd slurmd)" ]]; then
    slurmd || die "slurmd failed to start: see $DIR/log/slurmd.log"
  fi
}

node_state() { timeout -k 2 5 sinfo -h -N -o %t 2>/dev/null | head -n1; }

node_idle() { [[ "$(node_state)" == idle ]]; }

wait_idle() {
  local deadline=$((SECONDS + START_TIMEOUT)) state resumed=0
  while ((SECONDS < deadline)); do
    state="$(node_state || true)"
    [[ "$state" == idle ]] && return 0
    if [[ "$state" == down* || "$state" == drain* ]] && ((resumed == 0)); then
      timeout -k 2 10 scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
      resumed=1
    fi
    sleep 1
  done
  log "node state is '${state:-no answer}' after ${START_TIMEOUT} s; scontrol says:"
  timeout -k 2 5 scontrol show node "$HOST" >&2 || true
  return 1
}

write_profile() {
  local status_command=squeue
  [[ "$ACCOUNTING" != 1 ]] || status_command=sacct
  # The site template with what one node on localhost needs: its partition, no account, fast status checks
  # (the first one 2 s after submission), a short filesystem latency (local disk), kept logs for the tests.
  "$here/install_slurm_profile.sh" --partition "$PARTITION" --no-account --status-command "$status_command" \
    --init-seconds 2 --latency-wait 5 --keep-logs --force \
    --dest "$DIR/xdg/snakemake/slurm" >/dev/null
}

# --------------------------------------------------------------------------------------------- commands
cluster_up() { node_state | grep -qE '^(idle|mix|alloc|comp)'; }

cmd_start() {
  need_root
  check_dir
  case "$PROCTRACK" in
    linuxproc) ;;
    cgroup) [[ -d /sys/fs/cgroup/freezer ]] || die "ACERL_SLURM_PROCTRACK=cgroup needs the cgroup v1 freezer (/sys/fs/cgroup/freezer)" ;;
    *) die "ACERL_SLURM_PROCTRACK must be linuxproc or cgroup, got '$PROCTRACK'" ;;
  esac
  [[ "$ACCOUNTING" == 0 || "$ACCOUNTING" == 1 ]] || die "ACERL_SLURM_ACCOUNTING must be 0 or 1, got '$ACCOUNTING'"
  if [[ -e "$DIR/settings" && "$(cat "$DIR/settings")" != "$SETTINGS" ]]; then
    log "running with $(cat "$DIR/settings"); restarting with $SETTINGS"
    cmd_stop
  fi
  local all_up=1 d
  for d in $(daemons); do [[ -n "$(daemon_pid "${d%%:*}" "${d##*:}")" ]] || all_up=0; done
  if ((all_up)) && [[ -L "$ETC_CONF" ]] && cluster_up; then
    write_profile
    log "already running (node: $(node_state))"
    print_usage
    return 0
  fi
  # a partial or stale cluster: stop what is ours, wipe the state (a stale node may stay DOWN) and start fresh
  cmd_stop >/dev/null 2>&1 || true
  install_packages
  command -v slurmctld >/dev/null || die "slurmctld not found after installing"
  if [[ -d "$DIR" ]]; then rm -rf "${DIR:?}"; fi
  mkdir -p "$DIR"/{run,log,state/ctld,state/d,etc}
  touch "$DIR/$MARKER"
  echo "$SETTINGS" >"$DIR/settings"
  write_munge_key
  write_slurm_conf
  link_etc_conf
  start_munged
  if [[ "$ACCOUNTING" == 1 ]]; then start_mariadb; start_slurmdbd; fi
  start_slurm
  wait_idle || die "the node did not become idle: see $DIR/log/slurmd.log and $DIR/log/slurmctld.log"
  write_profile
  log "cluster up: partition '$PARTITION', node $HOST ($(nproc) CPUs), $SETTINGS, state in $DIR"
  print_usage
}

print_usage() {
  cat <<EOF
profile: $DIR/xdg/snakemake/slurm/config.yaml
use it:  XDG_CONFIG_HOME=$DIR/xdg snakemake --profile slurm --configfile=config/test.yaml all
stop:    $0 stop
EOF
}

cmd_stop() {
  need_root
  check_dir
  [[ -d "$DIR" ]] || { log "not running ($DIR absent)"; unlink_etc_conf; return 0; }
  # Jobs first: their slurmstepd processes belong to the cluster, not to any pid we started.
  if [[ -n "$(daemon_pid slurmctld slurmctld)" ]]; then
    timeout -k 2 10 scancel --partition="$PARTITION" >/dev/null 2>&1 || true
    local i
    for ((i = 0; i < 20; i++)); do
      [[ -n "$(timeout -k 2 5 squeue -h -t running,completing -o %A 2>/dev/null)" ]] || break
      sleep 0.5
    done
  fi
  local d order=()
  for d in $(all_daemons); do order=("$d" "${order[@]}"); done  # reverse start order
  for d in "${order[@]}"; do stop_pid "${d%%:*}" "${d##*:}"; done
  unlink_etc_conf
  log "stopped (state kept in $DIR until the next start)"
}

cmd_status() {
  local d pid rc=0
  [[ ! -f "$DIR/settings" ]] || echo "settings   $(cat "$DIR/settings")"
  for d in $(daemons); do
    pid="$(daemon_pid "${d%%:*}" "${d##*:}")"
    if [[ -n "$pid" ]]; then
      printf '%-10s running (pid %s)\n' "${d%%:*}" "$pid"
    else
      printf '%-10s not running\n' "${d%%:*}"
      rc=3
    fi
  done
  printf '%-10s %s\n' "conf" "$(readlink "$ETC_CONF" 2>/dev/null || echo "no $ETC_CONF symlink")"
  if command -v sinfo >/dev/null && cluster_up; then
    timeout -k 2 5 sinfo || true
  else
    echo "sinfo: no answer"
    rc=3
  fi
  [[ ! -f "$DIR/xdg/snakemake/slurm/config.yaml" ]] || echo "profile: $DIR/xdg/snakemake/slurm/config.yaml"
  return "$rc"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart) cmd_stop; cmd_start ;;
  status) cmd_status ;;
  *) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
