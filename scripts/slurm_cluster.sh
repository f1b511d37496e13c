#!/usr/bin/env bash
# A real one-machine SLURM cluster (Debian's slurm-wlm 22.05 + munge, no systemd) for tests and demos.
#
#   bash scripts/slurm_cluster.sh start    # munged, slurmctld, slurmd; waits until the node is idle
#   bash scripts/slurm_cluster.sh stop     # stops the daemons this script started, by PID
#   bash scripts/slurm_cluster.sh status   # prints daemon PIDs and `sinfo`
#
# Needs root and the packages from scripts/system/slurm.sh. `start` writes /etc/slurm/slurm.conf only when
# there is none or the one there was written by this script (marker line), so it never overwrites a real
# cluster's configuration. One node named after `hostname -s`, partition `debug`, all CPUs, memory =
# total - 1 GiB. No accounting database: use `--slurm-status-command squeue` (sacct would hang).
# Exit status: 0 started/stopped, 1 failure, 3 SLURM not installed or not root (callers may skip).
set -euo pipefail

MARKER="# written by rapidllm scripts/slurm_cluster.sh"
CONF=/etc/slurm/slurm.conf
RUN_SLURM=/run/slurm
RUN_MUNGE=/run/munge
PIDS=("$RUN_SLURM/slurmd.pid" "$RUN_SLURM/slurmctld.pid" "$RUN_MUNGE/munged.pid")

die() { echo "slurm_cluster.sh: $*" >&2; exit "${2:-1}"; }

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

check_installed() {
  [ "$(id -u)" = 0 ] || die "must run as root (starts munged/slurmctld/slurmd)" 3
  for bin in slurmctld slurmd sinfo sbatch squeue; do
    command -v "$bin" >/dev/null 2>&1 || die "$bin not found; run scripts/system/slurm.sh as root" 3
  done
  [ -x /usr/sbin/munged ] || die "munged not found; run scripts/system/slurm.sh as root" 3
}

write_conf() {
  if [ -e "$CONF" ] && ! grep -qF "$MARKER" "$CONF"; then
    echo "slurm_cluster.sh: keeping the existing $CONF (not written by this script)" >&2
    return
  fi
  local name cpus mem
  name="$(hostname -s)"
  cpus="$(nproc)"
  mem=$(( $(free -m | awk '/^Mem:/ {print $2}') - 1024 ))
  [ "$mem" -gt 512 ] || mem=512
  install -d /etc/slurm
  cat >"$CONF.tmp" <<EOF
$MARKER
ClusterName=rapidllm
SlurmctldHost=$name(127.0.0.1)
SlurmUser=slurm
SlurmctldPidFile=$RUN_SLURM/slurmctld.pid
SlurmdPidFile=$RUN_SLURM/slurmd.pid
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
MinJobAge=300
SlurmdTimeout=60
NodeName=$name NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$name Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
}

start() {
  check_installed
  write_conf
  install -d -o slurm -g slurm "$RUN_SLURM" /var/lib/slurm/slurmctld /var/log/slurm
  install -d /var/lib/slurm/slurmd
  if ! alive "$RUN_MUNGE/munged.pid"; then
    install -d -o munge -g munge -m 0755 "$RUN_MUNGE"
    runuser -u munge -- /usr/sbin/munged
  fi
  alive "$RUN_SLURM/slurmctld.pid" || slurmctld
  alive "$RUN_SLURM/slurmd.pid" || slurmd
  local state=""
  for _ in $(seq 1 60); do
    state="$(sinfo -h -N -o %t 2>/dev/null | head -n1 || true)"
    case "$state" in
      idle|mix|alloc) echo "slurm_cluster.sh: node $(hostname -s) $state"; return 0 ;;
      down*|drain*) scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
  done
  die "node not idle after 30 s (state: ${state:-none}); see /var/log/slurm/"
}

stop_pid() {  # SIGTERM, wait up to 10 s, then SIGKILL
  local file="$1" pid
  [ -s "$file" ] || return 0
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

stop() {
  for file in "${PIDS[@]}"; do
    stop_pid "$file"
  done
  echo "slurm_cluster.sh: stopped"
}

status() {
  for file in "${PIDS[@]}"; do
    if alive "$file"; then echo "$(basename "$file" .pid) $(cat "$file")"; else echo "$(basename "$file" .pid) -"; fi
  done
  sinfo 2>/dev/null || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: $0 start|stop|status" 2 ;;
esac
