"""``exp`` and ``log`` of a float64 in plain arithmetic, so that a numba loop
calling them vectorises.

``vexp`` and ``vlog`` are additions, multiplications, one division, integer bit
operations and selects only, inlined into the caller (``inline="always"``), so
LLVM vectorises the loop around them with no fastmath flag (numba compiles
``np.exp`` and ``np.log`` to libm calls, which keep a loop scalar). Measured within
0.67 ulp (``vexp``) and 0.68 ulp (``vlog``) of the exact value, special values as
numpy's (``tests/test_vecmath.py``). Beside them ``extremes`` (the largest and
smallest entries, NaN if any is) and the squared row norms of a data set read
in chunks (``row_sq_norms``, ``max_row_sq_norm``).

Inlined code is compiled into each caller: a caller cached with ``cache=True``
in another module keeps the version it was compiled with until its own source
file changes (numba's cache looks at the caller's file only).

Derivation: docs/algorithms.md, "Shared numerics".
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# ---------------------------------------------------------------------------
# bit-casts and a division without numba's zero check
# ---------------------------------------------------------------------------


@intrinsic
def _as_int64(typingctx, x):
    """The bits of a float64 as an int64 (a bit-cast, no conversion)."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def _as_float64(typingctx, x):
    """The float64 whose bits are the int64 ``x`` (a bit-cast, no conversion)."""
    if x != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def _fdiv(typingctx, a, b):
    """``a / b`` for float64 as the bare IEEE division: the inlined code then has
    no zero-division branch even in a caller with ``error_model="python"``,
    which would stop the loop from vectorising."""
    if a != types.float64 or b != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.fdiv(args[0], args[1])

    return types.float64(types.float64, types.float64), codegen


# ---------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------

#: ln 2 = _LN2_HI + _LN2_LO; _LN2_HI has 32 significant bits, so k * _LN2_HI is
#: exact for |k| < 2**21 (here |k| <= 1077)
_LN2_HI = float.fromhex("0x1.62e42fee00000p-1")
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
_INV_LN2 = 1.4426950408889634
#: 1.5 * 2**52: t = y + _ROUND rounds y (|y| < 2**51) to an integer k, and
#: bits(t) - bits(_ROUND) is k; the same constant turns an int64 back into a float
_ROUND = 6755399441055744.0
_ROUND_BITS = 0x4338000000000000
#: exp clamps its argument to [-746, 710], beyond both ends of the finite and
#: nonzero results (log(2**1024) = 709.78, log(2**-1075) = -745.13)
_EXP_LOW = -746.0
_EXP_HIGH = 710.0
#: 1/j!, j = 3..13
_E3, _E4, _E5, _E6, _E7, _E8, _E9, _E10, _E11, _E12, _E13 = (
    1.0 / math.factorial(j) for j in range(3, 14))
#: 2/(2j+1), j = 1..10: log(m) = 2s + s R, R = sum_j 2 s**(2j) / (2j+1)
_L1, _L2, _L3, _L4, _L5, _L6, _L7, _L8, _L9, _L10 = (
    2.0 / (2 * j + 1) for j in range(1, 11))
#: bits of sqrt(1/2): subtracting them puts the exponent boundary at sqrt(1/2)
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD
_TWO52 = 4503599627370496.0
_MIN_NORMAL = 2.2250738585072014e-308
#: clears the low 28 bits of a float64: 25 significant bits remain
_HIGH25 = -0x10000000
_ABS_BITS = 0x7FFFFFFFFFFFFFFF
_INF = math.inf
_NAN = math.nan

# ---------------------------------------------------------------------------
# exp and log
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy", inline="always")
def vexp(x):  # pragma: no cover - compiled
    """``exp(x)`` of a float64, within 0.67 ulp of the exact value (0.78 units
    of ``2**-1074`` for subnormal results; measured); special values as ``np.exp``.
    Inlined into numba callers, whose loops over it vectorise."""
    xc = x if x > _EXP_LOW else _EXP_LOW  # nan -> _EXP_LOW, restored at the end
    xc = xc if xc < _EXP_HIGH else _EXP_HIGH
    t = xc * _INV_LN2 + _ROUND
    kf = t - _ROUND
    k = _as_int64(t) - _ROUND_BITS
    a = xc - kf * _LN2_HI  # exact (Sterbenz)
    b = kf * _LN2_LO
    r = a - b
    r_err = (a - r) - b  # r + r_err = a - b to about 2**-105 relative
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    # exp(r) - 1 - r, Taylor to r**13, Estrin's scheme
    q = r2 * ((0.5 + r * _E3) + r2 * (_E4 + r * _E5)
              + r4 * ((_E6 + r * _E7) + r2 * (_E8 + r * _E9))
              + r8 * ((_E10 + r * _E11) + r2 * (_E12 + r * _E13)))
    hi = 1.0 + r
    lo = (1.0 - hi) + r  # 1 + r = hi + lo exactly
    # exp(r + r_err) = exp(r) (1 + r_err) to first order, and exp(r) ~ 1 + r
    p = hi + (lo + (q + (r_err + r_err * r)))
    h = k >> 1
    y = p * _as_float64((h + 1023) << 52) * _as_float64((k - h + 1023) << 52)
    return y if x == x else x


