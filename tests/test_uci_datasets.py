"""The DRO literature's five regression data sets (plugins/data/datasets.py): shapes,
checksums, the ``scale`` option, energy's target, ``model=auto`` with every
constraint set, k = n/2 through ``constraint.level``, and the trivial
solution ``w = 0`` recorded beside OPT (plugins/metrics/reference.py)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import harness
from plugins.data import datasets
from plugins.metrics import reference

from conftest import game_cfg

SHAPES = {"yacht": (308, 6), "energy": (768, 8), "concrete": (1030, 8),
          "kin8nm": (8192, 8), "power": (9568, 4)}


def _csv(name: str) -> np.ndarray:
    return np.loadtxt(datasets.DATA_DIR / f"{name}.csv", delimiter=",", skiprows=1)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_loads_with_the_shape_of_its_csv(name):
    ds = harness.build("dataset", name)
    assert ds.X.shape == SHAPES[name] and ds.y.shape == (SHAPES[name][0],)
    assert ds.task == "regression" and ds.default_model == "linear_mse"
    assert len(ds.feature_names) == SHAPES[name][1]
    assert ds.provenance["sha256"] == ds.sha256 and ds.provenance["source"]


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_standard_scaling_gives_mean_0_and_sd_1(name):
    ds = harness.build("dataset", name, scale="standard")
    np.testing.assert_allclose(ds.X.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(ds.X.std(axis=0), 1.0, atol=1e-12)
    assert abs(ds.y.mean()) < 1e-12 and abs(ds.y.std() - 1.0) < 1e-12


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_minmax_and_none_scaling(name):
    scaled = harness.build("dataset", name, scale="minmax")
    assert scaled.X.min() == 0.0 and scaled.X.max() == 1.0
    assert scaled.y.min() == 0.0 and scaled.y.max() == 1.0
    raw = harness.build("dataset", name, scale="none")
    body = _csv(name)
    target = body[:, [h == raw.target for h in
                      (datasets.DATA_DIR / f"{name}.csv").read_text().split("\n")[0].split(",")]]
    np.testing.assert_array_equal(raw.y, target[:, 0])
    assert set(map(tuple, raw.X[:3])) <= {tuple(row) for row in
                                            body[:3][:, [i for i in range(body.shape[1])
                                                         if i < raw.X.shape[1]]]}


def test_minmax_is_every_default_and_keeps_the_paper_data_sets_as_they_were():
    for name in ("boston", "breast_cancer", *SHAPES):
        assert harness.build("dataset", name).scale == "minmax"
    boston = harness.build("dataset", "boston")
    np.testing.assert_array_equal(boston.X, datasets.min_max(_csv("boston")[:, :-1]))
    np.testing.assert_array_equal(boston.y, datasets.min_max(_csv("boston")[:, -1:])[:, 0])
    with pytest.raises(harness.ConfigError, match="'scale' parameter of yacht"):
        harness.build("dataset", "yacht", scale="zscore")


def test_energy_target_is_selectable_and_the_other_response_is_dropped():
    body = _csv("energy")
    cooling = harness.build("dataset", "energy", scale="none")
    heating = harness.build("dataset", "energy", scale="none", target="heating_load")
    np.testing.assert_array_equal(cooling.y, body[:, 9])
    np.testing.assert_array_equal(heating.y, body[:, 8])
    for ds in (cooling, heating):
        assert "cooling_load" not in ds.feature_names and "heating_load" not in ds.feature_names
        np.testing.assert_array_equal(ds.X, body[:, :8])


def test_a_changed_byte_fails_the_checksum(tmp_path, monkeypatch):
    shutil.copy(datasets.DATA_DIR / "yacht.csv", tmp_path / "yacht.csv")
    data = bytearray((tmp_path / "yacht.csv").read_bytes())
    data[-3] = ord("9") if data[-3] != ord("9") else ord("8")
    (tmp_path / "yacht.csv").write_bytes(bytes(data))
    monkeypatch.setattr(datasets, "DATA_DIR", tmp_path)
    with pytest.raises(RuntimeError, match="SHA-256"):
        harness.build("dataset", "yacht")


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("constraint,p_player", [
    ("kset", "exp4mp"), ("kset", "ftrl"), ("simplex", "exp_ix"), ("alphaset", "exp4mp")])
def test_model_auto_and_every_constraint_set(name, constraint, p_player):
    # a short horizon: exp4mp's theory gamma needs T >= n log(n/k) / k, so set it
    short = ["p_player.gamma=0.1"] if p_player == "exp4mp" else []
    cfg = game_cfg(f"dataset={name}", f"constraint={constraint}", f"p_player={p_player}",
                   "budget=20000", "checkpoints=2", *short)
    prepared = harness.prepare(cfg)
    assert prepared.parts.names["model"] == "linear_mse"
    metrics = harness.play(prepared)
    assert np.isfinite(metrics["dual_gap"]) and metrics["objective"] > 0


@pytest.mark.parametrize("name,n", [("breast_cancer", 569), ("yacht", 308), ("power", 9568)])
def test_level_asks_for_k_as_a_fraction_of_n(name, n):
    prepared = harness.prepare(game_cfg(f"dataset={name}", "constraint.level=0.5",
                                        "budget=20000"))
    assert prepared.parts.constraint.k == n // 2
    assert prepared.context.params["constraint.k"] == n // 2
    assert prepared.context.params["constraint.level"] == 0.5
    default = harness.prepare(game_cfg(f"dataset={name}", "budget=100000"))
    assert default.parts.constraint.k == 20 and "constraint.level" in default.context.params
    with pytest.raises(harness.ConfigError, match="'level' parameter of kset"):
        harness.prepare(game_cfg(f"dataset={name}", "constraint.level=1.5"))


class _Params:
    """Keeps the run's params as they are at its end."""

    def __init__(self):
        self.params = {}

    @harness.hookimpl
    def on_run_end(self, context, status, metrics):
        self.params = dict(context.params)


