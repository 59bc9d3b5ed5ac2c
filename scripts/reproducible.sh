#!/usr/bin/env bash
# Checks that the amd64 image is reproducible: two clean clones of HEAD, in two folders of
# different names and depths, each build the image with scripts/image.sh, and the two image IDs
# (config digests, which name every layer's digest) must be the same. The clones share one build
# tree (CARGO_TARGET_DIR, else a new one), where cargo keeps each clone's own crates apart (their
# paths differ) and reuses the registry's crates, whose paths do not: what it proves is that the
# checkout's folder leaves no trace. Not part of scripts/test.sh: it builds the host crate twice
# in release (about 15 minutes on two cores with the dependencies built).
#
#   scripts/reproducible.sh            # prints both digests; exits 1 if they differ
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s (%ds)\n' "$*" "$SECONDS" >&2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-$work/target}")
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
a="$work/a"
b="$work/elsewhere/b-with-a-longer-name"
ids=()
for dir in "$a" "$b"; do
  step "clone HEAD into $dir and build its image"
  mkdir -p "$(dirname "$dir")"
  git clone --quiet --no-local . "$dir"
  (cd "$dir" && CARGO_TARGET_DIR="$target_dir" scripts/image.sh --out "target/oci" >/dev/null)
  ids+=("$(podman image inspect --format '{{.Id}}' "localhost/reconciled:$version")")
  cp "$target_dir/x86_64-unknown-linux-musl/image/reconciled" "$work/$(basename "$dir").bin"
  sha256sum "$work/$(basename "$dir").bin" >&2
done
echo "image from $a: sha256:${ids[0]}"
echo "image from $b: sha256:${ids[1]}"
if [ "${ids[0]}" != "${ids[1]}" ]; then
  cmp "$work/a.bin" "$work/b-with-a-longer-name.bin" >&2 || true
  echo "reproducible: the two clones built different images" >&2
  exit 1
fi
echo "reproducible: the same image from both clones" >&2
