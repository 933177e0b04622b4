#!/usr/bin/env bash
# `just release`: the release files of the crate's version, in dist/ (docs/RELEASE.md):
#   install.yaml                          all of config/default in one file, the image pinned by digest
#                                         (kubectl apply --server-side -f install.yaml; delete -f removes it)
#   event-series-<version>.tgz            the Helm chart (helm package)
#   event-series-v<version>.oci.tar       the runtime image as an OCI archive: an image index of
#                                         linux/amd64 and linux/arm64 (hack/image.sh)
#   event-series.cdx.json                 a CycloneDX SBOM of the binary's crates (cargo-cyclonedx)
#   event-series-image.cdx.json           a CycloneDX SBOM of the image, read from its archive: each
#                                         platform's manifest, files and crates (hack/release.py)
#   kubectl-series-v<version>-<os>-<arch>.tar.gz, krew-series.yaml
#                                         the kubectl plugin for linux/amd64 and linux/arm64 (and macOS
#                                         with RELEASE_DARWIN=1, where it links) and its krew manifest
#                                         (RELEASE_URL: where the archives will be downloaded from)
#   completions/                          bash, zsh and fish completions
#   event-series.pub                      the public key of the signatures below
#   image-signature.json(.sig)            the image index's digest, signed (cosign's payload format)
#   provenance.intoto.jsonl               SLSA provenance of every file and of the index: a signed
#                                         in-toto statement (DSSE envelope)
#   SHA256SUMS, SHA256SUMS.sig            of every file above, signed
# The key: RELEASE_SIGNING_KEY, a PEM EC P-256 private key (the project's, kept offline); without it a
# key pair is made for the version in target/release-key/ and kept (a re-run signs with the same key).
# The release ends with `just verify-release` on it.
# With --install-only: dist/install.yaml alone, the image of the host's platform (what the install
# test needs, without the arm64 build).
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
started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
PLATFORMS="linux/amd64 linux/arm64"
PLUGINS=(linux-amd64:x86_64-unknown-linux-gnu linux-arm64:aarch64-unknown-linux-gnu)
if [ "${RELEASE_DARWIN:-0}" = 1 ]; then
  PLUGINS+=(darwin-amd64:x86_64-apple-darwin darwin-arm64:aarch64-apple-darwin)
fi

if [ "$only_install" = 1 ]; then
  bash hack/image.sh >&2
else
  IMAGE_PLATFORMS="$PLATFORMS" bash hack/image.sh >&2
fi
bash hack/build-envtest.sh kubectl >&2
ARCHIVE="$target/image/event-series.oci.tar"
[ -s "$ARCHIVE" ] || ARCHIVE="$ROOT/target/image/event-series.oci.tar"
# The digest a registry serves the image under: its index's (its manifest's for one platform), named
# by the archive's index.json.
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

bin="$(bash hack/build-static.sh "$(rustc -vV | sed -n 's/^host: //p')")"
"$bin" completion bash >"$DIST/completions/event-series.bash"
"$bin" completion zsh >"$DIST/completions/_event-series"
"$bin" completion fish >"$DIST/completions/event-series.fish"

# The kubectl plugin: the same static binary, named for kubectl, one archive per platform.
for plugin in "${PLUGINS[@]}"; do
  platform="${plugin%%:*}" triple="${plugin#*:}"
  bin="$(bash hack/build-static.sh "$triple")"
  stage="$(mktemp -d)"
  case "$triple" in
    aarch64-unknown-linux-gnu) install -m 0755 -s --strip-program=aarch64-linux-gnu-strip "$bin" "$stage/kubectl-series" ;;
    *-linux-gnu) install -m 0755 -s "$bin" "$stage/kubectl-series" ;;
    *) install -m 0755 "$bin" "$stage/kubectl-series" ;;
  esac
  cp README.md LICENSE "$stage/"
  tar -C "$stage" --owner=0 --group=0 --mtime=@0 --sort=name -czf "$DIST/kubectl-series-v$version-$platform.tar.gz" \
    kubectl-series README.md LICENSE
  rm -rf "$stage"
done
python3 hack/release.py krew "$DIST" --version "$version" --url "$RELEASE_URL"

# The image's SBOM, from its archive.
python3 hack/release.py sbom-image "$DIST/event-series-v$version.oci.tar" "$DIST/event-series-image.cdx.json" --tag "$TAG"

# Signatures and provenance, then SHA256SUMS of it all.
key="${RELEASE_SIGNING_KEY:-}"
if [ -z "$key" ]; then
  key="$target/release-key/event-series-v$version.key"
  if [ ! -s "$key" ]; then
    mkdir -p "$(dirname "$key")"
    (umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$key")
  fi
  log "no RELEASE_SIGNING_KEY: signed with a key made for this release ($key); publish event-series.pub's fingerprint apart from the files"
fi
python3 hack/release.py attest "$DIST" --image "event-series-v$version.oci.tar" --tag "$TAG" --key "$key" \
  --started "$started" --param version="$version" --param platforms="$PLATFORMS" \
  --param plugins="${PLUGINS[*]%%:*}" --param releaseUrl="$RELEASE_URL"
python3 hack/release.py verify "$DIST" >&2
log "dist/: $(cd "$DIST" && find . -type f | wc -l) files"
