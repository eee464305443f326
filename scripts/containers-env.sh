# shellcheck shell=bash
# Sourced by scripts/image.sh and scripts/image-rehearsal.sh: podman and buildah as they run on
# a Debian 12 VM whose kernel has hybrid cgroups (crun fails there, on the cgroups and on raising
# RLIMIT_NOFILE; runc with cgroupfs and no default ulimits runs), with the overlay storage
# driver (ext4 supports it natively here).
# The settings live in files under $STATESTORE_IMAGE_CACHE and are handed over through
# CONTAINERS_CONF and CONTAINERS_STORAGE_CONF, so nothing under /etc is changed. The same by
# hand: podman --runtime runc --cgroup-manager cgroupfs run ... (with the file's ulimits).
#
# STATESTORE_STORAGE_DRIVER (default overlay) picks another storage driver: vfs where overlay
# does not work (every layer and container is then a full copy of its image: a build with the
# 1 GB builder image takes minutes longer) or where the machine's storage already uses it.

image_cache="${STATESTORE_IMAGE_CACHE:-$HOME/.cache/statestore-image}"
mkdir -p "$image_cache"
# The images' tag: IMAGE_TAG, else the workspace version.
# shellcheck disable=SC2034 # used by the scripts that source this file
image_tag="${IMAGE_TAG:-$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)}"

# podman, buildah, runc and debootstrap from Debian's packages, when missing.
containers_prereqs() {
  local missing=() tool
  for tool in podman buildah runc debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

cat >"$image_cache/containers.conf" <<'CONF'
[containers]
default_ulimits = []
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
cat >"$image_cache/storage.conf" <<CONF
[storage]
driver = "${STATESTORE_STORAGE_DRIVER:-overlay}"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
CONF
export CONTAINERS_CONF="$image_cache/containers.conf"
export CONTAINERS_STORAGE_CONF="$image_cache/storage.conf"
export BUILDAH_RUNTIME=runc
