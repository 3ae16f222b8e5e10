#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the tests (and for trying hydra/launcher=slurm on a laptop).
#
#   tests/slurm/cluster.sh up DIR     # munge, MariaDB, slurmdbd, slurmctld, slurmd, all state in DIR
#   export SLURM_CONF=DIR/etc/slurm.conf
#   sinfo; sbatch ...; python -m tfx_hydra -m hydra/launcher=slurm ...
#   tests/slurm/cluster.sh down DIR   # stops every daemon it started
#
# Debian's packages (apt-get install slurmctld slurmd slurm-client slurmdbd munge mariadb-server), run as root.
# One node named after this machine with all its CPUs, one partition `debug`. Accounting runs (slurmdbd on a
# MariaDB of its own in DIR): submitit reads a job's state with sacct, and without it a cancelled job would
# look running for ever. What a sandbox cannot give is configured around: no cgroups (proctrack/linuxproc,
# task/none, no job accounting gather), no systemd (every daemon runs in the foreground of its own process,
# its pid in DIR/run), no fixed ports (each daemon gets a free one).
set -euo pipefail

action=${1:?usage: cluster.sh up|down DIR}
dir=$(realpath -m "${2:?usage: cluster.sh up|down DIR}")

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: until COMMAND succeeds (each try at most 5 s)
    local seconds=$1 what=$2; shift 2
    local deadline=$((SECONDS + seconds))
    while [ $SECONDS -lt $deadline ]; do
        if timeout 5 "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    echo "cluster.sh: $what did not come up in ${seconds} s; its log is in $dir/log" >&2
    return 1
}

start() {  # start NAME COMMAND...: a daemon in the foreground of a process of its own, its pid kept
    local name=$1; shift
    setsid "$@" >"$dir/log/$name.out" 2>&1 < /dev/null &
    echo $! >"$dir/run/$name.pid"
}

up() {
    mkdir -p "$dir"/{etc,log,run,state,spool,munge,mysql}
    chmod 700 "$dir/munge"
    local host cpus memory ctld_port slurmd_port dbd_port db_port
    host=$(hostname -s)
    cpus=$(nproc)
    memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))  # MiB Slurm may hand out: half
    ctld_port=$(free_port); slurmd_port=$(free_port); dbd_port=$(free_port); db_port=$(free_port)

    # munge: the credentials every daemon and command checks (Debian's package made the key), on its
    # default socket, where Slurm's commands look; one already answering there is used as it is
    if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        mkdir -p /run/munge
        start munged munged --foreground --force --key-file=/etc/munge/munge.key \
            --pid-file="$dir/run/munged.pidfile" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
        wait_for 10 munge sh -c "munge -n | unmunge"
    fi

    # MariaDB for slurmdbd, listening on 127.0.0.1 only, without grant tables: nothing but slurmdbd talks to it
    mariadb-install-db --user=root --datadir="$dir/mysql" --skip-test-db >"$dir/log/mariadb-install.out" 2>&1
    start mariadbd mariadbd --user=root --datadir="$dir/mysql" --socket="$dir/run/mysql.sock" \
        --port="$db_port" --bind-address=127.0.0.1 --skip-grant-tables --pid-file="$dir/run/mariadbd.pidfile" \
        --log-error="$dir/log/mariadbd.log"
    wait_for 30 MariaDB test -S "$dir/run/mysql.sock"

    cat >"$dir/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=$dbd_port
SlurmUser=root
PidFile=$dir/run/slurmdbd.pidfile
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=root
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$dir/etc/slurmdbd.conf"

    cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=tfxhydra
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pidfile
SlurmdPidFile=$dir/run/slurmd.pidfile
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$dbd_port
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
ReturnToService=2
PropagateResourceLimits=NONE
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF="$dir/etc/slurm.conf"

    start slurmdbd slurmdbd -D
    wait_for 60 slurmdbd sacctmgr -n list cluster
    sacctmgr -i add cluster tfxhydra >"$dir/log/sacctmgr.out" 2>&1 || true  # already there on a restart
    start slurmctld slurmctld -D -i -f "$SLURM_CONF"
    wait_for 30 slurmctld scontrol ping
    start slurmd slurmd -D -f "$SLURM_CONF"
    wait_for 60 "the node" sh -c "sinfo -h -o %T | grep -qx idle"
    echo "cluster.sh: Slurm is up: export SLURM_CONF=$SLURM_CONF"
}

down() {
    export SLURM_CONF="$dir/etc/slurm.conf"
    scancel --full --quiet --user=root 2>/dev/null || true
    # the jobs' steps (slurmstepd) outlive slurmd: let them end with their jobs before the daemons go
    for _ in $(seq 50); do
        [ -z "$(timeout 5 squeue -h 2>/dev/null)" ] && break
        sleep 0.2
    done
    for name in slurmd slurmctld slurmdbd mariadbd munged; do  # the reverse of their start
        if [ -f "$dir/run/$name.pid" ]; then
            kill -TERM -- "-$(cat "$dir/run/$name.pid")" 2>/dev/null || true
        fi
    done
    for name in slurmd slurmctld slurmdbd mariadbd munged; do
        if [ -f "$dir/run/$name.pid" ]; then
            pid=$(cat "$dir/run/$name.pid")
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -KILL -- "-$pid" 2>/dev/null || true
            rm -f "$dir/run/$name.pid"
        fi
    done
}

case $action in
    up) up ;;
    down) down ;;
    *) echo "usage: cluster.sh up|down DIR" >&2; exit 2 ;;
esac
