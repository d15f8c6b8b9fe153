"""Draws and sums inside compiled kernels that give numpy's numbers exactly, so
a kernel (``harness.engine``) and the Python method it stands in for agree to
the bit: ``choice`` is ``Generator.choice(n, size=b, replace=False)`` (the same
integer draws from the same generator, in the same order), ``pairwise_sum`` is
``ndarray.sum()`` of a contiguous float64 array (numpy's pairwise order)."""

from __future__ import annotations

import numpy as np
from numba import njit

try:  # numba's ports of numpy's bounded-integer draws (numpy/random/src/distributions)
    from numba.np.random.generator_core import next_uint32
    from numba.np.random.random_methods import (
        bounded_lemire_uint64,
        buffered_bounded_lemire_uint32,
    )

    _LEMIRE = True
except ImportError:  # pragma: no cover - another numba layout: its public integers()
    _LEMIRE = False


if _LEMIRE:
    @njit(cache=True, error_model="numpy")
    def _bounded(rng, high):  # pragma: no cover - compiled
        """A uniform integer in ``[0, high]`` for ``0 <= high < 2**63``: numpy's
        ``random_bounded_uint64(bitgen, 0, high, 0, 0)`` (Lemire's rejection on
        32 bits below ``2**32 - 1``), the draw of ``Generator.choice``."""
        if high == 0:
            return np.int64(0)
        bitgen = rng.bit_generator
        if high < 0xFFFFFFFF:
            return np.int64(buffered_bounded_lemire_uint32(bitgen, np.uint32(high)))
        if high == 0xFFFFFFFF:
            return np.int64(next_uint32(bitgen))
        return np.int64(bounded_lemire_uint64(bitgen, np.uint64(high)))
else:  # pragma: no cover
    @njit(cache=True, error_model="numpy")
    def _bounded(rng, high):  # pragma: no cover - compiled
        """A uniform integer in ``[0, high]`` (``Generator.integers``: the same
        draw, through a one-entry array)."""
        if high == 0:
            return np.int64(0)
        return np.int64(rng.integers(0, high, endpoint=True))


@njit(cache=True, error_model="numpy")
def choice(rng, n, b, perm, swaps):  # pragma: no cover - compiled
    """``rng.choice(n, size=b, replace=False)`` of numpy's ``Generator``: the same
    integer draws in the same order. For ``n > 10000`` and ``b > n // 50`` a
    tail shuffle of ``0..n-1`` (``perm``, the identity, is shuffled in place and
    restored from the recorded ``swaps``: O(b) instead of numpy's O(n) copy),
    else Floyd's algorithm with numpy's open-addressing hash set, then a shuffle."""
    out = np.empty(b, dtype=np.int64)
    if n > 10000 and b > n // 50:
        first = max(n - b, 1)
        for i in range(n - 1, first - 1, -1):
            j = _bounded(rng, i)
            swaps[n - 1 - i] = j
            perm[i], perm[j] = perm[j], perm[i]
        for c in range(b):
            out[c] = perm[n - b + c]
        for i in range(first, n):
            j = swaps[n - 1 - i]
            perm[i], perm[j] = perm[j], perm[i]
        return out
    mask = np.uint64(1.2 * b)  # numpy's _gen_mask: smallest 2^m - 1 at least 1.2 b
    for shift in (1, 2, 4, 8, 16, 32):
        mask |= mask >> np.uint64(shift)
    m = np.int64(mask)
    seen = np.full(m + 1, -1, dtype=np.int64)
    for j in range(n - b, n):
        val = _bounded(rng, j)
        loc = val & m
        while seen[loc] != -1 and seen[loc] != val:
            loc = (loc + 1) & m
        if seen[loc] == -1:
            seen[loc] = val
            out[j - n + b] = val
        else:
            loc = j & m
            while seen[loc] != -1:
                loc = (loc + 1) & m
            seen[loc] = j
            out[j - n + b] = j
    for i in range(b - 1, 0, -1):
        j = _bounded(rng, i)
        out[i], out[j] = out[j], out[i]
    return out


@njit(cache=True, error_model="numpy")
def _block_sum(a, lo, n):  # pragma: no cover - compiled
    """numpy's sum of a block of at most 128 entries: sequential below 8, else
    8 accumulators combined pairwise, then the rest of ``n % 8``."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = lo + 8
    stop = lo + n - n % 8
    while i < stop:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < lo + n:
        res += a[i]
        i += 1
    return res


@njit(cache=True, error_model="numpy")
def pairwise_sum(a):  # pragma: no cover - compiled
    """``a.sum()`` in numpy's order, so that the two are equal: numpy's pairwise
    summation of a contiguous float64 array splits a range of more than 128
    entries in two at ``n // 2`` rounded down to a multiple of 8, sums each
    half and adds them (``_block_sum`` below). Walked with an explicit stack
    of (start, length, half done, left sum) frames."""
    n = a.size
    if n <= 128:
        return _block_sum(a, 0, n)
    starts = np.empty(64, dtype=np.int64)
    lengths = np.empty(64, dtype=np.int64)
    left_done = np.zeros(64, dtype=np.bool_)
    left = np.empty(64)
    starts[0], lengths[0], left_done[0] = 0, n, False
    depth = 1
    while True:
        top = depth - 1
        lo, m = starts[top], lengths[top]
        if m > 128:  # split: push the left half
            half = m // 2
            half -= half % 8
            starts[depth], lengths[depth], left_done[depth] = lo, half, False
            depth += 1
            continue
        value = _block_sum(a, lo, m)
        depth -= 1
        while depth > 0:  # hand the value up: a left half waits for its right half
            top = depth - 1
            if not left_done[top]:
                left[top] = value
                left_done[top] = True
                half = lengths[top] // 2
                half -= half % 8
                starts[depth] = starts[top] + half
                lengths[depth] = lengths[top] - half
                left_done[depth] = False
                depth += 1
                break
            value = left[top] + value
            depth -= 1
        if depth == 0:
            return value
