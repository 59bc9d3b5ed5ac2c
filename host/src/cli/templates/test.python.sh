#!/usr/bin/env bash
# Tests the reconciler's logic with unittest (no cluster, no host).
set -euo pipefail
cd "$(dirname "$0")"
python3 -m unittest -v test_status
