"""``plugins.lib.vecmath``: ``vexp`` and ``vlog`` against references that do not
share their method (mpmath at 120 bits; ``np.exp`` / ``np.log`` in 80-bit long
double, whose own error is below 2**-11 of a float64 ulp), their special values
against ``np.exp`` / ``np.log`` exactly, the compiled loop against the scalar
bit for bit, and the loop's vectorisation.

Errors are in ulps of the exact value (``2**(floor(log2|v|) - 52)``, at least
``2**-1074``). Tolerances are the measured maxima rounded up (module
docstring): ``vexp`` 0.7 ulp for normal results and 0.8 for subnormal ones,
``vlog`` 0.7 ulp. Each of these breaks the accuracy tests: dropping the
``r**13`` term of ``vexp`` (2.1 ulp), the last ``s**2`` term of ``vlog`` (0.77
ulp), the low part of ln 2 from either (millions of ulps), ``vexp``'s
correction of ``r`` or ``vlog``'s low part of ``f**2/2``.
"""

from __future__ import annotations

import re

import mpmath as mp
import numpy as np
import pytest
from numba import njit

from plugins.lib.vecmath import vexp, vlog

EXP_TOL = 0.7  # ulp, normal results
EXP_SUB_TOL = 0.8  # units of 2**-1074, subnormal results
LOG_TOL = 0.7  # ulp

LN_MIN_NORMAL = -708.3964185322641  # log(2**-1022)
LN_MAX = 709.782712893384  # largest x with finite np.exp(x)
LN_HALF_MIN_SUB = -745.1332191019412  # log(2**-1075)

LONG_DOUBLE_OK = np.finfo(np.longdouble).nmant >= 63


