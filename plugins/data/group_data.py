"""A synthetic classification data set with a group column, for per-row caps by
group (the alpha-set) and per-group metrics.

The two groups follow linear labelling rules at an angle to each other, so
one linear model fits both only as a compromise; ERM favours the majority's
rule, an average top-k loss the rows with the smallest margins whatever their
group, and per-group caps ``k alpha_i`` decide how much worst-case weight
each group's rows may receive.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

import harness
from harness import Param
from plugins.data.datasets import min_max
from plugins.data.split import PARAMS as SPLIT_PARAMS
from plugins.data.split import Splittable, split_rows


class SyntheticGroups(Splittable):
    """``n`` rows, ``d`` features in [0, 1], column ``group`` in
    {``majority``, ``minority``} (a ``minority`` share of the rows).

    Each row is drawn in its group's frame: a signed distance ``u`` to the
    group's decision boundary with ``|u|`` uniform on [``margin``, 1/2] and the
    label ``1[u > 0]`` (classes equally likely), the other coordinates uniform
    on [-1/2, 1/2]. The minority's frame is the majority's rotated by
    ``angle`` degrees in the plane of the first two features; features are
    then min-max scaled to [0, 1]. Each group alone is linearly separable
    with margin ``margin``. Generated from ``seed`` with numpy's default
    generator: the same parameters give the same table. The group is a
    column, not a feature. Under a ``split`` the min-max scaling is fitted on
    the training rows.
    """

    name: ClassVar[str] = "synthetic_groups"
    params: ClassVar[dict[str, Param]] = {
        "n": Param(int, default=400, low=10, doc="rows"),
        "d": Param(int, default=3, low=2, doc="features"),
        "minority": Param(float, default=0.1, low=0.0, high=0.5, low_open=True,
                          doc="share of rows in the minority group"),
        "angle": Param(float, default=45.0, low=0.0, high=90.0,
                       doc="degrees between the two groups' decision boundaries"),
        "margin": Param(float, default=0.1, low=0.0, high=0.5, high_open=True,
                        doc="smallest distance of a row to its group's boundary"),
        "seed": Param(int, default=0, low=0,
                      doc="seed of the generated data (its identity; not the run's seed)"),
        **SPLIT_PARAMS,
    }
    task: ClassVar[str] = "classification"
    n_classes: ClassVar[int] = 2
    default_model: ClassVar[str] = "logistic_cel"
    group_column: ClassVar[str] = "group"

    def __init__(self, n: int = 400, d: int = 3, minority: float = 0.1, angle: float = 45.0,
                 margin: float = 0.1, seed: int = 0, split: str = "all", test_size: float = 0.2,
                 split_seed: int = 42) -> None:
        self.n, self.d, self.minority, self.angle, self.margin, self.seed = (
            n, d, minority, angle, margin, seed)
        self.split, self.test_size, self.split_seed = split, test_size, split_seed
        rng = np.random.default_rng(seed)
        is_min = np.zeros(n, dtype=bool)
        is_min[rng.permutation(n)[:max(1, round(minority * n))]] = True
        y = rng.integers(0, 2, n)
        u = (2 * y - 1) * rng.uniform(margin, 0.5, n)
        rest = rng.uniform(-0.5, 0.5, (n, d - 1))
        theta = np.where(is_min, np.deg2rad(angle), 0.0)
        cos, sin = np.cos(theta), np.sin(theta)
        X = np.column_stack((cos * u - sin * rest[:, 0], sin * u + cos * rest[:, 0], rest[:, 1:]))
        rows = self.rows_ = split_rows(self.name, n, split, test_size, split_seed)
        self.X = min_max(rows.kept(X), rows.fitted(X))
        self.y = rows.kept(y).astype(np.int64)
        self.columns = {"group": rows.kept(np.where(is_min, "minority", "majority"))}
        self.provenance = {
            "source": "synthetic, plugins/data/group_data.py",
            "generator": f"numpy default_rng({seed}); n={n}, d={d}, minority={minority}, "
                         f"angle={angle}, margin={margin}",
        }
        if split != "all":
            self.provenance["split"] = rows.describe(test_size, split_seed)


@harness.hookimpl
def register_datasets(register):
    register(SyntheticGroups)
