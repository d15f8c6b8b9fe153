"""EXP3-IX with multiple plays on the k-set: implicit exploration (Neu 2015,
"Explore no more") for semi-bandit feedback, in O(k log n) per round."""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param, Proposal
from harness.engine import replaces
from plugins.lib.capped import (
    CAPPED_SET,
    capped_set_kappa,
    capped_set_point,
    capped_set_sample,
    capped_set_state,
    log_row_caps,
    needs_sets_of_k_rows,
    weights_row_caps,
)
from plugins.lib.steps import scale_param, scaled_step
from plugins.p_players.kset_tree import CappedWeightTree, TreeState, tree_ix_step, tree_sample


class DenseState(NamedTuple):
    """EXP-IX-M's dense state (``state="dense"``; its kernels' and its Python
    ``observe``'s), the arrays changed in place."""

    #: ``p_t`` and the weights' scratch
    p: np.ndarray
    w: np.ndarray
    #: the batch weights ``1/k``
    batch: np.ndarray
    eta: float
    gamma: float
    #: the capped rows of ``p``, and their cap mass and number of free rows
    #: (``weights_row_caps``'s book)
    capped: np.ndarray
    book: np.ndarray


class TreePlayerState(NamedTuple):
    """EXP-IX-M's state with ``state="tree"``: the tree's record and the step."""

    tree: TreeState
    #: the batch weights ``1/k``
    batch: np.ndarray
    eta: float
    gamma: float


