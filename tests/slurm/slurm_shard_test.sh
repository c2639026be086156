#!/bin/bash
# slurm_shard_test.sh: `quantize --shard` as a real Slurm job array and `merge` as the job that
# depends on it (docs/scale-out.md), on a one-node cluster on loopback that this script starts:
#   munged (as the munge user), slurmctld and slurmd (Debian's slurm-wlm), with state, spool,
#   logs and the munge socket in a scratch folder; every daemon stopped by its pid on exit.
# Round 1: sbatch --array=0-3 running --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT and
#   a merge job --dependency=afterok:<array>; OUT byte-identical to a one-machine run.
# Round 2: array task 2 is killed on purpose (scancel while it runs); the merge
#   (--dependency=afterany) refuses with exit 4 naming OUT.part-2-of-4; re-running that one part
#   (sbatch --wrap ... --shard 2/4) and merging again gives the same bytes, and only OUT is left.
# Needs root and slurmctld/slurmd/sbatch/munged; else it skips (exit 77) saying why, unless
# TM_REQUIRE_SLURM=1 (.ci/run sets it), which makes it fail.
set -u
T="${TM_BIN:?TM_BIN: the tensormorph binary}"
skip() {
    if [ "${TM_REQUIRE_SLURM:-0}" = 1 ]; then echo "FAIL: TM_REQUIRE_SLURM=1 but $1"; exit 1; fi
    echo "SKIP: $1"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "not root (munged and slurmd need it)"
for b in munged slurmctld slurmd sbatch squeue scancel scontrol sinfo; do
    command -v "$b" > /dev/null 2>&1 || skip "$b not installed (apt-get install slurmctld slurmd slurm-client munge; scripts/setup.sh --test)"
done
id munge > /dev/null 2>&1 || skip "no munge user (apt-get install munge)"

# the model: stories260K from ../shared, else the built-in demo checkpoint
M="${TM_SHARED:-}/models/safetensors/stories260K-f32"
S=$(mktemp -d /tmp/tm_slurm.XXXXXX)
chmod 755 "$S"
W="$S/work"
mkdir -p "$W" "$S/state" "$S/spool" "$S/log" "$S/munge"
if [ -z "${TM_SHARED:-}" ] || [ ! -d "$M" ]; then
    [ "${TM_REQUIRE_SHARED:-0}" = 1 ] && { echo "FAIL: TM_REQUIRE_SHARED=1 but $M is missing"; exit 1; }
    echo "note: ../shared not found: the demo checkpoint instead of stories260K"
    M="$W/demo"
    "$T" demo -o "$M" -q || { echo "FAIL: demo"; exit 1; }
fi

PIDS=()
cleanup() {
    local p k
    # slurmd, slurmctld, then munged (its own pid, then the runuser that started it)
    for ((k = ${#PIDS[@]} - 1; k >= 0; k--)); do
        p=${PIDS[$k]}
        kill "$p" 2> /dev/null
        for _ in $(seq 50); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
    done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
        kill -9 "$p" 2> /dev/null
    done
    rm -rf "$S"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    for f in "$S"/log/*.log; do echo "--- $f"; tail -n 20 "$f"; done
    exit 1
}

# --- munge: /run/munge owned by munge, munged as the munge user, its socket in scratch ---
mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
chown munge:munge "$S/munge" && chmod 700 "$S/munge"
dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 status=none
chown munge:munge "$S/munge/munge.key" && chmod 600 "$S/munge/munge.key"
SOCK="$S/munge/munge.socket.2"
chmod 755 "$S/munge" # the socket must be reachable by the clients
runuser -u munge -- munged -F --key-file="$S/munge/munge.key" --socket="$SOCK" \
    --pid-file="$S/munge/munged.pid" --log-file="$S/log/munged.log" --seed-file="$S/munge/seed" \
    > "$S/log/munged.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -S "$SOCK" ] && [ -s "$S/munge/munged.pid" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || fail "munged did not create its socket"
PIDS+=("$(cat "$S/munge/munged.pid")")

# --- slurm.conf: one node, loopback, everything in scratch ---
PORT=$((20000 + RANDOM % 20000))
export SLURM_CONF="$S/slurm.conf"
cat > "$SLURM_CONF" << EOF
ClusterName=tmtest
SlurmctldHost=localhost
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
MinJobAge=600
NodeName=localhost CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -i -f "$SLURM_CONF" > "$S/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" > "$S/log/slurmd.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 150); do
    st=$(sinfo -h -N -o %t 2> /dev/null | head -1)
    [ "$st" = idle ] && break
    sleep 0.2
done
[ "$st" = idle ] || fail "the node did not become idle (sinfo: '$st'); $(cat "$S"/log/*.out 2>/dev/null | tail -5)"
echo "ok: munged, slurmctld, slurmd up (node localhost idle)"

# wait_done JOBID...: until squeue lists none of them (bounded: 180 s)
wait_done() {
    local j
    for _ in $(seq 900); do
        local left=0
        for j in "$@"; do [ -n "$(squeue -h -j "$j" 2> /dev/null)" ] && left=1; done
        [ $left = 0 ] && return 0
        sleep 0.2
    done
    squeue
    fail "jobs $* still queued after 180 s"
}

cat > "$W/part.sh" << EOF
#!/bin/bash
# one array task: its part of the quantize (a task held on purpose sleeps until killed)
[ "\$SLURM_ARRAY_TASK_ID" = "\${TM_HOLD_TASK:-none}" ] && sleep 600
exec "$T" quantize "$M" -o "$W/out" --shard "\$SLURM_ARRAY_TASK_ID/\$SLURM_ARRAY_TASK_COUNT" --threads 1 -q
EOF
cat > "$W/merge.sh" << EOF
#!/bin/bash
"$T" merge "$W/out" > "$W/merge.\$SLURM_JOB_ID.msg" 2>&1
echo \$? > "$W/merge.\$SLURM_JOB_ID.rc"
EOF
chmod +x "$W/part.sh" "$W/merge.sh"

# the one-machine reference
"$T" quantize "$M" -o "$W/out" --threads 1 -q || fail "one-machine run"
mv "$W/out" "$W/ref"

same_as_ref() {
    local f
    [ "$(ls "$W/ref")" = "$(ls "$W/out")" ] || fail "OUT holds other files than the one-machine run: $(ls "$W/out")"
    for f in $(ls "$W/ref"); do
        [ "$f" = tensormorph-manifest.json ] && continue
        cmp "$W/ref/$f" "$W/out/$f" || fail "$f differs from the one-machine run's"
    done
    python3 - "$W/ref/tensormorph-manifest.json" "$W/out/tensormorph-manifest.json" << 'EOF' || fail "manifest differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert len(b["parts"]) == 4
for m in (a, b):
    for k in ("times", "host", "command_line", "parts"):
        m.pop(k, None)
sys.exit(a != b)
EOF
    local left
    left=$(cd "$W" && ls | grep -v -E '^(ref|out|demo|part\.sh|merge\.sh|merge\..*|slurm-.*\.out)$')
    [ -z "$left" ] || fail "left beside OUT after the merge: $left"
}

# --- round 1: the array and the dependent merge ---
cd "$W" || fail "cd"
A=$(sbatch --parsable --array=0-3 -n 1 -c 1 -o "$W/slurm-%A_%a.out" "$W/part.sh") || fail "sbatch array"
A=${A%%;*}
MJ=$(sbatch --parsable --dependency=afterok:"$A" -o "$W/slurm-%j.out" "$W/merge.sh") || fail "sbatch merge"
MJ=${MJ%%;*}
wait_done "$A" "$MJ"
[ "$(cat "$W/merge.$MJ.rc" 2> /dev/null)" = 0 ] || fail "merge job $MJ: rc $(cat "$W/merge.$MJ.rc" 2>/dev/null) $(cat "$W/merge.$MJ.msg" 2>/dev/null)"
same_as_ref
echo "ok: sbatch --array=0-3 + merge (afterok:$A): byte-identical to the one-machine run"

# --- round 2: task 2 killed on purpose; the merge refuses; re-run part 2; merge ---
rm -rf "$W/out"
A=$(TM_HOLD_TASK=2 sbatch --parsable --array=0-3 -n 1 -c 1 -o "$W/slurm-%A_%a.out" "$W/part.sh") || fail "sbatch array 2"
A=${A%%;*}
for _ in $(seq 900); do
    st2=$(squeue -h -j "${A}_2" -o %T 2> /dev/null)
    n_parts=$(ls -d "$W"/out.part-*-of-4 2> /dev/null | wc -l)
    [ "$st2" = RUNNING ] && [ "$n_parts" = 3 ] && break
    sleep 0.2
done
[ "$st2" = RUNNING ] && [ "$n_parts" = 3 ] || fail "task ${A}_2 not running with the 3 other parts done ($st2, $n_parts parts)"
scancel --signal=KILL --full "${A}_2" || fail "scancel ${A}_2"
MJ=$(sbatch --parsable --dependency=afterany:"$A" -o "$W/slurm-%j.out" "$W/merge.sh") || fail "sbatch merge 2"
MJ=${MJ%%;*}
wait_done "$A" "$MJ"
rc=$(cat "$W/merge.$MJ.rc" 2> /dev/null)
[ "$rc" = 4 ] || fail "merge with task 2 killed: rc '$rc', not 4: $(cat "$W/merge.$MJ.msg" 2>/dev/null)"
grep -q "out.part-2-of-4" "$W/merge.$MJ.msg" || fail "the merge does not name part 2: $(cat "$W/merge.$MJ.msg")"
[ -e "$W/out" ] && fail "a refused merge left OUT"
echo "ok: task ${A}_2 killed; merge job $MJ refused: $(cat "$W/merge.$MJ.msg")"
R=$(sbatch --parsable -n 1 -c 1 -o "$W/slurm-%j.out" --wrap "'$T' quantize '$M' -o '$W/out' --shard 2/4 --threads 1 -q") || fail "sbatch re-run"
R=${R%%;*}
MJ=$(sbatch --parsable --dependency=afterok:"$R" -o "$W/slurm-%j.out" "$W/merge.sh") || fail "sbatch merge 3"
MJ=${MJ%%;*}
wait_done "$R" "$MJ"
[ "$(cat "$W/merge.$MJ.rc" 2> /dev/null)" = 0 ] || fail "merge after re-running part 2: $(cat "$W/merge.$MJ.msg" 2>/dev/null)"
same_as_ref
echo "ok: part 2 re-run (job $R), merge (job $MJ): byte-identical, only OUT left"
echo "PASS"
