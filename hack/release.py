#!/usr/bin/env python3
"""The release's image SBOM, krew manifest, signatures and provenance (hack/release.sh), and their
check (`just verify-release`). Python's standard library and the openssl command only: a user who
verifies needs nothing built.

Signatures are ECDSA P-256 over SHA-256, base64 of the DER signature: the format of
`cosign sign-blob --key`, so `cosign verify-blob --key event-series.pub` accepts them too, and the
provenance is a DSSE envelope of an in-toto statement (`cosign verify-blob-attestation`).

Usage:
  release.py sbom-image ARCHIVE OUT --tag TAG [--no-crates]   CycloneDX SBOM of the image, read from
                                                              its OCI archive (files, crates per platform)
  release.py krew DIST --version V --url URL                  krew-series.yaml for every plugin archive
  release.py attest DIST --image FILE --tag TAG --key KEY     sign: image, provenance, SHA256SUMS
  release.py verify DIST [--key PUB]                          check all of it; exit 1 naming each failure
  release.py image ARCHIVE [--extract DIR]                    the index's platforms (each binary to DIR/ARCH)
  release.py fake DIST                                        a tiny signed release of stub binaries (tests)
"""

import argparse
import base64
import datetime
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import uuid
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPOSITORY = "ghcr.io/event-series/event-series"
HOMEPAGE = "https://github.com/event-series/event-series"
# The platforms of the image and what each one's binary must be: Rust target, ELF e_machine.
PLATFORMS = {
    "linux/amd64": ("x86_64-unknown-linux-gnu", 62, "x86-64"),
    "linux/arm64": ("aarch64-unknown-linux-gnu", 183, "aarch64"),
}
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
IN_TOTO = "application/vnd.in-toto+json"
STATEMENT = "https://in-toto.io/Statement/v1"
SLSA = "https://slsa.dev/provenance/v1"
USER = "65532:65532"
# Files of dist/ that are about the others: the provenance names every file but these.
SUMS, SUMS_SIG, PUBKEY = "SHA256SUMS", "SHA256SUMS.sig", "event-series.pub"
IMAGE_PAYLOAD, IMAGE_SIG = "image-signature.json", "image-signature.json.sig"
PROVENANCE = "provenance.intoto.jsonl"
META = {SUMS, SUMS_SIG, PUBKEY, IMAGE_PAYLOAD, IMAGE_SIG, PROVENANCE}


class Failure(Exception):
    """A check that failed: its message names the file and what is wrong with it."""


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def command(*args, data=None):
    """stdout of a command (text), or an empty string when it is missing or fails."""
    try:
        out = subprocess.run(args, input=data, capture_output=True, cwd=ROOT, check=True)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.stdout.decode(errors="replace").strip()


def files_of(dist):
    """Every file under dist, as paths relative to it with '/', sorted."""
    out = []
    for d, _, names in os.walk(dist):
        for n in names:
            out.append(os.path.relpath(os.path.join(d, n), dist).replace(os.sep, "/"))
    return sorted(out)


# --- OCI archives -----------------------------------------------------------------------------


