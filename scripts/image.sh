#!/usr/bin/env bash
# Builds the statestore image from this checkout with buildah, where no container registry is
# reachable: the Dockerfile's base images are replaced, through its build arguments, by local
# stand-ins built here first:
#
#   RUST_IMAGE     localhost/statestore-base/rust:<rustc version>-bookworm: Debian 12
#                  (debootstrap --variant=minbase) with gcc and libc6-dev, and the Rust
#                  toolchain this checkout builds with (rustc, cargo, the x86_64 std) copied in
#   DEBIAN_IMAGE   localhost/statestore-base/debian:bookworm-slim: that Debian 12 rootfs alone
#   RUNTIME_IMAGE  localhost/statestore-base/runtime:nonroot: only what the binary links
#                  (the dynamic loader, libc, libm, libgcc_s of that Debian 12), the CA bundle,
#                  /etc/passwd and /etc/group with nonroot (65532), /etc/nsswitch.conf, /tmp;
#                  no shell, no package manager (gcr.io/distroless/cc-debian12:nonroot's layout)
#
# With a registry, `docker build .` (or `buildah bud .`) uses the public images instead: the
# Dockerfile's defaults. Then it checks what the image promises (uid 65532, entrypoint
# statestore, one volume, no shell, runs on a read-only root) and prints its size and how long
# each step took.
#
#   scripts/image.sh            localhost/statestore:<version> (the Dockerfile's default target)
#   scripts/image.sh --all      also localhost/statestore-mosquitto:<version> (--target mosquitto,
#                               Debian's Mosquitto with the statestore plugin) and
#                               localhost/statestore-debug:<version> (--target debug)
#
# Needs root (debootstrap; podman's and buildah's root storage) and network access to Debian's
# mirror (debootstrap, apt-get in the mosquitto target) and to crates.io (cargo in the build
# stage). The stand-ins are built once and kept; REBUILD_BASES=1 builds them again. The build
# stage compiles the workspace inside a container (Cargo's registry and target directory are
# buildah cache mounts, kept between builds). Environment: IMAGE_TAG (default: the workspace
# version), DEBIAN_MIRROR (default http://deb.debian.org/debian), STATESTORE_IMAGE_CACHE
# (default ~/.cache/statestore-image: the Debian rootfs and podman's settings).
set -euo pipefail
cd "$(dirname "$0")/.."

all=false
case "${1:-}" in
  "") ;;
  --all) all=true ;;
  *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac

# shellcheck source=scripts/containers-env.sh
. scripts/containers-env.sh
containers_prereqs

start=$SECONDS
step_start=$SECONDS
step() { printf '\n== %s (%ss)\n' "$*" "$((SECONDS - start))"; step_start=$SECONDS; }
took() { echo "$1: $((SECONDS - step_start)) s"; }
image_exists() { podman image exists "$1"; }

tag=$image_tag
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# The toolchain cargo uses in this checkout (rustup's choice for this directory).
sysroot=$(rustc --print sysroot)
rustc_version=$("$sysroot/bin/rustc" --version | awk '{print $2}')
rust_version=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
case "$rustc_version" in
  "$rust_version" | "$rust_version".*) ;;
  *) echo "rustc $rustc_version at $sysroot is not Rust $rust_version (the Dockerfile's rust:$rust_version-bookworm)" >&2; exit 1 ;;
esac
base=localhost/statestore-base
debian_image="$base/debian:bookworm-slim"
rust_image="$base/rust:$rustc_version-bookworm"
runtime_image="$base/runtime:nonroot"
rootfs="$image_cache/bookworm-minbase"
[ "${REBUILD_BASES:-}" = 1 ] && rm -rf "$rootfs"

step "Debian 12 rootfs ($rootfs)"
if [ ! -f "$rootfs/.complete" ]; then
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$image_cache/debootstrap.log" 2>&1 ||
    { tail -n 20 "$image_cache/debootstrap.log" >&2; exit 1; }
  # As the slim image: no package lists, no downloaded packages, apt pointed at the mirror.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  echo "deb $mirror bookworm main" >"$rootfs/etc/apt/sources.list"
  touch "$rootfs/.complete"
  took "debootstrap --variant=minbase bookworm"
else
  echo "kept from an earlier run"
fi

step "stand-in $debian_image"
if [ "${REBUILD_BASES:-}" = 1 ] || ! image_exists "$debian_image"; then
  tar -C "$rootfs" --exclude=./.complete -c . |
    podman import --change 'CMD ["bash"]' - "$debian_image" >/dev/null
  took "podman import"
fi
echo "$debian_image: $(podman image inspect --format '{{.Size}}' "$debian_image") bytes"

