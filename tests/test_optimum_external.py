"""Our certified OPT against the field's published optima: the L-BFGS minima
of Mehta, Roulet, Pillutla and Harchaoui (ICLR 2024), ``lbfgs_min_loss.p`` in
``results/<set>/l2_reg_1.00e+00_loss_squared_error_objective_<risk>_shift_cost_1.00e+00/``
of ronakdm/prospect, on the five regression sets for the three spectral risks.

Their problem, as their code builds it (``src/utils/data.py``,
``src/optim/objectives.py``, ``src/utils/training.py``): the training rows of
``train_test_split(X, y, test_size=0.2, random_state=42)``, features
standardised by the training rows' mean and population deviation
(``StandardScaler``), the target centred by the training mean and divided by
the training sample deviation (``ddof=1``); energy's target the cooling load
(the file's last column); loss ``0.5 (y - x.w)^2`` without intercept; shift
cost ``(n/2) ||q - 1/n||^2`` (nu = 1), penalty ``||w||^2 / (2n)`` (mu = 1/n);
the superquantile at level 0.5, the extremile r = 2, the ESRM rho = 1; no ball.
Here: ``linear_mse`` with ``bias=false, loss_scale=2`` (``L = (y - x.w)^2 / 2``),
the data sets with ``scale=standard, split=train``, the set ``spectral``.

Yacht: their loader reads the headerless ``yacht_hydrodynamics.data`` with
pandas' ``header=1``, which takes the second line for column names and drops
the first two rows; their yacht has 306 rows (244 training rows, not 246), and
so does the one built here (``_yacht_as_read_by_them``). With all 308 rows
their optima are 0.4 % above ours: a different problem.

Their values are scipy L-BFGS-B minima at its default tolerances, so they may
lie above the optimum, never below it: each must be at least our certified
lower end (up to 1e-13 relative, the rounding of their evaluation) and within
``PUBLISHED_RTOL`` of our OPT. Measured (published - OPT) / OPT: 1.2e-10 to
6.9e-10 (yacht), 2.9e-9 to 4.3e-8 (energy), 5.1e-11 to 1.9e-9 (concrete),
1e-11 to 1.1e-10 (kin8nm), 4.9e-11 to 1e-9 (power).
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import numpy as np
import pytest

import harness
from plugins.data.datasets import Yacht, read_checked_csv
from plugins.metrics import optimum

pytest.importorskip("cvxpy")
pytest.importorskip("sklearn")

RISKS = ("superquantile", "extremile", "esrm")
#: their lbfgs_min_loss.p, in the order of RISKS
PUBLISHED = {
    "yacht": (0.19419635299072788, 0.19418946114688082, 0.19136517088074806),
    "energy": (0.0648441396017336, 0.06484414139421087, 0.06484187645943032),
    "concrete": (0.23214711478138084, 0.23213475774161907, 0.2285701186858633),
    "kin8nm": (0.3664969618546531, 0.3661145295700867, 0.35199939580842793),
    "power": (0.03862658198462182, 0.03862607057917418, 0.03812252160135499),
}
#: how far above our OPT a published L-BFGS minimum may lie (measured: 4.3e-8 at most)
PUBLISHED_RTOL = 1e-7
#: our certified intervals, relative to OPT (measured: 1.1e-15 to 1.5e-15 over caps,
#: 3.9e-14 to 9.4e-13 over a permutahedron, whose enclosure allows an n-term sum)
WIDTH_RTOL = 1e-11


def _yacht_as_read_by_them() -> tuple[np.ndarray, np.ndarray]:
    """Yacht without its first two rows, split and standardised as their code does."""
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    header, body = read_checked_csv(Yacht.filename, Yacht.sha256)
    body = body[2:]
    j = header.index(Yacht.target)
    X, y = np.delete(body, j, axis=1), body[:, j]
    X_train, _, y_train, _ = train_test_split(X, y, test_size=0.2, random_state=42)
    scaler = StandardScaler().fit(X_train)
    return scaler.transform(X_train), (y_train - y_train.mean()) / y_train.std(ddof=1)


def _training_rows(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name == "yacht":
        return _yacht_as_read_by_them()
    ds = harness.build("dataset", name, scale="standard", split="train")
    return np.asarray(ds.X, dtype=np.float64), np.asarray(ds.y, dtype=np.float64)


@pytest.fixture(scope="module")
def optima():
    """``{(set, risk): (n, Optimum, seconds)}`` for the 15 pairs, each solved once
    as the reference plugin would: the set's caps (the superquantile) or its
    spectrum, through ``optimum.solve``."""
    out = {}
    for name in PUBLISHED:
        X, y = _training_rows(name)
        n = X.shape[0]
        model = harness.build("model", "linear_mse", bias=False, loss_scale=2.0)
        model.setup(SimpleNamespace(X=X, y=y, n_classes=0), 1.0)
        for risk in RISKS:
            caps, sigma = optimum.set_form(harness.build("constraint_set", "spectral", n=n,
                                                         risk=risk))
            start = time.perf_counter()
            found = optimum.solve(X, y, model, caps, math.inf, rtol=WIDTH_RTOL, atol=1e-15,
                                  mu=1.0 / n, nu=1.0, spectrum=sigma)
            out[name, risk] = (n, found, time.perf_counter() - start)
    return out


def test_their_yacht_is_ours_without_its_first_two_rows():
    # the construction of _yacht_as_read_by_them is the data set's own on the
    # rows it keeps: on energy (no rows dropped) it gives split=train's rows
    # (features to 1e-14: numpy's and scikit-learn's deviations differ by ulps)
    from sklearn.model_selection import train_test_split

    ds = harness.build("dataset", "energy", scale="standard", split="train")
    header, body = read_checked_csv("energy.csv", type(ds).sha256)
    X = body[:, [header.index(h) for h in ds.feature_names]]
    y = body[:, header.index("cooling_load")]
    X_train, _, y_train, _ = train_test_split(X, y, test_size=0.2, random_state=42)
    sd = X_train.std(axis=0)
    np.testing.assert_allclose(ds.X, (X_train - X_train.mean(axis=0)) / sd, atol=1e-14)
    np.testing.assert_allclose(ds.y, (y_train - y_train.mean()) / y_train.std(ddof=1),
                               atol=1e-14)
    X_yacht, _ = _yacht_as_read_by_them()
    assert X_yacht.shape == (244, 6)


@pytest.mark.parametrize("name", list(PUBLISHED))
@pytest.mark.parametrize("risk", RISKS)
def test_published_optimum_is_above_our_certified_lower_end_and_near_opt(optima, name, risk):
    n, found, _ = optima[name, risk]
    published = PUBLISHED[name][RISKS.index(risk)]
    assert found.value - found.lower <= WIDTH_RTOL * found.value
    assert published >= found.lower - 1e-13 * published
    assert published - found.value <= PUBLISHED_RTOL * found.value, (
        name, risk, (published - found.value) / found.value)