def test_trivial_solution_is_recorded_beside_opt(tmp_path):
    pytest.importorskip("cvxpy")
    seen = _Params()
    cfg = game_cfg("dataset=yacht", "dataset.scale=standard", "budget=2000", "checkpoints=2",
                   reference={"exact": "true", "cache_dir": str(tmp_path)})
    harness.run(cfg, plugins=[seen])
    p = seen.params
    assert p["opt_status"] == "solved" and p["dataset.scale"] == "standard"
    ds = harness.build("dataset", "yacht", scale="standard")
    # w = 0 predicts 0, the mean of the standardised target: its losses are y^2
    model = harness.build("model", "linear_mse")
    model.setup(ds, 1.0)
    want = np.sort(ds.y ** 2)[-20:].mean() / model.scale_
    assert p["trivial_objective"] == pytest.approx(want, rel=1e-12)
    assert p["trivial_relative_suboptimality"] == pytest.approx(
        (want - p["opt"]) / p["opt"], rel=1e-12)
    assert p["trivial_relative_suboptimality"] > 1.0  # yacht is informative


def test_summary_warns_when_w0_nearly_solves_the_problem():
    lines = reference.trivial_lines({"trivial_objective": 0.1148,
                                     "trivial_relative_suboptimality": 0.004})
    assert lines[0][0] == "trivial solution w = 0" and "0.004" in lines[0][1]
    assert lines[1][0] == "warning" and "nearly solved by w = 0" in lines[1][1]
    lines = reference.trivial_lines({"trivial_objective": 0.068,
                                     "trivial_relative_suboptimality": 10.4})
    assert len(lines) == 1
    assert reference.trivial_lines(None) == []


@pytest.mark.parametrize("rel", [-3.98e-08, 0.0])
def test_summary_says_plainly_when_w0_is_optimal_within_opts_interval(rel):
    # F(0) at or below OPT's upper end (relative suboptimality <= 0, as the
    # example's two moons at -3.98e-08 once read "within -4e-06 % of OPT"):
    # w = 0 is optimal as far as OPT is certified, said without a percentage
    lines = reference.trivial_lines({"trivial_objective": 0.693147,
                                     "trivial_relative_suboptimality": rel})
    assert lines == [
        ("trivial solution w = 0", "0.693147 (not above OPT's certified interval)"),
        ("warning", "w = 0 is optimal to within OPT's certified interval: this problem is "
                    "solved before the first round and cannot separate algorithms")]
    # just above the interval: the nearly-solved warning, with a positive percentage
    (_, row), (_, warning) = reference.trivial_lines(
        {"trivial_objective": 0.693147, "trivial_relative_suboptimality": 3e-8})
    assert row.endswith("(relative suboptimality 3e-08)")
    assert "within 3e-06 % of OPT" in warning