step "stand-ins $rust_image and $runtime_image"
if [ "${REBUILD_BASES:-}" = 1 ] || ! image_exists "$rust_image" || ! image_exists "$runtime_image"; then
  ctr=$(buildah from --pull=never "$debian_image")
  trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
  # A C compiler and linker driver (ring and mimalloc compile C; rustc links through cc) and
  # the CA bundle cargo checks crates.io against.
  buildah run --network host "$ctr" -- sh -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev ca-certificates >/dev/null && rm -rf /var/lib/apt/lists/*'
  # The toolchain without its documentation: rustc, cargo, rustdoc, and lib/ (the compiler's
  # libraries, the x86_64 std and rust-lld, the default linker since Rust 1.90).
  buildah copy --quiet "$ctr" "$sysroot/bin/rustc" "$sysroot/bin/cargo" "$sysroot/bin/rustdoc" /usr/local/rust/bin/
  buildah copy --quiet "$ctr" "$sysroot/lib" /usr/local/rust/lib
  # As the official rust image: CARGO_HOME=/usr/local/cargo (the Dockerfile's cache mount).
  buildah config --env CARGO_HOME=/usr/local/cargo \
    --env PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd bash "$ctr"
  buildah run "$ctr" -- cargo --version
  staging=$(mktemp -d)
  trap 'buildah rm "$ctr" >/dev/null 2>&1 || true; rm -rf "$staging"' EXIT
  # The runtime base gets Debian's CA bundle; the build stage the machine's, which may hold a
  # CA of the network's own (a TLS-inspecting proxy between this machine and crates.io).
  mkdir -p "$staging/etc/ssl/certs"
  buildah run "$ctr" -- cat /etc/ssl/certs/ca-certificates.crt >"$staging/etc/ssl/certs/ca-certificates.crt"
  buildah copy --quiet "$ctr" "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" /etc/ssl/certs/ca-certificates.crt
  buildah commit --quiet --rm "$ctr" "$rust_image" >/dev/null
  took "$rust_image"

  # The runtime base: files only, from the same Debian 12 (what `ldd statestore` lists).
  libs=$rootfs/usr/lib/x86_64-linux-gnu
  install -d "$staging/lib/x86_64-linux-gnu" "$staging/lib64" "$staging/usr/local/bin" \
    "$staging/home/nonroot" "$staging/root"
  install -m 0755 "$(readlink -f "$libs/ld-linux-x86-64.so.2")" "$staging/lib64/ld-linux-x86-64.so.2"
  for lib in libc.so.6 libm.so.6 libgcc_s.so.1; do
    install -m 0644 "$(readlink -f "$libs/$lib")" "$staging/lib/x86_64-linux-gnu/$lib"
  done
  install -d -m 1777 "$staging/tmp"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$staging/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$staging/etc/group"
  printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$staging/etc/nsswitch.conf"
  chown 65532:65532 "$staging/home/nonroot"
  chmod 0700 "$staging/root"
  tar -C "$staging" --numeric-owner -c . |
    podman import --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' - "$runtime_image" >/dev/null
  rm -rf "$staging"
  trap - EXIT
  took "$runtime_image"
fi
for i in "$rust_image" "$runtime_image"; do echo "$i: $(podman image inspect --format '{{.Size}}' "$i") bytes"; done

build() { # TARGET NAME
  step "buildah bud --target $1 -t $2"
  buildah bud --pull=never --layers --network host \
    --build-arg "RUST_IMAGE=$rust_image" --build-arg "DEBIAN_IMAGE=$debian_image" \
    --build-arg "RUNTIME_IMAGE=$runtime_image" --target "$1" -t "$2" . 2>&1 |
    grep -v '^\(Copying \(blob\|config\)\|Writing manifest\|Storing signatures\|Getting image source\)'
  took "buildah bud --target $1"
}
image="localhost/statestore:$tag"
build runtime "$image"
if $all; then
  build mosquitto "localhost/statestore-mosquitto:$tag"
  build debug "localhost/statestore-debug:$tag"
fi

step "what $image promises"
fail() { echo "FAIL: $*" >&2; exit 1; }
config=$(podman image inspect --format '{{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.Volumes}}' "$image")
[ "$config" = '65532:65532 ["/usr/local/bin/statestore"] {"/var/lib/statestore":{}}' ] ||
  fail "user, entrypoint, volumes: $config"
echo "user 65532:65532, entrypoint /usr/local/bin/statestore, one volume /var/lib/statestore"
files=$(podman create --quiet "$image")
listing=$(podman export "$files" | tar -t)
podman rm --force --volumes "$files" >/dev/null
if grep -E '(^|/)(sh|bash|dash|busybox|apt|apt-get|dpkg)$' <<<"$listing"; then fail "a shell or package manager in the image"; fi
echo "no shell, no package manager ($(grep -vc '/$' <<<"$listing") files)"
run=(podman run --rm --network none --read-only --user 65532 --cap-drop ALL "$image")
"${run[@]}" --version
# Every library the binary needs is there (the loader reports a missing one and fails).
podman run --rm --network none --read-only --entrypoint /lib64/ld-linux-x86-64.so.2 "$image" \
  --list /usr/local/bin/statestore
size=$(podman image inspect --format '{{.Size}}' "$image")
base_size=$(podman image inspect --format '{{.Size}}' "$runtime_image")
echo "size of $image: $size bytes ($((size / 1000000)) MB; the runtime base $((base_size / 1000000)) MB of it)"
step "image.sh: done in $((SECONDS - start)) s"
