#!/bin/sh
# A single-node Slurm cluster on this machine for the launcher tests:
#   slurm_cluster.sh start DIR   writes DIR/slurm.conf, starts munged, slurmctld
#                                and slurmd (as root, every file under DIR,
#                                free ports), waits until the node is idle;
#                                prints "SLURM_CONF=DIR/slurm.conf"
#   slurm_cluster.sh stop DIR    stops them and removes DIR
# Exit status 77 (a skip) when the machine cannot run one: not root, or
# Slurm or MUNGE not installed (slurm-wlm, munge); 1 when it fails to start,
# with the daemons' logs on stderr.
set -u
cmd=$1
dir=$2

stop() {
  [ -f "$dir/slurm.conf" ] && SLURM_CONF="$dir/slurm.conf" scontrol shutdown > /dev/null 2>&1
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2> /dev/null
  done
  sleep 1
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2> /dev/null
  done
  rm -rf "$dir"
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "not root: slurmd runs as root" >&2
  exit 77
fi
for p in slurmctld slurmd srun sbatch scontrol sinfo munged; do
  if ! command -v $p > /dev/null; then
    echo "$p is not installed (slurm-wlm, munge)" >&2
    exit 77
  fi
done

# A port the kernel says is free on the loopback interface.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

rm -rf "$dir"
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" || exit 1
chmod 700 "$dir/munge"
# A key of this cluster's own.
head -c 1024 /dev/urandom > "$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"
munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --log-file="$dir/log/munged.log" --pid-file="$dir/munge/munged.pid" \
  --seed-file="$dir/munge/seed" || { cat "$dir/log/munged.log" >&2; stop; exit 1; }

node=$(hostname -s)
ctld_port=$(free_port)
slurmd_port=$(free_port)
cat > "$dir/slurm.conf" << EOF
ClusterName=ucxasio
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
NodeName=$node NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -c && slurmd || { cat "$dir/log/"*.log >&2; stop; exit 1; }
# Until the node is idle (bounded: a minute).
i=0
while [ "$(sinfo -h -o %T 2> /dev/null)" != idle ]; do
  i=$((i + 1))
  if [ $i -gt 120 ]; then
    echo "the node did not become idle:" >&2
    sinfo >&2
    cat "$dir/log/"*.log >&2
    stop
    exit 1
  fi
  sleep 0.5
done
echo "SLURM_CONF=$SLURM_CONF"