@njit(cache=True, error_model="numpy", inline="always")
def vlog(x):  # pragma: no cover - compiled
    """``log(x)`` of a float64, within 0.68 ulp of the exact value (subnormal
    ``x`` included; measured); special values as ``np.log``. Inlined into
    numba callers, whose loops over it vectorise."""
    tiny = x < _MIN_NORMAL
    # |x| (scaled when subnormal): no integer step below can overflow
    ix = _as_int64(x * _TWO52 if tiny else x) & _ABS_BITS
    e = (ix - _SQRT_HALF_BITS) >> 52
    m = _as_float64(ix - (e << 52))  # in [sqrt(1/2), sqrt(2))
    kf = _as_float64((e - 52 if tiny else e) + _ROUND_BITS) - _ROUND
    f = m - 1.0  # exact
    s = _fdiv(f, 2.0 + f)
    z = s * s
    z2 = z * z
    z4 = z2 * z2
    z8 = z4 * z4
    big_r = z * ((_L1 + z * _L2) + z2 * (_L3 + z * _L4)
                 + z4 * ((_L5 + z * _L6) + z2 * (_L7 + z * _L8))
                 + z8 * (_L9 + z * _L10))
    # f**2/2 = hh + hl, hh exact (25-bit f_hi squared)
    f_hi = _as_float64(_as_int64(f) & _HIGH25)
    hh = 0.5 * f_hi * f_hi
    hl = 0.5 * (f - f_hi) * (f + f_hi)
    d = f - hh
    d_err = (f - d) - hh  # f - hh = d + d_err exactly
    a = kf * _LN2_HI  # exact
    hi = a + d
    lo = (a - hi) + d  # a + d = hi + lo exactly (|a| >= ln2 > |d| unless a = 0)
    y = hi + (lo + ((d_err - hl) + (s * ((hh + hl) + big_r) + kf * _LN2_LO)))
    special = -_INF if x == 0.0 else (_NAN if x < 0.0 else x)
    return y if (x > 0.0) & (x < _INF) else special


# ---------------------------------------------------------------------------
# scans
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def extremes(x):  # pragma: no cover - compiled
    """``(x.max(), x.min())``, NaN for both if any entry is NaN (as numpy's), in
    four interleaved scans (the order does not change a maximum or a minimum)."""
    n = x.size
    top0 = top1 = top2 = top3 = -math.inf
    low0 = low1 = low2 = low3 = math.inf
    nan = False
    i = 0
    while i + 4 <= n:
        a, b, c, d = x[i], x[i + 1], x[i + 2], x[i + 3]
        nan |= (a != a) | (b != b) | (c != c) | (d != d)
        top0 = a if a > top0 else top0
        top1 = b if b > top1 else top1
        top2 = c if c > top2 else top2
        top3 = d if d > top3 else top3
        low0 = a if a < low0 else low0
        low1 = b if b < low1 else low1
        low2 = c if c < low2 else low2
        low3 = d if d < low3 else low3
        i += 4
    while i < n:
        a = x[i]
        nan |= a != a
        top0 = a if a > top0 else top0
        low0 = a if a < low0 else low0
        i += 1
    if nan:
        return math.nan, math.nan
    return max(max(top0, top1), max(top2, top3)), min(min(low0, low1), min(low2, low3))


def row_sq_norms(X, chunk: int = 65536):
    """``(start, ||x_i||^2 for the rows start..start + chunk)`` over the rows of
    ``X`` (an array or a memory map), read ``chunk`` rows at a time; empty
    blocks skipped."""
    for start in range(0, X.shape[0], chunk):
        block = np.asarray(X[start:start + chunk], dtype=np.float64)
        if block.size:
            yield start, np.einsum("ij,ij->i", block, block)


def max_row_sq_norm(X, chunk: int = 65536) -> float:
    """``max_i ||x_i||^2`` over the rows of ``X`` (an array or a memory map),
    read ``chunk`` rows at a time."""
    return max((float(np.max(sq)) for _, sq in row_sq_norms(X, chunk)), default=0.0)
