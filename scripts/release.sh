#!/usr/bin/env bash
# Publishes the host image as platform teams admit images: one manifest list (an OCI image
# index) of an amd64 and an arm64 image, the list and each image signed with a cosign key-pair
# signature, and each image's CycloneDX SBOM attached to it as an OCI referrer. Prints the list's
# reference pinned by its digest, which is what a Deployment should name.
#
#   RECONCILED_REGISTRY_PASSWORD=… scripts/release.sh --sign-key cosign.key \
#       [--username USER] [--ca-file CA.pem] [--arch amd64,arm64] registry.example/reconciled/host:0.1.0
#
# The key is a PKCS#8 PEM ECDSA P-256 key (openssl genpkey -algorithm EC -pkeyopt
# ec_paramgen_curve:P-256); `cosign verify --key cosign.pub --insecure-ignore-tlog` accepts what
# it signs. Check a release as an admission step would, before running it:
#
#   reconciled verify registry.example/reconciled/host@sha256:… --key cosign.pub \
#       --platform linux/amd64 --platform linux/arm64 --artifact application/vnd.cyclonedx+json
#
# Each image is built by scripts/image.sh (arm64 cross-built: nothing runs under emulation). With
# RECONCILED_IMAGE_BINARY set, image.sh makes the machine's image of that binary instead (the test
# suite's, built already), and --arch can name only the machine's architecture.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: scripts/release.sh --sign-key KEY [--username USER] [--ca-file CA.pem] [--arch amd64,arm64] REGISTRY/REPOSITORY:TAG"
sign_key=""
username=""
ca_file=""
arches=amd64,arm64
reference=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sign-key) sign_key="${2:?--sign-key needs a key file}"; shift 2 ;;
    --username) username="${2:?--username needs a user}"; shift 2 ;;
    --ca-file) ca_file="${2:?--ca-file needs a PEM file}"; shift 2 ;;
    --arch) arches="${2:?--arch needs a comma-separated list}"; shift 2 ;;
    -*) echo "release: unknown option $1 ($usage)" >&2; exit 2 ;;
    *) [ -z "$reference" ] || { echo "release: one reference only ($usage)" >&2; exit 2; }
       reference="$1"; shift ;;
  esac
done
[ -n "$reference" ] && [ -n "$sign_key" ] || { echo "release: $usage" >&2; exit 2; }
case "$reference" in
  *@*) echo "release: $reference is pinned by digest; name a tag to push to" >&2; exit 2 ;;
esac
case "${reference##*/}" in
  *:*) ;;
  *) echo "release: $reference names no tag; write REGISTRY/REPOSITORY:TAG" >&2; exit 2 ;;
esac
[ -r "$sign_key" ] || { echo "release: cannot read the signing key $sign_key" >&2; exit 1; }
if [ -n "$username" ] && [ -z "${RECONCILED_REGISTRY_PASSWORD:-}" ]; then
  echo "release: --username $username needs the password in \$RECONCILED_REGISTRY_PASSWORD" >&2
  exit 1
fi

step() { printf '\n==> %s\n' "$*" >&2; }
command -v openssl >/dev/null 2>&1 || { echo "release: openssl is not on PATH (it derives the public key to verify the release with); install Debian's openssl" >&2; exit 1; }
command -v podman >/dev/null 2>&1 || { echo "release: podman is not on PATH; install Debian's podman and runc" >&2; exit 1; }

work=$(mktemp -d)
list="localhost/reconciled-release-$$"
cleanup() {
  podman manifest rm "$list" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# Options for podman and for `reconciled` that reach the registry as the caller asked.
podman_opts=()
reconciled_opts=()
if [ -n "$ca_file" ]; then
  mkdir -p "$work/certs"
  cp "$ca_file" "$work/certs/ca.crt"
  podman_opts+=(--cert-dir "$work/certs")
  reconciled_opts+=(--ca-file "$ca_file")
fi
if [ -n "$username" ]; then
  podman_opts+=(--creds "$username:$RECONCILED_REGISTRY_PASSWORD")
  reconciled_opts+=(--username "$username")
fi

IFS=, read -r -a arch_list <<< "$arches"
declare -A sbom
for arch in "${arch_list[@]}"; do
  step "the $arch image (scripts/image.sh --arch $arch)"
  archive=$(scripts/image.sh --arch "$arch" --out "target/oci/release/$arch")
  sbom[$arch]="$(dirname "$archive")/reconciled.cdx.json"
done

# The binary the images were made of (RECONCILED_IMAGE_BINARY: built for this machine) signs and
# attaches; else the amd64 image's own when this machine can run it; else a build for the machine.
target_dir="${CARGO_TARGET_DIR:-target}"
reconciled="${RECONCILED_IMAGE_BINARY:-}"
if [ -z "$reconciled" ]; then
  reconciled="$target_dir/x86_64-unknown-linux-musl/image/reconciled"
  if [ "$(uname -m)" != x86_64 ] || [ ! -x "$reconciled" ]; then
    step "cargo build --release (reconciled, to sign and attach)"
    cargo build --quiet --release --locked -p reconciled --bin reconciled --no-default-features
    reconciled="$target_dir/release/reconciled"
  fi
fi

step "podman manifest push (one list, ${arches//,/ and })"
podman manifest create "$list" >/dev/null
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
for arch in "${arch_list[@]}"; do
  tag="localhost/reconciled:$version"
  [ "$arch" = amd64 ] || tag="$tag-$arch"
  podman manifest add "$list" "containers-storage:$tag" >/dev/null
done
podman manifest push --quiet --all --format oci "${podman_opts[@]}" \
  --digestfile "$work/digest" "$list" "docker://$reference"
digest=$(cat "$work/digest")
repository="${reference%:*}"
pinned="$repository@$digest"

step "reconciled sign --recursive (the list and each image)"
"$reconciled" sign --recursive --key "$sign_key" "${reconciled_opts[@]}" "$pinned" >/dev/null

for arch in "${arch_list[@]}"; do
  step "reconciled attach (the $arch image's SBOM)"
  "$reconciled" attach "${reconciled_opts[@]}" "$pinned" --platform "linux/$arch" \
    --artifact-type application/vnd.cyclonedx+json --file "${sbom[$arch]}" \
    --annotation "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    >/dev/null
done

# What an admission step will check, checked before the reference is handed out: the list names
# exactly the platforms built, and it and each image are signed by the key, each with its SBOM.
step "reconciled verify (the list, ${arches//,/ and }, signed, each with its SBOM)"
public="$work/release.pub"
openssl pkey -in "$sign_key" -pubout -out "$public"
platforms=()
for arch in "${arch_list[@]}"; do
  platforms+=(--platform "linux/$arch")
done
verified=$("$reconciled" verify "${reconciled_opts[@]}" "$pinned" --key "$public" "${platforms[@]}" \
  --artifact application/vnd.cyclonedx+json)
listed=$(printf '%s' "${arches//,/, linux/}")
printf '%s\n' "$verified" | grep -q ": an image index of linux/$listed\$" \
  || { echo "release: $pinned does not list exactly linux/$listed:" >&2; echo "$verified" >&2; exit 1; }

echo "release: $pinned (${arches//,/, }), signed, each image with its SBOM, verified" >&2
echo "$pinned"
