# syntax=docker/dockerfile:1
#
# The event-series controller image where a Docker engine exists: the Rust binary linked static, FROM
# scratch (no shell, no libc), uid 65532. `just image` builds the same runtime image without Docker
# (hack/image.sh: the same static build, then buildah on hack/image.Containerfile, whose lines are the
# runtime stage below; a test keeps the two equal).
#   docker build -t ghcr.io/event-series/event-series:v0.2.0-dev .
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
# Static glibc: RUSTFLAGS apply to the target only (not to build scripts) because --target is given.
# target/ is a cache mount, gone after this RUN: copy the binary out within the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --bin event-series --target x86_64-unknown-linux-gnu \
    && install -D -m 0755 target/x86_64-unknown-linux-gnu/release/event-series /out/event-series

FROM scratch AS runtime
COPY --from=builder /out/event-series /event-series
USER 65532:65532
# metrics (HTTPS), health (plain HTTP)
EXPOSE 8443 8081
ENTRYPOINT ["/event-series"]
CMD ["run"]
