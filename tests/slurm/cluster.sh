#!/usr/bin/env bash
# A one-machine SLURM cluster for the tests (and for trying profiles/slurm before a real cluster).
#
#   tests/slurm/cluster.sh start    # install slurm-wlm + munge if missing, write the config, start the daemons
#   tests/slurm/cluster.sh status   # sinfo of the running cluster (exit 1 if it is not up)
#   tests/slurm/cluster.sh stop     # stop the daemons by PID, leaving none behind
#   tests/slurm/cluster.sh env      # the line to eval so sbatch/squeue/snakemake find this cluster
#
# Root only (it installs packages and runs slurmd, which starts jobs as their users), no systemd:
# munged, slurmctld and slurmd run as plain background daemons whose PIDs are kept in the state
# directory, PRH_SLURM_STATE (default /tmp/prh-slurm). Everything the cluster writes is there:
# the munge key and socket, slurm.conf, gres.conf, the daemons' logs and spool, and env.sh.
# The client commands find the cluster through SLURM_CONF (env.sh sets it); the one thing written
# outside it is a link /etc/slurm/slurm.conf -> the state's slurm.conf, made only where no config is
# there and removed by stop (a job's nested srun ignores SLURM_CONF; see write_config). One node (this host, CPUs = nproc, memory = 90 % of MemTotal, one fake GPU whose
# device file is /dev/null) in two partitions over the same node: `cpu` (the default) and `gpu`,
# the names of profiles/slurm/partitions.yaml. Ports: PRH_SLURM_PORT (slurmctld, default 6817)
# and the next one (slurmd).
#
# Exit codes of start: 0 up; 3 cannot start here (not root, no apt-get, install failed), with the
# reason on stderr (the tests skip on 3); 1 anything else.
set -euo pipefail

STATE=${PRH_SLURM_STATE:-/tmp/prh-slurm}
PORT=${PRH_SLURM_PORT:-6817}
CLUSTER=prhtest
ETC_CONF=/etc/slurm/slurm.conf

cannot() { echo "cluster.sh: cannot start a SLURM cluster here: $*" >&2; exit 3; }

