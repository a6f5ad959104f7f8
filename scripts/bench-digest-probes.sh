#!/usr/bin/env bash
# State digests under status probes (docs/BENCHMARKS.md): a fresh 3-node cluster of the
# binaries in BIN_DIR holding ENTITIES entities, 4 writers for 20 s, then 4 writers for 40 s
# beside PROBERS loops of `hubctl cluster status` (each asks every member for its digest).
# Prints the writes, the status calls' latency and "digest not ready" rows, and the nodes' CPU.
# usage: bench-digest-probes.sh BIN_DIR NAME ENTITIES PROBERS   (the cluster goes to /tmp/dg-NAME)
set -u
B=$1; N=$2; E=$3; K=$4; D=/tmp/dg-$N
rm -rf $D
export RUST_LOG="info,openraft=warn,h2=warn,tower=warn,raft_store::digest=debug"
$B/hubctl dev up --nodes 3 --data-dir $D --base-port 0 > /dev/null
source $D/hubctl.env
pids=$(pgrep -f "hub-node.*$D" | xargs)
cpu() { local t=0; for p in $pids; do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }
echo "== $N ($B): nodes $pids, $E entities, $K probers"
$B/hub-bench writes --cluster $D --entities $E --concurrency 4 --seconds 20 2>&1 | grep '^| 4'
s=$(date +%s.%N); $B/hubctl digest -o json | tr -d '\n '; e=$(date +%s.%N); echo " digest took $(echo "$e - $s" | bc) s"
c0=$(cpu)
$B/hub-bench writes --cluster $D --concurrency 4 --seconds 40 > /tmp/dg-$N.writes 2>&1 &
w=$!
rm -f /tmp/dg-$N.lat.*
for k in $(seq 1 $K); do
  ( end=$(( $(date +%s) + 38 ))
    while [ $(date +%s) -lt $end ]; do
      s=$(date +%s%N)
      if $B/hubctl --timeout-ms 5000 cluster status -o json > /tmp/dg-$N.out.$k 2>&1; then r=ok; else r=err; fi
      e=$(date +%s%N)
      nr=$(grep -c 'not ready' /tmp/dg-$N.out.$k)
      echo "$(( (e - s) / 1000000 )) $r $nr" >> /tmp/dg-$N.lat.$k
    done ) &
done
wait $w
wait
c1=$(cpu)
grep '^| 4' /tmp/dg-$N.writes | sed 's/^/with probes: /'
cat /tmp/dg-$N.lat.* | python3 -c "
import sys
rows=[l.split() for l in sys.stdin if l.strip()]
a=sorted(int(r[0]) for r in rows)
q=lambda f: a[min(len(a)-1,int(len(a)*f))]
print(f'status calls {len(a)} ({sum(r[1]==\"err\" for r in rows)} failed, {sum(int(r[2]) for r in rows)} member rows digest not ready): p50 {q(0.5)} ms, p99 {q(0.99)} ms, max {a[-1]} ms')
"
echo "nodes' CPU during the 40 s: $(echo "($c1 - $c0) / 100" | bc -l | cut -c1-6) s"
grep -h 'state digest computed' $D/node-*.log | wc -l | xargs echo "digest computations logged (builds from 2283f18 on):"
$B/hubctl dev down --data-dir $D > /dev/null 2>&1
sleep 1; for p in $pids; do kill $p 2>/dev/null; done
