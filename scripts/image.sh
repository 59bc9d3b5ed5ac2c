#!/usr/bin/env bash
# Builds the reconciled host image from this checkout, with no base image to pull: a static
# (musl) binary, CA certificates and a non-root user, on an empty root. Writes it as an OCI
# archive and tags it in podman's local storage, and writes the binary's SBOM beside it.
#
#   scripts/image.sh                      # target/oci/reconciled.oci.tar, localhost/reconciled:0.1.0
#   scripts/image.sh --arch arm64         # target/oci/arm64/…, localhost/reconciled:0.1.0-arm64 (cross-built)
#   scripts/image.sh --out DIR            # the archive in DIR instead (relative to the repository)
#   scripts/image.sh --rootfs-only DIR    # only the root filesystem (deploy/Containerfile's build stage)
#   scripts/image.sh --binary PATH        # the image of a binary built already (the test suite's)
#
# The binary is built with cargo's `image` profile (optimised, stripped) for musl. --binary (or
# RECONCILED_IMAGE_BINARY) names one built already instead, for this machine's architecture:
# scripts/test.sh hands over the host binary its test build made, with `cargo auditable`, so the
# suite compiles the host once rather than once more for musl. Such a binary is dynamically
# linked; its shared libraries (as `ldd` lists them) go into the image beside it, at the paths it
# loads them from. Such an image is for tests: the reproducibility below does not hold for it
# (it carries this machine's libraries and a binary built with this checkout's paths). Released
# images are built here, static.
#
# The binary is built with cargo-auditable, so it carries the list of crates compiled into it
# (any scanner that reads the `.dep-v0` section, syft and trivy among them, finds them), and
# auditable2cdx turns that list into a CycloneDX SBOM, reconciled.cdx.json beside the archive:
# the SBOM describes exactly the binary shipped. Both tools are built from crates.io once per
# machine and cached by version (scripts/sbom-tools.sh).
#
# deploy/Containerfile describes the same image; this script builds it by handing podman the
# root filesystem assembled here as the Containerfile's `rootfs` stage, so the Rust build stage
# (which needs a base image) is skipped. File times and the image's date are the last commit's
# (or SOURCE_DATE_EPOCH), modes are fixed, paths are remapped out of the binary and the CA bundle
# is the repository's, so two checkouts of one commit, in any folders, with one toolchain give
# the same image.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
out=""
rootfs_only=""
arch=amd64
prebuilt="${RECONCILED_IMAGE_BINARY:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch="${2:?--arch needs amd64 or arm64}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --rootfs-only) rootfs_only="${2:?--rootfs-only needs a directory}"; shift 2 ;;
    --binary) prebuilt="${2:?--binary needs the path of a reconciled binary}"; shift 2 ;;
    *) echo "image: unknown argument '$1' (try --arch ARCH, --out DIR, --binary PATH or --rootfs-only DIR)" >&2; exit 2 ;;
  esac
done
case "$arch" in
  amd64) target=x86_64-unknown-linux-musl; tag="localhost/reconciled:${version}"; out="${out:-target/oci}" ;;
  arm64) target=aarch64-unknown-linux-musl; tag="localhost/reconciled:${version}-arm64"; out="${out:-target/oci/arm64}" ;;
  *) echo "image: --arch $arch is not one of amd64, arm64" >&2; exit 2 ;;
esac
cache="${RECONCILED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/reconciled}"

step() { printf '\n==> %s\n' "$*" >&2; }
need() {
  command -v "$1" >/dev/null 2>&1 || { echo "image: \`$1\` is not on PATH; $2" >&2; exit 1; }
}
need cargo "install Rust 1.95+ with rustup"
# The CA bundle is pinned in the repository (Debian's ca-certificates 20230311+deb12u1), not the
# build machine's, which changes with its updates; deploy/README.md says how to refresh it.
certs=deploy/ca-certificates.crt
if [ -z "$rootfs_only" ]; then
  need podman "install Debian's podman and runc (apt-get install podman runc)"
fi

# cargo-auditable and auditable2cdx, by version, in the machine's tools folder.
sbom_tools=$(scripts/sbom-tools.sh)
eval "$sbom_tools"

if [ -n "$prebuilt" ]; then
  case "$(uname -m)" in
    x86_64) machine=amd64 ;;
    aarch64) machine=arm64 ;;
    *) machine=$(uname -m) ;;
  esac
  [ "$arch" = "$machine" ] || {
    echo "image: --binary takes a binary built for this machine ($machine), not for --arch $arch; leave --binary out to cross-build one" >&2
    exit 2
  }
  [ -f "$prebuilt" ] && [ -x "$prebuilt" ] || {
    echo "image: --binary $prebuilt is not an executable file; build it first (cargo auditable build -p reconciled)" >&2
    exit 1
  }
  need ldd "install Debian's libc-bin"
  need strip "install Debian's binutils"
  binary=$(realpath "$prebuilt")
