#!/usr/bin/env bash
# Failover test on a kind cluster: builds the image, installs the chart with its Mosquitto,
# runs a writer Job that records every acknowledged write, then breaks the cluster five
# ways. After each break it waits until all members are ready and writes are acknowledged
# again, checks that every write acknowledged so far reads back, and reports the longest gap
# between two acknowledged writes.
#
#   1. delete the leader pod             4. rolling restart (kubectl rollout restart)
#   2. cut the leader off (NetworkPolicy) 5. delete all pods at once
#   3. drain a follower's node (a second drain must be refused by the PodDisruptionBudget)
#
# Needs docker, kind >= 0.24 (its CNI enforces NetworkPolicy), kubectl and helm >= 3.14, and
# about 4 CPUs / 8 GiB for docker. CLUSTER (default statestore-failover) names the kind
# cluster; KEEP=1 keeps it afterwards. Exits 1 if an acknowledged write is lost or a step
# times out. The broker and the writer run on the control-plane node, so that only the
# statestore members are hit.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${CLUSTER:-statestore-failover}
NS=statestore
REL=demo
STS=$REL-statestore
SEL=app.kubernetes.io/instance=$REL,app.kubernetes.io/name=statestore
CONTROL_PLANE='{"node-role.kubernetes.io/control-plane": ""}'
TOLERATE='[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]'
k() { kubectl -n "$NS" "$@"; }
say() { printf '\n[%s] %s\n' "$(date +%T)" "$*"; }
now() { date +%s%3N; }
# poll SECONDS COMMAND...: until COMMAND succeeds, once a second.
poll() { local n=$1; shift; until "$@"; do ((n-- > 0)) || { echo "timed out: $*" >&2; return 1; }; sleep 1; done; }

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "missing prerequisite: $tool" >&2; exit 2; }
done
[ "${KEEP:-}" = 1 ] || trap 'kind delete cluster --name "$CLUSTER"' EXIT

say "kind cluster $CLUSTER: a control plane and 3 workers (one member each)"
kind create cluster --name "$CLUSTER" --wait 120s --config - <<'EOF'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes: [{role: control-plane}, {role: worker}, {role: worker}, {role: worker}]
EOF

say "images statestore:kind and statestore-debug:kind (the same binary with bash, for the writer)"
docker build -t statestore:kind .
docker build --target debug -t statestore-debug:kind .
kind load docker-image statestore:kind statestore-debug:kind --name "$CLUSTER"

say "helm install: 3 members, Mosquitto, MQTT users for the writer and 4 checkers"
helm upgrade --install "$REL" helm/statestore -n "$NS" --create-namespace --wait --timeout 5m \
  --set image.repository=statestore,image.tag=kind,image.pullPolicy=Never \
  --set resources.requests.cpu=100m,resources.requests.memory=256Mi \
  --set-json 'mqtt.auth.users=[{"name":"writer"},{"name":"checker-1"},{"name":"checker-2"},{"name":"checker-3"},{"name":"checker-4"}]' \
  --set-json "mqtt.nodeSelector=$CONTROL_PLANE" --set-json "mqtt.tolerations=$TOLERATE"
helm test "$REL" -n "$NS" --logs

