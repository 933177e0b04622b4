#!/usr/bin/env bash
# `just release`: the release files of the crate's version, in dist/:
#   install.yaml                          all of config/default in one file, the image pinned by digest
#                                         (kubectl apply --server-side -f install.yaml; delete -f removes it)
#   event-series-<version>.tgz            the Helm chart (helm package)
#   event-series-v<version>.oci.tar       the runtime image as an OCI archive (hack/image.sh)
#   event-series.cdx.json                 a CycloneDX SBOM of the binary's crates (cargo-cyclonedx)
#   kubectl-series-v<version>-linux-amd64.tar.gz, krew-series.yaml
#                                         the kubectl plugin and its krew manifest (RELEASE_URL: where
#                                         the archive will be downloaded from)
#   completions/                          bash, zsh and fish completions
#   SHA256SUMS                            of every file above
# With --install-only: dist/install.yaml alone (what the install test needs).
set -euo pipefail
# The product is built the same whatever Kubernetes minor a test runs on (ENVTEST_MINOR, the matrix):
# its helper binaries (pause, kubectl for kustomize) are the newest release's.
unset ENVTEST_MINOR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
only_install=0
[ "${1:-}" = --install-only ] && only_install=1

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
TAG="ghcr.io/event-series/event-series:v$version"
DIST="$ROOT/dist"
RELEASE_URL="${RELEASE_URL:-https://github.com/event-series/event-series/releases/download/v$version}"
target="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$target" in /*) ;; *) target="$ROOT/$target" ;; esac
log() { printf 'release: %s\n' "$*" >&2; }

bash hack/image.sh >&2
bash hack/build-envtest.sh kubectl >&2
ARCHIVE="$target/image/event-series.oci.tar"
[ -s "$ARCHIVE" ] || ARCHIVE="$ROOT/target/image/event-series.oci.tar"
# The digest a registry serves the image under: its manifest's, named by the archive's index.
digest="$(tar -xOf "$ARCHIVE" index.json | python3 -c 'import json, sys; print(json.load(sys.stdin)["manifests"][0]["digest"])')"
case "$digest" in sha256:*) ;; *) log "no manifest digest in $ARCHIVE: $digest"; exit 1 ;; esac

mkdir -p "$DIST"
install_yaml="$DIST/install.yaml"
{
  echo "# event-series v$version: the whole install (config/default) in one file, the image by digest."
  echo "#   kubectl apply --server-side -f install.yaml    kubectl delete -f install.yaml"
  "$ROOT/target/envtest/bin/kubectl" kustomize config/default | sed "s#image: $TAG\$#image: $TAG@$digest#"
} >"$install_yaml.tmp"
pinned="$(grep -c "image: $TAG@$digest" "$install_yaml.tmp" || true)"
[ "$pinned" = 1 ] || { log "expected one image $TAG in config/default, pinned $pinned"; exit 1; }
mv "$install_yaml.tmp" "$install_yaml"
log "$install_yaml ($TAG@$digest)"
[ "$only_install" = 1 ] && exit 0

bash hack/tools.sh helm cargo-cyclonedx >&2
find "$DIST" -mindepth 1 ! -name install.yaml -delete
mkdir -p "$DIST/completions"
"$ROOT/target/tools/bin/helm" package charts/event-series -d "$DIST" --version "$version" --app-version "v$version" >&2
cp "$ARCHIVE" "$DIST/event-series-v$version.oci.tar"

# The SBOM of the operator's crates (the workspace's other members are test tools).
"$ROOT/target/tools/bin/cargo-cyclonedx" cyclonedx --manifest-path Cargo.toml --format json \
  --spec-version 1.5 --override-filename event-series.cdx >&2
mv "$ROOT/event-series.cdx.json" "$DIST/event-series.cdx.json"
find "$ROOT/core" "$ROOT/test-support" "$ROOT/fuzz" -maxdepth 1 -name '*.cdx.json' -delete 2>/dev/null || true

bin="$target/x86_64-unknown-linux-gnu/release/event-series"
"$bin" completion bash >"$DIST/completions/event-series.bash"
"$bin" completion zsh >"$DIST/completions/_event-series"
"$bin" completion fish >"$DIST/completions/event-series.fish"

# The kubectl plugin: the same static binary, named for kubectl, and its krew manifest.
plugin="kubectl-series-v$version-linux-amd64.tar.gz"
stage="$(mktemp -d)"
install -m 0755 -s "$bin" "$stage/kubectl-series"
cp README.md "$stage/"
tar -C "$stage" --owner=0 --group=0 --mtime=@0 --sort=name -czf "$DIST/$plugin" kubectl-series README.md
rm -rf "$stage"
cat >"$DIST/krew-series.yaml" <<KREW
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: series
spec:
  version: v$version
  homepage: https://github.com/event-series/event-series
  shortDescription: Show event loops as series, with count, state and rate
  description: |
    Lists the series objects event-series writes (one events.k8s.io Event per loop of
    isomorphic events): object, reason, count, Ongoing or Finished, when it started and was
    last seen, and its rate; with -n/-A, --state, -l, --for, -o wide|json|yaml and --watch.
    Needs event-series running in the cluster.
  platforms:
    - selector:
        matchLabels:
          os: linux
          arch: amd64
      uri: $RELEASE_URL/$plugin
      sha256: $(sha256sum "$DIST/$plugin" | cut -d' ' -f1)
      bin: kubectl-series
KREW

# shellcheck disable=SC2094 # find leaves SHA256SUMS, the file written, out by name
(cd "$DIST" && find . -type f ! -name SHA256SUMS | sed 's#^\./##' | sort | xargs sha256sum >SHA256SUMS)
log "dist/: $(cd "$DIST" && find . -type f | wc -l) files"
