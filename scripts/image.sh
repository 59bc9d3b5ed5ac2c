#!/usr/bin/env bash
# Builds the reconciled host image from this checkout, with no base image to pull: a static
# (musl) binary, CA certificates and a non-root user, on an empty root. Writes it as an OCI
# archive and tags it in podman's local storage.
#
#   scripts/image.sh                      # target/oci/reconciled.oci.tar, localhost/reconciled:0.1.0
#   scripts/image.sh --out DIR            # the archive in DIR instead (relative to the repository)
#   scripts/image.sh --rootfs-only DIR    # only the root filesystem (deploy/Containerfile's build stage)
#
# deploy/Containerfile describes the same image; this script builds it by handing podman the
# root filesystem assembled here as the Containerfile's `rootfs` stage, so the Rust build stage
# (which needs a base image) is skipped. File times and the image's date are the last commit's
# (or SOURCE_DATE_EPOCH) and modes are fixed, so rebuilding one checkout with one toolchain
# gives the same image. Across machines the binary can differ (it embeds the cargo registry's
# path in panic locations) and so can the CA bundle, which is the build machine's.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-musl
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
tag="localhost/reconciled:${version}"
out=target/oci
rootfs_only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --rootfs-only) rootfs_only="${2:?--rootfs-only needs a directory}"; shift 2 ;;
    *) echo "image: unknown argument '$1' (try --out DIR or --rootfs-only DIR)" >&2; exit 2 ;;
  esac
done

step() { printf '\n==> %s\n' "$*" >&2; }
need() {
  command -v "$1" >/dev/null 2>&1 || { echo "image: \`$1\` is not on PATH; $2" >&2; exit 1; }
}
need cargo "install Rust 1.95+ with rustup"
# ring (TLS) and mimalloc (the allocator) compile C for the musl target with musl-gcc.
need musl-gcc "install Debian's musl-tools (apt-get install musl-tools)"
certs=/etc/ssl/certs/ca-certificates.crt
[ -s "$certs" ] || { echo "image: $certs is missing; install Debian's ca-certificates (apt-get install ca-certificates)" >&2; exit 1; }
if [ -z "$rootfs_only" ]; then
  need podman "install Debian's podman and runc (apt-get install podman runc)"
fi

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  step "rustup target add $target (a static binary for an image with no libc)"
  rustup target add "$target"
fi

step "cargo build --profile image --target $target (the host without the embedded control plane)"
cargo build --profile image --locked --target "$target" -p reconciled --bin reconciled --no-default-features

# The root filesystem. Modes are set explicitly so that the umask of whoever builds does not
# change the digest; podman's --timestamp does the same for times.
rootfs="${rootfs_only:-$out/rootfs}"
# Emptied first, so refuse anything that is not empty or an earlier root filesystem of ours.
if [ -d "$rootfs" ] && [ -n "$(ls -A "$rootfs")" ] && [ ! -e "$rootfs/usr/local/bin/reconciled" ]; then
  echo "image: $rootfs is neither empty nor a root filesystem this script made; name another directory" >&2
  exit 1
fi
rm -rf "$rootfs"
mkdir -p "$rootfs"/usr/local/bin "$rootfs"/etc/ssl/certs "$rootfs"/etc/reconciled \
  "$rootfs"/var/cache/reconciled
install -m 0755 "${CARGO_TARGET_DIR:-target}/$target/image/reconciled" "$rootfs/usr/local/bin/reconciled"
install -m 0644 "$certs" "$rootfs/etc/ssl/certs/ca-certificates.crt"
# The user the Deployment's securityContext names (runAsUser 65532); a name for it makes logs
# and `ps` in a debug container readable. No shell, no home.
printf 'root:x:0:0:root:/root:/sbin/nologin\nreconciled:x:65532:65532:reconciled:/nonexistent:/sbin/nologin\n' \
  > "$rootfs/etc/passwd"
printf 'root:x:0:\nreconciled:x:65532:\n' > "$rootfs/etc/group"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
find "$rootfs" -type d -exec chmod 0755 {} +
if [ -n "$rootfs_only" ]; then
  exit 0
fi

# Every time in the image (its creation, its files') is the last commit's, or SOURCE_DATE_EPOCH.
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
step "podman build (deploy/Containerfile, its rootfs stage from $rootfs)"
previous=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
# The binary is x86_64 whatever the build machine is, and so must the image's config say.
podman build --quiet --layers=false --platform linux/amd64 --timestamp "$epoch" \
  --build-context "rootfs=$rootfs" \
  --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
  -f deploy/Containerfile -t "$tag" "$rootfs" >/dev/null
mkdir -p "$out"
rm -f "$out/reconciled.oci.tar"
podman save --quiet --format oci-archive -o "$out/reconciled.oci.tar" "$tag"

# What a platform team wants to know before loading it: size, digest, contents.
config=$(podman image inspect --format '{{.Id}}' "$tag")
if [ -n "$previous" ] && [ "$previous" != "$config" ]; then
  # The build it replaces, untagged now; kept if a container still uses it.
  podman rmi "$previous" >/dev/null 2>&1 || true
fi
size=$(podman image inspect --format '{{.Size}}' "$tag")
archive=$(stat -c %s "$out/reconciled.oci.tar")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
{
  echo "image: $tag, image ID (config digest) sha256:$config"
  echo "image: $(mb "$size") unpacked, $(mb "$archive") as $out/reconciled.oci.tar (layers gzipped)"
  echo "image: contents:"
  (cd "$rootfs" && find . -type f -printf '  %M %s\t%p\n' | sort -k3)
} >&2
realpath "$out/reconciled.oci.tar"
