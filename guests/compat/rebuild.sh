#!/usr/bin/env bash
# Rebuilds the guest kept for one released reconciled:runtime version from the commit its
# provenance names, and says whether the bytes match the committed component.
#
#   guests/compat/rebuild.sh 0.1.1            # rebuild in a temporary worktree; compare digests
#   guests/compat/rebuild.sh 0.1.1 --write    # and replace stamp.wasm and its recorded digest
#
# Not part of the test suite: the suite loads the committed components, which is the point. A
# module built yesterday must run on today's host, and what proves it is yesterday's module, not
# today's compiler rebuilding yesterday's sources. Run this when a version ships (to add the
# version before it) or to audit a kept component.
#
# provenance.toml names, in `key = "value"` lines:
#   commit   the commit whose tree the guest was built from (must be in this clone's history)
#   dir      the folder of that tree to build in
#   command  the build command, run in `dir`
#   output   the component the command writes, relative to CARGO_TARGET_DIR
#   rustc    the compiler that built it (`rustc --version`)
#   sha256   the component's digest (empty for a version being added: --write fills it in)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="${1:?usage: guests/compat/rebuild.sh VERSION [--write]}"
write=false
case "${2:-}" in
  "") ;;
  --write) write=true ;;
  *) echo "rebuild: unknown argument $2 (usage: guests/compat/rebuild.sh VERSION [--write])" >&2; exit 2 ;;
esac
kept="$here/$version"
[ -f "$kept/provenance.toml" ] || { echo "rebuild: no $kept/provenance.toml; versions kept: $(ls "$here" | grep -E '^[0-9]' | tr '\n' ' ')" >&2; exit 1; }

field() { sed -n "s/^$1 = \"\(.*\)\"$/\1/p" "$kept/provenance.toml"; }
commit=$(field commit) dir=$(field dir) command=$(field command) output=$(field output)
recorded=$(field sha256) rustc_was=$(field rustc)
for f in commit dir command output; do
  [ -n "$(field $f)" ] || { echo "rebuild: $kept/provenance.toml has no $f" >&2; exit 1; }
done
git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null \
  || { echo "rebuild: commit $commit is not in this clone's history; fetch it, or clone without --depth" >&2; exit 1; }

tree=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree/src" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git -C "$root" worktree add --quiet --detach "$tree/src" "$commit"
rustc_now=$(rustc --version)
[ "$rustc_now" = "$rustc_was" ] || echo "rebuild: $rustc_now here, $rustc_was then: the bytes may differ" >&2
echo "rebuild: $version from $commit:$dir: $command" >&2
(cd "$tree/src/$dir" && CARGO_TARGET_DIR="$tree/target" bash -c "$command" >&2)
built="$tree/target/$output"
digest=$(sha256sum "$built" | cut -d' ' -f1)
if [ "$digest" = "$recorded" ]; then
  echo "rebuild: $version reproduced: sha256:$digest" >&2
elif $write; then
  install -m 0644 "$built" "$kept/stamp.wasm"
  sed -i "s/^sha256 = \".*\"$/sha256 = \"$digest\"/; s/^rustc = \".*\"$/rustc = \"$rustc_now\"/" "$kept/provenance.toml"
  echo "rebuild: $version rewritten: sha256:$digest (was sha256:$recorded)" >&2
else
  echo "rebuild: $version differs: built sha256:$digest, kept sha256:$recorded (--write replaces it)" >&2
  exit 1
fi
