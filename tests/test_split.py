"""The train/test protocol of every built-in data set (plugins/data/split.py) and
the held-out metrics at each checkpoint (plugins/metrics/held_out.py).

References are independent: scikit-learn's own ``train_test_split`` and
``StandardScaler`` on the arrays read from the CSV files, numpy for the
moments, MSE, accuracy and the objective. Tolerances: rows and ``split=all``
arrays bit for bit; moments 1e-12 absolute; the preparation against
StandardScaler 1e-13 absolute (bit for bit on the shipped data sets with
scikit-learn 1.9); held-out metrics 1e-12 relative (1e-10 with nu > 0, whose
reference projection is a bisection). Seeds: the run's seed 0, split seeds
42 (the field's), 0 and 7.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import harness
from plugins.data import datasets

from conftest import game_cfg

CSV_SETS = ("breast_cancer", "boston", "yacht", "energy", "concrete", "kin8nm", "power")
REGRESSION = CSV_SETS[1:]
#: (test_size, split_seed): the field's, and two others
SPLITS = [(0.2, 42), (0.33, 0), (0.5, 7)]


def raw_arrays(name: str, **params) -> tuple[np.ndarray, np.ndarray]:
    """Features and target as the CSV holds them (independent of the data set's code)."""
    path = datasets.DATA_DIR / f"{name}.csv"
    header = path.read_text().split("\n", 1)[0].split(",")
    body = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    target = {"breast_cancer": "target", "boston": "medv", "yacht": "residuary_resistance",
              "energy": params.get("target", "cooling_load"), "concrete": "strength_mpa",
              "kin8nm": "y", "power": "energy_output"}[name]
    dropped = {"cooling_load", "heating_load"} if name == "energy" else {target}
    features = [i for i, h in enumerate(header) if h not in dropped]
    return body[:, features], body[:, header.index(target)]


def field_split(name: str, test_size: float = 0.2, seed: int = 42):
    """The DRO papers' recipe (Mehta et al. 2024, src/utils/data.py): sklearn's split,
    StandardScaler fitted on train, the target standardised by the train mean and
    sample (ddof=1) standard deviation."""
    X, y = raw_arrays(name)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=test_size, random_state=seed)
    scaler = StandardScaler().fit(X_tr)
    centre, spread = y_tr.mean(), y_tr.std(ddof=1)
    return (scaler.transform(X_tr), scaler.transform(X_te),
            (y_tr - centre) / spread, (y_te - centre) / spread)


# --------------------------------------------------------------------------- the rows


@pytest.mark.parametrize("name", CSV_SETS)
@pytest.mark.parametrize(("test_size", "seed"), SPLITS)
def test_rows_are_scikit_learns_train_test_split(name, test_size, seed):
    X, y = raw_arrays(name)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=test_size, random_state=seed)
    given = {"scale": "none", "test_size": test_size, "split_seed": seed}
    train = harness.build("dataset", name, split="train", **given)
    test = harness.build("dataset", name, split="test", **given)
    for ours, theirs in ((train.X, X_tr), (test.X, X_te), (train.y, y_tr), (test.y, y_te)):
        np.testing.assert_array_equal(ours, theirs)  # the same rows in the same order
    assert train.split_counts == test.split_counts == {"n_train": y_tr.size,
                                                       "n_test": y_te.size}
    assert y_te.size == math.ceil(test_size * y.size)


@pytest.mark.parametrize("name", ("yacht", "breast_cancer", "energy"))
def test_test_is_the_complement_of_train_and_held_out_is_the_test_split(name):
    X, _ = raw_arrays(name)
    train = harness.build("dataset", name, scale="none", split="train", test_size=0.3,
                          split_seed=5)
    test = harness.build("dataset", name, scale="none", split="test", test_size=0.3,
                         split_seed=5)
    both = np.concatenate((train.X, test.X))
    assert both.shape == X.shape
    # every row once: the union, sorted as rows, is the data set's rows sorted as rows
    np.testing.assert_array_equal(np.unique(both, axis=0, return_counts=True)[1],
                                  np.unique(X, axis=0, return_counts=True)[1])
    np.testing.assert_array_equal(np.unique(both, axis=0), np.unique(X, axis=0))
    held = harness.build("dataset", name, scale="standard", split="train", test_size=0.3,
                         split_seed=5).held_out()
    want = harness.build("dataset", name, scale="standard", split="test", test_size=0.3,
                         split_seed=5)
    np.testing.assert_array_equal(held.X, want.X)
    np.testing.assert_array_equal(held.y, want.y)
    assert want.held_out() is None and harness.build("dataset", name).held_out() is None


