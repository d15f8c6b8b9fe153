"""The k-set ``S_{n,k} = {p : 0 <= p_i <= 1/k, sum p = 1}`` (paper, eq. (k-Set)).

Its extreme points are the ``(1/k) 1_I`` for subsets ``I`` of size k (Section 4),
so a draw from it is k distinct rows. ``<L, p>`` maximised over it is the
average of the k largest losses (average top-k loss, empirical CVaR). The
numerics (Algorithm 4, Algorithm 5, the Euclidean projection) are in
``plugins.lib.capped``.

``level`` asks for k as a fraction of the data set's n instead: ``k = max(1,
floor(level n))``, the average of the largest ``level`` share of the losses: the
superquantile (CVaR) at level ``1 - level`` (``constraint=spectral``'s
``level`` counts the other way), the same at ``level=0.5``, the DRO papers' k =
n/2. One sweep then covers data sets of different n (``constraint.level=null,0.5``);
the k used is recorded as ``constraint.k``.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

import harness
from harness import Draw, Param
from harness.engine import Compiled, replaces
from plugins.lib.capped import (
    CAPPED_SET,
    capped_kl_projection,
    capped_set_state,
    capped_simplex_euclidean,
    check_gamma,
    depround,
    log_weights,
    systematic,
)


class KSet:
    """``S_{n,k}``: caps every row's weight at 1/k (average top-k loss)."""

    name: ClassVar[str] = "kset"
    params: ClassVar[dict[str, Param]] = {
        "n": Param(int, low=1, doc="number of rows (set by the data set)"),
        "k": Param(int, default=20, low=1, high="n", doc="rows per extreme point"),
        "sampler": Param(str, default="depround", choices=("depround", "systematic"),
                         doc="how an extreme point with mean p is drawn: DepRound "
                             "(Algorithm 5) or systematic sampling (Madow), same marginals"),
        "level": Param(float, low=0.0, low_open=True, high=1.0, nullable=True,
                       doc="if set, k = max(1, floor(level n)) in place of k "
                           "(the superquantile at level 1 - level; 0.5: k = n/2)"),
    }

    def __init__(self, n: int, k: int = 20, sampler: str = "depround",
                 level: float | None = None) -> None:
        self.n = n
        self.level = level
        self.k = k if level is None else max(1, math.floor(level * n + 1e-9))
        self.sampler = sampler
        self.ones_ = np.ones(self.k, dtype=np.int64)  # every draw's multiplicities
        self.ones_.flags.writeable = False

    def bind(self, dataset) -> dict[str, int] | None:
        """The k derived from ``level`` (recorded as ``constraint.k``), if any."""
        return None if self.level is None else {"k": self.k}

    def row_caps(self) -> np.ndarray:
        """Every row capped at ``1/k``."""
        return np.full(self.n, 1.0 / self.k)

    def lmo(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        """Average of the k largest losses and the point 1/k on them."""
        idx = np.argpartition(losses, self.n - self.k)[self.n - self.k:]
        p = np.zeros(self.n)
        p[idx] = 1.0 / self.k
        return float(np.sum(losses[idx]) / self.k), p

    def kappa(self, gamma: float) -> float:
        """The cap before mixing, ``(1/k - gamma/n) / (1 - gamma)`` (Line 5 of Algorithm 2)."""
        return (1.0 / self.k - gamma / self.n) / (1.0 - gamma)

    def project(self, weights, gamma=0.0, *, log_domain=False, return_capped=False):
        """Lines 3-10 of Algorithm 2: project onto ``S_{n, 1/kappa}``, then mix
        with the uniform distribution at rate ``gamma``; capped rows end at
        exactly 1/k."""
        check_gamma(gamma)
        log_w = log_weights(weights, log_domain)
        q, capped = capped_kl_projection(log_w, self.kappa(gamma))
        p = (1.0 - gamma) * q + gamma / self.n
        p[capped] = 1.0 / self.k
        return (p, capped) if return_capped else p

    def euclidean_project(self, v: np.ndarray) -> np.ndarray:
        """Euclidean projection onto the set (for gradient-ascent p-players)."""
        return capped_simplex_euclidean(v, 1.0 / self.k)

    def sample(self, p: np.ndarray, rng: np.random.Generator) -> Draw:
        """k distinct rows with ``P[i in rows] = k p_i``, each of multiplicity 1:
        DepRound (Algorithm 5) or systematic sampling, as ``sampler`` says."""
        draw = systematic if self.sampler == "systematic" else depround
        return Draw(draw(p, self.k, rng), self.ones_)

    def compiled(self) -> Compiled | None:
        """The compiled form (``harness.engine``): the capped simplex with every cap
        1/k, drawn by this set's sampler (``plugins.lib.capped.capped_set_state``);
        the single point 1/n when k = n."""
        if replaces(self, KSet, ("project", "euclidean_project", "row_caps")):
            return None
        # the class that defines ``sample`` names its compiled draw
        owner = next(c for c in type(self).__mro__ if "sample" in vars(c))
        if owner is not KSet and "compiled_sampler" not in vars(owner):
            return None
        # k = n: the single point 1/n, as the p-players' own states say
        return Compiled(CAPPED_SET, capped_set_state(self.row_caps(), self.k,
                                                     self.compiled_sampler, self.k == self.n))

    @property
    def compiled_sampler(self) -> str:
        return self.sampler

    def contains(self, p: np.ndarray, atol: float = 1e-9) -> bool:
        p = np.asarray(p)
        return bool(
            p.shape == (self.n,)
            and abs(float(np.sum(p)) - 1.0) <= atol
            and float(np.min(p)) >= -atol
            and float(np.max(p)) <= 1.0 / self.k + atol
        )


@harness.hookimpl
def register_constraint_sets(register):
    register(KSet)
