# syntax=docker/dockerfile:1
# The statestore image: `docker build -t statestore:0.1.0 .` (README "Deploy on Kubernetes").
# A Rust builder on Debian 12, then distroless: no shell, no package manager, glibc and
# libgcc only; runs as uid 65532 (nonroot) and needs nothing writable but its data volume,
# /var/lib/statestore.
#
# The base images are build arguments whose defaults are the public images. Where no
# registry is reachable, scripts/image.sh builds local stand-ins (a debootstrapped Debian 12,
# the machine's Rust toolchain, a runtime base holding only what the binary links) and passes
# them here with --build-arg.
ARG RUST_IMAGE=rust:1.95-bookworm
ARG DEBIAN_IMAGE=debian:bookworm-slim
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# The release profile keeps line tables (file:line in a panic's backtrace); compressed
# (objcopy, zlib) they still serve backtraces, and the binary is 51 MB instead of 136 MB.
FROM ${RUST_IMAGE} AS builder
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p statestore-node -p statestore-mosquitto-plugin --bin statestore --lib \
    && install -d /out \
    && objcopy --compress-debug-sections=zlib target/release/statestore /out/statestore \
    && install -m 0644 target/release/libstatestore_mosquitto_plugin.so \
        /out/libstatestore_mosquitto_plugin.so \
    && install -d -m 0700 /out/data

# `--target debug`: the same binary with bash and coreutils, for scripts/kind-failover.sh's
# writer Job. Not for production.
FROM ${DEBIAN_IMAGE} AS debug
COPY --from=builder /out/statestore /usr/local/bin/statestore
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/statestore"]

# `--target mosquitto`: Debian 12's Mosquitto 2.0 with the statestore plugin (README
# "Authorization: who may do what"), for the chart's mqtt.image with mqtt.statestorePlugin.
# The plugin is built against glibc and Mosquitto 2.0.11's plugin API: it cannot load into the
# Alpine (musl) eclipse-mosquitto image. Runs as the chart's uid 1883.
FROM ${DEBIAN_IMAGE} AS mosquitto
RUN apt-get update \
    && apt-get install -y --no-install-recommends mosquitto=2.0.11-1.2+deb12u2 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=builder /out/libstatestore_mosquitto_plugin.so /usr/lib/statestore/
USER 1883:1883
EXPOSE 1883
ENTRYPOINT ["/usr/sbin/mosquitto"]
CMD ["-c", "/mosquitto/config/mosquitto.conf"]

# The default target.
FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=builder /out/statestore /usr/local/bin/statestore
# The one writable path: the data volume, owned by the image's user (a fresh volume takes
# this ownership). It is also the working directory, so the default data_dir
# (statestore-data, relative) lands in it too.
COPY --from=builder --chown=65532:65532 /out/data /var/lib/statestore
VOLUME ["/var/lib/statestore"]
WORKDIR /var/lib/statestore
USER 65532:65532
# HTTP (/metrics, /livez, /readyz, admin API) and Raft.
EXPOSE 7480 7481
ENTRYPOINT ["/usr/local/bin/statestore"]
CMD ["--help"]