def test_synthetic_and_file_data_sets_split_the_same_rows(tmp_path):
    syn = {"n": 500, "d": 3, "hard": 0.1, "cache_dir": str(tmp_path)}
    whole = harness.build("dataset", "synthetic", **syn)
    X_tr, X_te, y_tr, y_te = train_test_split(np.asarray(whole.X), whole.y, test_size=0.25,
                                              random_state=3)
    test = harness.build("dataset", "synthetic", split="test", test_size=0.25, split_seed=3,
                         **syn)
    np.testing.assert_array_equal(np.asarray(test.X), X_te)
    np.testing.assert_array_equal(test.y, y_te)
    rows = np.array([0, 7, 3])
    np.testing.assert_array_equal(test.X[rows], X_te[rows])

    rng = np.random.default_rng(0)
    X, y = rng.normal(10.0, 5.0, (400, 4)), rng.normal(size=400)
    np.save(tmp_path / "t.npy", np.column_stack((X[:, :2], y, X[:, 2:])))
    given = {"path": str(tmp_path / "t.npy"), "target": "2", "task": "regression"}
    train = harness.build("dataset", "file", split="train", **given)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=42)
    lo, span = X_tr.min(axis=0), X_tr.max(axis=0) - X_tr.min(axis=0)
    np.testing.assert_allclose(np.asarray(train.X), (X_tr - lo) / span, rtol=0, atol=1e-15)
    held = train.held_out()
    np.testing.assert_allclose(np.asarray(held.X), (X_te - lo) / span, rtol=0, atol=1e-15)
    np.testing.assert_allclose(held.y, (y_te - y_tr.min()) / (y_tr.max() - y_tr.min()),
                               rtol=0, atol=1e-15)
    assert train.split_counts == {"n_train": 320, "n_test": 80}


def test_synthetic_groups_split_keeps_each_rows_group():
    whole = harness.build("dataset", "synthetic_groups")
    train = harness.build("dataset", "synthetic_groups", split="train")
    _, _, y_tr, _, g_tr, _ = train_test_split(np.asarray(whole.X), whole.y,
                                              whole.columns["group"], random_state=42,
                                              test_size=0.2)
    np.testing.assert_array_equal(train.y, y_tr)
    np.testing.assert_array_equal(train.columns["group"], g_tr)
    assert train.X.min() == 0.0 and train.X.max() == 1.0  # min-max fitted on train


# --------------------------------------------------------------------------- preparation


@pytest.mark.parametrize("name", REGRESSION)
@pytest.mark.parametrize(("test_size", "seed"), SPLITS)
def test_standard_is_fitted_on_the_training_rows(name, test_size, seed):
    given = {"scale": "standard", "test_size": test_size, "split_seed": seed}
    train = harness.build("dataset", name, split="train", **given)
    test = harness.build("dataset", name, split="test", **given)
    np.testing.assert_allclose(train.X.mean(axis=0), 0.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(train.X.std(axis=0), 1.0, rtol=0, atol=1e-12)  # population
    assert abs(train.y.mean()) < 1e-12 and abs(train.y.std(ddof=1) - 1.0) < 1e-12  # sample
    X_tr, X_te, y_tr, y_te = field_split(name, test_size, seed)
    for ours, theirs in ((train.X, X_tr), (test.X, X_te), (train.y, y_tr), (test.y, y_te)):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-13)


@pytest.mark.parametrize("name", ("breast_cancer", "yacht", "power"))
def test_minmax_is_fitted_on_the_training_rows_and_labels_are_not_scaled(name):
    X, y = raw_arrays(name)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=42)
    train = harness.build("dataset", name, split="train")
    test = harness.build("dataset", name, split="test")
    lo, hi = X_tr.min(axis=0), X_tr.max(axis=0)
    np.testing.assert_array_equal(train.X, (X_tr - lo) / (hi - lo))
    np.testing.assert_array_equal(test.X, (X_te - lo) / (hi - lo))
    assert train.X.min() == 0.0 and train.X.max() == 1.0
    if train.task == "classification":
        np.testing.assert_array_equal(test.y, y_te.astype(np.int64))
        standard = harness.build("dataset", name, split="test", scale="standard")
        np.testing.assert_array_equal(standard.y, y_te.astype(np.int64))
    else:
        np.testing.assert_array_equal(test.y, (y_te - y_tr.min()) / (y_tr.max() - y_tr.min()))


