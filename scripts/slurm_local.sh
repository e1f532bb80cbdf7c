#!/usr/bin/env bash
# A single-node Slurm on this machine (Debian's slurm-wlm: munged, slurmctld and slurmd on localhost), to run
# `hf-tlaser mine-pipeline --launcher slurm` for real where no cluster is at hand. Needs root (apt, /etc, daemons).
#   bash scripts/slurm_local.sh          install if missing, write the config, start the daemons, wait for the node
#   bash scripts/slurm_local.sh stop     stop them
# The node is this machine with its CPUs and memory; one partition, `local`, the default. Not for CI.
set -euo pipefail

fail() { echo "slurm_local: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || fail "run as root (it installs slurm-wlm and starts its daemons)"

if [ "${1:-start}" = stop ]; then
    pkill -x slurmd || true
    pkill -x slurmctld || true
    pkill -x munged || true
    echo "slurm_local: stopped"
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/tmp/slurm_local-apt.log 2>&1 \
        || fail "apt-get install slurm-wlm munge failed; see /tmp/slurm_local-apt.log"
fi

HOST=$(hostname -s)
CPUS=$(nproc)
MEMORY=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024))   # MiB, 1 GiB left to the system
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat >/etc/slurm/slurm.conf <<EOF
ClusterName=local
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
NodeName=$HOST CPUs=$CPUS RealMemory=$MEMORY State=UNKNOWN
PartitionName=local Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF

[ -s /etc/munge/munge.key ] || { mkdir -p /etc/munge; dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- munged || munged --force
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd

for _ in $(seq 30); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
        sinfo
        echo "slurm_local: node $HOST up ($CPUS CPUs, $MEMORY MiB); try: srun hostname"
        exit 0
    fi
    sleep 1
done
fail "the node did not come up in 30 s; see /var/log/slurm/slurmctld.log and /var/log/slurm/slurmd.log"
