#!/usr/bin/env bash
# Renders docs/overview.png: the overview dashboard's panels drawn from real data. It runs
# tests/tests/t96_dashboards.rs in render mode (3 nodes + Mosquitto under load for ~25 s, the
# leader SIGKILLed and restarted, ~25 s more, scraped every second by a real Prometheus), which
# writes every overview query's query_range result; dashboards/tools/render_page.py lays them
# out by gridPos with uPlot, and headless chromium takes the screenshot. An approximation of
# Grafana (which cannot be installed here), not its renderer.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out="${1:-$repo/docs/overview.png}"

if ! command -v chromium >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
tools="${STATESTORE_NPM_CACHE:-$HOME/.cache/statestore-npm}"
mkdir -p "$tools"
if ! cmp -s dashboards/tools/package-lock.json "$tools/package-lock.json" ||
  [ ! -d "$tools/node_modules/uplot" ]; then
  cp dashboards/tools/package.json dashboards/tools/package-lock.json "$tools/"
  (cd "$tools" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --locked --bin statestore
STATESTORE_DASHBOARD_RENDER="$work/data.json" \
  cargo test --locked -p statestore-tests --test t96_dashboards -- --nocapture
python3 dashboards/tools/render_page.py "$work/data.json" "$tools/node_modules/uplot/dist" "$work/page.html"
mkdir -p "$(dirname "$out")"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$work/chromium" --hide-scrollbars --window-size=1580,950 \
  --screenshot="$out" "file://$work/page.html" 2>/dev/null
echo "wrote $out"
