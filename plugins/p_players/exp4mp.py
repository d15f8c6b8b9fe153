"""OL-EXP.4M's p-player: EXP4.MP on the k-set (paper, Algorithm 2; Vural et al. 2019)
and on the alpha-set (the alpha-set appendix, D)."""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param, Proposal
from plugins.lib.capped import (
    capped_set_kappa,
    capped_set_point,
    capped_set_sample,
    capped_set_state,
    log_row_caps,
    needs_draws,
    needs_row_caps,
    player_form,
    weights_row_caps,
)
from plugins.lib.steps import scale_param, scaled_step
from plugins.p_players.kset_tree import (
    MixedTreeState,
    mixed_p_of,
    mixed_tree_p,
    mixed_tree_state,
    tree_gain_step,
    tree_mixed_sample,
)


class Exp4MPState(NamedTuple):
    """EXP4.MP's state (its kernels' and its Python ``observe``'s), the arrays
    changed in place."""

    #: the log-weights, rebased to max 0 only now and then (``exp4mp_project``)
    log_w: np.ndarray
    #: the weights ``exp(log_w)``, kept in step with the log-weights
    w: np.ndarray
    #: a bound on max log_w, the confidence terms' largest climb since the
    #: weights were recomputed, the capped rows' cap mass and the number of free
    #: rows (the last two: ``weights_row_caps``'s book)
    book: np.ndarray
    #: ``p_t`` and the capped rows ``J_t``
    p: np.ndarray
    capped: np.ndarray
    #: rounds since the weights were recomputed, in a one-element array
    since: np.ndarray
    eta: float
    gamma: float
    #: the confidence coefficient ``c / sqrt(n T)``
    conf: float
    #: the confidence term on every row outside ``J_t`` (``confidence="all"``)
    all_rows: bool


class Exp4MPTreeState(NamedTuple):
    """EXP4.MP's state with ``state="tree"`` (``confidence="sampled"``): the
    mixed tree's record and the step."""

    tree: MixedTreeState
    #: the batch weights ``1/k`` (the draws are k distinct rows)
    batch: np.ndarray
    #: the gains of a round's rows (scratch)
    gains: np.ndarray
    eta: float
    #: the confidence coefficient ``c / sqrt(n T)``, on the sampled rows only
    conf: float


