"""The ``mhc`` console script: runs the mhc command line bundled in the wheel (mhc/bin/mhc)."""

import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "mhc")
    if not os.access(exe, os.X_OK):
        sys.exit(f"mhc: no bundled command at {exe} (the package was built with MHC_BUILD_TOOLS=OFF)")
    os.execv(exe, ["mhc"] + sys.argv[1:])


if __name__ == "__main__":
    main()