class Archive:
    """An OCI image layout in a tar (what `buildah push oci-archive:` writes), blobs checked."""

    def __init__(self, path):
        self.path = path
        try:
            with tarfile.open(path) as tar:
                self.members = {m.name.lstrip("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        except (OSError, tarfile.TarError, EOFError, zlib.error) as e:
            raise Failure(f"{os.path.basename(path)}: not a readable tar archive ({e})") from e
        self.layout = self.json_file("index.json")

    def json_file(self, name):
        try:
            return json.loads(self.members[name])
        except (KeyError, ValueError) as e:
            raise Failure(f"{os.path.basename(self.path)}: no valid {name} ({e})") from e

    def blob(self, digest):
        """The blob of a digest, its content checked against it."""
        algo, _, hexa = digest.partition(":")
        data = self.members.get(f"blobs/{algo}/{hexa}")
        if algo != "sha256" or data is None:
            raise Failure(f"{os.path.basename(self.path)}: blob {digest} is missing")
        if sha256(data) != hexa:
            raise Failure(f"{os.path.basename(self.path)}: blob {digest} does not match its digest")
        return data

    def top(self):
        """The archive's one image: (media type, digest, parsed content)."""
        entries = self.layout.get("manifests") or []
        if len(entries) != 1:
            raise Failure(f"{os.path.basename(self.path)}: index.json names {len(entries)} images, not one")
        digest = entries[0].get("digest", "")
        return entries[0].get("mediaType"), digest, json.loads(self.blob(digest))

    def platforms(self):
        """{"linux/amd64": (manifest digest, config, {path: file bytes})} of the image index."""
        kind, digest, index = self.top()
        if kind != INDEX or index.get("mediaType", INDEX) != INDEX:
            raise Failure(f"{os.path.basename(self.path)}: {digest} is a {kind}, not an OCI image index")
        out = {}
        for entry in index.get("manifests", []):
            p = entry.get("platform") or {}
            name = f"{p.get('os')}/{p.get('architecture')}"
            manifest = json.loads(self.blob(entry["digest"]))
            config = json.loads(self.blob(manifest["config"]["digest"]))
            files = {}
            for layer in manifest.get("layers", []):
                files.update(layer_files(self.blob(layer["digest"])))
            out[name] = (entry["digest"], config, files)
        return out


def layer_files(blob):
    """{"/path": bytes} of the regular files in a (gzip) layer tar."""
    data = gzip.decompress(blob) if blob[:2] == b"\x1f\x8b" else blob
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {"/" + m.name.lstrip("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def elf_machine(data):
    """e_machine of a 64-bit little-endian ELF file, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    return int.from_bytes(data[18:20], "little")


def check_image(path, want=tuple(PLATFORMS)):
    """The index of the archive: exactly `want`, each config's os/architecture and user, each binary an
    ELF of its architecture. Returns (index digest, platforms)."""
    archive = Archive(path)
    _, digest, _ = archive.top()
    platforms = archive.platforms()
    name = os.path.basename(path)
    if sorted(platforms) != sorted(want):
        raise Failure(f"{name}: the index has {sorted(platforms)}, not {sorted(want)}")
    for platform, (_, config, files) in platforms.items():
        os_, arch = platform.split("/")
        if (config.get("os"), config.get("architecture")) != (os_, arch):
            got = f"{config.get('os')}/{config.get('architecture')}"
            raise Failure(f"{name}: the {platform} entry's image config says {got}")
        if (config.get("config") or {}).get("User") != USER:
            raise Failure(f"{name}: the {platform} image does not run as {USER}")
        machine = elf_machine(files.get("/event-series", b""))
        if machine != PLATFORMS[platform][1]:
            raise Failure(f"{name}: /event-series of {platform} is not an ELF for {PLATFORMS[platform][2]}")
    return digest, platforms


# --- keys and signatures ----------------------------------------------------------------------


def public_key(key):
    """The PEM public key of a private key file (EC P-256 only: cosign's and this check's kind)."""
    text = command("openssl", "pkey", "-in", key, "-noout", "-text")
    if "prime256v1" not in text and "P-256" not in text:
        raise Failure(
            f"{key}: not an EC P-256 private key (openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)"
        )
    return command("openssl", "pkey", "-in", key, "-pubout") + "\n"


def fingerprint(pub):
    """SHA-256 of the public key's DER form: what to compare with the published one."""
    der = subprocess.run(["openssl", "pkey", "-pubin", "-in", pub, "-outform", "DER"], capture_output=True, check=False)
    if der.returncode != 0 or not der.stdout:
        raise Failure(f"{pub}: not a PEM public key")
    return sha256(der.stdout)


def sign(key, data):
    out = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=data, capture_output=True, check=True)
    return base64.b64encode(out.stdout).decode()


def signed(pub, data, signature):
    """Whether `signature` (base64 DER) is the key's signature of `data`."""
    try:
        der = base64.b64decode(signature.strip(), validate=True)
    except ValueError:
        return False
    with tempfile.NamedTemporaryFile() as f:
        f.write(der)
        f.flush()
        r = subprocess.run(
            ["openssl", "dgst", "-sha256", "-verify", pub, "-signature", f.name],
            input=data,
            capture_output=True,
            check=False,
        )
    return r.returncode == 0


def pae(payload_type, payload):
    """DSSE's pre-authentication encoding: what the envelope's signature is over."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


# --- SBOM of the image ------------------------------------------------------------------------


def crates(triple):
    """The crates linked into the operator's binary for a Rust target: cargo metadata's normal
    dependencies of event-series on that platform, proc macros (and what only they use) left out."""
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", triple],
        capture_output=True,
        cwd=ROOT,
        check=True,
    )
    meta = json.loads(out.stdout)
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = next(i for i, p in packages.items() if p["name"] == "event-series" and p["source"] is None)
    seen, todo = set(), [root]
    while todo:
        for dep in nodes[todo.pop()]["deps"]:
            normal = any(k["kind"] is None for k in dep["dep_kinds"])
            macro = any("proc-macro" in t["kind"] for t in packages[dep["pkg"]]["targets"])
            if normal and not macro and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    return sorted((packages[i] for i in seen), key=lambda p: (p["name"], p["version"]))


def crate_component(p):
    c = {"type": "library", "bom-ref": f"pkg:cargo/{p['name']}@{p['version']}", "name": p["name"]}
    c["version"] = p["version"]
    if p["source"] and p["source"].startswith("registry+"):
        c["purl"] = c["bom-ref"]
    if p.get("license"):
        c["licenses"] = [{"expression": p["license"]}]
    return c


def image_sbom(path, tag, with_crates=True):
    """A CycloneDX 1.5 SBOM of the image in the archive: the index, each platform's manifest, the files
    of its layers with their hashes, and the crates compiled into its binary."""
    digest, platforms = check_image(path)
    hexa = digest.split(":")[1]
    purl = f"pkg:oci/event-series@sha256%3A{hexa}?repository_url={REPOSITORY.replace('/', '%2F')}"
    components, deps, by_ref = [], [], {}
    for platform, (manifest, config, files) in sorted(platforms.items()):
        os_, arch = platform.split("/")
        ref = f"image/{platform}"
        components.append(
            {
                "type": "container",
                "bom-ref": ref,
                "name": REPOSITORY,
                "version": manifest,
                "purl": f"pkg:oci/event-series@{manifest.replace(':', '%3A')}?arch={arch}&os={os_}",
                "hashes": [{"alg": "SHA-256", "content": manifest.split(":")[1]}],
                "properties": [
                    {"name": "oci:platform", "value": platform},
                    {"name": "oci:config.user", "value": config.get("config", {}).get("User", "")},
                ],
            }
        )
        file_refs = []
        for name, data in sorted(files.items()):
            file_ref = f"{ref}:{name}"
            file_refs.append(file_ref)
            components.append(
                {
                    "type": "file",
                    "bom-ref": file_ref,
                    "name": name,
                    "hashes": [{"alg": "SHA-256", "content": sha256(data)}],
                }
            )
            if name == "/event-series" and with_crates:
                linked = [crate_component(p) for p in crates(PLATFORMS[platform][0])]
                for c in linked:
                    by_ref[c["bom-ref"]] = c
                deps.append({"ref": file_ref, "dependsOn": [c["bom-ref"] for c in linked]})
        deps.append({"ref": ref, "dependsOn": file_refs})
    deps.insert(0, {"ref": "image", "dependsOn": [f"image/{p}" for p in sorted(platforms)]})
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, purl)}",
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "event-series hack/release.py"}]},
            "component": {
                "type": "container",
                "bom-ref": "image",
                "name": REPOSITORY,
                "version": tag.rpartition(":")[2],
                "purl": purl,
                "hashes": [{"alg": "SHA-256", "content": hexa}],
            },
        },
        "components": components + [by_ref[r] for r in sorted(by_ref)],
        "dependencies": deps,
    }


# --- krew -------------------------------------------------------------------------------------

KREW = """apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: series
spec:
  version: v{version}
  homepage: {homepage}
  shortDescription: Show event loops as series, with count, state and rate
  description: |
    Lists the series objects event-series writes (one events.k8s.io Event per loop of
    isomorphic events): object, reason, count, Ongoing or Finished, when it started and was
    last seen, and its rate; with -n/-A, --state, -l, --for, -o wide|json|yaml and --watch.
    Needs event-series running in the cluster.
  platforms:
"""
KREW_PLATFORM = """    - selector:
        matchLabels:
          os: {os}
          arch: {arch}
      uri: {url}/{file}
      sha256: {sha}
      bin: kubectl-series
"""


def plugin_archives(dist):
    """{file: (os, arch)} of the kubectl plugin archives in dist (kubectl-series-vV-OS-ARCH.tar.gz)."""
    out = {}
    for f in files_of(dist):
        if f.startswith("kubectl-series-") and f.endswith(".tar.gz"):
            os_, arch = f[: -len(".tar.gz")].split("-")[-2:]
            out[f] = (os_, arch)
    return out


def krew(dist, version, url):
    text = KREW.format(version=version, homepage=HOMEPAGE)
    for f, (os_, arch) in sorted(plugin_archives(dist).items()):
        text += KREW_PLATFORM.format(os=os_, arch=arch, url=url, file=f, sha=sha256(read(os.path.join(dist, f))))
    return text


# --- attest: sign and state how it was built ---------------------------------------------------


def materials():
    """What the release was built from: the commit (and whether the tree had changes), Cargo.lock,
    and the toolchain."""
    commit = command("git", "rev-parse", "HEAD")
    dirty = bool(command("git", "status", "--porcelain", "--untracked-files=no"))
    rustc = command("rustc", "-vV")
    sysroot = command("rustc", "--print", "sysroot")
    rustc_bin = os.path.join(sysroot, "bin", "rustc")
    deps = [
        {"uri": f"git+{HOMEPAGE}", "digest": {"gitCommit": commit}, "annotations": {"uncommittedChanges": dirty}},
        {"name": "Cargo.lock", "digest": {"sha256": sha256(read(os.path.join(ROOT, "Cargo.lock")))}},
    ]
    if os.path.exists(rustc_bin):
        deps.append(
            {
                "name": "rustc",
                "digest": {"sha256": sha256(read(rustc_bin))},
                "annotations": {"version": rustc.split("\n")},
            }
        )
    tools = {
        "rustc": rustc.split("\n")[0],
        "cargo": command("cargo", "--version"),
        "buildah": command("buildah", "--version"),
        "aarch64-linux-gnu-gcc": command("aarch64-linux-gnu-gcc", "--version").split("\n")[0],
        "zig": command("zig", "version"),
    }
    return deps, {k: v for k, v in tools.items() if v}


def statement(dist, index_digest, tag, params, started):
    """The in-toto statement: every file of dist (the meta files aside) and the image index, built by
    hack/release.sh from the materials."""
    subjects = [
        {"name": f, "digest": {"sha256": sha256(read(os.path.join(dist, f)))}} for f in files_of(dist) if f not in META
    ]
    subjects.append({"name": tag.rpartition(":")[0], "digest": {"sha256": index_digest.split(":")[1]}})
    deps, tools = materials()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "_type": STATEMENT,
        "subject": subjects,
        "predicateType": SLSA,
        "predicate": {
            "buildDefinition": {
                "buildType": f"{HOMEPAGE}/blob/main/docs/RELEASE.md#provenance",
                "externalParameters": dict(params, tag=tag),
                "internalParameters": {"tools": tools, "rustflags": "-C target-feature=+crt-static"},
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": f"{HOMEPAGE}/blob/main/hack/release.sh"},
                "metadata": {"invocationId": str(uuid.uuid4()), "startedOn": started or now, "finishedOn": now},
            },
        },
    }


def image_payload(tag, digest):
    """What `cosign sign` signs for an image (its "simple signing" payload): the index digest under the
    repository's name. `cosign attach signature --payload --signature` puts it next to a pushed image."""
    return json.dumps(
        {
            "critical": {
                "identity": {"docker-reference": tag.rpartition(":")[0]},
                "image": {"docker-manifest-digest": digest},
                "type": "cosign container image signature",
            },
            "optional": {"tag": tag.rpartition(":")[2]},
        },
        sort_keys=True,
    ).encode()


def attest(dist, image, tag, key, params, started):
    """Signs dist: the public key, the image payload and its signature, the provenance envelope, then
    SHA256SUMS of every file and its signature."""
    for f in META:
        if os.path.exists(os.path.join(dist, f)):
            os.remove(os.path.join(dist, f))
    digest, _ = check_image(os.path.join(dist, image))
    pub = public_key(key)
    write(os.path.join(dist, PUBKEY), pub)
    keyid = fingerprint(os.path.join(dist, PUBKEY))
    payload = image_payload(tag, digest)
    write(os.path.join(dist, IMAGE_PAYLOAD), payload)
    write(os.path.join(dist, IMAGE_SIG), sign(key, payload))
    body = json.dumps(statement(dist, digest, tag, params, started), sort_keys=True).encode()
    envelope = {
        "payloadType": IN_TOTO,
        "payload": base64.b64encode(body).decode(),
        "signatures": [{"keyid": keyid, "sig": sign(key, pae(IN_TOTO, body))}],
    }
    write(os.path.join(dist, PROVENANCE), json.dumps(envelope) + "\n")
    sums = "".join(f"{sha256(read(os.path.join(dist, f)))}  {f}\n" for f in files_of(dist) if f not in (SUMS, SUMS_SIG))
    write(os.path.join(dist, SUMS), sums)
    write(os.path.join(dist, SUMS_SIG), sign(key, sums.encode()))
    return keyid


# --- verify -----------------------------------------------------------------------------------


class Verifier:
    """Each check of a release directory; every failure is kept, so that one run names all of them."""

    def __init__(self, dist, pub):
        self.dist, self.pub = dist, pub
        self.failures = []
        # The archive's index digest, once the image check read it.
        self.digest = None

    def ok(self, message):
        print(f"verify-release: ok: {message}")

    def fail(self, message):
        self.failures.append(message)
        print(f"verify-release: FAILED: {message}", file=sys.stderr)

    def path(self, name):
        return os.path.join(self.dist, name)

    def text(self, name):
        if not os.path.isfile(self.path(name)):
            raise Failure(f"{name} is missing")
        return read(self.path(name))

    def check(self, step):
        try:
            step()
        except Failure as e:
            self.fail(str(e))

    def sums(self):
        """SHA256SUMS signed by the key, every file listed and as listed, no file left out."""
        sums = self.text(SUMS)
        if not signed(self.pub, sums, self.text(SUMS_SIG).decode(errors="replace")):
            raise Failure(f"{SUMS_SIG}: not a valid signature of {SUMS} by this key (one of the two was changed)")
        listed = {}
        for line in sums.decode(errors="replace").splitlines():
            digest, _, name = line.partition("  ")
            listed[name] = digest
        for name, digest in sorted(listed.items()):
            if not os.path.isfile(self.path(name)):
                self.fail(f"{name}: listed in {SUMS} but missing")
            elif sha256(read(self.path(name))) != digest:
                self.fail(f"{name}: its SHA-256 differs from {SUMS} (the file changed after signing)")
        extra = [f for f in files_of(self.dist) if f not in listed and f not in (SUMS, SUMS_SIG)]
        for name in extra:
            self.fail(f"{name}: not covered by {SUMS}")
        self.ok(f"{SUMS} signed; {len(listed)} files match it")

    def image(self):
        """The image archive: an index of linux/amd64 and linux/arm64, signed, pinned by install.yaml."""
        archives = [f for f in files_of(self.dist) if f.endswith(".oci.tar")]
        if len(archives) != 1:
            raise Failure(f"expected one image archive (*.oci.tar) in {self.dist}, found {archives}")
        digest, platforms = check_image(self.path(archives[0]))
        self.ok(f"{archives[0]}: index {digest} of {', '.join(sorted(platforms))}, each config and binary of its arch")
        self.digest = digest
        payload = self.text(IMAGE_PAYLOAD)
        if not signed(self.pub, payload, self.text(IMAGE_SIG).decode(errors="replace")):
            raise Failure(f"{IMAGE_SIG}: not a valid signature of {IMAGE_PAYLOAD} by this key")
        critical = json.loads(payload).get("critical", {})
        if critical.get("image", {}).get("docker-manifest-digest") != digest:
            raise Failure(f"{IMAGE_PAYLOAD}: signs another image than the archive's index {digest}")
        if critical.get("identity", {}).get("docker-reference") != REPOSITORY:
            raise Failure(f"{IMAGE_PAYLOAD}: signs an image of another repository than {REPOSITORY}")
        self.ok(f"{IMAGE_SIG}: the image {REPOSITORY}@{digest} is signed")
        if f"image: {REPOSITORY}:" not in self.text("install.yaml").decode() or f"@{digest}\n" not in self.text(
            "install.yaml"
        ).decode(errors="replace"):
            raise Failure(f"install.yaml: does not run the image by the index digest {digest}")
        self.ok(f"install.yaml runs {REPOSITORY}@{digest}")

    def provenance(self):
        """The DSSE envelope signed; its statement's subjects are exactly the files and the index."""
        try:
            envelope = json.loads(self.text(PROVENANCE))
            body = base64.b64decode(envelope["payload"], validate=True)
            sigs = [s["sig"] for s in envelope["signatures"]]
        except (ValueError, KeyError, TypeError) as e:
            raise Failure(f"{PROVENANCE}: not a DSSE envelope ({e})") from e
        if envelope.get("payloadType") != IN_TOTO or not any(signed(self.pub, pae(IN_TOTO, body), s) for s in sigs):
            raise Failure(f"{PROVENANCE}: no valid signature of its statement by this key")
        stmt = json.loads(body)
        if stmt.get("_type") != STATEMENT or stmt.get("predicateType") != SLSA:
            raise Failure(f"{PROVENANCE}: not an in-toto statement of SLSA provenance v1")
        subjects = {s["name"]: s["digest"].get("sha256") for s in stmt.get("subject", [])}
        for name in files_of(self.dist):
            if name in META:
                continue
            if name not in subjects:
                self.fail(f"{name}: not a subject of {PROVENANCE}")
            elif sha256(read(self.path(name))) != subjects.pop(name):
                self.fail(f"{name}: its SHA-256 differs from the provenance's subject")
        image = subjects.pop(REPOSITORY, None)
        if self.digest and image != self.digest.split(":")[1]:
            self.fail(f"{PROVENANCE}: its image subject is not the archive's index")
        for name in subjects:
            self.fail(f"{PROVENANCE}: subject {name} is not in {self.dist}")
        deps = stmt["predicate"]["buildDefinition"].get("resolvedDependencies", [])
        commit = next((d["digest"].get("gitCommit") for d in deps if "gitCommit" in d.get("digest", {})), None)
        lock = next((d["digest"].get("sha256") for d in deps if d.get("name") == "Cargo.lock"), None)
        if not commit or not lock:
            raise Failure(f"{PROVENANCE}: names no commit or no Cargo.lock among its materials")
        self.ok(f"{PROVENANCE}: signed; built from commit {commit[:12]}, Cargo.lock {lock[:12]}; subjects match")

    def sboms(self):
        """The crates' SBOM and the image's, the latter about the archive's index."""
        for name in ("event-series.cdx.json", "event-series-image.cdx.json"):
            try:
                bom = json.loads(self.text(name))
            except ValueError as e:
                raise Failure(f"{name}: not JSON ({e})") from e
            if bom.get("bomFormat") != "CycloneDX":
                raise Failure(f"{name}: not a CycloneDX SBOM")
        hashes = (bom.get("metadata") or {}).get("component", {}).get("hashes", [])
        if self.digest and self.digest.split(":")[1] not in [h.get("content") for h in hashes]:
            raise Failure("event-series-image.cdx.json: is not about the archive's index")
        self.ok("event-series.cdx.json (crates) and event-series-image.cdx.json (the index) present")

    def krew(self):
        """Every plugin archive in the krew manifest, with its SHA-256."""
        text = self.text("krew-series.yaml").decode(errors="replace")
        for name in sorted(plugin_archives(self.dist)):
            if f"/{name}\n      sha256: {sha256(read(self.path(name)))}\n" not in text:
                self.fail(f"krew-series.yaml: no entry with the SHA-256 of {name}")
        self.ok(f"krew-series.yaml lists {', '.join('-'.join(p) for p in sorted(plugin_archives(self.dist).values()))}")


def verify(dist, pub):
    if not pub:
        pub = os.path.join(dist, PUBKEY)
        print(f"verify-release: key {pub}, which came with the files: compare its fingerprint with the published one")
    try:
        print(f"verify-release: key fingerprint SHA256:{fingerprint(pub)}")
    except Failure as e:
        print(f"verify-release: FAILED: {e}", file=sys.stderr)
        return 1
    v = Verifier(dist, pub)
    for step in (v.sums, v.image, v.provenance, v.sboms, v.krew):
        v.check(step)
    if v.failures:
        print(f"verify-release: {len(v.failures)} check(s) failed in {dist}", file=sys.stderr)
        return 1
    print(f"verify-release: {dist} verified")
    return 0


# --- a fake release, for the tests ------------------------------------------------------------


def tar_bytes(files, gz=False):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0) if gz else buf.getvalue()


def fake_archive(path, tag):
    """An OCI archive of an index of both platforms whose /event-series is an ELF header alone."""
    blobs, entries = {}, []

    def add(data):
        blobs[sha256(data)] = data
        return {"digest": f"sha256:{sha256(data)}", "size": len(data)}

    for platform, (_, machine, _) in sorted(PLATFORMS.items()):
        os_, arch = platform.split("/")
        elf = b"\x7fELF\x02\x01\x01" + bytes(11) + machine.to_bytes(2, "little") + bytes(44)
        layer = dict(
            add(tar_bytes({"event-series": elf}, gz=True)), mediaType="application/vnd.oci.image.layer.v1.tar+gzip"
        )
        config = {"architecture": arch, "os": os_, "config": {"User": USER, "Entrypoint": ["/event-series"]}}
        config = dict(add(json.dumps(config).encode()), mediaType="application/vnd.oci.image.config.v1+json")
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST, "config": config, "layers": [layer]}
        entries.append(
            dict(add(json.dumps(manifest).encode()), mediaType=MANIFEST, platform={"architecture": arch, "os": os_})
        )
    index = dict(
        add(json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}).encode()), mediaType=INDEX
    )
    index["annotations"] = {"org.opencontainers.image.ref.name": tag}
    files = {f"blobs/sha256/{h}": d for h, d in blobs.items()}
    files["oci-layout"] = b'{"imageLayoutVersion":"1.0.0"}'
    files["index.json"] = json.dumps({"schemaVersion": 2, "manifests": [index]}).encode()
    write(path, tar_bytes(files))
    return index["digest"]


