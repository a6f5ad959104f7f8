#!/usr/bin/env bash
# The leader's CPU during a canary analysis with a 1 s interval, two rollout webhooks and a
# Prometheus metric called every tick.
#
# usage: scripts/bench-canary-cpu.sh BIN_DIR OUT_DIR [SECONDS] [SCHEME]
#
# BIN_DIR holds hubctl, hub-node, hub-agent and demo-service (e.g. ~/.cache/hub-target/debug).
# SCHEME is http (default) or https: the webhook and Prometheus server (python3) then serves
# TLS with a CA made by openssl, which the nodes trust through --outbound-ca-file (a hub
# built before issue 16 only speaks http). The server keeps connections alive (HTTP/1.1) and
# counts them. Measures the leader's utime+stime (/proc/PID/stat) for SECONDS without a
# canary, then for SECONDS of a canary in Progressing; prints both in ticks and as % of one
# core, the analysis ticks (one Prometheus query each), webhook calls, the new connections
# they came on, and the CPU per analysis tick above idle.
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 BIN_DIR OUT_DIR [SECONDS] [http|https]" >&2; exit 2; }
bin=$(cd "$1" && pwd)
out=$2
seconds=${3:-60}
scheme=${4:-http}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
hubctl=$bin/hubctl
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for f in "$out"/agent/process/*/state.json; do
    [ -f "$f" ] || continue
    p=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("pid") or "")' "$f")
    [ -n "$p" ] && kill "$p" 2>/dev/null || true
  done
  [ -f "$out/hub/cluster.json" ] && "$hubctl" dev down --data-dir "$out/hub" >/dev/null 2>&1 || true
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The webhook + Prometheus server.
hook_port=$(free_port)
tls_args=()
node_args=""
if [ "$scheme" = https ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=bench CA" -keyout "$out/ca.key" -out "$out/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$out/srv.key" -out "$out/srv.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' >"$out/srv.ext"
  openssl x509 -req -in "$out/srv.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -CAcreateserial \
    -days 2 -extfile "$out/srv.ext" -out "$out/srv.pem" 2>/dev/null
  tls_args=("$out/srv.pem" "$out/srv.key")
  node_args="--outbound-ca-file $out/ca.pem"
fi
python3 - "$hook_port" "$out/server.json" "${tls_args[@]}" <<'EOF' &
import http.server, json, socket, ssl, sys, threading
port, report = int(sys.argv[1]), sys.argv[2]
counts = {"connections": 0, "webhooks": 0, "queries": 0}
lock = threading.Lock()
def bump(k):
    with lock:
        counts[k] += 1
        json.dump(counts, open(report, "w"))
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def setup(self):
        super().setup(); bump("connections")
        # Headers and body are two writes: without this, Nagle holds the body until the
        # client's delayed ACK (40 ms) on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def answer(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0))); bump("webhooks")
        self.answer(b"{}")
    def do_GET(self):
        bump("queries")
        self.answer(b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"99.9"]}]}}')
    def log_message(self, *a): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
if len(sys.argv) > 3:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[3], sys.argv[4])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
EOF
pids+=($!)

"$hubctl" dev up --nodes 3 --data-dir "$out/hub" --base-port 0 --node-args "$node_args" >/dev/null
endpoints=$(python3 -c 'import json,sys; print(",".join(n["addr"] for n in json.load(open(sys.argv[1]))["nodes"]))' "$out/hub/cluster.json")
export HUBCTL_ENDPOINTS=$endpoints
DEMO_SERVICE_BIN=$bin/demo-service bash "$repo/scripts/demo-package.sh" "$out/demo" 1.0.0 1.1.0 >/dev/null
port=$(free_port)
"$hubctl" env create prod >/dev/null
"$hubctl" env registry set prod local "file://$out/demo/registry" >/dev/null
"$hubctl" product create com.example:demo-service >/dev/null
"$hubctl" entity create --env prod --kind helmChart --name demo --product com.example:demo-service --namespace demo >/dev/null
printf 'port: %s\n' "$port" >"$out/config.yml"
"$hubctl" entity config set prod/demo -f "$out/config.yml" >/dev/null
"$bin/hub-agent" --environment prod --endpoints "$endpoints" --data-dir "$out/agent" \
  --driver process --state-interval-ms 300 2>"$out/agent.log" &
pids+=($!)
"$hubctl" release publish -f "$out/demo/manifests/demo-service-1.0.0.yml" >/dev/null
for _ in $(seq 600); do
  curl -sf "127.0.0.1:$port/version" >/dev/null && break
  sleep 0.1
done

# The leader's CPU without a canary, for comparison.
leader=$("$hubctl" cluster status -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])')
pid=$(python3 -c 'import json,sys; print([n["pid"] for n in json.load(open(sys.argv[1]))["nodes"] if n["id"]==int(sys.argv[2])][0])' "$out/hub/cluster.json" "$leader")
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
i0=$(ticks)
sleep "$seconds"
idle=$(($(ticks) - i0))

cat >"$out/canary.yml" <<EOF
apiVersion: flagger.app/v1beta1
kind: Canary
metadata: {name: demo, namespace: prod}
spec:
  targetRef: {kind: helmChart, name: demo}
  service: {port: $port}
  analysis:
    interval: 1s
    threshold: 5
    maxWeight: 99
    stepWeight: 1
    metrics:
      - name: budget
        provider: {type: prometheus, address: "$scheme://127.0.0.1:$hook_port"}
        query: sum(up)
        thresholdRange: {min: 95}
    webhooks:
      - {name: load, type: rollout, url: "$scheme://127.0.0.1:$hook_port/load", timeout: 5s}
      - {name: check, type: rollout, url: "$scheme://127.0.0.1:$hook_port/check", timeout: 5s}
EOF
"$hubctl" canary apply -f "$out/canary.yml" -n prod >/dev/null
phase() { "$hubctl" canary get demo -n prod -o json | python3 -c 'import json,sys; s=json.load(sys.stdin)["status"]; print(s["phase"], s["canaryWeight"])'; }
wait_phase() {
  for _ in $(seq 1200); do
    read -r p w < <(phase) || true
    [ "${p:-}" = "$1" ] && [ "${w:-0}" -ge "${2:-0}" ] && return 0
    sleep 0.1
  done
  echo "canary never reached $1 (weight >= ${2:-0})" >&2; exit 1
}
wait_phase Initialized
"$hubctl" release publish -f "$out/demo/manifests/demo-service-1.1.0.yml" >/dev/null
wait_phase Progressing 2

now_leader=$("$hubctl" cluster status -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])')
[ "$now_leader" = "$leader" ] || { echo "the leader changed ($leader -> $now_leader)" >&2; exit 1; }
calls() { python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["webhooks"], c["queries"], c["connections"])' "$out/server.json"; }
read -r w0 q0 c0 < <(calls)
t0=$(ticks)
sleep "$seconds"
t1=$(ticks)
read -r w1 q1 c1 < <(calls)
read -r p w < <(phase)
[ "$p" = Progressing ] || { echo "the canary left Progressing ($p) during the measurement" >&2; exit 1; }
hz=$(getconf CLK_TCK)
python3 - "$seconds" "$((t1 - t0))" "$hz" "$((w1 - w0))" "$((q1 - q0))" "$((c1 - c0))" "$scheme" "$idle" <<'EOF'
import sys
s, t, hz, w, q, c, scheme, idle = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), *map(int, sys.argv[4:7]), sys.argv[7], int(sys.argv[8])
pct = lambda ticks: 100 * ticks / hz / s
print(f"{scheme}: {s} s, leader cpu {t} ticks = {pct(t):.2f}% of a core (idle {idle} ticks = "
      f"{pct(idle):.2f}%); {q} analysis ticks, {w} webhook calls, {q} prometheus queries, "
      f"{c} new connections; {1000 * (t - idle) / hz / max(q, 1):.1f} ms cpu per analysis tick above idle")
EOF
