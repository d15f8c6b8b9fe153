"""Independent references the set tests compare against: an SLSQP solve of the
capped KL projection, DepRound in plain Python, and the random weights both
set test modules draw."""

from __future__ import annotations

import contextlib

import numpy as np
from scipy import optimize

try:  # SLSQP's tiny dense solves run ~7x slower with multi-threaded BLAS on a busy machine
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - optional
    def threadpool_limits(*args, **kwargs):
        return contextlib.nullcontext()

__all__ = ["_wrong_projection_no_renormalisation", "bisect_euclidean", "python_depround_core",
           "random_weights", "slsqp_kl_projection", "threadpool_limits"]

_SOLVED: dict[tuple[bytes, bytes], np.ndarray] = {}


def slsqp_kl_projection(w: np.ndarray, kappa) -> np.ndarray:
    """argmin_q sum q_i log(q_i / v_i) s.t. 0 <= q_i <= kappa_i, sum q = 1,
    v = w / sum w; ``kappa`` is one cap or one per row (memoised: several
    tests share the instances)."""
    w = np.asarray(w, dtype=np.float64)
    kappa = np.broadcast_to(np.asarray(kappa, dtype=np.float64), w.shape).copy()
    key = (w.tobytes(), kappa.tobytes())
    if key not in _SOLVED:
        _SOLVED[key] = _slsqp_kl_projection(w, kappa)
    return _SOLVED[key].copy()


def _slsqp_kl_projection(w: np.ndarray, kappa: np.ndarray) -> np.ndarray:
    v = w / w.sum()
    n = v.size
    tiny = 1e-300

    def f(q):
        q = np.maximum(q, tiny)
        return float(np.sum(q * np.log(q / v)))

    def g(q):
        return np.log(np.maximum(q, tiny) / v) + 1.0

    x0 = kappa / kappa.sum()  # feasible: sum kappa >= 1
    with threadpool_limits(limits=1):
        res = optimize.minimize(
            f, x0, jac=g, method="SLSQP", bounds=list(zip(np.zeros(n), kappa, strict=True)),
            constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1.0,
                          "jac": lambda q: np.ones(n)}],
            options={"ftol": 1e-15, "maxiter": 2000},
        )
    q = np.clip(res.x, 0.0, kappa)
    assert abs(q.sum() - 1.0) < 1e-9, res.message
    return q


def random_weights(rng: np.random.Generator, n: int, n_large: int = 3) -> np.ndarray:
    """Positive weights with a few very large ones, so that capping is active."""
    w = rng.exponential(size=n) + 1e-3
    big = rng.choice(n, size=min(n_large, n), replace=False)
    w[big] *= rng.uniform(20.0, 1000.0, size=big.size)
    return w


def bisect_euclidean(v: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Euclidean projection onto ``{0 <= p_i <= caps_i, sum p = 1}`` by bisection
    on ``tau`` in ``p_i = clip(v_i - tau, 0, caps_i)`` (``sum p`` is monotone in
    ``tau``), 200 halvings: an answer that shares nothing with the code's
    breakpoint walk but the optimality condition."""
    v, caps = np.asarray(v, dtype=np.float64), np.asarray(caps, dtype=np.float64)
    lo, hi = float(v.min() - caps.max()) - 1.0, float(v.max())  # sums >= 1 at lo, 0 at hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.clip(v - mid, 0.0, caps).sum() >= 1.0:
            lo = mid
        else:
            hi = mid
    return np.clip(v - 0.5 * (lo + hi), 0.0, caps)


def _wrong_projection_no_renormalisation(w, kappa):
    """A known wrong KL projection, for the tests that show the reference's
    power: lambda = 1 / sum w, q = min(kappa, v), which no longer sums to 1."""
    return np.minimum(kappa, w / w.sum())


def python_depround_core(x, u, k, *, invert_coin=False):
    """Pure-Python drop-in for ``plugins.lib.capped.depround_core`` (same signature and
    pairing: a round of m entries pairs entry s with entry s + m // 2, a step only
    when both are fractional, the open one of each pair going on, coins in the order
    of the pairs), for monkeypatching a wrong coin into the real ``depround`` wrapper."""
    live = list(range(x.size))
    coin = 0
    while len(live) > 1:
        half = len(live) // 2
        kept = []
        for s in range(half):
            i, j = live[s], live[s + half]
            xi, xj = x[i], x[j]
            if 1e-12 < xi < 1.0 - 1e-12 and 1e-12 < xj < 1.0 - 1e-12:
                alpha, beta = min(1.0 - xi, xj), min(xi, 1.0 - xj)
                prob_up = (alpha if invert_coin else beta) / (alpha + beta)
                if u[coin + s] < prob_up:
                    xi, xj = xi + alpha, xj - alpha
                else:
                    xi, xj = xi - beta, xj + beta
                x[i], x[j] = xi, xj
            kept.append(i if 1e-12 < xi < 1.0 - 1e-12 else j)
        if len(live) % 2:
            kept.append(live[-1])
        coin += half
        live = kept
    rows = np.flatnonzero(x > 0.5)
    return rows if rows.size == k else np.full(k, -1, dtype=np.int64)