install_packages() {
  local missing=()
  command -v munged >/dev/null || missing+=(munge)
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sbatch >/dev/null || missing+=(slurm-client)
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || cannot "missing ${missing[*]} and no apt-get to install them"
  echo "cluster.sh: installing ${missing[*]} (apt-get)" >&2
  # The packages' init scripts must not start daemons of their own (no systemd here anyway).
  local policy=/usr/sbin/policy-rc.d restore=""
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; restore=1; fi
  {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      munge slurm-wlm-basic-plugins slurmctld slurmd slurm-client >"$STATE/apt.log" 2>&1 ||
    { apt-get update -q >>"$STATE/apt.log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        munge slurm-wlm-basic-plugins slurmctld slurmd slurm-client >>"$STATE/apt.log" 2>&1; }
  } || { [ -n "$restore" ] && rm -f "$policy"; cannot "apt-get install failed (see $STATE/apt.log)"; }
  [ -n "$restore" ] && rm -f "$policy"
  return 0
}

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_config() {
  local host cpus mem_kb mem_mb gres_line gres_conf
  host=$(hostname -s)
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc honours OMP_NUM_THREADS, which the tests set to 1
  mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
  mem_mb=$((mem_kb / 1024 * 9 / 10))
  mkdir -p "$STATE"/{ctld,spool,log,munge}
  chmod 700 "$STATE/munge"
  if [ ! -s "$STATE/munge/munge.key" ]; then
    dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
  fi
  chmod 400 "$STATE/munge/munge.key"
  gres_conf="NodeName=$host Name=gpu File=/dev/null"
  gres_line="Gres=gpu:1"
  [ "${PRH_SLURM_NO_GRES:-0}" = 1 ] && { gres_conf=""; gres_line=""; }
  echo "$gres_conf" >"$STATE/gres.conf"
  cat >"$STATE/slurm.conf" <<EOF
# written by tests/slurm/cluster.sh: a one-node test cluster
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/slurmd-%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# finished jobs stay visible to squeue for an hour: the plugin polls with squeue here (no sacct), the tests read them back
MinJobAge=3600
SlurmctldTimeout=60
SlurmdTimeout=120
InactiveLimit=0
DefMemPerCPU=1000
KillWait=5
GresTypes=gpu
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb $gres_line State=UNKNOWN
PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$host MaxTime=INFINITE State=UP
EOF
  # profiles/slurm's partition file, sized to this node (snakemake --slurm-partition-config FILE)
  cat >"$STATE/partitions.yaml" <<EOF
partitions:
  cpu: {max_runtime: 1440, max_mem_mb: $mem_mb, max_threads: $cpus}
  gpu: {max_runtime: 1440, max_mem_mb: $mem_mb, max_threads: $cpus, max_gpu: 1, max_cpus_per_gpu: $cpus}
EOF
  cat >"$STATE/env.sh" <<EOF
export SLURM_CONF=$STATE/slurm.conf
EOF
  # snakemake-executor-plugin-slurm-jobstep (0.6.1) runs each job's command under a nested `srun`
  # with every SLURM_* variable but the job's identity removed, SLURM_CONF included: that srun
  # only finds a config at the default path. Link it there
  # (a link there is an earlier test cluster's: replaced). A real file there is a real cluster's: refuse.
  if [ -e "$ETC_CONF" ] && [ ! -L "$ETC_CONF" ]; then
    cannot "$ETC_CONF is a real SLURM config (the jobs' nested srun would read it, not this cluster's)"
  fi
  mkdir -p "$(dirname "$ETC_CONF")"
  ln -sfn "$STATE/slurm.conf" "$ETC_CONF"
}

start() {
  [ "$(id -u)" = 0 ] || cannot "not root (munged and slurmd run as root here)"
  mkdir -p "$STATE"
  if alive "$STATE/slurmctld.pid" && alive "$STATE/slurmd.pid" && alive "$STATE/munged.pid"; then
    echo "cluster.sh: already running ($STATE)" >&2; return 0
  fi
  stop_daemons quiet
  install_packages
  write_config
  export SLURM_CONF=$STATE/slurm.conf
  munged --key-file="$STATE/munge/munge.key" --socket="$STATE/munge/munge.socket" \
         --pid-file="$STATE/munged.pid" --log-file="$STATE/log/munged.log" \
         --seed-file="$STATE/munge/munged.seed" --force
  slurmctld -f "$SLURM_CONF" -c    # -c: no jobs carried over from an earlier cluster in this directory
  slurmd -f "$SLURM_CONF"
  local i
  for i in $(seq 1 60); do
    if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
      echo "cluster.sh: up ($STATE; eval \"\$($0 env)\" to use it)" >&2
      return 0
    fi
    sleep 1
  done
  echo "cluster.sh: the node did not come up in 60 s; logs:" >&2
  tail -n 20 "$STATE"/log/*.log >&2 || true
  stop_daemons quiet
  return 1
}

# Stop one daemon by its PID file: TERM, wait up to 20 s, then KILL.
stop_one() {
  local pidfile=$1 pid i
  [ -s "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

stop_daemons() {
  # Jobs first (while slurmctld still answers), then slurmd, slurmctld, munged.
  if [ -s "$STATE/slurm.conf" ] && alive "$STATE/slurmctld.pid" && [ "${1:-}" != quiet ]; then
    SLURM_CONF=$STATE/slurm.conf scancel --full --quiet --user=root 2>/dev/null || true
  fi
  stop_one "$STATE/slurmd.pid"
  # job steps slurmd started (slurmstepd) outlive it: end those of this cluster by their spool dir
  local pid
  for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    if grep -qa -- "$STATE" "/proc/$pid/cmdline" "/proc/$pid/environ" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  stop_one "$STATE/slurmctld.pid"
  stop_one "$STATE/munged.pid"
  # the default-path link start made (only ours: it points into this state directory)
  if [ -L "$ETC_CONF" ] && [ "$(readlink "$ETC_CONF")" = "$STATE/slurm.conf" ]; then rm -f "$ETC_CONF"; fi
}

status() {
  if alive "$STATE/slurmctld.pid" && alive "$STATE/slurmd.pid" && alive "$STATE/munged.pid"; then
    SLURM_CONF=$STATE/slurm.conf sinfo
    return 0
  fi
  echo "cluster.sh: not running ($STATE)" >&2
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop_daemons; echo "cluster.sh: stopped ($STATE)" >&2 ;;
  status) status ;;
  env) echo "export SLURM_CONF=$STATE/slurm.conf" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
