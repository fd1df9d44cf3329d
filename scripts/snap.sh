#!/usr/bin/env bash
# scripts/snap.sh DIR REV [PATCH...]: one tree of a device call (scripts/device_session.sh), made
# here: `git archive REV` into DIR (.snap, .snap2, ..: ignored by git, named in the call's
# `carry`), then each PATCH applied with `patch -p1` inside DIR. `git apply` run inside such a
# folder applies paths relative to the enclosing repository and silently skips them (session 26's
# first call ran main against main that way), so every file a patch names must end up different
# from REV's, or this fails. Prints the files that differ.
#   bash scripts/snap.sh .snap HEAD bench/results/<run>/next-x.patch
#   bash scripts/snap.sh .snap2 HEAD
set -euo pipefail
dir=${1:?usage: scripts/snap.sh DIR REV [PATCH...]}
rev=${2:?usage: scripts/snap.sh DIR REV [PATCH...]}
shift 2
patches=()
for p in "$@"; do patches+=("$(realpath "$p")"); done  # from the caller's folder
cd "$(dirname "$0")/.."
case "$dir" in .snap*) ;; *) echo "snap.sh: DIR must be a .snap* folder (ignored by git), not '$dir'" >&2; exit 2 ;; esac
rm -rf "$dir"
mkdir -p "$dir"
git archive "$rev" | tar -x -C "$dir"
for p in "${patches[@]}"; do
  patch -p1 -s -d "$dir" < "$p"
done
status=0
for p in "${patches[@]}"; do
  while read -r f; do
    if git cat-file -e "$rev:$f" 2>/dev/null && git show "$rev:$f" | cmp -s - "$dir/$f"; then
      echo "snap.sh: $f is unchanged in $dir after $(basename "$p")" >&2
      status=1
    else
      echo "$dir: $f differs from $rev"
    fi
  done < <(sed -n 's|^+++ b/||p' "$p")
done
exit $status