@pytest.mark.parametrize("name", CSV_SETS)
def test_split_all_is_todays_data_set_bit_for_bit(name):
    """``split=all`` (the default) gives the arrays the code gave before splits
    existed: min-max over all rows; standard with the population deviation of the
    centred columns over all rows, the target likewise; none as read."""
    X, y = raw_arrays(name)
    regression = name != "breast_cancer"

    def minmax(a):
        return (a - a.min(axis=0)) / np.where(a.max(axis=0) > a.min(axis=0),
                                              a.max(axis=0) - a.min(axis=0), 1.0)

    def standard(a):
        centred = a - a.mean(axis=0)
        sd = centred.std(axis=0)
        return centred / np.where(sd > 0, sd, 1.0)

    for scale, prepare in (("minmax", minmax), ("standard", standard), ("none", np.asarray)):
        for ds in (harness.build("dataset", name, scale=scale),
                   harness.build("dataset", name, scale=scale, split="all", test_size=0.5,
                                 split_seed=1)):
            np.testing.assert_array_equal(ds.X, prepare(X))
            np.testing.assert_array_equal(
                ds.y, prepare(y[:, None])[:, 0] if regression else y.astype(np.int64))
            assert ds.split_counts == {} and "split" not in ds.provenance


def test_split_all_does_not_import_scikit_learn():
    code = ("import sys, harness\n"
            "for name in ('yacht', 'breast_cancer', 'synthetic_groups'):\n"
            "    harness.build('dataset', name)\n"
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


# --------------------------------------------------------------------------- bad values


@pytest.mark.parametrize(("override", "message"), [
    ("dataset.split=validation",
     "The 'split' parameter of yacht must be one of ['all', 'train', 'test']. "
     "Got 'validation' instead."),
    ("dataset.test_size=1.5",
     "The 'test_size' parameter of yacht must be a float in (0, 1). Got 1.5 instead."),
])
def test_bad_split_values_are_one_line_errors(run_cli, override, message):
    proc = run_cli("dataset=yacht", override, "tracking.enabled=false", "budget=2000")
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"minimax-bench: error: {message}"], proc.stderr


def test_a_test_size_that_leaves_no_training_row_is_refused():
    with pytest.raises(harness.ConfigError, match=re.escape(
            "The 'test_size' parameter of yacht must leave a training row among its n=308 "
            "rows (it holds out ceil(test_size n)). Got 0.999 instead.")):
        harness.build("dataset", "yacht", split="train", test_size=0.999)


# --------------------------------------------------------------------------- held-out metrics


class Recorder:
    """Keeps ``w_bar`` at each checkpoint, the metrics there and the run's params."""

    def __init__(self) -> None:
        self.w: list[np.ndarray] = []
        self.metrics: list[dict] = []
        self.params: dict = {}

    @harness.hookimpl
    def checkpoint_metrics(self, context, w_bar, losses):
        self.w.append(np.array(w_bar))

    @harness.hookimpl
    def on_checkpoint(self, context, step, metrics):
        self.metrics.append(dict(metrics, step=step))

    @harness.hookimpl
    def on_run_end(self, context, status, metrics):
        self.params = dict(context.params)


def top_k_objective(raw: np.ndarray, scale: float, k: int) -> float:
    return float(np.sort(raw / scale)[-k:].mean())


YACHT_RUN = ("dataset=yacht", "dataset.split=train", "dataset.scale=standard",
             "budget=20000", "checkpoints=4")


def test_held_out_metrics_are_logged_at_each_checkpoint(tmp_path, monkeypatch, tracking_uri):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    seen = Recorder()
    cfg = game_cfg(*YACHT_RUN, tracking={"enabled": True, "uri": tracking_uri,
                                         "experiment": "split"})
    harness.run(cfg, plugins=[seen])
    _, X_te, _, y_te = field_split("yacht")
    p = seen.params
    assert (p["dataset.n_train"], p["dataset.n_test"], p["n"]) == (246, 62, 246)
    client = MlflowClient(tracking_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("split").experiment_id])
    assert run.data.params["dataset.n_test"] == "62"
    assert run.data.params["dataset.split"] == "train"
    logged = {key: client.get_metric_history(run.info.run_id, key)
              for key in ("test_mse", "test_objective", "objective")}
    assert [m.step for m in logged["test_mse"]] == [m.step for m in logged["objective"]]
    assert len(logged["test_mse"]) == len(seen.w) >= 4
    for w, mse, objective in zip(seen.w, logged["test_mse"], logged["test_objective"],
                                 strict=True):
        residual = X_te @ w[:-1] + w[-1] - y_te
        assert mse.value == pytest.approx(np.mean(residual ** 2), rel=1e-12)
        assert objective.value == pytest.approx(
            top_k_objective(residual ** 2, p["model.loss_scale"], 20), rel=1e-12)
    assert "test_accuracy" not in run.data.metrics


