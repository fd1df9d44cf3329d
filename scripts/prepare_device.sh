#!/usr/bin/env bash
# Run HERE (not on the GPU machine) before a device call: the GPU machine's image has no
# GoogleTest, so its sources (Debian's googletest package) travel as .deps/googletest, an
# ignored folder that the device call must name in `carry`. Then, on the device:
#   bash scripts/device.sh test run sanitize bench
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d /usr/src/googletest ]; then
  bash scripts/setup.sh   # installs googletest (libgtest-dev pulls in the sources)
fi
mkdir -p .deps
rm -rf .deps/googletest
cp -r /usr/src/googletest .deps/googletest
# CLI11 (header-only): the image has no package of it either.
[ -f /usr/include/CLI/CLI.hpp ] || bash scripts/setup.sh
rm -rf .deps/cli11 && mkdir -p .deps/cli11 && cp -r /usr/include/CLI .deps/cli11/CLI
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
echo "prepared .deps/googletest: carry [\".deps\"] in the device call"
