"""Out-of-core data: the ``file`` data set (.npy memory-mapped, Parquet by row
group), the ``synthetic`` generator written in chunks, and the checkpoint
evaluation streamed over row chunks (harness/stream.py).

Exactness checks compare with in-memory numpy to 1e-12 (relative) or bit for
bit; the streamed certificate is checked to bound the in-memory one from the
safe side. Memory: the generator's peak traced allocation is checked against
the size of one chunk.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

import harness
from harness import stream
from plugins.data import files
from plugins.data.datasets import BreastCancer, min_max

from conftest import game_cfg

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def cfg_for(dataset: dict, **over) -> dict:
    return game_cfg("constraint.k=5", "budget=20000", "checkpoints=5", dataset=dataset, **over)


@pytest.fixture
def raw(tmp_path):
    """A 500 x 4 table with features far outside [0, 1] and a 3-class target."""
    rng = np.random.default_rng(0)
    X = rng.normal(10.0, 5.0, (500, 4))
    y = rng.integers(0, 3, 500)
    return X, y


def test_npy_with_target_column_is_memory_mapped_and_min_max_scaled(tmp_path, raw):
    X, y = raw
    np.save(tmp_path / "t.npy", np.column_stack((X, y)))
    ds = harness.build("dataset", "file", path=str(tmp_path / "t.npy"), target="-1")
    assert isinstance(ds.X.source, np.memmap)  # rows are read from the file on demand
    np.testing.assert_allclose(np.asarray(ds.X), min_max(X), rtol=1e-12, atol=1e-15)
    rows = np.array([3, 17, 499])
    np.testing.assert_allclose(ds.X[rows], min_max(X)[rows], rtol=1e-12, atol=1e-15)
    assert ds.y.tolist() == y.tolist() and ds.n_classes == 3
    assert ds.default_model == "logistic_cel"


def test_npy_target_in_a_middle_column_or_a_separate_file(tmp_path, raw):
    X, y = raw
    np.save(tmp_path / "mid.npy", np.column_stack((X[:, :2], y, X[:, 2:])))
    ds = harness.build("dataset", "file", path=str(tmp_path / "mid.npy"), target="2")
    np.testing.assert_allclose(np.asarray(ds.X), min_max(X), rtol=1e-12, atol=1e-15)
    np.save(tmp_path / "X.npy", min_max(X))
    np.save(tmp_path / "y.npy", y)
    ds = harness.build("dataset", "file", path=str(tmp_path / "X.npy"), target="y.npy",
                       scale="none")
    assert isinstance(ds.X, np.memmap)  # in [0, 1] already: used as stored
    assert ds.y.tolist() == y.tolist()


def test_features_outside_unit_interval_with_scale_none_name_the_column(tmp_path, raw):
    X, y = raw
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    with pytest.raises(harness.ConfigError, match=r"column 0 in \[.*\].*scale=minmax"):
        harness.build("dataset", "file", path=str(tmp_path / "X.npy"), target="y.npy",
                      scale="none")


@pytest.mark.parametrize(("target", "match"), [("name", "column index"), ("7", r"\[-5, 4\]"),
                                               ("nope.npy", "does not exist")])
def test_bad_npy_targets_are_config_errors(tmp_path, raw, target, match):
    X, y = raw
    np.save(tmp_path / "t.npy", np.column_stack((X, y)))
    with pytest.raises(harness.ConfigError, match=match):
        harness.build("dataset", "file", path=str(tmp_path / "t.npy"), target=target)


def write_parquet(path, X, y, row_group_size):
    table = pa.table({**{f"f{j}": X[:, j] for j in range(X.shape[1])}, "label": y})
    pq.write_table(table, path, row_group_size=row_group_size)


def test_parquet_rows_come_from_row_groups_read_on_demand(tmp_path, raw):
    X, y = raw
    labels = np.array(["a", "b", "c"])[y]
    write_parquet(tmp_path / "t.parquet", X, labels, row_group_size=64)
    ds = harness.build("dataset", "file", path=str(tmp_path / "t.parquet"), target="label",
                       cache_mb=0)
    src = ds.X.source
    assert isinstance(src, files.ParquetRows) and src.starts.size - 1 == 8
    rows = np.array([0, 63, 64, 300, 499, 65])
    np.testing.assert_allclose(ds.X[rows], min_max(X)[rows], rtol=1e-12, atol=1e-15)
    before = src.group_reads
    ds.X[np.array([130])]
    assert src.group_reads == before + 1  # one row: one group read, not the file
    np.testing.assert_allclose(ds.X[60:200], min_max(X)[60:200], rtol=1e-12, atol=1e-15)
    assert ds.y.tolist() == y.tolist() and ds.provenance["classes"] == "a,b,c"


def test_parquet_cache_is_bounded(tmp_path, raw):
    X, y = raw
    write_parquet(tmp_path / "t.parquet", X, y, row_group_size=50)
    rows = files.ParquetRows(tmp_path / "t.parquet", ["f0", "f1", "f2", "f3"],
                             cache_bytes=3 * 50 * 4 * 8)
    for g in range(10):
        rows[np.array([50 * g])]
    assert len(rows.cache) == 3 and sorted(rows.cache) == [7, 8, 9]
    rows[np.array([451])]  # group 9: cached
    assert rows.group_reads == 10


def test_parquet_target_must_be_a_column(tmp_path, raw):
    X, y = raw
    write_parquet(tmp_path / "t.parquet", X, y, row_group_size=100)
    with pytest.raises(harness.ConfigError, match="one of .*'label'"):
        harness.build("dataset", "file", path=str(tmp_path / "t.parquet"), target="y")


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_a_game_on_a_file_equals_the_game_on_the_same_data_in_memory(tmp_path, fmt):
    # breast cancer written to disk (already scaled: scale=none keeps it bit for
    # bit); the same config and seed give the same metrics to 1e-12
    bc = BreastCancer()
    if fmt == "npy":
        np.save(tmp_path / "X.npy", bc.X)
        np.save(tmp_path / "y.npy", bc.y)
        ds = {"name": "file", "path": str(tmp_path / "X.npy"), "target": "y.npy",
              "scale": "none"}
    else:
        write_parquet(tmp_path / "bc.parquet", bc.X, bc.y, row_group_size=100)
        ds = {"name": "file", "path": str(tmp_path / "bc.parquet"), "target": "label",
              "scale": "none"}
    on_file = harness.run(cfg_for(ds))
    in_memory = harness.run(cfg_for({"name": "breast_cancer"}))
    for key in ("dual_gap", "objective", "accuracy", "inner_min_lower", "max_loss"):
        assert on_file[key] == pytest.approx(in_memory[key], rel=1e-12, abs=1e-15), key


def test_streamed_checkpoint_equals_in_memory_and_certificate_stays_safe(monkeypatch):
    # the same game evaluated in one piece and in chunks of 1 KiB (4 rows of
    # breast cancer), with the support (569 rows) forced through the streamed
    # certificate (subsample of 68 rows in memory, then one exact pass): losses,
    # objective and task metrics equal to 1e-12; the streamed gap is a valid
    # (never smaller) certificate within 0.02 of the exact solve's (measured
    # 0.003 above it).
    prep = harness.prepare(cfg_for({"name": "breast_cancer"}, budget=40000))
    harness.play(prep)
    game = prep.game
    state = game.state
    state.inner_w, state.inner_lipschitz = None, 1.0
    exact = game.evaluate()
    monkeypatch.setattr(stream, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(stream, "IN_MEMORY_BYTES", 1 << 16)
    streamed_losses = stream.raw_losses(prep.parts.model, prep.parts.w_player.w_bar,
                                        prep.parts.dataset.X, prep.parts.dataset.y)
    direct = prep.parts.model.raw_losses(prep.parts.w_player.w_bar, prep.parts.dataset.X,
                                         prep.parts.dataset.y)
    np.testing.assert_allclose(streamed_losses, direct, rtol=1e-12)
    state.inner_w, state.inner_lipschitz = None, 1.0
    chunked = game.evaluate()
    for key in ("objective", "accuracy", "max_loss", "mean_loss"):
        assert chunked[key] == pytest.approx(exact[key], rel=1e-12), key
    assert chunked["inner_solver_slack"] > exact["inner_solver_slack"]  # the streamed path ran
    assert chunked["dual_gap"] >= exact["dual_gap"] - 1e-9
    assert chunked["dual_gap"] <= exact["dual_gap"] + 0.02, (chunked, exact)


def test_subsample_is_unbiased_and_takes_heavy_rows_surely():
    # Horvitz-Thompson: mean of 4000 estimates (seeds 0..3999) within 4 standard
    # errors of sum a f; rows with c a_i >= 1 are in every draw
    rng = np.random.default_rng(9)
    a = rng.random(2000) ** 6
    a[:3] = 5.0
    f = rng.random(2000)
    est = []
    for s in range(4000):
        picked, ht = stream.subsample(a, 200, np.random.default_rng(s))
        assert {0, 1, 2} <= set(picked.tolist()) and picked.size == 200
        est.append(float(ht @ f[picked]))
    se = np.std(est) / np.sqrt(len(est))
    assert abs(np.mean(est) - a @ f) <= 4 * se


def test_check_dataset_finds_a_non_finite_value_in_a_late_chunk(tmp_path, monkeypatch):
    X = np.random.default_rng(1).random((300, 3))
    X[250, 2] = np.nan
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", np.zeros(300, dtype=np.int64))
    monkeypatch.setattr(stream, "CHUNK_BYTES", 240)  # 10 rows per chunk
    ds = {"name": "file", "path": str(tmp_path / "X.npy"), "target": "y.npy", "scale": "none"}
    with pytest.raises(harness.ConfigError, match=r"nan\)? in X at row 250, column 2 \(1 "):
        harness.prepare(cfg_for(ds))


def test_synthetic_is_written_in_chunks_and_reused(tmp_path, monkeypatch):
    # 20000 x 10 float64 (1.6 MB) written in chunks of 16 KiB: the generator's
    # peak traced allocation stays under 0.5 MB (a chunk, the targets and
    # temporaries), far below the data's size
    monkeypatch.setattr(files, "GEN_CHUNK_BYTES", 1 << 14)
    tracemalloc.start()
    try:
        files.write_synthetic(tmp_path / "s", 20000, 10, 0.05, 3, "classification")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 500_000, peak
    X = np.load(tmp_path / "s" / "X.npy", mmap_mode="r")
    y = np.load(tmp_path / "s" / "y.npy")
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert X.shape == (20000, 10) and X.min() >= 0.0 and X.max() <= 1.0
    # hard rows: Binomial(20000, 0.05), mean 1000, sd 31: within 4 sd
    assert abs(meta["hard_rows"] - 1000) <= 4 * 31
    beta_side = y.mean()
    assert 0.3 < beta_side < 0.7


def test_synthetic_data_set_is_deterministic_and_reused(tmp_path):
    params = {"n": 3000, "d": 5, "hard": 0.1, "seed": 1, "cache_dir": str(tmp_path)}
    a = harness.build("dataset", "synthetic", **params)
    mtime = a.path.stat().st_mtime_ns
    b = harness.build("dataset", "synthetic", **params)
    assert b.path.stat().st_mtime_ns == mtime  # opened, not written again
    assert isinstance(b.X, np.memmap)
    other = harness.build("dataset", "synthetic", **{**params, "cache_dir": str(tmp_path / "o")})
    assert np.array_equal(np.asarray(other.X), np.asarray(a.X))
    assert np.array_equal(other.y, a.y)
    reg = harness.build("dataset", "synthetic", **{**params, "task": "regression"})
    assert reg.default_model == "linear_mse" and reg.y.min() >= 0.0 and reg.y.max() <= 1.0


def test_exp_ix_m_tree_runs_on_synthetic_data_from_disk(tmp_path):
    cfg = cfg_for({"name": "synthetic", "n": 5000, "d": 8, "cache_dir": str(tmp_path)},
                  constraint={"name": "kset", "k": 10, "sampler": "systematic"},
                  p_player={"name": "exp_ix_m"}, budget=50000)
    prep = harness.prepare(cfg)
    assert prep.context.params["p_player.state"] == "tree"
    metrics = harness.play(prep)
    assert metrics["data_points"] == 50000
    assert np.isfinite(metrics["dual_gap"]) and metrics["dual_gap"] >= 0.0
