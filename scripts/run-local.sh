#!/usr/bin/env bash
# Starts a local statestore against a local Mosquitto, in the foreground (Ctrl-C stops both).
#
#   ./scripts/run-local.sh              one node
#   ./scripts/run-local.sh --nodes 3    a three-node cluster
#
# Mosquitto is installed if missing and started with the settings statestore needs
# (set_tcp_nodelay true, a raised max_inflight_messages). Data lives in .local/.
# Environment: MQTT_PORT (default 1883; a free port is picked if it is taken).
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=1
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    *) echo "usage: $0 [--nodes N]" >&2; exit 2 ;;
  esac
done

./scripts/prereqs.sh
# The binary is wherever cargo put it (CARGO_TARGET_DIR or build.target-dir, else ./target):
# the build's own report of the executable says where.
statestore_bin=$(cargo build --release --locked --bin statestore --message-format=json-render-diagnostics |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ ! -x "$statestore_bin" ]; then
  echo "cargo built no statestore binary (looked for its path in cargo's report)" >&2
  exit 1
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
mqtt_port="${MQTT_PORT:-1883}"
if ! port_free "$mqtt_port"; then
  echo "port $mqtt_port is taken (a system mosquitto?); picking another one"
  for p in $(seq 18830 18900); do if port_free "$p"; then mqtt_port="$p"; break; fi; done
fi

state=.local
mkdir -p "$state"
cat > "$state/mosquitto.conf" <<CONF
listener $mqtt_port 127.0.0.1
allow_anonymous true
set_tcp_nodelay true
max_inflight_messages 1000
max_queued_messages 100000
persistence false
CONF

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

mosquitto_bin=$(command -v mosquitto || echo /usr/sbin/mosquitto)
"$mosquitto_bin" -c "$state/mosquitto.conf" >"$state/mosquitto.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do port_free "$mqtt_port" || break; sleep 0.1; done

peers=()
if [ "$nodes" -gt 1 ]; then
  for i in $(seq 1 "$nodes"); do peers+=(--peer "$i=127.0.0.1:$((7481 + (i - 1) * 10))"); done
fi
for i in $(seq 1 "$nodes"); do
  offset=$(( (i - 1) * 10 ))
  "$statestore_bin" run --id "$i" --data-dir "$state/cluster-of-$nodes/node-$i" --broker "127.0.0.1:$mqtt_port" \
    --http "127.0.0.1:$((7480 + offset))" --raft "127.0.0.1:$((7481 + offset))" "${peers[@]}" \
    2> >(sed -u "s/^/[node-$i] /" >&2) &
  pids+=($!)
done

echo "statestore: $nodes node(s) on MQTT broker 127.0.0.1:$mqtt_port ($statestore_bin)"
for i in $(seq 1 "$nodes"); do echo "  node $i: http://127.0.0.1:$((7480 + (i - 1) * 10))/metrics  /readyz  /admin/status"; done
echo "Ctrl-C to stop."
wait
