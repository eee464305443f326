#!/usr/bin/env bash
# The chart's pods as podman containers of the real images: builds them (scripts/image.sh
# --all: seconds when nothing changed, about 9 minutes on 2 cores from nothing), then runs
# helm/tools/rehearse_image.py: the broker pod (the subchart's init script and configuration in
# the Dockerfile's mosquitto target), three members of localhost/statestore with the
# StatefulSet's exact arguments and each pod's TOML, its own named data volume, --read-only,
# --user 65532:65532, readiness through /readyz; scripts/kind-failover-writer.yaml's writer
# (statestore kv set every 100 ms, in the debug target); podman kill of the leader's container
# (no gap over 2 s between acknowledged writes), its restart from its volume, every
# acknowledged write read back; scale to 5 and back with the chart's Job commands run as
# containers of the image; the helm test pod. Prints the failover gap it measured.
#
#   scripts/image-rehearsal.sh       KEEP=1 keeps the containers and files afterwards
#
# Needs root (podman's root storage), and what scripts/image.sh needs; the chart's pinned
# tools come from scripts/helm-tools.sh (the cache scripts/check-helm.sh uses).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

./scripts/prereqs.sh
./scripts/image.sh --all
# shellcheck source=scripts/helm-tools.sh
. scripts/helm-tools.sh
# shellcheck source=scripts/containers-env.sh
. scripts/containers-env.sh
built=$SECONDS
"$py" helm/tools/rehearse_image.py "$helm" "$PWD" "localhost/statestore:$image_tag" \
  "localhost/statestore-mosquitto:$image_tag" "localhost/statestore-debug:$image_tag"
echo "image-rehearsal: images in $((built - start)) s, rehearsal in $((SECONDS - built)) s"
