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
# The newest official SDK (1.5.0-beta1: SCAN) in its own crate and lock file (Cargo allows one
# 1.x version of a crate per build graph); it runs the same binary.
if [ "$#" -eq 0 ]; then
    target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
    CARGO_TARGET_DIR="$target_dir" STATESTORE_BIN="$target_dir/debug/statestore" \
        cargo test --locked --manifest-path tests/sdk-next/Cargo.toml
fi