def fake(dist):
    """dist/ as `just release` lays it out, around stub binaries, signed with a new key in dist/../key.pem."""
    tag, version = f"{REPOSITORY}:v0.0.0-test", "0.0.0-test"
    image = f"event-series-v{version}.oci.tar"
    digest = fake_archive(os.path.join(dist, image), tag)
    write(os.path.join(dist, "install.yaml"), f"kind: Deployment\n        image: {tag}@{digest}\n")
    write(os.path.join(dist, "event-series.cdx.json"), json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.5"}))
    sbom = image_sbom(os.path.join(dist, image), tag, with_crates=False)
    write(os.path.join(dist, "event-series-image.cdx.json"), json.dumps(sbom, indent=2))
    write(os.path.join(dist, "completions", "event-series.bash"), "complete -F _event_series event-series\n")
    for platform in PLATFORMS:
        name = f"kubectl-series-v{version}-{platform.replace('/', '-')}.tar.gz"
        write(os.path.join(dist, name), tar_bytes({"kubectl-series": b"stub"}, gz=True))
    write(os.path.join(dist, "krew-series.yaml"), krew(dist, version, "https://example.invalid/v0.0.0-test"))
    key = os.path.join(os.path.dirname(os.path.abspath(dist)), "key.pem")
    subprocess.run(
        ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key],
        check=True,
        capture_output=True,
    )
    attest(dist, image, tag, key, {"version": version, "fake": True}, None)


