#!/usr/bin/env bash
# scripts/ci_fresh.sh [REV]: `.ci/run` on a fresh clone of this repository at REV (default HEAD:
# committed work only), as CI runs it on a fresh machine. The clone (about 6 GB once built, with
# torch) is deleted afterwards, pass or fail: a session's leftover clones once filled the disk
# that CI's torch step needs (bench/results/2026-12-05-nodevice-s39). Writes the run's output to
# $MHC_CI_LOG (default /tmp/mhc-ci.log), prints its last lines and exits with its status.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
log=${MHC_CI_LOG:-/tmp/mhc-ci.log}
dir=$(mktemp -d /tmp/mhc-ci.XXXXXX)
trap 'rm -rf "$dir"' EXIT
git clone -q . "$dir/repo"
git -C "$dir/repo" checkout -q "$rev"
rc=0
(cd "$dir/repo" && bash .ci/run) > "$log" 2>&1 || rc=$?
tail -3 "$log"
echo "ci_fresh: $rev rc=$rc (log: $log)"
exit "$rc"
