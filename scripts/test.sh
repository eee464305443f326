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
# The black-box tests start the real binary: build it first (same profile as the tests). It is
# wherever cargo puts it (CARGO_TARGET_DIR, build.target-dir, else ./target): cargo's own
# report of the executable says where.
statestore_bin=$(cargo build --locked --bin statestore --message-format=json-render-diagnostics |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$statestore_bin" ] || { echo "cargo built no statestore binary" >&2; exit 1; }
# The Mosquitto plugin (broker-plugin/): the black-box authorization tests and the chart's
# rehearsal load it into a real broker. Found the same way.
plugin=$(cargo build --locked -p statestore-mosquitto-plugin --message-format=json-render-diagnostics |
    grep -o '"[^"]*libstatestore_mosquitto_plugin\.so"' | tr -d '"' | tail -n 1)
[ -f "$plugin" ] || { echo "cargo built no libstatestore_mosquitto_plugin.so" >&2; exit 1; }
export STATESTORE_MOSQUITTO_PLUGIN="$plugin"
# The power-cut test filesystem (tests/powercut-fs): its own tests find it through cargo
# (CARGO_BIN_EXE_powercut-fs); the power-cut cycles of other crates through POWERCUT_FS_BIN.
powercut_fs_bin=$(cargo build --locked -p statestore-powercut-fs --bin powercut-fs --message-format=json-render-diagnostics |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$powercut_fs_bin" ] || { echo "cargo built no powercut-fs binary" >&2; exit 1; }
export POWERCUT_FS_BIN="$powercut_fs_bin"
# The Helm chart: lint, schema and manifest checks, then a rehearsal of its StatefulSet with
# this binary and Mosquitto (tools pinned, cached in ~/.cache/statestore-helm).
STATESTORE_BIN="$statestore_bin" ./scripts/check-helm.sh
cargo test --locked --workspace "$@"
# The newest official SDK (1.5.0-beta1: SCAN) in its own crate and lock file (Cargo allows one
# 1.x version of a crate per build graph); it runs the same binary, and builds into the same
# target directory.
if [ "$#" -eq 0 ]; then
    target_dir=$(dirname "$(dirname "$statestore_bin")")
    CARGO_TARGET_DIR="$target_dir" STATESTORE_BIN="$statestore_bin" \
        cargo test --locked --manifest-path tests/sdk-next/Cargo.toml
fi