say "writer Job: SET w/<i> <i> every 100 ms, printing ACK <i> <ms> for each acknowledged one"
writer=$(<scripts/kind-failover-writer.yaml)
writer=${writer//@REL@/$REL}; writer=${writer//@NS@/$NS}
writer=${writer//@CONTROL_PLANE@/$CONTROL_PLANE}; writer=${writer//@TOLERATE@/$TOLERATE}
k apply -f - <<<"$writer"
k wait --for=condition=Ready pod -l job-name=writer --timeout=120s
WRITER=$(k get pod -l job-name=writer -o jsonpath='{.items[0].metadata.name}')

acks() { k logs "$WRITER" | grep -c '^ACK'; }
more_acks() { [ "$(acks)" -gt "$1" ]; }
uids() { k get pod -l "$SEL" -o jsonpath='{.items[*].metadata.uid}'; }
gone() { local u all; all=" $(uids) "; for u in "$@"; do [[ $all != *" $u "* ]] || return 1; done; }
all_ready() { [ "$(k get pod -l "$SEL" -o jsonpath='{..status.conditions[?(@.type=="Ready")].status}' | grep -o True | wc -l)" = 3 ]; }
# wait_healthy [UID...]: the given pods replaced, all 3 members ready, a new acknowledged write.
wait_healthy() { local n; poll 300 gone "$@"; poll 300 all_ready; n=$(acks); poll 120 more_acks "$n"; }
leader_pod() { # the pod of the member the members name as leader
  local pod id
  for pod in $(k get pod -l "$SEL" -o name); do
    # The chart serves HTTPS with a certificate it generated, which names 127.0.0.1.
    id=$(k exec "${pod#pod/}" -- statestore cluster --endpoint https://127.0.0.1:7480 --ca /etc/statestore/tls/http/ca.crt status 2>/dev/null | sed -n 's/.*"leader": \([0-9]*\).*/\1/p')
    [ -n "$id" ] && { echo "$STS-$((id - 1))"; return; }
  done
  return 1
}
uid() { k get pod "$1" -o jsonpath='{.metadata.uid}'; }

failed=0
report=$(mktemp)
report() { # NAME FAULT-START-MS: the longest gap since the fault; every acknowledged write read back
  local gap checked missing
  gap=$(k logs "$WRITER" | awk -v t="$2" '$1 == "ACK" { if ($3 >= t && prev && $3 - prev > g) g = $3 - prev; prev = $3 } END { print g + 0 }')
  read -r checked missing < <(k exec "$WRITER" -- /tmp/check)
  printf '%-32s longest gap %6s ms   %5s acknowledged writes read back, %s missing\n' \
    "$1" "$gap" "$checked" "$missing" | tee -a "$report"
  [ "$missing" = 0 ] || failed=1
}

say "1. delete the leader pod"
t=$(now); victim=$(leader_pod); old=$(uid "$victim")
k delete pod "$victim" --wait=false
wait_healthy "$old"; report "delete leader $victim" "$t"

say "2. cut the leader off with a NetworkPolicy for 20 s"
t=$(now); victim=$(leader_pod)
k apply -f - <<'EOF'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: isolate}
spec:
  podSelector: {matchLabels: {statestore.io/isolated: "true"}}
  policyTypes: [Ingress, Egress]
EOF
# The chart's own policy leaves out pods with this label, so only the deny-all one applies.
# CNIs filter new connections only: drop the pod's tracked ones on its node.
k label pod "$victim" statestore.io/isolated=true
ip=$(k get pod "$victim" -o jsonpath='{.status.podIP}')
docker exec "$(k get pod "$victim" -o jsonpath='{.spec.nodeName}')" \
  sh -c "conntrack -D -s $ip; conntrack -D -d $ip" >/dev/null 2>&1 || true
if k wait --for=condition=Ready=false "pod/$victim" --timeout=30s; then
  echo "$victim is cut off"
else
  echo "WARNING: $victim is still ready: does the CNI enforce NetworkPolicy?"
fi
sleep 20
k label pod "$victim" statestore.io/isolated-
k delete networkpolicy isolate
wait_healthy; report "isolate leader $victim" "$t"

say "3. drain a follower's node"
t=$(now); lead=$(leader_pod)
mapfile -t nodes < <(k get pod -l "$SEL" -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}' |
  awk -v l="$lead" '$1 != l { print $2 }')
drained=$(k get pod -l "$SEL" --field-selector "spec.nodeName=${nodes[0]}" -o jsonpath='{.items[0].metadata.uid}')
kubectl drain "${nodes[0]}" --ignore-daemonsets --delete-emptydir-data --timeout=120s
# Its member cannot run elsewhere (kind's volumes are node-local), so one member is down and
# the PodDisruptionBudget must refuse to evict another.
if kubectl drain "${nodes[1]}" --ignore-daemonsets --delete-emptydir-data --timeout=20s; then
  echo "FAIL: the PodDisruptionBudget let a second member go"; failed=1
else
  echo "the PodDisruptionBudget refused a second eviction"
fi
kubectl uncordon "${nodes[@]}"
wait_healthy "$drained"; report "drain ${nodes[0]}" "$t"

say "4. rolling restart"
t=$(now); old=$(uids)
k rollout restart "sts/$STS"
k rollout status "sts/$STS" --timeout=600s
# shellcheck disable=SC2086 # one UID per word
wait_healthy $old; report "rolling restart" "$t"

say "5. delete all pods at once"
t=$(now); old=$(uids)
k delete pod -l "$SEL" --wait=false
# shellcheck disable=SC2086
wait_healthy $old; report "delete all pods" "$t"

say "summary"
cat "$report"
if [ "$failed" = 0 ]; then echo "PASS: every acknowledged write read back"; else echo "FAIL"; exit 1; fi
