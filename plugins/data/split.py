"""The train/test protocol of the DRO literature as options of every built-in
data set: ``split`` (``all``, ``train`` or ``test``), ``test_size`` and
``split_seed``.

The rows are scikit-learn's: ``train_test_split(X, y, test_size=test_size,
random_state=split_seed)`` (Mehta et al., ICLR 2024, run their regression
study on ``test_size=0.2, random_state=42``), in the order that call returns
them. A data set under a split fits its preparation on the training rows
only and applies it to the rows it keeps, so ``split=test`` holds the
held-out rows as a model trained on ``split=train`` sees them. scikit-learn
is imported when a split is asked for: ``split=all`` (the default) does not
load it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from harness import ConfigError, Param

SPLITS = ("all", "train", "test")

#: the split options, in every built-in data set's ``params``
PARAMS: dict[str, Param] = {
    "split": Param(str, default="all", choices=SPLITS,
                   doc="all rows, or the rows of scikit-learn's train_test_split: train, or "
                       "test (the held-out rows); a split's preparation is fitted on train"),
    "test_size": Param(float, default=0.2, low=0.0, high=1.0, low_open=True, high_open=True,
                       doc="share of the rows held out (train_test_split's test_size)"),
    "split_seed": Param(int, default=42, low=0, high=2**32 - 1,
                        doc="train_test_split's random_state"),
}


@dataclass(frozen=True)
class Rows:
    """The rows a data set keeps (``keep``) and those its preparation is fitted
    on (``fit``), as indices in scikit-learn's order; None: all rows, in order."""

    split: str
    keep: np.ndarray | None = None
    fit: np.ndarray | None = None
    n_train: int = 0
    n_test: int = 0

    def kept(self, a: Any) -> Any:
        """``a``'s kept rows."""
        return a if self.keep is None else a[self.keep]

    def fitted(self, a: Any) -> Any:
        """``a``'s rows that preparation is fitted on; None for all rows (the
        data set is fitted on itself)."""
        return None if self.fit is None else a[self.fit]

    def counts(self) -> dict[str, int]:
        """``n_train`` and ``n_test`` under a split; empty for all rows."""
        return {} if self.split == "all" else {"n_train": self.n_train, "n_test": self.n_test}

    def describe(self, test_size: float, split_seed: int) -> str:
        """The split in words, for a data set's provenance."""
        return (f"{self.split}: {self.n_train if self.split == 'train' else self.n_test} of "
                f"{self.n_train + self.n_test} rows (scikit-learn train_test_split, "
                f"test_size={test_size}, random_state={split_seed})")


def split_rows(name: str, n: int, split: str, test_size: float, split_seed: int) -> Rows:
    """The rows of ``split`` among ``n`` (``name``: the data set, for errors)."""
    if split == "all":
        return Rows("all")
    n_test = math.ceil(test_size * n)  # as train_test_split counts them
    if n_test >= n:
        raise ConfigError(f"The 'test_size' parameter of {name} must leave a training row "
                          f"among its n={n} rows (it holds out ceil(test_size n)). Got "
                          f"{test_size!r} instead.")
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(np.arange(n), test_size=test_size, random_state=split_seed)
    return Rows(split, train if split == "train" else test, train, train.size, test.size)


class Splittable:
    """A data set with the split options (``PARAMS``): it stores every one of its
    ``params`` under its own name, so that ``held_out`` rebuilds it."""

    params: ClassVar[dict[str, Param]]
    split: str
    rows_: Rows

    def held_out(self) -> Any:
        """The held-out rows of a training split: this data set with ``split=test``
        (prepared as fitted on the same training rows); None unless ``split=train``."""
        if self.split != "train":
            return None
        values = {key: getattr(self, key) for key in type(self).params}
        return type(self)(**{**values, "split": "test"})

    @property
    def split_counts(self) -> dict[str, int]:
        """``{"n_train": ..., "n_test": ...}`` under a split, recorded as the
        parameters ``dataset.n_train`` and ``dataset.n_test``; empty for all rows."""
        return self.rows_.counts()
