"""The permutahedron ``P(sigma)`` of a spectral risk: the convex hull of the
permutations of a spectrum ``sigma`` (non-negative, non-decreasing, summing to
1). ``max_{q in P(sigma)} <l, q> = sum_i sigma_i l_(i)``, losses sorted
ascending: the superquantile, the extremile and the exponential spectral risk
measure (ESRM) of Mehta, Roulet, Pillutla and Harchaoui (ICLR 2024, Section 2),
their spectra as ronakdm/prospect's ``src/optim/objectives.py`` defines them.

The superquantile's ``P(sigma)`` is the capped simplex ``{0 <= q_i <= c, sum q =
1}`` with ``c = 1/(n(1-level))`` at any level: its ``row_caps()`` are ``c`` and
the capped-set numerics (``plugins.lib.capped``) answer for it; when ``n(1 -
level)`` is an integer k it is the k-set ``S_{n,k}``, with its DepRound draws and
compiled form. The extremile and the ESRM have no row caps and no sampler. The
numerics are in ``plugins.lib.permutahedron``; the derivations in
docs/algorithms.md, "Spectral risks and the permutahedron".
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

import harness
from harness import ConfigError, Draw, Param
from harness.engine import Compiled
from plugins.lib.capped import (
    capped_kl_projection,
    capped_simplex_euclidean,
    check_gamma,
    log_weights,
)
from plugins.lib.permutahedron import (
    RISKS,
    permutahedron_kl_projection,
    permutahedron_lmo,
    permutahedron_projection,
    spectrum,
    superquantile_width,
)
from plugins.sets.kset import KSet

#: the ``sampler`` of a set without one: ``sample`` raises, and the players that
#: draw from the set refuse it (``plugins.lib.capped.needs_draws``)
NO_SAMPLER = "none"


class Spectral:
    """``P(sigma)`` of the superquantile (``level``), the extremile (``r``) or the
    ESRM (``rho``): ``lmo`` is the spectral risk (a sort), ``euclidean_project``
    sorts and pools adjacent violators, ``project`` is the KL projection by
    pooling with log-sum-exp blocks (Blondel, Teboul, Berthet and Djolonga, ICML
    2020, Proposition 3), ``contains`` checks majorisation by ``sigma``.

    The superquantile is a capped simplex (caps ``1/(n(1-level))``, the boundary
    row's weight fractional unless ``n(1-level)`` is an integer k, where the set
    is the k-set and draws k rows by DepRound). ``k``: that k, or otherwise the
    number of positive entries of ``sigma`` (the rows an extreme point weights).
    Without the k-set (``sampler = "none"``) the bandit p-players refuse the set;
    ``ftrl`` and the solvers run on every risk.
    """

    name: ClassVar[str] = "spectral"
    params: ClassVar[dict[str, Param]] = {
        "n": Param(int, low=1, doc="number of rows (set by the data set)"),
        "risk": Param(str, default="superquantile", choices=RISKS,
                      doc="the spectral risk whose permutahedron K is"),
        "level": Param(float, default=0.5, low=0.0, high=1.0, high_open=True,
                       doc="superquantile: weight 1/(n(1-level)) on the largest "
                           "n(1-level) losses (fractional at the boundary)"),
        "r": Param(float, default=2.0, low=1.0,
                   doc="extremile: sigma_i = (i^r - (i-1)^r) / n^r (r = 1: the mean)"),
        "rho": Param(float, default=1.0, low=0.0, low_open=True,
                     doc="ESRM: sigma_i proportional to e^(rho i/n) - e^(rho (i-1)/n)"),
    }

    def __init__(self, n: int, risk: str = "superquantile", level: float = 0.5,
                 r: float = 2.0, rho: float = 1.0) -> None:
        self.n = n
        self.risk = risk
        self.level = level
        self.r = r
        self.rho = rho
        self.sigma_ = spectrum(risk, n, level=level, r=r, rho=rho)
        self.sigma_.flags.writeable = False
        self.cap_: float | None = None  # the superquantile's row cap
        self.kset_: KSet | None = None  # the k-set this set is, if it is one
        if risk == "superquantile":
            width = superquantile_width(n, level)
            if width == int(width) or width < 1.0:  # below one row: the max loss, k = 1
                self.kset_ = KSet(n, max(1, int(width)))
                self.cap_ = 1.0 / self.kset_.k
            else:
                self.cap_ = 1.0 / width
        self.k = self.kset_.k if self.kset_ is not None else int(np.count_nonzero(self.sigma_))
        self.sampler = "depround" if self.kset_ is not None else NO_SAMPLER

    def bind(self, dataset: Any) -> dict[str, int]:
        """The k (recorded as ``constraint.k``)."""
        return {"k": self.k}

    def label(self) -> str:
        """The risk and its parameter, e.g. "extremile r=2" (the report's name of K)."""
        value = {"superquantile": ("level", self.level), "extremile": ("r", self.r),
                 "esrm": ("rho", self.rho)}[self.risk]
        return f"{self.risk} {value[0]}={value[1]:g}"

    def spectrum(self, m: int | None = None) -> np.ndarray:
        """The spectrum over ``m`` rows (default n), sorted ascending: the risk's
        weights on a mini-batch of m losses."""
        if m is None or m == self.n:
            return self.sigma_.copy()
        if m < 1:
            raise ValueError(f"m must be an int >= 1. Got {m!r} instead.")
        return spectrum(self.risk, int(m), level=self.level, r=self.r, rho=self.rho)

    def row_caps(self) -> np.ndarray | None:
        """The superquantile: every row capped at ``1/(n(1-level))``; None for the
        extremile and the ESRM (not capped simplices)."""
        return None if self.cap_ is None else np.full(self.n, self.cap_)

    def lmo(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        """The spectral risk ``sum_i sigma_i l_(i)`` and ``sigma`` on the losses
        sorted ascending (ties by row index)."""
        if self.kset_ is not None:
            return self.kset_.lmo(losses)
        q = permutahedron_lmo(np.ascontiguousarray(losses, dtype=np.float64), self.sigma_)
        return float(np.dot(losses, q)), q

    def euclidean_project(self, v: np.ndarray) -> np.ndarray:
        """``argmin_{q in P(sigma)} ||q - v||``: the capped simplex's on the
        superquantile, else sort and pool adjacent violators."""
        v = np.ascontiguousarray(v, dtype=np.float64)
        if self.cap_ is not None:
            return capped_simplex_euclidean(v, self.cap_)
        return permutahedron_projection(v, self.sigma_)

    def project(self, weights, gamma=0.0, *, log_domain=False, return_capped=False):
        """The KL projection of positive weights onto ``P(sigma')``, ``sigma' =
        (sigma - gamma/n) / (1 - gamma)``, then mixed with the uniform
        distribution at rate ``gamma`` (so the mix lies in ``P(sigma)``). The
        superquantile: the capped simplex's (Algorithm 4), capped rows ending at
        the cap. Otherwise pooling with log-sum-exp blocks; the mask of
        ``return_capped`` then marks the rows fixed at a spectrum entry."""
        check_gamma(gamma)
        if self.kset_ is not None:
            return self.kset_.project(weights, gamma, log_domain=log_domain,
                                      return_capped=return_capped)
        log_w = log_weights(weights, log_domain)
        log_w = np.ascontiguousarray(log_w)
        n = self.n
        if self.cap_ is not None:
            q, capped = capped_kl_projection(log_w, (self.cap_ - gamma / n) / (1.0 - gamma))
            p = (1.0 - gamma) * q + gamma / n
            p[capped] = self.cap_
        else:
            shifted = (self.sigma_ - gamma / n) / (1.0 - gamma)
            q, capped, feasible = permutahedron_kl_projection(log_w, shifted)
            if not feasible:
                raise ValueError(
                    f"The KL projection onto P(sigma) of {self.label()} needs more rows with "
                    f"positive weight; got {int(np.sum(np.isfinite(log_w)))} of n={n} "
                    "(zero weights and gamma = 0?).")
            p = (1.0 - gamma) * q + gamma / n
        return (p, capped) if return_capped else p

    def sample(self, p: np.ndarray, rng: np.random.Generator) -> Draw:
        """The k-set's draw (k rows by DepRound, ``P[i in rows] = k p_i``) when
        the set is one; otherwise there is no sampler: ConfigError."""
        if self.kset_ is None:
            raise ConfigError(
                f"The constraint set 'spectral' ({self.label()}) has no sampler: its "
                "extreme points are not sets of k rows of weight 1/k (only the "
                "superquantile with n(1-level) an integer is the k-set).")
        return self.kset_.sample(p, rng)

    def compiled(self) -> Compiled | None:
        """The k-set's compiled form when the set is the k-set; None otherwise."""
        return self.kset_.compiled() if self.kset_ is not None else None

    def contains(self, p: np.ndarray, atol: float = 1e-9) -> bool:
        """``p >= 0``, ``sum p = 1`` and ``p`` majorised by ``sigma``: the partial
        sums of ``p`` sorted descending at most those of ``sigma`` (within
        ``atol``)."""
        p = np.asarray(p, dtype=np.float64)
        if p.shape != (self.n,) or not np.all(np.isfinite(p)):
            return False
        if abs(float(np.sum(p)) - 1.0) > atol or float(np.min(p)) < -atol:
            return False
        if self.kset_ is not None:
            return self.kset_.contains(p, atol)
        excess = np.cumsum(np.sort(p)[::-1]) - np.cumsum(self.sigma_[::-1])
        return bool(np.all(excess[:-1] <= atol))


@harness.hookimpl
def register_constraint_sets(register):
    register(Spectral)
