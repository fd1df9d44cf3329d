#!/usr/bin/env python3
"""Static instruction count of a persistent ring kernel's main loop, from its SASS.

For each function in the output of `scripts/sass.sh FILE.cu` (cuobjdump -sass), the loop is the
longest backward branch around the first mbarrier wait (SYNCS.PHASECHK); its "fast path" leaves
out every forward-branched block that holds a CALL (the exact sums' double redo, about one pair
in 500). Session 25 used it to predict the two-vectors-a-thread shapes of post_collapse_kernel
and post_bulk_kernel (instructions a vector, fast path) before running them.

    bash scripts/sass.sh src/cuda/n4/post_bulk_kernel.cu 2>/dev/null | python3 bench/probes/sass_loop_count.py
"""
import collections
import re
import sys

INS = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
TARGET = re.compile(r"BRA (?:!?U?P\d, )?0x([0-9a-f]+)")


def main() -> int:
    text = sys.stdin.read() if len(sys.argv) < 2 else open(sys.argv[1]).read()
    for func in re.split(r"\n\s*Function : ", text)[1:]:
        name = func.split("\n", 1)[0].strip()
        ins = [(int(m.group(1), 16), m.group(2).strip()) for m in map(INS.match, func.splitlines()) if m]
        waits = [a for a, t in ins if "PHASECHK" in t]
        if not waits:
            print(f"{name}: no mbarrier wait")
            continue
        w = min(waits)
        back = [(a, int(m.group(1), 16)) for a, t in ins if (m := TARGET.search(t)) and int(m.group(1), 16) <= w < a]
        if not back:
            print(f"{name}: no loop around the first wait")
            continue
        end, start = max(back)
        body = [(a, t) for a, t in ins if start <= a <= end]
        slow = []
        for a, t in body:
            m = TARGET.search(t)
            if t.startswith("@") and m and 0 < int(m.group(1), 16) - a < 0x800:
                stop = int(m.group(1), 16)
                if any("CALL" in tt for aa, tt in body if a < aa < stop):
                    slow.append((a + 16, stop))
        fast = [(a, t) for a, t in body if not any(s <= a < e for s, e in slow)]
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0] for _, t in fast)
        print(f"{name}\n  loop {len(body)} instructions, fast path {len(fast)}; "
              + ", ".join(f"{op} {n}" for op, n in ops.most_common(8)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
