#!/usr/bin/env bash
# Builds and installs the Python package into a private virtual environment, then runs the
# Python tests (pytest). CPU-only build by default: the Python tests exercise the CUDA path
# only where a GPU exists, and CI has none (MHC_PY_CUDA=ON builds the CUDA backend too).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${MHC_VENV:-build-test/venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  -C cmake.define.MHC_ENABLE_CUDA="${MHC_PY_CUDA:-OFF}" -C build-dir=build-test/py ".[test]"
cd tests/python && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider .
