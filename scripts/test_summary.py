#!/usr/bin/env python3
"""The closing lines of scripts/test.sh, from the JUnit reports of its test runs.

usage: test_summary.py --ctest CTEST.xml --gpu-tests NAMES.txt [--pytest PYTEST.xml ...]
                       [--passed NAME ...] [--gpu-present]

CTEST.xml is `ctest --output-junit`, NAMES.txt the ctest names labelled `gpu` (one a line),
each PYTEST.xml `pytest --junitxml`; --passed counts a check that is not a test runner (the
installed-package consumer) as one passed test. A skipped test is a GPU test skipped for lack
of a GPU when there is no GPU here and it is a ctest `gpu` test, or a pytest test whose skip
reason names CUDA or a GPU. Prints the failed tests, a line on what was skipped, then
'tests: N passed, N failed, N skipped'. Exit status 1 when a test failed or no test ran.
"""

import argparse
import re
import sys
import xml.etree.ElementTree as ET

GPU_REASON = re.compile(r"cuda|gpu", re.IGNORECASE)


def cases(path):
    """(name, outcome, skip message) of every test case of a JUnit file (ctest or pytest)."""
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        if case.get("classname") and case.get("classname") != name:
            name = "%s::%s" % (case.get("classname"), name)
        if case.find("failure") is not None or case.find("error") is not None or case.get("status") == "fail":
            yield name, "failed", ""
        elif case.find("skipped") is not None:
            yield name, "skipped", case.find("skipped").get("message", "")
        else:
            yield name, "passed", ""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ctest", required=True)
    p.add_argument("--gpu-tests", required=True)
    p.add_argument("--pytest", action="append", default=[])
    p.add_argument("--passed", action="append", default=[])
    p.add_argument("--gpu-present", action="store_true")
    a = p.parse_args(argv)

    with open(a.gpu_tests) as f:
        gpu_names = {line.strip() for line in f if line.strip()}
    count = {"passed": len(a.passed), "failed": 0, "skipped": 0}
    gpu_skipped = 0
    failed = []
    for source, is_gpu_skip in [(a.ctest, lambda name, msg: name in gpu_names)] + \
                               [(x, lambda name, msg: bool(GPU_REASON.search(msg))) for x in a.pytest]:
        for name, outcome, msg in cases(source):
            count[outcome] += 1
            if outcome == "failed":
                failed.append(name)
            elif outcome == "skipped" and not a.gpu_present and is_gpu_skip(name, msg):
                gpu_skipped += 1
    for name in failed[:40]:
        print("FAILED %s" % name)
    ran = count["passed"] + count["failed"]
    print("test.sh: %d tests ran (ctest, the package consumer, pytest), %d skipped: %d GPU tests "
          "for lack of a GPU, %d others" % (ran, count["skipped"], gpu_skipped, count["skipped"] - gpu_skipped))
    print("tests: %d passed, %d failed, %d skipped" % (count["passed"], count["failed"], count["skipped"]))
    return 1 if count["failed"] or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
