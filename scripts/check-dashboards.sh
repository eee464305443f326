#!/usr/bin/env bash
# Validates every dashboards/*.json against the JSON Schema derived from @grafana/schema's
# `Dashboard` type (ts-json-schema-generator), with ajv. The npm tools are pinned in
# dashboards/tools/package.json + package-lock.json and installed (npm ci, no install scripts)
# into a cache directory outside the repository: $STATESTORE_NPM_CACHE, default
# ~/.cache/statestore-npm. Also checks that the JSON files are what dashboards/generate.py writes.
# Exits non-zero on any invalid dashboard.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

tools="${STATESTORE_NPM_CACHE:-$HOME/.cache/statestore-npm}"
mkdir -p "$tools"
# Reinstall only when the pinned lock file changed.
if ! cmp -s dashboards/tools/package-lock.json "$tools/package-lock.json" ||
  [ ! -d "$tools/node_modules/@grafana/schema" ]; then
  cp dashboards/tools/package.json dashboards/tools/package-lock.json "$tools/"
  (cd "$tools" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi

python3 dashboards/generate.py --check

schema="$tools/dashboard.schema.json"
if [ ! -s "$schema" ] || [ "$tools/package-lock.json" -nt "$schema" ]; then
  (cd "$tools" && npx --no-install ts-json-schema-generator \
    --path node_modules/@grafana/schema/dist/types/raw/dashboard/x/types.gen.d.ts \
    --type Dashboard --no-type-check --out "$schema")
fi

shopt -s nullglob
boards=("$repo"/dashboards/*.json)
[ ${#boards[@]} -gt 0 ] || { echo "no dashboards/*.json" >&2; exit 1; }
args=()
for board in "${boards[@]}"; do args+=(-d "$board"); done
(cd "$tools" && npx --no-install ajv validate --spec=draft7 --strict=false --all-errors \
  --errors=text -c ajv-formats -s "$schema" "${args[@]}")
echo "${#boards[@]} dashboards valid against @grafana/schema $(node -p "require('$tools/node_modules/@grafana/schema/package.json').version") Dashboard"
