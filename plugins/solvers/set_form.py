"""The form of the constraint set a solver runs on, read through the set's
protocol, never its name: ``K = {0 <= q_i <= c_i, sum q = 1}`` where
``row_caps()`` gives the caps ``c``, else the permutahedron ``P(sigma)`` of
``spectrum()`` (``harness.protocols.ConstraintSet``). ``SetForm`` is the one
record the kernels read it from (by field, branching on ``kind``).

A set of neither form, or a penalty whose best response the kernels do not
compute (``kernel_form``), is read through ``harness.problem.Problem.inner``
instead, by the solvers that can (``lsvrg``, ``sgd``); ``largest_weight``
gives their default step its ``sigma_max`` from the set's ``max_weight()``
when it has no form."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from harness import ConfigError

#: ``SetForm.kind``: row caps, or a spectrum
ROW_CAPS, SPECTRUM = 0, 1


class SetForm(NamedTuple):
    """A constraint set's form: ``kind`` (``ROW_CAPS`` or ``SPECTRUM``), the row
    caps (``ROW_CAPS``; else empty) and the spectrum sorted ascending
    (``SPECTRUM``; else empty)."""

    kind: np.int64
    caps: np.ndarray
    sigma: np.ndarray


def caps_form(caps: np.ndarray) -> SetForm:
    """The form of the capped simplex with row caps ``caps``."""
    return SetForm(np.int64(ROW_CAPS), np.ascontiguousarray(caps, dtype=np.float64), np.empty(0))


def spectrum_form(sigma: np.ndarray) -> SetForm:
    """The form of the permutahedron of ``sigma`` (sorted ascending)."""
    return SetForm(np.int64(SPECTRUM), np.empty(0), np.ascontiguousarray(sigma, dtype=np.float64))


def set_form(solver: str, constraint: Any) -> SetForm:
    """``constraint``'s row caps if ``row_caps()`` is not None, else its spectrum
    over its n rows, else a ``ConfigError`` naming ``solver``, the set and
    what is missing."""
    caps = constraint.row_caps()
    if caps is not None:
        return caps_form(caps)
    spectrum = getattr(constraint, "spectrum", None)
    sigma = spectrum() if callable(spectrum) else None
    if sigma is None:
        raise ConfigError(
            f"The solver '{solver}' needs a constraint set with row caps or a spectrum; "
            f"'{getattr(constraint, 'name', type(constraint).__name__)}' has neither "
            "(row_caps() is None, spectrum() absent or None).")
    return spectrum_form(sigma)


def sigma_max(form: SetForm) -> float:
    """The largest weight a point of K can put on one row: the largest cap, or
    the largest entry of the spectrum."""
    return float(np.max(form.caps if form.kind == ROW_CAPS else form.sigma))


def largest_weight(constraint: Any) -> float:
    """``sigma_max`` of ``constraint`` if it has row caps or a spectrum, else its
    ``max_weight()`` (``max_{q in K} max_i q_i``) if it offers one, else 1 (no
    point of the simplex weighs a row more: always valid, if loose)."""
    try:
        return sigma_max(set_form("", constraint))
    except ConfigError:
        pass
    offered = getattr(constraint, "max_weight", None)
    return float(offered()) if callable(offered) else 1.0


def penalty_of(problem: Any) -> str:
    """The problem's divergence ``D`` of the shift cost: ``"chi2"`` or ``"kl"``."""
    return str(getattr(problem, "penalty", "chi2"))


def kernel_form(constraint: Any, penalty: str, nu: float) -> SetForm | None:
    """The form the kernels compute the best response on (``best_response_dense``:
    the Euclidean projection of ``1/n + l/(nu n)``, or the LMO at ``nu = 0``):
    the set's row caps or spectrum, when the penalty is the chi-square one or
    ``nu = 0``; None otherwise (the best response is then
    ``Problem.inner``'s)."""
    if nu > 0.0 and penalty != "chi2":
        return None
    try:
        return set_form("", constraint)
    except ConfigError:
        return None