class Exp4MP:
    """EXP4.MP with semi-bandit feedback on ``S_{n,k}`` (Algorithm 2, Theorem 4.1 ``th:topk``).

    Each round projects the weights onto the k-set mixed with uniform (Lines
    3-10), draws k rows with ``P[i in I_t] = k p_i`` (Line 11) and raises the
    log-weights by ``eta * (L_hat + c U / sqrt(n T))`` (Lines 13-15).
    ``confidence="all"`` (default) adds the confidence term to every row outside
    ``J_t`` as the proof (Appendix C) does; ``"sampled"`` as the algorithm box
    (Line 15 on the sampled rows only).
    Defaults (Theorem 4.1): ``gamma = sqrt(n log(n/k) / (k T))``, ``eta = k gamma
    / (2n)``, ``c = sqrt(k log(n/delta))``, ``delta = 0.05``.
    ``regret_bound``: ``th:EXP4.MP`` (Appendix C) for the first t rounds, on
    ``S_{n,k}`` with ``confidence="all"`` only (None otherwise).

    Cost per round: ``state="dense"`` keeps the log-weights and ``p_t`` as
    arrays and projects all n rows: O(n). ``state="tree"`` keeps the weights
    in a tree of sums and maxima (``plugins.p_players.kset_tree``,
    ``MixedTreeState``): the projection caps the largest weights (Lemma C.2),
    the draw is systematic sampling (Madow) from the mixture ``p = (1 - gamma)
    q + gamma / n`` by k descents, and a round changes the k sampled rows and
    the capped ones: O(k log n), and O(n) only for a rare rebase and when
    ``p`` is read (checkpoints). The tree needs ``confidence="sampled"``
    (``"all"`` changes every row by its own amount each round: O(n)) and a set
    that samples systematically with one cap on every row (the k-set with
    ``sampler=systematic``, the simplex); ``state="tree"`` elsewhere is a
    config error, and ``auto`` (default) picks the tree where it applies, else
    dense. Derivation: docs/algorithms.md, "EXP4.MP: the round, the
    confidence term and the samples".
    """

    name: ClassVar[str] = "exp4mp"
    state_version: ClassVar[int] = 2
    constraints: ClassVar[tuple[str, ...] | None] = None  # any set that supports() accepts
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="step size; None: k gamma / (2n)"),
        "eta_scale": scale_param("eta"),
        "gamma": Param(float, low=0.0, high=1.0, low_open=True, high_open=True, nullable=True,
                       doc="uniform mixing; None: sqrt(n log(n/k) / (k T))"),
        "c": Param(float, low=0.0, nullable=True,
                   doc="confidence width; None: sqrt(k log(n/delta))"),
        "delta": Param(float, default=0.05, low=0.0, high=1.0, low_open=True, high_open=True,
                       doc="failure probability of the high-probability bound"),
        "confidence": Param(str, default="all", choices=("all", "sampled"),
                            doc="rows receiving the confidence term: all outside J_t (proof) "
                                "or only sampled ones (algorithm box)"),
        "state": Param(str, default="auto", choices=("auto", "tree", "dense"),
                       doc="tree: O(k log n) per round, needs confidence=sampled and a set "
                           "sampling systematically; dense: O(n); auto: tree where it applies"),
    }

    @classmethod
    def supports(cls, constraint) -> str | None:
        """A capped simplex with a sampler: the k-set, the simplex, an alpha-set."""
        return needs_draws(constraint) or needs_row_caps(constraint)

    def __init__(self, eta=None, gamma=None, c=None, delta=0.05, confidence="all",
                 eta_scale=1.0, state="auto") -> None:
        self.eta = eta
        self.eta_scale = eta_scale
        self.gamma = gamma
        self.c = c
        self.delta = delta
        self.confidence = confidence
        self.state = state

    def rows_per_round(self, constraint) -> int:
        return constraint.k

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n, k, T = constraint.n, constraint.k, horizon
        self.constraint_ = constraint
        self.horizon_ = T
        gamma = self.gamma
        if gamma is None:
            gamma = math.sqrt(n * math.log(n / k) / (k * T)) if n > k else 0.0
            if gamma >= 1.0:
                raise harness.ConfigError(
                    f"The theory value of exp4mp's gamma, sqrt(n log(n/k) / (k T)) = {gamma:.3g}, "
                    f"is not below 1 for n={n}, k={k}, T={T}: Theorem 4.1 needs "
                    f"T >= n log(n/k) / k = {n * math.log(n / k) / k:.0f} rounds. "
                    "Raise the budget or set p_player.gamma."
                )
        self.gamma_ = gamma
        self.eta_ = scaled_step(self.name, "eta", self.eta, self.eta_scale, k * gamma / (2 * n))
        self.c_ = self.c if self.c is not None else math.sqrt(k * math.log(n / self.delta))
        self.conf_ = self.c_ / math.sqrt(n * T)
        caps = constraint.row_caps()  # th:EXP4.MP is proven on S_{n,k} only
        self.proven_ = caps is not None and bool(np.all(caps == 1.0 / k))
        self.state_name_ = self._storage(constraint, caps)
        derived = {"eta": self.eta_, "gamma": self.gamma_, "c": self.c_, "delta": self.delta,
                   "state": self.state_name_}
        if self.state_name_ == "tree":
            self.tree_ = mixed_tree_state(n, k, float(caps[0]), float(gamma))
            self.log_w_raw_ = self.tree_.log_w
            self.state_ = Exp4MPTreeState(self.tree_, np.full(k, 1.0 / k), np.zeros(k),
                                          float(self.eta_), float(self.conf_))
            return derived
        self.tree_ = None
        self.log_w_raw_ = np.zeros(n)
        self.weights_ = np.ones(n)  # exp(log_w), kept in step with log_w
        self.p_ = np.empty(n)
        self.capped_ = np.zeros(n, dtype=bool)
        self.state_ = Exp4MPState(self.log_w_raw_, self.weights_, np.array([0.0, 0.0, 0.0, n]),
                                  self.p_, self.capped_, np.zeros(1, dtype=np.int64),
                                  float(self.eta_), float(self.gamma_), float(self.conf_),
                                  self.confidence == "all")
        self.set_state_ = capped_set_state(caps, k, "depround",
                                           abs(float(caps.sum()) - 1.0) <= 1e-12)
        exp4mp_project(self.state_, self.set_state_, True, 0.0)
        return derived

    def _storage(self, constraint, caps) -> str:
        """``state`` resolved: "tree" or "dense" (class docstring)."""
        sampled = self.confidence == "sampled"
        systematic = constraint.sampler == "systematic"
        one_cap = (caps is not None and bool(np.all(caps == caps[0]))
                   and float(caps[0]) * constraint.k <= 1.0 + 1e-12)
        if self.state == "auto":
            return "tree" if sampled and systematic and one_cap else "dense"
        if self.state == "tree" and not sampled:
            raise harness.ConfigError(
                "The 'state' parameter of exp4mp is 'tree', which needs the 'confidence' "
                "parameter to be 'sampled' (the confidence term on the k sampled rows, "
                "O(k log n) per round); it is 'all' (a different term on every row outside "
                "J_t each round: O(n)). Set p_player.confidence=sampled, or "
                "p_player.state=dense or auto."
            )
        if self.state == "tree" and not systematic:
            raise harness.ConfigError(
                "The 'state' parameter of exp4mp is 'tree', which samples systematically; "
                f"the constraint set '{constraint.name}' is configured with sampler "
                f"'{constraint.sampler}'. Set constraint.sampler=systematic "
                "or p_player.state=dense."
            )
        if self.state == "tree" and not one_cap:
            raise harness.ConfigError(
                "The 'state' parameter of exp4mp is 'tree', which needs one row cap of at "
                f"most 1/k on every row (the k-set, the simplex); '{constraint.name}' has "
                "others. Set p_player.state=dense."
            )
        return self.state

    @property
    def p(self) -> np.ndarray:
        """``p_t`` (with ``state="tree"`` computed from the tree: O(n))."""
        return mixed_tree_p(self.tree_) if self.tree_ is not None else self.p_

    @property
    def log_w_(self) -> np.ndarray:
        """The log-weights rebased to max 0 (a copy; the state rebases them
        only now and then, ``exp4mp_project``)."""
        return self.log_w_raw_ - self.log_w_raw_.max()

    def propose(self, rng: np.random.Generator) -> Proposal:
        if self.tree_ is not None:  # tree_mixed_sample, the kernel the compiled path runs too
            self.rows_ = tree_mixed_sample(self.tree_, rng).copy()
            return Proposal(self.rows_, self.state_.batch)
        self.rows_, self.mult_ = self.constraint_.sample(self.p_, rng)
        return Proposal(self.rows_, self.mult_ / self.constraint_.k)

    def observe(self, losses: np.ndarray) -> None:
        """Lines 12-15 and the next round's projection (Lines 3-10), in
        ``exp4mp_observe`` (``exp4mp_tree_step`` with the tree), the kernel the
        compiled path runs too."""
        losses = np.ascontiguousarray(losses, dtype=np.float64)
        if self.tree_ is not None:
            exp4mp_tree_step(self.state_, np.ascontiguousarray(self.rows_, dtype=np.int64),
                             losses)
            return None
        exp4mp_observe(self.state_, self.set_state_, self.rows_, self.mult_ / self.constraint_.k,
                       losses)
        return None

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``). ``state="dense"``:
        ``exp4mp_propose`` and ``exp4mp_observe`` on ``Exp4MPState``, on a
        capped simplex only; ``state="tree"``: ``exp4mp_tree_propose`` and
        ``exp4mp_tree_observe`` on ``Exp4MPTreeState``, on any set (the tree
        draws and projects itself). The Python methods run the same kernels
        but the dense draw (the set's ``sample``)."""
        if self.tree_ is not None:
            return player_form(self, Exp4MP, constraint, "plugins.p_players.exp4mp:exp4mp_tree",
                               capped=False)
        return player_form(self, Exp4MP, constraint, "plugins.p_players.exp4mp:exp4mp")

    def regret_bound(self, rounds: int) -> float | None:
        """The EXP4.MP regret theorem (``th:EXP4.MP``, Appendix C) after
        ``rounds`` rounds at the parameters in use, in game units (class
        docstring); None where the proof does not cover the run."""
        if not self.proven_ or self.confidence != "all":
            return None
        n, k, t = self.constraint_.n, self.constraint_.k, rounds
        eta, gamma, eps = self.eta_, self.gamma_, self.conf_
        a = math.log(n / self.delta)
        beta = gamma + 2 * eta * n / k
        if (n <= k or eps <= 0.0 or beta >= 1.0 or eps * eps > math.e - 2
                or eta * (1 + eps) * n / (k * gamma) > 1.0):
            return None
        return (beta * t + math.log(n / k) / eta + eps * n * t / k
                + 2 * eta * eps * eps * n * n * t / (k * k * gamma) + a / eps)


@njit(cache=True, error_model="numpy")
def exp4mp_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``Exp4MP.propose``: a draw with mean ``p_t`` (Line 11); batch weights ``m / k``."""
    rows, mult = capped_set_sample(ks, ps.p, rng)
    k = ks.k
    weights = np.empty(rows.size)
    for j in range(rows.size):
        weights[j] = mult[j] / k
    return rows, weights


#: rounds after which the weights are recomputed from the log-weights
REFRESH_ROUNDS = 4096


#: increments below this take ``_exp_taylor``
TAYLOR_BELOW = 1e-2


@njit(cache=True, error_model="numpy")
def _exp_taylor(d):  # pragma: no cover - compiled
    """``exp(d)`` for ``|d| < TAYLOR_BELOW`` by its degree-6 Taylor polynomial
    (the rest, below ``d^7 / 5040``, is under 2e-18 relative: within rounding
    of ``exp``)."""
    return 1.0 + d * (1.0 + d * (0.5 + d * (1.0 / 6.0 + d * (1.0 / 24.0 + d * (
        1.0 / 120.0 + d * (1.0 / 720.0))))))


@njit(cache=True, error_model="numpy")
def _exp_small(d):  # pragma: no cover - compiled
    """``exp(d)``: ``_exp_taylor`` below ``TAYLOR_BELOW``, else ``np.exp``."""
    if -TAYLOR_BELOW < d < TAYLOR_BELOW:
        return _exp_taylor(d)
    return np.exp(d)


@njit(cache=True, error_model="numpy")
def exp4mp_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``Exp4MP.observe``: Lines 12-15 of Algorithm 2, then the next round's
    projection (Lines 3-10, ``exp4mp_project``). The multiplicities are ``k``
    times the batch weights.

    The log-weights ``log w`` are the state, as in the class docstring. Beside
    them the weights ``w = exp(log w)`` are kept up to date by multiplying
    each by ``exp`` of its increment (the confidence increments are below
    1e-2 at the defaults, where ``_exp_small`` needs no ``exp`` call), so the
    projection needs no ``exp`` of n rows. Every ``REFRESH_ROUNDS`` rounds,
    and whenever the largest log-weight may have grown by 200, the
    log-weights are rebased to max 0 and the weights recomputed from them, so
    their rounding never drifts by more than about 1e-13 relative. The sampled
    rows' gains (Line 14) come first; the confidence term (Line 15) on every
    uncapped row is then added in the projection's first pass."""
    log_w, w, book, p, capped = ps.log_w, ps.w, ps.book, ps.p, ps.capped
    eta, conf, all_rows = ps.eta, ps.conf, ps.all_rows
    k = ks.k
    stale = False
    for j in range(rows.size):
        i = rows[j]
        if capped[i]:
            continue
        inv = 1.0 / (k * p[i])
        m = np.rint(weights[j] * k)
        gain = eta * losses[j] * inv * m
        if not all_rows:
            gain += (eta * conf) * (m * inv)
        log_w[i] += gain
        if gain > 100.0 or w[i] < 1e-290:
            # a weight that underflowed at a refresh (0, or too few bits) would
            # not follow its log-weight up: recompute them all
            stale = True
        else:
            w[i] *= np.exp(gain)
        if log_w[i] > book[0]:
            book[0] = log_w[i]
    ps.since[0] += 1
    exp4mp_project(ps, ks, stale, eta * conf if all_rows else 0.0)
    return weights, rows, weights


@njit(cache=True, error_model="numpy")
def exp4mp_project(ps, ks, refresh, c):  # pragma: no cover - compiled
    """Lines 3-10 of Algorithm 2 on the weights, after adding the confidence
    term ``c / (k p_i)`` (Line 15; ``c = 0``: none) to every row outside the
    last capped set: ``weights_row_caps`` (the capped set warm-started from
    the last round's, Lemma C.2), then ``p = (1 - gamma) q + gamma / n`` and
    ``p_i = c_i`` on capped rows. If the uncapped rows' weights are below
    1e-250 of the largest (the capped rows dominate by more than
    ``exp(575)``), the log-domain projection (``log_row_caps``) is used for
    the round instead. The common round is three passes over the rows that
    vectorise or keep four running sums: the confidence term, the sum of
    the free weights, and ``p`` with the check of the capped set."""
    log_w, w, book, p, capped, since = ps.log_w, ps.w, ps.book, ps.p, ps.capped, ps.since
    gamma = ps.gamma
    caps, k = ks.caps, ks.k
    n = p.size
    if capped_set_point(ks, p, capped):
        return
    kappa, log_kappa = capped_set_kappa(ks, gamma)
    if c > 0.0:
        # every p_i >= gamma / n: no increment is above c n / (k gamma)
        most = c * n / (k * gamma) if gamma > 0.0 else np.inf
        if most < TAYLOR_BELOW:
            # the Taylor polynomial of exp in a pass free of branches
            for i in range(n):
                d = 0.0 if capped[i] else c * (1.0 / (k * p[i]))
                log_w[i] += d
                w[i] *= _exp_taylor(d)
            book[0] += most
            book[1] += most
        else:
            largest = 0.0
            for i in range(n):
                if not capped[i]:
                    d = c * (1.0 / (k * p[i]))
                    log_w[i] += d
                    if d > 100.0:
                        refresh = True
                    else:
                        w[i] *= _exp_small(d)
                    if log_w[i] > book[0]:
                        book[0] = log_w[i]
                    if d > largest:
                        largest = d
            book[1] += largest
    # a weight below exp(-708) of the largest at the last refresh is 0 or has
    # lost bits, and does not follow its log-weight up: while it has climbed by
    # at most 60 it is below exp(-648), under exp(-73) of the free weights'
    # sum (more than exp(-575) of the largest, else the log domain is used)
    if refresh or since[0] >= REFRESH_ROUNDS or book[0] > 200.0 or book[1] > 60.0:
        high = log_w.max()
        for i in range(n):
            log_w[i] -= high
            w[i] = np.exp(log_w[i])
        book[0] = 0.0
        book[1] = 0.0
        since[0] = 0
    tiny = 1e-250 * np.exp(book[0])
    if not weights_row_caps(p, w, capped, caps, kappa, gamma, book[2:], tiny):
        log_row_caps(p, log_w, capped, caps, kappa, log_kappa, gamma, book[2:])


@njit(cache=True, error_model="numpy")
def exp4mp_tree_step(ps, rows, losses):  # pragma: no cover - compiled
    """``Exp4MP.observe`` with ``state="tree"``: Lines 12-15 of Algorithm 2
    with the confidence term on the sampled rows (``confidence="sampled"``),
    ``log w_i += eta (L_i + conf) / (k p_i)`` outside ``J_t`` with ``p_i`` of
    this round, then the next round's projection (Lines 3-10) on the tree
    (``tree_gain_step``). The rows are distinct (multiplicity 1). O(k log n)
    but for a rare rebase."""
    ms = ps.tree
    k = ms.tree.k
    eta, conf, gains = ps.eta, ps.conf, ps.gains
    for j in range(rows.size):
        i = rows[j]
        inv = 1.0 / (k * mixed_p_of(ms, i))
        # the arithmetic of exp4mp_observe with m = 1
        gains[j] = eta * losses[j] * inv + (eta * conf) * inv
    tree_gain_step(ms, rows, gains)


@njit(cache=True, error_model="numpy")
def exp4mp_tree_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``Exp4MP.propose`` with ``state="tree"``: k distinct rows with ``P[i in
    I_t] = k p_i`` by systematic sampling from the mixture (Line 11,
    ``tree_mixed_sample``); batch weights ``1/k``. O(k log n)."""
    return tree_mixed_sample(ps.tree, rng), ps.batch


@njit(cache=True, error_model="numpy")
def exp4mp_tree_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``Exp4MP.observe`` with ``state="tree"`` (``exp4mp_tree_step``); the
    action is ``1/k`` on the sampled rows."""
    exp4mp_tree_step(ps, rows, losses)
    return ps.batch, rows, ps.batch


@harness.hookimpl
def register_p_players(register):
    register(Exp4MP)
