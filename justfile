# event-series development commands. `just` lists them.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List the recipes.
default:
    @just --list

# The whole suite: format, lints, unit, property and end-to-end tests.
test: lint
    cargo test --all-targets

# Format check and clippy with warnings as errors.
lint:
    cargo fmt --all -- --check
    cargo clippy --all-targets -- -D warnings

# Format the code.
fmt:
    cargo fmt --all

# Build the release binary.
build:
    cargo build --release

# The benchmarks (not part of `just test`); figures go to docs/BENCHMARKS.md.
bench:
    cargo bench --bench engine
    cargo bench --bench memory
