# syntax=docker/dockerfile:1
#
# The event-series controller image: the Rust binary on distroless (glibc, no shell, non-root).
#   docker build -t ghcr.io/event-series/event-series:v0.1.0 .
#
# Dependency caching: BuildKit cache mounts (the cargo registry, git checkouts and target/) instead of
# the "copy Cargo.toml, build a stub main.rs" trick. The stub must mirror every target the manifest
# declares (lib, bin, benches, examples) and every workspace member (test-support/), and goes stale
# whenever they change; with cache mounts cargo's own fingerprinting decides what to rebuild, so a
# source change recompiles only this crate. Cache mounts need BuildKit (the default builder since
# Docker 23) and live on the builder, not in the image.

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
COPY . .
# target/ is a cache mount, gone after this RUN: copy the binary out within the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin event-series \
    && install -D -m 0755 target/release/event-series /out/event-series

# glibc + libgcc only: TLS is rustls (ring), there is no OpenSSL to ship.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/event-series /event-series
USER 65532:65532
# metrics (HTTPS), health (plain HTTP)
EXPOSE 8443 8081
ENTRYPOINT ["/event-series"]
CMD ["run"]
