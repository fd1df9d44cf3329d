// src/cpu/simd.hpp - <immintrin.h> for the fast CPU path's AVX2 and AVX-512 code (target
// attributes, chosen at run time: fast.hpp's cpu::isa).
//
// GCC 12's AVX-512 intrinsics pass an undefined vector as the unused merge source of their
// masked builtins, and GCC 12 then warns that it is used uninitialised (GCC bug 105593) wherever
// they are inlined; the warning belongs to the header's lines, so it is silenced for them here.
// Include this before any other header that could include <immintrin.h>.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
