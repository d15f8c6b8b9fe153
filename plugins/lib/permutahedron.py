"""Numerics of the permutahedron ``P(sigma)``, the uncertainty set of a spectral
risk (Mehta, Roulet, Pillutla and Harchaoui, ICLR 2024, Section 2): the convex
hull of the permutations of a spectrum ``sigma`` (non-negative, sorted
ascending, summing to 1). ``max_{q in P(sigma)} <l, q> = sum_i sigma_i l_(i)``
with ``l_(1) <= ... <= l_(n)`` sorted ascending: the spectral risk.

* the spectra of the field's three risks (``spectrum``), as their authors'
  code defines them;
* the linear maximisation oracle (``permutahedron_lmo``: a sort);
* the Euclidean projection (``permutahedron_projection``): sort ``v``
  ascending, ``s``, and pool adjacent violators on ``u = s - sigma``: the
  non-decreasing isotonic regression ``z`` of ``u`` gives ``q = s - z`` in the
  sorted order (Blondel, Teboul, Berthet and Djolonga, "Fast Differentiable
  Sorting and Ranking", ICML 2020, Proposition 3; Lim and Wright 2016);
  O(n log n) for the sort, O(n) for the pooling (``pav_sorted``).

Derivation: docs/algorithms.md, "Spectral risks and the permutahedron".
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

#: the spectral risks and their parameter (the config's ``constraint.risk``)
RISKS = ("superquantile", "extremile", "esrm")


def superquantile_width(n: int, level: float) -> float:
    """``n (1 - level)``, the mass of rows the superquantile at ``level`` averages
    over (its cap is the inverse), snapped to the integer ``n - round(n level)``
    when ``n level`` is within 1e-9 of an integer (``100 * 0.29`` is
    ``28.999999999999996``: the k-set with k = 71, not a sliver of a 72nd row)."""
    if not 0.0 <= level < 1.0:
        raise ValueError(f"level must be in [0, 1). Got {level!r} instead.")
    below = n * level
    if abs(below - round(below)) <= 1e-9:
        return float(n - round(below))
    return n * (1.0 - level)


def superquantile_spectrum(n: int, level: float) -> np.ndarray:
    """Weight ``1/(n(1-level))`` on the largest ``n(1-level)`` losses, the
    boundary loss weighted by the fraction left when ``n level`` is not an
    integer (so the weights sum to 1 at any n): the superquantile (CVaR) at
    ``level``. As ``src/optim/objectives.py`` of ronakdm/prospect defines it,
    with ``n level`` within 1e-9 of an integer read as that integer
    (``superquantile_width``)."""
    width = superquantile_width(n, level)
    sigma = np.zeros(n)
    if width == int(width):  # k = n(1 - level) rows of 1/k: the k-set
        sigma[n - int(width):] = 1.0 / width
        return sigma
    idx = math.floor(n * level)
    sigma[idx] = 1.0 - (n - idx - 1) / width
    sigma[idx + 1:] = 1.0 / width
    return sigma


def extremile_spectrum(n: int, r: float) -> np.ndarray:
    """``sigma_i = (i^r - (i-1)^r) / n^r``, i = 1..n (the extremile of order r;
    r = 1 is the mean)."""
    if not r >= 1.0:
        raise ValueError(f"r must be >= 1 (a non-decreasing spectrum). Got {r!r} instead.")
    i = np.arange(n, dtype=np.float64)
    return ((i + 1.0) ** r - i ** r) / float(n) ** r


def esrm_spectrum(n: int, rho: float) -> np.ndarray:
    """``sigma_i = e^-rho (e^(rho i/n) - e^(rho (i-1)/n)) / (1 - e^-rho)``, i = 1..n
    (the exponential spectral risk measure)."""
    if not rho > 0.0:
        raise ValueError(f"rho must be > 0. Got {rho!r} instead.")
    i = np.arange(n, dtype=np.float64)
    # e^-rho moved inside the exponentials: the same weights, finite at any rho
    upper = np.exp(rho * ((i + 1.0) / n - 1.0))
    lower = np.exp(rho * (i / n - 1.0))
    return (upper - lower) / -math.expm1(-rho)


def spectrum(risk: str, n: int, *, level: float = 0.5, r: float = 2.0,
             rho: float = 1.0) -> np.ndarray:
    """The spectrum of ``risk`` over n rows, sorted ascending (largest weight on
    the largest loss)."""
    if risk == "superquantile":
        return superquantile_spectrum(n, level)
    if risk == "extremile":
        return extremile_spectrum(n, r)
    if risk == "esrm":
        return esrm_spectrum(n, rho)
    raise ValueError(f"risk must be one of {RISKS}. Got {risk!r} instead.")


@njit(cache=True, error_model="numpy")
def pav_sorted(s, sigma, q, sums, counts):  # pragma: no cover - compiled
    """The projection onto ``P(sigma)`` of a vector whose values sorted ascending
    are ``s``, in that sorted order, written into ``q``: pool adjacent
    violators on ``u = s - sigma`` (non-decreasing fit ``z``), ``q = s - z``.
    ``sums`` and ``counts`` are scratch of length n (the stack of blocks). O(n)."""
    n = s.size
    top = -1
    for j in range(n):
        top += 1
        sums[top] = s[j] - sigma[j]
        counts[top] = 1
        # a block whose mean exceeds the next one's violates z non-decreasing
        while top > 0 and sums[top - 1] * counts[top] >= sums[top] * counts[top - 1]:
            sums[top - 1] += sums[top]
            counts[top - 1] += counts[top]
            top -= 1
    j = 0
    for b in range(top + 1):
        z = sums[b] / counts[b]
        for _ in range(counts[b]):
            q[j] = s[j] - z
            j += 1


@njit(cache=True, error_model="numpy")
def permutahedron_projection(v, sigma):  # pragma: no cover - compiled
    """``argmin_{q in P(sigma)} ||q - v||_2`` (module docstring), ``sigma`` sorted
    ascending. O(n log n). Ties of ``v`` get equal weights."""
    n = v.size
    order = np.argsort(v, kind="mergesort")
    s = np.empty(n)
    for j in range(n):
        s[j] = v[order[j]]
    qs = np.empty(n)
    pav_sorted(s, sigma, qs, np.empty(n), np.empty(n, dtype=np.int64))
    q = np.empty(n)
    for j in range(n):
        q[order[j]] = qs[j]
    return q


@njit(cache=True, error_model="numpy")
def permutahedron_lmo(losses, sigma):  # pragma: no cover - compiled
    """``argmax_{q in P(sigma)} <losses, q>``: ``sigma`` on the losses sorted
    ascending, ties broken by the row index (a stable sort)."""
    order = np.argsort(losses, kind="mergesort")
    q = np.empty(losses.size)
    for j in range(losses.size):
        q[order[j]] = sigma[j]
    return q


@njit(cache=True, error_model="numpy")
def _block_value(lse, mass):  # pragma: no cover - compiled
    """The multiplier ``v = log sum_B w - log sum_B sigma`` of a pooled block
    (``kl_pav_sorted``); +inf for a block without positive sigma mass, which
    must pool with its neighbour."""
    if mass <= 0.0:
        return np.inf
    return lse - np.log(mass)


@njit(cache=True, error_model="numpy")
def _log_add(a, b):  # pragma: no cover - compiled
    """``log(e^a + e^b)``, exact at -inf."""
    top = max(a, b)
    if top == -np.inf:
        return -np.inf
    return top + np.log1p(np.exp(-abs(a - b)))


@njit(cache=True, error_model="numpy")
def kl_pav_sorted(s, sigma, q, fixed, lse, mass, counts):  # pragma: no cover - compiled
    """The KL projection onto ``P(sigma) ∩ {q >= 0}`` of weights whose logs sorted
    ascending are ``s`` (-inf for a weight 0), in that sorted order, written
    into ``q``: pool adjacent violators on the block multipliers ``v_B = log
    sum_B e^s - log sum_B sigma`` (non-decreasing fit), ``q_j = e^(s_j - v_B)``
    (Blondel et al. 2020, Proposition 3 with the entropic regulariser).
    ``sigma`` sorted ascending, summing to 1, may hold zeros and negative
    entries (the caps before mixing: ``ConstraintSet.project``). ``fixed[j]``:
    row j is a block of its own, ``q_j = sigma_j`` whatever the weights.
    ``lse``, ``mass``, ``counts``: scratch of length n. Returns False when no
    projection exists (a block of zero weights must hold positive mass). O(n)."""
    n = s.size
    top = -1
    for j in range(n):
        top += 1
        lse[top] = s[j]
        mass[top] = sigma[j]
        counts[top] = 1
        # a block whose multiplier exceeds the next one's violates v non-decreasing
        while top > 0:
            right = _block_value(lse[top], mass[top])
            if not (_block_value(lse[top - 1], mass[top - 1]) > right or right == np.inf):
                break
            lse[top - 1] = _log_add(lse[top - 1], lse[top])
            mass[top - 1] += mass[top]
            counts[top - 1] += counts[top]
            top -= 1
    j = 0
    for b in range(top + 1):
        if lse[b] == -np.inf and mass[b] > 0.0:
            return False
        for _ in range(counts[b]):
            q[j] = np.exp(s[j] - lse[b]) * mass[b]
            fixed[j] = counts[b] == 1
            j += 1
    return True


@njit(cache=True, error_model="numpy")
def permutahedron_kl_projection(log_w, sigma):  # pragma: no cover - compiled
    """``argmin_{q in P(sigma), q >= 0} KL(q || w)`` for ``w = exp(log_w)``
    (``kl_pav_sorted``), ``sigma`` sorted ascending. Returns ``q``, the rows
    fixed at a spectrum entry (blocks of one row) and whether a projection
    exists. O(n log n). Ties of ``log_w`` get equal weights."""
    n = log_w.size
    order = np.argsort(log_w, kind="mergesort")
    s = np.empty(n)
    for j in range(n):
        s[j] = log_w[order[j]]
    qs = np.empty(n)
    fixed_s = np.zeros(n, dtype=np.bool_)
    feasible = kl_pav_sorted(s, sigma, qs, fixed_s, np.empty(n), np.empty(n),
                             np.empty(n, dtype=np.int64))
    q = np.empty(n)
    fixed = np.zeros(n, dtype=np.bool_)
    for j in range(n):
        q[order[j]] = qs[j]
        fixed[order[j]] = fixed_s[j]
    return q, fixed, feasible