def test_cli_run_logs_the_held_out_metrics_and_prints_them(run_cli, tracking_uri):
    proc = run_cli(*YACHT_RUN, f"tracking.uri={tracking_uri}", "tracking.experiment=cli-split")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"held-out rows \(62\)\s+objective \S+, MSE \S+", proc.stdout), proc.stdout
    client = MlflowClient(tracking_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("cli-split").experiment_id])
    assert run.data.params["dataset.n_train"] == "246"
    # the same game in process: the same held-out numbers at the same steps
    seen = Recorder()
    harness.run(game_cfg(*YACHT_RUN), plugins=[seen])
    for key in ("test_mse", "test_objective"):
        history = client.get_metric_history(run.info.run_id, key)
        assert [(m.step, m.value) for m in history] == [(r["step"], r[key])
                                                        for r in seen.metrics]


def test_classification_logs_the_held_out_accuracy():
    seen = Recorder()
    harness.run(game_cfg("dataset=breast_cancer", "dataset.split=train", "budget=20000",
                         "checkpoints=3"), plugins=[seen])
    X, y = raw_arrays("breast_cancer")
    X_tr, X_te, _, y_te = train_test_split(X, y.astype(np.int64), test_size=0.2,
                                           random_state=42)
    lo, hi = X_tr.min(axis=0), X_tr.max(axis=0)
    X_te = (X_te - lo) / (hi - lo)
    for w, metrics in zip(seen.w, seen.metrics, strict=True):
        W = w.reshape(2, X_te.shape[1] + 1)
        logits = X_te @ W[:, :-1].T + W[:, -1]
        assert metrics["test_accuracy"] == np.mean(np.argmax(logits, axis=1) == y_te)
        log_p = logits - np.logaddexp(logits[:, 0], logits[:, 1])[:, None]
        raw = -log_p[np.arange(y_te.size), y_te]
        assert metrics["test_objective"] == pytest.approx(
            top_k_objective(raw, seen.params["model.loss_scale"], 20), rel=1e-12)
        assert "test_mse" not in metrics


def capped_simplex_projection(v: np.ndarray, cap: float) -> np.ndarray:
    """Euclidean projection onto {0 <= q <= cap, sum q = 1} by bisection on the shift."""
    lo, hi = v.min() - 1.0, v.max()
    for _ in range(200):
        tau = 0.5 * (lo + hi)
        if np.clip(v - tau, 0.0, cap).sum() > 1.0:
            lo = tau
        else:
            hi = tau
    return np.clip(v - 0.5 * (lo + hi), 0.0, cap)


def test_held_out_objective_keeps_mu_nu_and_the_level_of_the_set():
    seen = Recorder()
    harness.run(game_cfg(*YACHT_RUN, "solver=prospect", "constraint.level=0.5",
                         "model=linear_mse", "model.bias=false", "model.loss_scale=2.0",
                         "problem.mu_times_n=1.0", "problem.nu=1.0", "problem.ball=false"),
                plugins=[seen])
    _, X_te, _, y_te = field_split("yacht")
    n, k, mu, nu = 62, 31, 1.0 / 246, 1.0
    assert seen.params["problem.mu"] == mu
    for w, metrics in zip(seen.w, seen.metrics, strict=True):
        losses = (X_te @ w - y_te) ** 2 / 2.0
        q = capped_simplex_projection(1.0 / n + losses / (nu * n), 1.0 / k)
        want = losses @ q - 0.5 * nu * n * np.sum((q - 1.0 / n) ** 2) + 0.5 * mu * w @ w
        assert metrics["test_objective"] == pytest.approx(want, rel=1e-10)
        assert metrics["test_mse"] == pytest.approx(np.mean(2.0 * losses), rel=1e-12)


def test_a_set_that_does_not_fit_the_held_out_rows_warns_and_leaves_the_objective_out():
    seen = Recorder()
    with pytest.warns(RuntimeWarning, match=re.escape(
            "test_objective is not logged: the constraint set 'kset' cannot be rebuilt for the "
            "n_test=62 held-out rows (The 'k' parameter of kset must be an int in [1, n=62]. "
            "Got 100 instead.)")):
        harness.run(game_cfg(*YACHT_RUN, "constraint.k=100"), plugins=[seen])
    assert "test_objective" not in seen.metrics[-1] and "test_mse" in seen.metrics[-1]


def test_all_rows_log_no_held_out_metric(tiny_cfg):
    seen = Recorder()
    harness.run(tiny_cfg, plugins=[seen])
    assert not any(key.startswith("test_") for key in seen.metrics[-1])
    assert "dataset.n_train" not in seen.params and seen.params["dataset.split"] == "all"
