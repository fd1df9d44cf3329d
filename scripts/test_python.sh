#!/usr/bin/env bash
# Builds the Python wheel once, then:
#   1. installs it into a fresh virtual environment with only its required dependencies (numpy)
#      and pytest, checks `import mhc`, `mhc --version` (the console script) and runs the suite
#      there (tests needing ml_dtypes or torch skip by name);
#   2. installs it with the test extras and torch (PyPI) into the test environment and runs the
#      suite again: the torch tests run (MHC_REQUIRE_TORCH=1 makes a missing torch an error), with
#      the operators registered in Python (the wheel, built without torch, has no torch extension);
#   3. builds the torch extension against that torch and runs the suite a third time with the
#      operators registered from C++.
# CPU-only build by default: the Python tests exercise the CUDA path only where a GPU exists,
# and CI has none (MHC_PY_CUDA=ON builds the CUDA backend too). MHC_PY_TORCH=0 skips installing
# torch. pytest's JUnit reports go to build-test/pytest-*.xml (scripts/test.sh counts them).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-test
venv="${MHC_VENV:-$out/venv}"
root="$PWD"
pipq=(-m pip install -q --disable-pip-version-check --no-cache-dir)
mkdir -p "$out"

# The wheel, built once (its CMake build in build-test/py is kept for the next run).
t0=$(date +%s)
python3 -m venv "$out/venv-build"
"$out/venv-build/bin/python" "${pipq[@]}" --upgrade pip
rm -rf "$out/wheel"
"$out/venv-build/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$out/wheel" \
  -C cmake.define.MHC_ENABLE_CUDA="${MHC_PY_CUDA:-OFF}" -C build-dir="$out/py" . > "$out/wheel.log" 2>&1 \
  || { tail -40 "$out/wheel.log"; exit 1; }
wheel="$(ls "$out"/wheel/mhc-*.whl)"
echo "test_python: built $(basename "$wheel") in $(( $(date +%s) - t0 )) s"

# 1. A fresh environment: the wheel and its required dependencies only, plus pytest.
fresh="$out/venv-fresh"
rm -rf "$fresh"
python3 -m venv "$fresh"
"$fresh/bin/python" "${pipq[@]}" "$wheel" pytest
(cd /tmp && "$root/$fresh/bin/python" -c "import mhc, sys; print('test_python: fresh venv imports mhc', mhc.__version__, 'from', mhc.__file__)")
cli_version="$("$fresh/bin/mhc" --version 2>&1 || true)"
py_version="$("$fresh/bin/python" -c "import mhc; print(mhc.__version__)")"
echo "test_python: mhc --version: $cli_version; mhc.__version__: $py_version"
case "$cli_version" in *"$py_version"*) ;; *) echo "test_python: mhc --version does not report $py_version"; exit 1 ;; esac
rc=0
(cd tests/python && MHC_REQUIRE_TORCH=0 "../../$fresh/bin/python" -m pytest -q -p no:cacheprovider \
  --junitxml="../../$out/pytest-minimal.xml" .) || rc=1

# 2. The test environment: test extras (ml_dtypes) and torch.
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" "${pipq[@]}" --upgrade pip
"$venv/bin/python" "${pipq[@]}" --force-reinstall --no-deps "$wheel"
"$venv/bin/python" "${pipq[@]}" "$wheel[test]"
if [ "${MHC_PY_TORCH:-1}" = 1 ] && ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  t0=$(date +%s)
  # PyPI's Linux wheel (it brings the CUDA libraries: about 5 GB installed, 1.5 min here, and
  # about 4 GB of downloads while pip runs; no pip cache is kept). Too little disk is said plainly.
  free_kb=$(df -Pk "$out" | awk 'NR == 2 { print $4 }')
  if [ "${free_kb:-0}" -lt $((10 * 1024 * 1024)) ]; then
    echo "test_python: torch needs about 10 GB of free disk and $out has $((free_kb / 1024)) MB:"
    df -h "$out"
    exit 1
  fi
  "$venv/bin/python" "${pipq[@]}" torch
  echo "test_python: installed torch $("$venv/bin/python" -c "import torch; print(torch.__version__)") in $(( $(date +%s) - t0 )) s"
fi
(cd tests/python && "../../$venv/bin/python" -m pytest -q -p no:cacheprovider --junitxml="../../$out/pytest.xml" .) || rc=1

# 3. The torch operators registered from C++ (issue 16): the torch extension built against this
#    environment's torch (python/torch_ext: one file, ~15 s; no copy of the library), put next to
#    the installed package, and the suite again, now with mhc.torch.BACKEND == "cpp"
#    (MHC_REQUIRE_TORCH_CPP=1 makes the Python fallback an error). Removed afterwards, so step 2
#    of the next run tests the Python registration again.
if "$venv/bin/python" -c "import torch" 2>/dev/null; then
  t0=$(date +%s)
  cmake -S python/torch_ext -B "$out/torch_ext" -DPython_EXECUTABLE="$root/$venv/bin/python" -DMHC_BUILD_TORCH=ON \
    > "$out/torch_ext.log" 2>&1 && cmake --build "$out/torch_ext" -j"$(nproc)" >> "$out/torch_ext.log" 2>&1 \
    || { tail -30 "$out/torch_ext.log"; exit 1; }
  pkgdir="$("$venv/bin/python" -c 'import mhc, os; print(os.path.dirname(mhc.__file__))')"
  cp "$out/torch_ext/_mhc_torch.so" "$pkgdir/"
  echo "test_python: built the torch extension in $(( $(date +%s) - t0 )) s"
  (cd tests/python && MHC_REQUIRE_TORCH_CPP=1 "../../$venv/bin/python" -m pytest -q -p no:cacheprovider \
    --junitxml="../../$out/pytest-torch-cpp.xml" .) || rc=1
  rm -f "$pkgdir/_mhc_torch.so"
fi
exit $rc
