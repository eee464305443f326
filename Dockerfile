# syntax=docker/dockerfile:1
# The statestore image: `docker build -t statestore:0.1.0 .` (README "Deploy on Kubernetes").
# A Rust builder on Debian 12, then distroless: no shell, no package manager, glibc and
# libgcc only; runs as uid 65532 (nonroot) and needs nothing writable but its data volume.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin statestore -p statestore-mosquitto-plugin \
    && install -D -m 0755 target/release/statestore /out/statestore \
    && install -D -m 0644 target/release/libstatestore_mosquitto_plugin.so \
        /out/libstatestore_mosquitto_plugin.so

# `--target debug`: the same binary with bash and coreutils, for scripts/kind-failover.sh's
# writer Job. Not for production.
FROM debian:bookworm-slim AS debug
COPY --from=builder /out/statestore /usr/local/bin/statestore
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/statestore"]

# `--target mosquitto`: Debian 12's Mosquitto 2.0 with the statestore plugin (README
# "Authorization: who may do what"), for the chart's mqtt.image with mqtt.statestorePlugin.
# The plugin is built against glibc and Mosquitto 2.0.11's plugin API: it cannot load into the
# Alpine (musl) eclipse-mosquitto image. Runs as the chart's uid 1883.
FROM debian:bookworm-slim AS mosquitto
RUN apt-get update \
    && apt-get install -y --no-install-recommends mosquitto=2.0.11-1.2+deb12u2 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=builder /out/libstatestore_mosquitto_plugin.so /usr/lib/statestore/
USER 1883:1883
EXPOSE 1883
ENTRYPOINT ["/usr/sbin/mosquitto"]
CMD ["-c", "/mosquitto/config/mosquitto.conf"]

# The default target.
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=builder /out/statestore /usr/local/bin/statestore
USER 65532:65532
# HTTP (/metrics, /livez, /readyz, admin API) and Raft; the data directory is a volume.
EXPOSE 7480 7481
ENTRYPOINT ["/usr/local/bin/statestore"]
CMD ["--help"]
