#!/usr/bin/env python3
"""A model check of broadcast-product.patch's certificate (collapse_vec_one_row), without a GPU.

For n equal streams e, the patch rounds e * S (S = pre0 + pre1 + pre2 + pre3) to bf16 by one fp32
product and an error bound, and takes that bf16 only where both ends of the interval round alike
and are finite ("certified"); otherwise it runs the n-term code (not modelled here: it is the
existing, tested path). This script emulates the patch's fp32 arithmetic exactly, rounding
every operation once as the GPU does, for the two forms the compiler may emit:
  A: s0 = fl(s * e), then lo = fl(s0 - b), hi = fl(s0 + b);
  B: lo = fma(s, e, -b), hi = fma(s, e, b) (the product contracted into the ends).
It requires, for every certified output, that the bf16 equals both the reference's (the float64
chain ((p0 e + p1 e) + p2 e) + p3 e rounded once to bf16, src/cpu/reference.cpp) and the exact
product's rounding. Exact values use fractions; no rounding is left to the host's floats except
where double then float rounding is known to be exact (+, -, * of two floats: 53 >= 2 x 24 + 2).

usage: python3 product_certificate_model.py [samples per family] [seed]
Prints the count of certified and uncertified outputs per input family and exits 1 on any mismatch.
"""

import math
import random
import struct
import sys
from fractions import Fraction

INF = float("inf")


def exponent(f):
    """floor(log2 |f|) of a nonzero Fraction."""
    p, q = abs(f.numerator), f.denominator
    e = p.bit_length() - q.bit_length()
    if (p < (q << e)) if e >= 0 else ((p << -e) < q):
        e -= 1
    return e


def round_frac(f, mant_bits, min_exp=-126, max_exp=127):
    """f rounded to nearest even with mant_bits significand bits and the fp32 exponent range
    (bf16 shares it); +-inf beyond the largest finite value. Returns a Python float."""
    if f == 0:
        return 0.0
    e = max(exponent(f), min_exp)
    q = Fraction(2) ** (e - (mant_bits - 1))
    n = round(f / q)  # Fraction.__round__: half to even
    r = n * q
    if abs(r) >= Fraction(2) ** (max_exp + 1):
        return INF if f > 0 else -INF
    return float(r)


def f32(x):
    """A double rounded to fp32 (nearest even), +-inf on overflow, NaN kept."""
    if x != x or x in (INF, -INF):
        return x
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return INF if x > 0 else -INF


def fma32(a, b, c):
    """fmaf: a * b + c rounded once to fp32 (inputs fp32 values as floats)."""
    for v in (a, b, c):
        if v != v:
            return float("nan")
    if any(v in (INF, -INF) for v in (a, b, c)):
        return f32(a * b + c)  # inf arithmetic: the double result has the right inf / NaN
    return round_frac(Fraction(a) * Fraction(b) + Fraction(c), 24)


def bf16_of_f32(x):
    """__float2bfloat16_rn of an fp32 value: (bits, is_finite)."""
    if x != x:
        return ("nan", False)
    if x in (INF, -INF):
        return (x, False)
    r = round_frac(Fraction(x), 8) if x != 0 else x
    return (r, r not in (INF, -INF))


def bf16_of_frac(f):
    return round_frac(f, 8) if f != 0 else 0.0


def certificate(pre, e, contracted):
    """The patch's fast path for one output: (certified, bf16 value)."""
    s, a = pre[0], abs(pre[0])
    for j in range(1, 4):
        s = f32(s + pre[j])
        a = f32(a + abs(pre[j]))
    err = f32(a * 2.0 ** -20) if a >= 2.0 ** -100 else INF  # exact scaling where a is normal
    s0 = f32(s * e)
    inner = fma32(abs(s0), 2.0 ** -22, 2.0 ** -140)
    b = fma32(abs(e), err, inner)
    if contracted:
        lo, hi = fma32(s, e, -b), fma32(s, e, b)
    else:
        lo, hi = f32(s0 - b), f32(s0 + b)
    lb, hb = bf16_of_f32(lo), bf16_of_f32(hi)
    same = lb[0] == hb[0] and (lb[0] != 0.0 or str(lb[0]) == str(hb[0]))  # -0 and +0 differ in bits
    return same and lb[1] and hb[1], lb[0]


def reference(pre, e):
    v = 0.0
    for j in range(4):
        v += pre[j] * e  # products of an fp32 and a bf16 are exact in double
    if v != v or v in (INF, -INF):
        return v
    return bf16_of_frac(Fraction(v))


def exact(pre, e):
    return bf16_of_frac(Fraction(e) * sum(Fraction(p) for p in pre))


def rand_bf16(rng, lo_exp, hi_exp):
    m = rng.randrange(128, 256)  # 8 significant bits
    x = m * 2.0 ** (rng.randint(lo_exp, hi_exp) - 7)
    return -x if rng.random() < 0.5 else x


