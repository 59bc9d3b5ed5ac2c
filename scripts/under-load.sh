#!/usr/bin/env bash
# Runs the suite's tests again and again on a loaded machine, to find the tests that fail only
# under load: a busy loop on every core beside them, as a CI machine shared with other builds
# is. Prints each run's failures and a count at the end; exits non-zero if any run failed.
#
#   scripts/under-load.sh                   # 10 runs of `cargo test` (unit and integration)
#   scripts/under-load.sh --runs 3          # fewer
#   scripts/under-load.sh --hogs 0          # without the load
#   scripts/under-load.sh -- rollout::      # a filter (and any other test-binary argument)
#
# Tests run as scripts/test.sh runs them, RECONCILED_TEST_THREADS (4) at a time.
#
# It builds what scripts/test.sh builds for the tests first (the guests, the test binaries, the
# image; cached when built before), so run scripts/test.sh once on a new machine. Each run's
# output is kept in target/under-load/<run>.log (or $CARGO_TARGET_DIR/under-load).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

runs=10
hogs=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="${2:?--runs needs a number}"; shift 2 ;;
    --hogs) hogs="${2:?--hogs needs a number}"; shift 2 ;;
    --) shift; break ;;
    *) echo "under-load: unknown argument $1 (usage: scripts/under-load.sh [--runs N] [--hogs N] [-- TEST ARGS])" >&2; exit 2 ;;
  esac
done

target_dir="${CARGO_TARGET_DIR:-$root/target}"
tests=(--workspace --exclude reconciled-bench --features reconciled/fault-injection)
logs="$target_dir/under-load"
mkdir -p "$logs"

echo "under-load: building the guests, the test binaries and the image (cached when built before)" >&2
RECONCILED_GUEST_WASMS="$(CARGO_TARGET_DIR="$target_dir/wasm-guests" guests/build.sh 2>/dev/null)"
export RECONCILED_GUEST_WASMS
# As scripts/test.sh builds them: with cargo-auditable, the image made of the test build's host.
sbom_tools=$(scripts/sbom-tools.sh --tests)
eval "$sbom_tools"
cargo auditable test "${tests[@]}" --no-run --quiet 2>/dev/null
export RECONCILED_IMAGE_BINARY="$target_dir/debug/reconciled"
RECONCILED_IMAGE="$(scripts/image.sh 2>/dev/null)"
export RECONCILED_IMAGE

pids=()
stop_hogs() {
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
}
trap stop_hogs EXIT
for _ in $(seq 1 "$hogs"); do
  bash -c 'while :; do :; done' &
  pids+=($!)
done
echo "under-load: $runs runs of cargo test beside $hogs busy loops; logs in $logs" >&2

failed_runs=0 failures=0
started=$SECONDS
for run in $(seq 1 "$runs"); do
  log="$logs/$run.log"
  run_started=$SECONDS
  if cargo auditable test "${tests[@]}" --no-fail-fast -- --test-threads "${RECONCILED_TEST_THREADS:-4}" "$@" >"$log" 2>&1; then
    printf 'under-load: run %d of %d passed (%ds)\n' "$run" "$runs" "$((SECONDS - run_started))" >&2
  else
    failed_runs=$((failed_runs + 1))
    # libtest ends a failed binary's output with a "failures:" heading listing each failed test
    # four spaces in, then its "test result:" (an earlier "failures:" heading holds their output).
    names=$(awk '/^failures:$/ {n = 0; list = 1; next}
                 list && /^    [^ ]/ {failed[n++] = $1; next}
                 list && /^test result:/ {for (i = 0; i < n; i++) print failed[i]; list = 0}' "$log" | sort -u)
    count=$(printf '%s' "$names" | grep -c . || true)
    [ "$count" -gt 0 ] || count=1
    failures=$((failures + count))
    printf 'under-load: run %d of %d FAILED (%ds): %s\n' "$run" "$runs" "$((SECONDS - run_started))" \
      "${names:-no test named; see $log}" | tr '\n' ' ' >&2
    echo >&2
  fi
done
printf 'under-load: %d failed tests in %d of %d runs, %d min in all\n' "$failures" "$failed_runs" "$runs" \
  "$(((SECONDS - started) / 60))" >&2
[ "$failed_runs" -eq 0 ]