@njit(error_model="numpy")
def _vexp_loop(x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = vexp(x[i])
    return out


@njit  # the default error model: vlog's division must not get a zero check
def _vlog_loop(x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = vlog(x[i])
    return out


def _neighbours(x0: float, n: int) -> np.ndarray:
    """The ``2 n + 1`` consecutive float64 centred on ``x0``."""
    bits = np.array([x0]).view(np.int64)[0] + np.arange(-n, n + 1, dtype=np.int64)
    return np.sort(bits.view(np.float64))


def _ulps_long(y: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """``|y - exact|`` in ulps of ``exact`` (long double)."""
    _, e = np.frexp(exact)
    unit = np.ldexp(np.longdouble(1), np.maximum(e.astype(np.int64) - 53, -1074))
    return np.abs(y.astype(np.longdouble) - exact) / unit


def _ulps_mp(y: np.ndarray, x: np.ndarray, fn) -> np.ndarray:
    """``|y - fn(x)|`` in ulps of the exact value, ``fn`` an mpmath function."""
    out = np.empty(x.size)
    with mp.workprec(120):
        for i, (xi, yi) in enumerate(zip(x.tolist(), y.tolist(), strict=True)):
            exact = fn(mp.mpf(xi))
            e = int(mp.floor(mp.log(abs(exact), 2))) if exact else -1100  # log(1) == 0
            out[i] = float(abs(mp.mpf(yi) - exact) / mp.ldexp(1, max(e - 52, -1074)))
    return out


# (name, points, tolerance): 10**6 random points each, seed 0, or edge grids
def _exp_ranges() -> list[tuple[str, np.ndarray, float]]:
    rng = np.random.default_rng(0)
    return [
        ("wide, normal", rng.uniform(LN_MIN_NORMAL, 709.7, 10**6), EXP_TOL),
        ("[-1, 1]", rng.uniform(-1.0, 1.0, 10**6), EXP_TOL),
        ("subnormal results", rng.uniform(LN_HALF_MIN_SUB, LN_MIN_NORMAL, 10**6), EXP_SUB_TOL),
        ("edges", np.concatenate([_neighbours(LN_MAX, 2000)[:2001],  # finite results only
                                  _neighbours(LN_MIN_NORMAL, 2000),
                                  _neighbours(LN_HALF_MIN_SUB, 2000),
                                  np.linspace(700.0, LN_MAX, 10**4),
                                  np.linspace(LN_HALF_MIN_SUB, -700.0, 10**4)]), EXP_SUB_TOL),
    ]


def _log_ranges() -> list[tuple[str, np.ndarray, float]]:
    rng = np.random.default_rng(0)
    return [
        ("log-uniform [1e-300, 1e300]", np.exp(rng.uniform(np.log(1e-300), np.log(1e300), 10**6)),
         LOG_TOL),
        ("[0.5, 2]", rng.uniform(0.5, 2.0, 10**6), LOG_TOL),
        ("1 +- 2**-40", _neighbours(1.0, 4000) + rng.uniform(-2.0**-40, 2.0**-40, 8001), LOG_TOL),
        ("subnormal", rng.uniform(0.0, 2.2250738585072014e-308, 10**6), LOG_TOL),
        ("large", rng.uniform(1e300, np.finfo(np.float64).max, 10**6), LOG_TOL),
    ]


@pytest.mark.skipif(not LONG_DOUBLE_OK, reason="long double is not 80-bit or wider")
def test_vexp_accuracy_long_double():
    """Max error per range (seed 0, 10**6 points) within EXP_TOL / EXP_SUB_TOL."""
    for name, x, tol in _exp_ranges():
        err = _ulps_long(_vexp_loop(x), np.exp(x.astype(np.longdouble)))
        assert err.max() <= tol, f"vexp on {name}: {err.max():.3f} ulp"


@pytest.mark.skipif(not LONG_DOUBLE_OK, reason="long double is not 80-bit or wider")
def test_vlog_accuracy_long_double():
    """Max error per range (seed 0, 10**6 points) within LOG_TOL."""
    for name, x, tol in _log_ranges():
        x = x[x > 0]
        err = _ulps_long(_vlog_loop(x), np.log(x.astype(np.longdouble)))
        assert err.max() <= tol, f"vlog on {name}: {err.max():.3f} ulp"


def test_accuracy_mpmath():
    """The first 5000 points of every range (seed 0) against mpmath at 120
    bits, the reference independent of libm; same tolerances."""
    for name, x, tol in _exp_ranges():
        x = x[:: max(1, x.size // 5000)]
        err = _ulps_mp(_vexp_loop(x), x, lambda v: v.context.exp(v))
        assert err.max() <= tol, f"vexp on {name}: {err.max():.3f} ulp"
    for name, x, tol in _log_ranges():
        x = x[x > 0][:: max(1, x.size // 5000)]
        err = _ulps_mp(_vlog_loop(x), x, lambda v: v.context.log(v))
        assert err.max() <= tol, f"vlog on {name}: {err.max():.3f} ulp"


def test_overflow_and_underflow_as_numpy():
    """Around the edges (consecutive float64), ``vexp`` is ``inf`` or 0 exactly
    where ``np.exp`` is."""
    x = np.concatenate([_neighbours(LN_MAX, 500), _neighbours(LN_HALF_MIN_SUB, 500),
                        np.linspace(-760.0, -740.0, 5001), np.linspace(705.0, 715.0, 5001)])
    with np.errstate(over="ignore"):
        ref = np.exp(x)
    y = _vexp_loop(x)
    np.testing.assert_array_equal(np.isinf(y), np.isinf(ref))
    np.testing.assert_array_equal(y == 0.0, ref == 0.0)


SPECIAL_EXP = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e308, -1e308, 709.79, -745.14,
               -746.0, 710.0, 5e-324, -5e-324]
SPECIAL_LOG = [1.0, 0.0, -0.0, -1.0, -5e-324, -np.inf, np.nan, np.inf, 5e-324,
               2.2250738585072014e-308, np.finfo(np.float64).max, 2.0, 0.5]


def _same(a, b) -> bool:
    """Equal as numbers, nan equal to nan (either sign), signed zeros told apart."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return bool(np.all((a == b) & (np.signbit(a) == np.signbit(b))
                       | (np.isnan(a) & np.isnan(b))))


@pytest.mark.parametrize("x", SPECIAL_EXP)
def test_vexp_special_values(x):
    """Exactly ``np.exp``: exp(+-0) == 1, nan, +-inf, over- and underflow."""
    with np.errstate(over="ignore"):
        ref = np.exp(x)
    assert _same(vexp(x), ref), (x, vexp(x), ref)
    assert _same(_vexp_loop(np.array([x]))[0], ref)


@pytest.mark.parametrize("x", SPECIAL_LOG)
def test_vlog_special_values(x):
    """Exactly ``np.log``: log(1) == +0, log(+-0) == -inf, negatives and nan give
    nan, log(inf) == inf, and the extreme finite values (these are correctly
    rounded, as ``np.log`` is on them)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = np.log(x)
    assert _same(vlog(x), ref), (x, vlog(x), ref)
    assert _same(_vlog_loop(np.array([x]))[0], ref)


def test_loop_matches_scalar_bitwise():
    """The vectorised loop and the scalar function called from Python (compiled
    on its own, not inlined) give the same bits (seed 1, 3000 points per
    function, special values included)."""
    rng = np.random.default_rng(1)
    xe = np.concatenate([rng.uniform(-750.0, 712.0, 2000), rng.uniform(-1.0, 1.0, 1000),
                         SPECIAL_EXP])
    xl = np.concatenate([np.exp(rng.uniform(-745.0, 709.0, 2000)), rng.uniform(0.5, 2.0, 1000),
                         SPECIAL_LOG])
    for loop, fn, x in [(_vexp_loop, vexp, xe), (_vlog_loop, vlog, xl)]:
        scalar = np.array([fn(v) for v in x.tolist()])
        np.testing.assert_array_equal(loop(x).view(np.int64), scalar.view(np.int64))


@pytest.mark.parametrize("loop", [_vexp_loop, _vlog_loop])
def test_loop_vectorises(loop):
    """The loop's LLVM IR multiplies vectors of doubles (any width: SSE2, AVX2,
    AVX-512, NEON; each function has more than 15 multiplications, a loop of
    ``np.exp`` calls has none) and calls no libm function."""
    loop(np.linspace(0.5, 2.0, 16))
    llvm = loop.inspect_llvm(loop.signatures[0])
    assert len(re.findall(r"fmul <\d+ x double>", llvm)) >= 15
    assert not re.search(r"call [^\n]*@(?:llvm\.)?(?:exp|log)(?:\.f64)?\(", llvm)
