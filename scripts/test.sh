#!/usr/bin/env bash
# Runs the whole test suite: unit, property, storage-conformance and black-box tests (real
# Mosquitto, real statestore processes, the official SDK client, raw MQTT).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/prereqs.sh
# Alert rules: syntax, then their unit tests (each alert fires and stays silent).
promtool check rules dashboards/alerts.yaml >/dev/null
promtool test rules dashboards/alerts_test.yaml
# Grafana dashboards: JSON Schema from @grafana/schema (npm tools cached outside the repo).
./scripts/check-dashboards.sh
# The black-box tests start the real binary: build it first (same profile as the tests).
cargo build --locked --bin statestore
# The Helm chart: lint, schema and manifest checks, then a rehearsal of its StatefulSet with
# this binary and Mosquitto (tools pinned, cached in ~/.cache/statestore-helm).
STATESTORE_BIN="${CARGO_TARGET_DIR:-target}/debug/statestore" ./scripts/check-helm.sh
cargo test --locked --workspace "$@"