# --- command line -----------------------------------------------------------------------------


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sbom-image")
    s.add_argument("archive")
    s.add_argument("out")
    s.add_argument("--tag", required=True)
    s.add_argument("--no-crates", action="store_true")
    k = sub.add_parser("krew")
    k.add_argument("dist")
    k.add_argument("--version", required=True)
    k.add_argument("--url", required=True)
    a = sub.add_parser("attest")
    a.add_argument("dist")
    a.add_argument("--image", required=True)
    a.add_argument("--tag", required=True)
    a.add_argument("--key", required=True)
    a.add_argument("--param", action="append", default=[], help="NAME=VALUE, an external parameter of the build")
    a.add_argument("--started", help="when the build started (RFC 3339)")
    v = sub.add_parser("verify")
    v.add_argument("dist")
    v.add_argument("--key", help="the public key to trust (default: DIST/event-series.pub)")
    i = sub.add_parser("image")
    i.add_argument("archive")
    i.add_argument("--extract", help="write each platform's /event-series to DIR/ARCH/event-series")
    f = sub.add_parser("fake")
    f.add_argument("dist")
    args = p.parse_args(argv)
    try:
        if args.cmd == "sbom-image":
            write(args.out, json.dumps(image_sbom(args.archive, args.tag, not args.no_crates), indent=2) + "\n")
        elif args.cmd == "krew":
            write(os.path.join(args.dist, "krew-series.yaml"), krew(args.dist, args.version, args.url))
        elif args.cmd == "attest":
            params = dict(kv.split("=", 1) for kv in args.param)
            keyid = attest(args.dist, args.image, args.tag, args.key, params, args.started)
            print(f"release: signed {args.dist} with the key of fingerprint SHA256:{keyid}", file=sys.stderr)
        elif args.cmd == "verify":
            return verify(args.dist, args.key)
        elif args.cmd == "image":
            digest, platforms = check_image(args.archive)
            for platform, (manifest, _, files) in sorted(platforms.items()):
                print(f"{platform}\t{manifest}")
                if args.extract:
                    out = os.path.join(args.extract, platform.split("/")[1], "event-series")
                    write(out, files["/event-series"])
                    os.chmod(out, 0o755)
            print(f"index\t{digest}")
        elif args.cmd == "fake":
            fake(args.dist)
    except Failure as e:
        print(f"{os.path.basename(sys.argv[0])}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
