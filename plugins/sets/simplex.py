"""The simplex ``S_n`` (max loss; the k-set with k = 1), paper Section 3."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

import harness
from harness import Draw, Param
from plugins.lib.capped import categorical_row
from plugins.sets.kset import KSet


class Simplex(KSet):
    """``S_n``: ``lmo`` is the largest loss; ``project`` normalises (the KL
    projection onto the simplex) and mixes with the uniform distribution;
    ``sample`` is one categorical draw (inverse CDF, O(n)), which is
    systematic sampling with k = 1: ``sampler`` is "systematic"."""

    name: ClassVar[str] = "simplex"
    params: ClassVar[dict[str, Param]] = {
        "n": Param(int, low=1, doc="number of rows (set by the data set)"),
    }

    def __init__(self, n: int) -> None:
        super().__init__(n, k=1, sampler="systematic")

    #: the compiled draw (``plugins.lib.capped.capped_set_sample``): this ``sample``
    compiled_sampler: ClassVar[str] = "categorical"

    def sample(self, p: np.ndarray, rng: np.random.Generator) -> Draw:
        """One row, the inverse CDF at a uniform (``categorical_row``)."""
        row = categorical_row(np.ascontiguousarray(p, dtype=np.float64), rng.random())
        return Draw(np.array([row], dtype=np.int64), self.ones_)


@harness.hookimpl
def register_constraint_sets(register):
    register(Simplex)
