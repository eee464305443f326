# syntax=docker/dockerfile:1
# The statestore image: `docker build -t statestore:0.1.0 .` (README "Deploy on Kubernetes").
# A Rust builder on Debian 12, then distroless: no shell, no package manager, glibc and
# libgcc only; runs as uid 65532 (nonroot) and needs nothing writable but its data volume.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin statestore \
    && install -D -m 0755 target/release/statestore /out/statestore

# `--target debug`: the same binary with bash and coreutils, for scripts/kind-failover.sh's
# writer Job. Not for production.
FROM debian:bookworm-slim AS debug
COPY --from=builder /out/statestore /usr/local/bin/statestore
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/statestore"]

# The default target.
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=builder /out/statestore /usr/local/bin/statestore
USER 65532:65532
# HTTP (/metrics, /livez, /readyz, admin API) and Raft; the data directory is a volume.
EXPOSE 7480 7481
ENTRYPOINT ["/usr/local/bin/statestore"]
CMD ["--help"]
