#!/usr/bin/env bash
# Installs the tools that give the host binary its SBOM, once per version, into
# ~/.cache/reconciled/tools/<tool>-<version> (or $RECONCILED_TOOLS_DIR/<tool>-<version>), and
# prints their paths as shell assignments:
#
#   eval "$(scripts/sbom-tools.sh)"         # CARGO_AUDITABLE=... AUDITABLE2CDX=...
#   eval "$(scripts/sbom-tools.sh --tests)" # and the environment `cargo auditable test` needs
#
# - cargo-auditable: a drop-in for cargo (`cargo auditable build`, `cargo auditable test`) that
#   embeds the list of crates compiled into each binary in its `.dep-v0` section. It wraps rustc
#   for the workspace's own crates only, so a build with it and one without share every
#   dependency but rebuild the workspace's crates.
# - auditable2cdx: that list as a CycloneDX SBOM.
#
# Both are built from crates.io with `cargo install --locked`; progress goes to stderr. The folder
# is the machine's: RECONCILED_CACHE_DIR (which tests set per test) does not move it.
set -euo pipefail

tests=false
case "${1:-}" in
  "") ;;
  --tests) tests=true ;;
  *) echo "sbom-tools: unknown argument $1 (usage: scripts/sbom-tools.sh [--tests])" >&2; exit 2 ;;
esac
tools="${RECONCILED_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/reconciled/tools}"
command -v cargo >/dev/null 2>&1 || { echo "sbom-tools: cargo is not on PATH; install Rust 1.95+ with rustup" >&2; exit 1; }
mkdir -p "$tools"
# scripts/test.sh and a developer's scripts/image.sh at once would install into the same folder.
if command -v flock >/dev/null 2>&1; then
  exec 8>"$tools/.sbom-tools.lock"
  flock 8
fi

# tool NAME VERSION: the installed binary's path; installed first when missing.
tool() {
  local name=$1 crate_version=$2 root="$tools/$1-$2"
  if [ ! -x "$root/bin/$name" ]; then
    printf '\n==> cargo install %s %s (once per machine, cached in %s)\n' "$name" "$crate_version" "$root" >&2
    # Into a temporary root first: an interrupted install must not look finished.
    rm -rf "$root.tmp"
    CARGO_TARGET_DIR="$tools/.build-sbom" cargo install --quiet --locked --root "$root.tmp" \
      --version "$crate_version" "$name" >&2
    rm -rf "$root"
    mv "$root.tmp" "$root"
  fi
  echo "$root/bin/$name"
}
auditable=$(tool cargo-auditable 0.7.7)
auditable2cdx=$(tool auditable2cdx 0.1.0)
rm -rf "$tools/.build-sbom"

printf 'CARGO_AUDITABLE=%q\n' "$auditable"
printf 'AUDITABLE2CDX=%q\n' "$auditable2cdx"
if $tests; then
  # `cargo auditable` on PATH. It hands its wrapper to cargo in the environment, which the test
  # processes would inherit and pass on to the cargo builds some tests run (new projects,
  # guests): a runner for the host's target runs each test binary without it.
  host_triple=$(rustc -vV | sed -n 's/^host: //p')
  printf 'export PATH=%q\n' "$(dirname "$auditable"):$PATH"
  printf 'export CARGO_TARGET_%s_RUNNER=%q\n' "$(echo "$host_triple" | tr 'a-z-' 'A-Z_')" \
    "env -u RUSTC_WORKSPACE_WRAPPER -u CARGO_AUDITABLE_ORIG_ARGS"
fi