def rand_f32(rng, lo_exp, hi_exp, signed=False):
    x = f32(rng.random() * 2.0 ** rng.randint(lo_exp, hi_exp))
    return -x if signed and rng.random() < 0.5 else x


def near_tie(rng):
    """pre and e with e * S within a few fp32 ulps of a bf16 rounding boundary (a midpoint)."""
    e = rand_bf16(rng, -20, 20)
    t = rand_bf16(rng, -20, 20)
    half_ulp = 2.0 ** (math.frexp(t)[1] - 9)  # t = m 2^x, 0.5 <= |m| < 1: a bf16 ulp is 2^(x - 8)
    mid = t + half_ulp * (1 if rng.random() < 0.5 else -1)  # a bf16 midpoint next to t
    S = mid / e
    parts = [rng.random() for _ in range(4)]
    tot = sum(parts)
    pre = [f32(S * w / tot) for w in parts]
    k = rng.randint(-3, 3) if rng.random() < 0.5 else rng.choice((-1, 1)) * rng.randint(4, 1 << rng.randint(3, 12))
    pre[0] = f32(pre[0] + k * abs(pre[0]) * 2.0 ** -24)  # k fp32 ulps of pre[0] off the midpoint, up to 4096
    return pre, e


FAMILIES = {
    # the computed pre: sigmoid + eps in (0, 1 + eps], embeddings of model scale
    "sigmoid_pre": lambda r: ([f32(r.random() + 1e-6) for _ in range(4)], rand_bf16(r, -12, 6)),
    # signed pre of any scale (the carried pre of the exact-sum extremes)
    "signed_wide": lambda r: ([rand_f32(r, -60, 60, True) for _ in range(4)], rand_bf16(r, -60, 60)),
    # cancellation: pre summing to almost zero
    "cancelling": lambda r: (lambda p: (p + [f32(-(p[0] + p[1] + p[2]) * (1 + r.randint(-4, 4) * 2.0 ** -23))],
                                        rand_bf16(r, -10, 10)))([rand_f32(r, -2, 2, True) for _ in range(3)]),
    "near_tie": near_tie,
    # products near fp32 / bf16 overflow and underflow
    "huge": lambda r: ([rand_f32(r, 60, 100) for _ in range(4)], rand_bf16(r, 20, 60)),
    "tiny": lambda r: ([rand_f32(r, -100, -60, True) for _ in range(4)], rand_bf16(r, -60, -20)),
    "subnormal_pre": lambda r: ([f32(r.randint(1, 1 << 20) * 2.0 ** -149) for _ in range(4)], rand_bf16(r, -5, 60)),
}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 42
    rng = random.Random(seed)
    bad = 0
    for name, gen in FAMILIES.items():
        counts = {"certified": 0, "fallback": 0}
        for _ in range(n):
            pre, e = gen(rng)
            ref, ex = reference(pre, e), exact(pre, e)
            for contracted in (False, True):
                ok, v = certificate(pre, e, contracted)
                if not ok:
                    counts["fallback"] += 1
                    continue
                counts["certified"] += 1
                if not (v == ref == ex) or str(v) != str(ref):
                    bad += 1
                    if bad <= 10:
                        print(f"MISMATCH {name} contracted={contracted} pre={pre!r} e={e!r}: "
                              f"certified {v!r}, reference {ref!r}, exact {ex!r}")
        print(f"{name:14s} certified {counts['certified']:7d}  fallback {counts['fallback']:6d}")
    # fixed cases: exact ties, zeros, inf / NaN inputs
    fixed = [([1.0 + 2.0 ** -8, 0.0, 0.0, 0.0], 1.0), ([0.25] * 4, 1.0 + 2.0 ** -7), ([0.0] * 4, 3.0),
             ([-0.0] * 4, 3.0), ([0.5] * 4, INF), ([0.5] * 4, float("nan")), ([f32(3.4e38)] * 4, 2.0 ** 60),
             ([float("nan"), 0.5, 0.5, 0.5], 1.0), ([2.0 ** -101] * 4, 1.0), ([1.0, -1.0, 0.0, 0.0], 5.0)]
    for pre, e in fixed:
        ref = reference(pre, e)
        for contracted in (False, True):
            ok, v = certificate(pre, e, contracted)
            if ok and not (v == ref and str(v) == str(ref) and v == exact(pre, e)):
                bad += 1
                print(f"MISMATCH fixed pre={pre!r} e={e!r} contracted={contracted}: {v!r} against {ref!r}")
            print(f"fixed pre={pre!r} e={e!r} contracted={contracted}: {'certified ' + repr(v) if ok else 'fallback'}")
    print("mismatches:", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