else
  # ring (TLS) and mimalloc (the allocator) compile C for the musl target: with musl-gcc, or for
  # arm64 with Debian's cross gcc pointed at the arm64 musl headers and libraries (what musl-gcc
  # does for the machine's own architecture).
  if [ "$arch" = amd64 ]; then
    need musl-gcc "install Debian's musl-tools (apt-get install musl-tools)"
  else
    need aarch64-linux-gnu-gcc "install Debian's cross compiler and arm64 musl (dpkg --add-architecture arm64; apt-get update; apt-get install gcc-aarch64-linux-gnu musl-dev:arm64)"
    specs=/usr/lib/aarch64-linux-musl/musl-gcc.specs
    [ -s "$specs" ] || { echo "image: $specs is missing; install Debian's arm64 musl (dpkg --add-architecture arm64; apt-get update; apt-get install musl-dev:arm64)" >&2; exit 1; }
    mkdir -p "$cache/bin"
    printf '#!/bin/sh\nexec aarch64-linux-gnu-gcc "$@" -specs %s\n' "$specs" > "$cache/bin/aarch64-linux-musl-gcc"
    chmod 0755 "$cache/bin/aarch64-linux-musl-gcc"
    export CC_aarch64_unknown_linux_musl="$cache/bin/aarch64-linux-musl-gcc"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
  fi

  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    step "rustup target add $target (a static binary for an image with no libc)"
    rustup target add "$target"
  fi

  # Reproducible across machines and folders: in panic messages the crates' sources are named
  # /cargo/registry/src/… rather than by this machine's cargo home, and code that build scripts
  # generate (wasmtime's, cranelift's) /target/… rather than by the build tree's path; the
  # workspace's own sources are relative already, and the standard library's /rustc/<commit>/….
  # Set for the target alone, so build scripts and the host's other builds keep their
  # fingerprints.
  cargo_home=$(realpath -m "${CARGO_HOME:-$HOME/.cargo}")
  target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
  triple_env=$(echo "$target" | tr 'a-z-' 'A-Z_')
  export "CARGO_TARGET_${triple_env}_RUSTFLAGS=--remap-path-prefix=$cargo_home/registry/src=/cargo/registry/src --remap-path-prefix=$cargo_home/git/checkouts=/cargo/git/checkouts --remap-path-prefix=$target_dir=/target"

  step "cargo auditable build --profile image --target $target (the host without the embedded control plane)"
  PATH="$(dirname "$CARGO_AUDITABLE"):$PATH" cargo auditable build --profile image --locked --target "$target" \
    -p reconciled --bin reconciled --no-default-features
  binary="$target_dir/$target/image/reconciled"
fi

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
install -m 0755 "$binary" "$rootfs/usr/local/bin/reconciled"
if [ -n "$prebuilt" ]; then
  # Symbols and debug information out, as the `image` profile leaves them (the crate list in
  # `.dep-v0` stays); then the shared libraries it loads and its loader, at the paths it names
  # them by, since the root has no libc of its own.
  strip "$rootfs/usr/local/bin/reconciled"
  while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    install -m 0755 "$(realpath "$lib")" "$rootfs$lib"
  done < <( (ldd "$binary" || true) | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
fi
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

mkdir -p "$out"
step "auditable2cdx (the binary's SBOM, from the crate list it carries)"
"$AUDITABLE2CDX" "$binary" > "$out/reconciled.cdx.json.tmp" || {
  echo "image: $binary carries no crate list to make its SBOM from; build it with cargo auditable (scripts/sbom-tools.sh installs it)" >&2
  exit 1
}
mv "$out/reconciled.cdx.json.tmp" "$out/reconciled.cdx.json"

# Every time in the image (its creation, its files') is the last commit's, or SOURCE_DATE_EPOCH.
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
step "podman build (deploy/Containerfile, its rootfs stage from $rootfs)"
previous=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
# The binary is for $arch whatever the build machine is, and so must the image's config say.
# Nothing in the Containerfile runs, so no emulator is needed for another architecture.
podman build --quiet --layers=false --platform "linux/$arch" --timestamp "$epoch" \
  --build-context "rootfs=$rootfs" \
  --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
  -f deploy/Containerfile -t "$tag" "$rootfs" >/dev/null
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
