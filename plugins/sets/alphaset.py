"""The alpha-set ``K_alpha = {p : 0 <= p_i <= alpha_i, sum p = 1}`` with
``k alpha_i`` in ``{1, ..., k}`` (paper, Appendix F, eq. (alpha-Set)).

Per-row caps let rows be treated heterogeneously: by subgroup, by a prior
confidence that a row is an outlier, or by any per-row column. Caps are given
in units of ``1/k`` (``c_i = k alpha_i``); with every ``c_i = 1`` the set is the
k-set ``S_{n,k}``. Appendix F shows that the extreme points of ``K_alpha`` have
``k p`` integer (Corollary F.2), i.e. they are multisets of size k (samples
*with* replacement, Section F.2); it gives no sampler and no bandit. This
module supplies the set's oracle, its KL projection mixed with the uniform
distribution (Algorithm 4 with per-row caps), its Euclidean projection and a
multiset sampler with ``E[m_i] = k p_i``, whose numerics are in
``plugins.lib.capped`` (``alpha_kl_projection``, ``capped_simplex_euclidean``,
``multiset_round``), and the parsing of the caps from the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import harness
from harness import ConfigError, Draw, Param
from harness.engine import Compiled, replaces
from plugins.lib.capped import (
    CAPPED_SET,
    alpha_kl_projection,
    capped_set_state,
    capped_simplex_euclidean,
    check_gamma,
    log_weights,
    multiset_round,
)

#: ways to give the caps ``k alpha_i`` (the keys of the ``caps`` mapping)
CAP_SOURCES = ("rows", "file", "column", "by_group")


# ---------------------------------------------------------------------------
# caps from the config
# ---------------------------------------------------------------------------


def _rows_text(rows: np.ndarray, limit: int = 5) -> str:
    shown = ", ".join(str(int(i)) for i in rows[:limit])
    more = f", ... ({rows.size} rows in all)" if rows.size > limit else ""
    return f"[{shown}{more}]"


def check_caps(values: Any, n: int, k: int, source: str) -> np.ndarray:
    """Validate caps ``c_i = k alpha_i``: n integers in [1, k] with ``sum c >= k``
    (i.e. ``sum alpha_i >= 1``, implied by ``c_i >= 1`` when ``k <= n``); return
    them as int64. Errors name the first offending rows."""
    try:
        c = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"The caps of alphaset ({source}) must be numbers k alpha_i, "
                          f"one per row. Got {values!r:.200} instead.") from err
    if c.size != n:
        raise ConfigError(f"The caps of alphaset ({source}) must give one k alpha_i per row "
                          f"(n={n}). Got {c.size} values instead.")
    bad = np.flatnonzero(~np.isfinite(c) | (c != np.round(c)) | (c < 1) | (c > k))
    if bad.size:
        raise ConfigError(
            f"The caps of alphaset ({source}) must be integers k alpha_i in [1, k={k}]. "
            f"Got {c[bad[0]]:g} at row {int(bad[0])}; offending rows {_rows_text(bad)}."
        )
    caps = c.astype(np.int64)
    if int(caps.sum()) < k:
        raise ConfigError(
            f"The caps of alphaset ({source}) must satisfy sum alpha_i >= 1, i.e. "
            f"sum k alpha_i >= k={k}. Got sum k alpha_i = {int(caps.sum())} over n={n} rows."
        )
    return caps


def read_caps_file(path: str, n: int, k: int) -> np.ndarray:
    """Caps from a file: ``.npy``, or text with one number per line (``#`` comments)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"The caps file of alphaset was not found: {file.resolve()}.")
    try:
        values = np.load(file) if file.suffix == ".npy" else np.loadtxt(file, ndmin=1)
    except (ValueError, OSError) as err:
        raise ConfigError(f"The caps file of alphaset could not be read as numbers: "
                          f"{file.resolve()} ({err}).") from err
    return check_caps(values, n, k, f"file {file}")


def _dataset_column(dataset: Any, column: Any) -> np.ndarray:
    columns = getattr(dataset, "columns", None) or {}
    if not isinstance(column, str) or column not in columns:
        raise ConfigError(
            f"The caps of alphaset name the data-set column {column!r}; the data set "
            f"'{getattr(dataset, 'name', '?')}' has columns {sorted(columns)}."
        )
    return np.asarray(columns[column])


def caps_by_group(labels: np.ndarray, rule: Any, n: int, k: int) -> np.ndarray:
    """Caps from a rule by group: ``{column, values: {group: k alpha}, default}``;
    every group must have a value unless ``default`` is given."""
    values = rule.get("values") or {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"caps.by_group.values of alphaset must map group -> k alpha_i. "
                          f"Got {values!r} instead.")
    by_text = {str(g): v for g, v in values.items()}
    default = rule.get("default")
    groups = [str(g) for g in np.unique(labels.astype(str))]
    missing = [g for g in groups if g not in by_text]
    if missing and default is None:
        raise ConfigError(
            f"caps.by_group of alphaset gives no k alpha_i for group(s) {missing} of column "
            f"'{rule.get('column')}' (groups {groups}); add them to 'values' or set 'default'."
        )
    unknown = sorted(set(by_text) - set(groups))
    if unknown:
        raise ConfigError(f"caps.by_group.values of alphaset names group(s) {unknown} absent "
                          f"from column '{rule.get('column')}' (groups {groups}).")
    text = labels.astype(str)
    caps = np.full(n, np.nan)
    for group, value in [(None, default), *by_text.items()]:
        if value is None:
            continue
        try:
            caps[slice(None) if group is None else text == group] = float(value)
        except (TypeError, ValueError) as err:
            where = "default" if group is None else f"group {group!r}"
            raise ConfigError(f"caps.by_group of alphaset must give integers k alpha_i. "
                              f"Got {value!r} for {where}.") from err
    return check_caps(caps, n, k, f"by_group on column '{rule.get('column')}'")


def parse_caps(spec: Any) -> tuple[str | None, Any]:
    """``(source, argument)`` of a ``caps`` config value (None: every cap 1)."""
    if spec is None:
        return None, None
    if not isinstance(spec, Mapping) or len(spec) != 1 or next(iter(spec)) not in CAP_SOURCES:
        raise ConfigError(
            "The 'caps' parameter of alphaset must be None or a mapping with exactly one "
            f"of the keys {list(CAP_SOURCES)}. Got {spec!r:.200} instead."
        )
    source, arg = next(iter(spec.items()))
    if source == "by_group":
        if not isinstance(arg, Mapping) or not isinstance(arg.get("column"), str):
            raise ConfigError("caps.by_group of alphaset must be a mapping with a 'column' "
                              f"name and 'values'. Got {arg!r} instead.")
        extra = sorted(set(arg) - {"column", "values", "default"})
        if extra:
            raise ConfigError(f"Unknown key(s) {extra} in caps.by_group of alphaset. "
                              "Allowed keys: ['column', 'default', 'values'].")
    if source in ("file", "column") and not isinstance(arg, str):
        raise ConfigError(f"caps.{source} of alphaset must be a str. Got {arg!r} instead.")
    return source, arg


# ---------------------------------------------------------------------------
# the constraint set
# ---------------------------------------------------------------------------


class AlphaSet:
    """``K_alpha``: row i's weight is capped at ``alpha_i = c_i / k``.

    ``caps`` (one of): None (every ``c_i = 1``: the k-set), ``{rows: [...]}``
    (n integers), ``{file: path}`` (``.npy`` or one number per line),
    ``{column: name}`` (a column of the data set's ``columns``), or
    ``{by_group: {column: name, values: {group: c}, default: c}}``. Caps that
    read the data set are resolved by ``bind(dataset)``, which the harness
    calls right after building the set.
    """

    name: ClassVar[str] = "alphaset"
    sampler: ClassVar[str] = "multiset"
    params: ClassVar[dict[str, Param]] = {
        "n": Param(int, low=1, doc="number of rows (set by the data set)"),
        "k": Param(int, default=20, low=1, high="n",
                   doc="multiset size; caps are k alpha_i in {1, ..., k}"),
        "caps": Param(dict, default=None, nullable=True,
                      doc="k alpha_i per row: None (all 1), {rows}, {file}, {column} "
                          "or {by_group: {column, values, default}}"),
    }

    def __init__(self, n: int, k: int = 20, caps: Mapping[str, Any] | None = None) -> None:
        self.n = n
        self.k = k
        self.caps = caps
        self.source_, arg = parse_caps(caps)
        self.caps_: np.ndarray | None = None
        if self.source_ is None:
            self._set_caps(np.ones(n, dtype=np.int64))
        elif self.source_ == "rows":
            self._set_caps(check_caps(arg, n, k, "rows"))
        elif self.source_ == "file":
            self._set_caps(read_caps_file(arg, n, k))

    @classmethod
    def contract_params(cls, n: int) -> dict[str, Any]:
        """Non-uniform caps for ``harness.contract``: ``k = min(4, n)``,
        ``k alpha_i = k`` on every 8th row (a row that alone can hold all the
        mass), 2 on every 3rd of the others, 1 elsewhere; so the oracle, the
        projections, the sampler and the p-players meet caps of three sizes, and
        the sampler multiplicities above 1 (with every cap 1 the set is the k-set)."""
        k = min(4, n)
        caps = np.ones(n, dtype=np.int64)
        caps[::3] = 2
        caps[::8] = k
        return {"n": n, "k": k, "caps": {"rows": np.minimum(caps, k).tolist()}}

    def _set_caps(self, caps: np.ndarray) -> None:
        self.caps_ = caps
        self.alpha_ = caps / self.k
        self.kappa_cache_: tuple[float, np.ndarray] | None = None

    def bind(self, dataset: Any) -> dict[str, float]:
        """Read caps that come from the data set's columns; return summary values
        of the caps (logged as ``constraint.*`` parameters)."""
        if self.source_ == "column":
            self._set_caps(check_caps(_dataset_column(dataset, self.caps["column"]),
                                      self.n, self.k, f"column '{self.caps['column']}'"))
        elif self.source_ == "by_group":
            rule = self.caps["by_group"]
            labels = _dataset_column(dataset, rule["column"])
            self._set_caps(caps_by_group(labels, rule, self.n, self.k))
        caps = self._caps()
        return {"sum_alpha": float(caps.sum()) / self.k, "max_k_alpha": int(caps.max()),
                "rows_k_alpha_above_1": int(np.count_nonzero(caps > 1))}

    def _caps(self) -> np.ndarray:
        if self.caps_ is None:
            raise RuntimeError(
                f"alphaset caps from caps.{self.source_} are read from the data set: call "
                "bind(dataset) first (harness.prepare does)."
            )
        return self.caps_

    @property
    def alpha(self) -> np.ndarray:
        """The caps ``alpha_i = c_i / k``."""
        self._caps()
        return self.alpha_

    def row_caps(self) -> np.ndarray:
        """The caps ``alpha`` (every ``k alpha_i = 1``: the k-set ``S_{n,k}``)."""
        return self.alpha.copy()

    def lmo(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        """``max_{p in K_alpha} <losses, p>``: fill the largest losses up to their
        caps until the mass is 1. Every cap is at least 1/k, so only the k
        largest losses can receive mass: O(n) selection plus O(k log k) sort.
        The argmax has ``k p`` integer (a multiset vertex, Corollary F.2)."""
        caps = self._caps()
        n, k = self.n, self.k
        top = np.argpartition(losses, n - k)[n - k:]
        rank = np.argsort(-losses[top], kind="stable")
        c = caps[top][rank]
        before = np.cumsum(c) - c
        take = np.empty(k)
        take[rank] = np.clip(k - before, 0, c)
        p = np.zeros(n)
        p[top] = take / k
        return float(np.sum(losses[top] * take) / k), p

    def kappa(self, gamma: float) -> np.ndarray:
        """Per-row caps before mixing, ``(alpha_i - gamma/n) / (1 - gamma)``
        (Line 5 of Algorithm 2 with a cap per row). With ``k <= n`` and ``alpha_i
        >= 1/k`` every ``kappa_i >= 1/n > 0`` for ``gamma`` in [0, 1), and
        ``sum kappa >= 1`` because ``sum alpha >= 1``."""
        cached = self.kappa_cache_
        if cached is not None and cached[0] == gamma:
            return cached[1]
        kappa = (self.alpha - gamma / self.n) / (1.0 - gamma)
        self.kappa_cache_ = (gamma, kappa)
        return kappa

    def project(self, weights, gamma=0.0, *, log_domain=False, return_capped=False):
        """KL projection onto ``{q_i <= kappa_i, sum q = 1}`` then mixing with the
        uniform distribution at rate ``gamma`` (Lines 3-10 of Algorithm 2 with
        per-row caps): capped rows end at exactly ``alpha_i``, the uncapped rows
        are ``(1 - gamma) lam w_i + gamma / n`` with one common ``lam``."""
        check_gamma(gamma)
        alpha = self.alpha
        if int(self.caps_.sum()) == self.k:  # sum alpha = 1: the set is the point alpha
            p = alpha.copy()
            return (p, np.ones(self.n, dtype=bool)) if return_capped else p
        log_w = log_weights(weights, log_domain)
        q, capped = alpha_kl_projection(log_w, self.kappa(gamma))
        p = (1.0 - gamma) * q + gamma / self.n
        p[capped] = alpha[capped]
        return (p, capped) if return_capped else p

    def euclidean_project(self, v: np.ndarray) -> np.ndarray:
        """Euclidean projection onto ``K_alpha`` (for gradient-ascent p-players)."""
        return capped_simplex_euclidean(v, self.alpha)

    def sample(self, p: np.ndarray, rng: np.random.Generator) -> Draw:
        """A multiset of size k with mean ``k p``: the rows distinct,
        ``E[m_i] = k p_i``, ``m_i <= k alpha_i``; the action is ``a = m / k`` on
        ``rows`` (``multiset_round``: DepRound on the fractional parts of ``k p``)."""
        rows, mult = multiset_round(np.asarray(p, dtype=np.float64) * self.k, self._caps(),
                                    self.k, rng)
        return Draw(rows, mult)

    def compiled(self) -> Compiled | None:
        """The compiled form (``harness.engine``): the capped simplex with caps
        ``alpha`` and the multiset draw (``plugins.lib.capped.capped_set_state``);
        the single point ``alpha`` when the caps sum to 1."""
        if replaces(self, AlphaSet, ("sample", "project", "euclidean_project", "row_caps")):
            return None
        caps = self._caps()
        return Compiled(CAPPED_SET, capped_set_state(self.alpha, self.k, "multiset",
                                                     int(caps.sum()) == self.k))

    def contains(self, p: np.ndarray, atol: float = 1e-9) -> bool:
        p = np.asarray(p)
        return bool(
            p.shape == (self.n,)
            and abs(float(np.sum(p)) - 1.0) <= atol
            and float(np.min(p)) >= -atol
            and np.all(p <= self.alpha + atol)
        )


@harness.hookimpl
def register_constraint_sets(register):
    register(AlphaSet)