class ExpIXM:
    """Exponential weights on ``S_{n,k}`` with the implicit-exploration (IX)
    loss estimate for multiple plays; on the simplex (k = 1) it is EXP3-IX.

    The p-player maximises ``<L, p>``, so it minimises the complement
    ``l = 1 - L`` in [0, 1]. Each round: draw k distinct rows ``I_t`` with
    ``P[i in I_t] = k p_i`` (Line 11 of Algorithm 2), observe their losses,
    estimate ``l_hat_i = (1 - L_i) / (k p_i + gamma)`` on ``i in I_t`` (zero
    elsewhere: Neu 2015, Section 3, with the observation probability ``k p_i``
    of a row under multiple plays), and take a greedy mirror-descent step,
    ``p_{t+1} = Proj_KL(p_t exp(-eta l_hat))`` onto ``S_{n,k}`` (Algorithm 4
    without mixing: IX needs no uniform exploration). The action is
    ``a_t = (1/k) 1_{I_t}``.

    Guarantee (``regret_bound``; game units). The paper has no theorem for
    this player: Neu (2015)'s argument for EXP3-IX (his Theorem 1 and Lemma 1)
    carried to multiple plays gives, with probability at least ``1 - delta``,
    for every ``u`` in ``S_{n,k}`` and every t <= T at once, ``log(n/k)/eta +
    log(n/delta)/(2 gamma) + ((eta/2 + gamma)/k) (n t + n log(n/delta)/(2
    gamma))`` at the eta and gamma in use (None if ``gamma = 0``; proof sketch
    in docs/algorithms.md, "The p-players' regret bounds"). No confidence
    term is added to any row, unlike EXP4.MP (``exp4mp``, Theorem 4.1
    ``th:topk``), whose term touches all n rows each round.

    Cost per round: ``state="tree"`` keeps ``p_t`` in a tree of sums and maxima
    (``plugins.p_players.kset_tree``) and samples systematically (Madow): O(k log n)
    time, O(n) memory; ``p`` is materialised (O(n)) only when read, at
    checkpoints. ``state="dense"`` keeps ``p_t`` as an array, multiplies the
    sampled rows' entries by ``exp(-eta l_hat_i)``, projects the result onto
    the row caps (``plugins.lib.capped.weights_row_caps``: the KL projection,
    the constraint set's ``project`` with gamma = 0) and draws with the set's
    ``sample``: O(n) per round, the reference the tree reproduces. ``auto`` picks the tree when the
    set's ``sampler`` is "systematic" (the simplex's is: its categorical draw is
    systematic sampling with k = 1), else dense.
    """

    name: ClassVar[str] = "exp_ix_m"
    state_version: ClassVar[int] = 1
    constraints: ClassVar[tuple[str, ...] | None] = None  # any set that supports() accepts
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="step size; None: sqrt(k (log(n/k) + log(n/delta)) / (n T))"),
        "eta_scale": scale_param("eta"),
        "gamma": Param(float, low=0.0, high=1.0, nullable=True,
                       doc="implicit exploration; None: eta / 2; 0: no exploration "
                           "(unbiased estimate, no high-probability bound)"),
        "delta": Param(float, default=0.05, low=0.0, high=1.0, low_open=True, high_open=True,
                       doc="failure probability of the high-probability bound"),
        "state": Param(str, default="auto", choices=("auto", "tree", "dense"),
                       doc="tree: O(k log n) per round, systematic sampling; dense: O(n), "
                           "the set's sampler; auto: tree if the set samples systematically"),
    }

    @classmethod
    def supports(cls, constraint) -> str | None:
        """Draws of k distinct rows (every row cap at most 1/k: the k-set, the simplex)."""
        return needs_sets_of_k_rows(constraint)

    def __init__(self, eta=None, gamma=None, delta=0.05, state="auto", eta_scale=1.0) -> None:
        self.eta = eta
        self.eta_scale = eta_scale
        self.gamma = gamma
        self.delta = delta
        self.state = state

    def rows_per_round(self, constraint) -> int:
        return constraint.k

    def setup(self, constraint, horizon: int) -> dict[str, float | str]:
        n, k, T = constraint.n, constraint.k, horizon
        self.constraint_ = constraint
        systematic = constraint.sampler == "systematic"
        state = self.state
        if state == "auto":
            state = "tree" if systematic else "dense"
        elif state == "tree" and not systematic:
            raise harness.ConfigError(
                "The 'state' parameter of exp_ix_m is 'tree', which samples systematically; "
                f"the constraint set '{constraint.name}' is configured with sampler "
                f"'{constraint.sampler}'. Set constraint.sampler=systematic "
                "or p_player.state=dense."
            )
        self.state_ = state
        width = math.log(n / k) + math.log(n / self.delta)
        self.eta_ = scaled_step(self.name, "eta", self.eta, self.eta_scale,
                                math.sqrt(k * width / (n * T)))
        self.gamma_ = self.gamma if self.gamma is not None else self.eta_ / 2
        self.weights_ = np.full(k, 1.0 / k)
        if state == "tree":
            self.tree_ = CappedWeightTree(n, k)
        else:
            self.tree_ = None
            self.p_ = np.full(n, 1.0 / n)
            caps = constraint.row_caps()
            self.dense_state_ = DenseState(self.p_, np.empty(n), self.weights_, float(self.eta_),
                                           float(self.gamma_), np.zeros(n, dtype=bool),
                                           np.array([0.0, n]))
            self.set_state_ = capped_set_state(caps, k, "depround",
                                               abs(float(caps.sum()) - 1.0) <= 1e-12)
        return {"eta": self.eta_, "gamma": self.gamma_, "delta": self.delta, "state": state}

    @property
    def p(self) -> np.ndarray:
        return self.tree_.p if self.tree_ is not None else self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        if self.tree_ is None:
            self.rows_ = self.constraint_.sample(self.p_, rng).rows  # multiplicities 1
        else:  # the tree's draw (tree_sample), the kernel the compiled path runs too
            self.rows_ = tree_sample(self.tree_.state_, rng).copy()
        return Proposal(self.rows_, self.weights_)

    def observe(self, losses: np.ndarray) -> None:
        losses = np.ascontiguousarray(losses, dtype=np.float64)
        if self.tree_ is not None:  # tree_ix_step, the kernel the compiled path runs too
            self.tree_.ix_step(self.rows_, losses, self.eta_, self.gamma_)
            return None
        # the IX step and the projection onto the row caps in the kernel the
        # compiled path runs too, so both paths round alike
        exp_ix_m_dense_observe(self.dense_state_, self.set_state_, self.rows_, self.weights_,
                               losses)
        return None

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``). ``state="tree"``:
        ``exp_ix_m_tree_propose``/``exp_ix_m_tree_observe`` on ``TreePlayerState``
        (the tree's record), on any set (the tree draws and projects itself);
        ``state="dense"``: ``exp_ix_m_dense_propose``/``exp_ix_m_dense_observe``
        on ``DenseState`` with the set's draw, on a capped simplex only. The
        Python methods run the same kernels but the dense draw (the set's
        ``sample``)."""
        if constraint is None or replaces(self, ExpIXM, ("propose", "observe")):
            return None
        if self.tree_ is not None:
            state = TreePlayerState(self.tree_.state_, self.weights_, float(self.eta_),
                                    float(self.gamma_))
            return Compiled("plugins.p_players.exp_ix_m:exp_ix_m_tree", state)
        if constraint.kernels != CAPPED_SET:
            return None
        return Compiled("plugins.p_players.exp_ix_m:exp_ix_m_dense", self.dense_state_)

    def regret_bound(self, rounds: int) -> float | None:
        """The bound of the class docstring after ``rounds`` rounds at the step
        sizes in use (game units, probability at least 1 - delta)."""
        n, k, T = self.constraint_.n, self.constraint_.k, rounds
        eta, gamma = self.eta_, self.gamma_
        if gamma <= 0.0:
            return None
        a = math.log(n / self.delta)
        return (math.log(n / k) / eta + a / (2 * gamma)
                + (eta / 2 + gamma) / k * (n * T + n * a / (2 * gamma)))


@njit(cache=True, error_model="numpy")
def exp_ix_m_dense_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``ExpIXM.propose`` with ``state="dense"``: k distinct rows with
    ``P[i in I_t] = k p_i`` by the set's draw (Algorithm 2, Line 11); batch
    weights ``1/k``."""
    rows, _ = capped_set_sample(ks, ps.p, rng)
    return rows, ps.batch


@njit(cache=True, error_model="numpy")
def exp_ix_m_dense_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``ExpIXM.observe`` with ``state="dense"``: the weights ``p`` (into the
    scratch ``w``) times ``exp(-eta l_hat_i)`` on the sampled rows (the IX
    estimate, Neu 2015), then the KL projection onto K without mixing
    (Algorithm 4, ``K.project(log p - eta l_hat, 0, log_domain=True)``) by
    ``weights_row_caps``, the capped set warm-started from the last round's
    (``log_row_caps`` from ``log w`` if the free weights underflow), written
    into ``p``; the action is ``1/k`` on the sampled rows. O(n), in passes
    that vectorise. numpy's error model: a division by zero gives inf."""
    p, w, batch, eta, gamma, capped, book = ps
    caps, k = ks.caps, ks.k
    n = p.size
    if capped_set_point(ks, p, capped):
        return batch, rows, batch
    kappa, log_kappa = capped_set_kappa(ks, 0.0)
    for i in range(n):
        w[i] = p[i]
    for j in range(rows.size):
        i = rows[j]
        w[i] *= np.exp(-(eta * (1.0 - losses[j]) / (k * p[i] + gamma)))
    if not weights_row_caps(p, w, capped, caps, kappa, 0.0, book, 0.0):
        for i in range(n):
            w[i] = np.log(w[i])
        log_row_caps(p, w, capped, caps, kappa, log_kappa, 0.0, book)
    return batch, rows, batch


@njit(cache=True, error_model="numpy")
def exp_ix_m_tree_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``ExpIXM.propose`` with ``state="tree"``: systematic sampling by k
    descents of the tree (``CappedWeightTree.sample``, ``tree_sample``; the
    draw of Algorithm 2, Line 11), one offset per try, redrawn while two
    targets fall in one row; batch weights ``1/k``. O(k log n)."""
    return tree_sample(ps.tree, rng), ps.batch


@njit(cache=True, error_model="numpy")
def exp_ix_m_tree_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``ExpIXM.observe`` with ``state="tree"``: ``CappedWeightTree.ix_step``
    (``tree_ix_step``: the IX step on the sampled rows, the KL projection of
    Algorithm 4 on the largest weights, a rebase when due); the action is
    ``1/k`` on the sampled rows. O(k log n) but for the rare O(n) rebase."""
    tree_ix_step(ps.tree, rows, losses, ps.eta, ps.gamma)
    return ps.batch, rows, ps.batch


@harness.hookimpl
def register_p_players(register):
    register(ExpIXM)
