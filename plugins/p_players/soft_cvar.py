"""SGD on the smoothed Rockafellar-Uryasev form of the average top-k loss:
Curi, Levy, Jegelka and Krause (2020)'s Soft-CVaR baseline, the convex
approximation of Nemirovski and Shapiro (2006). Everything but the slope of
the batch weights is ``ru_sgd`` (``plugins.p_players.ru_sgd``), whose kernels
it runs."""

from __future__ import annotations

import math
from typing import ClassVar

import harness
from harness import Param
from plugins.p_players.ru_sgd import TruncatedCVaR


class SoftCVaR(TruncatedCVaR):
    """SGD on the smoothed Rockafellar-Uryasev form

        F_T(w, tau) = tau + sum_i c_i T softplus((L_i(w) - tau) / T):

    ``(x)_+`` is replaced by ``T log(1 + exp(x / T))``, so the batch weights
    are ``(n/b) c_i sigmoid((L_i - tau) / T)`` instead of an indicator. Since
    ``0 <= T softplus(x / T) - (x)_+ <= T log 2`` and ``sum_i c_i = n/k``,
    ``F <= F_T <= F + (n/k) T log 2``: the default temperature
    ``T = bias * k / (n log 2)`` guarantees that minimising ``F_T`` costs at
    most ``bias`` in objective.
    """

    name: ClassVar[str] = "soft_cvar"
    state_version: ClassVar[int] = 1
    params: ClassVar[dict[str, Param]] = {
        **TruncatedCVaR.params,
        "temperature": Param(float, low=0.0, low_open=True, nullable=True,
                             doc="softplus temperature T; None: bias * k / (n log 2)"),
        "bias": Param(float, default=1e-3, low=0.0, low_open=True,
                      doc="largest objective cost of the smoothing (sets T when T is None)"),
    }

    def __init__(self, batch_size=None, tau_lr=None, temperature=None, bias=1e-3,
                 tau_lr_scale=1.0) -> None:
        super().__init__(batch_size, tau_lr, tau_lr_scale)
        self.temperature = temperature
        self.bias = bias

    def softplus_temperature(self, constraint) -> float:
        """``temperature``, or ``bias / (sum_i c_i log 2)`` (``bias k / (n log 2)``
        on the k-set)."""
        total_caps = float(self.caps(constraint).sum())  # n/k on the k-set
        self.temperature_ = self.temperature if self.temperature is not None else (
            self.bias / (total_caps * math.log(2.0)))
        return self.temperature_

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        derived = super().setup(constraint, horizon)
        total_caps = float(self.caps(constraint).sum())
        # the guaranteed smoothing cost at the temperature in use
        return {**derived, "temperature": self.temperature_,
                "bias": self.temperature_ * total_caps * math.log(2.0)}


@harness.hookimpl
def register_p_players(register):
    register(SoftCVaR)
