"""A checkpoint reads the data once (``harness.stream.losses_and_task_metrics``,
the models' ``losses_and_metrics``), and the round's prefetches
(``harness.prefetch``) compile for every kind of data and change nothing."""

from __future__ import annotations

import platform

import numpy as np
import pytest
from numba import njit

import harness
from harness import stream
from harness.prefetch import prefetch_entries, prefetch_rows
from tests.conftest import game_cfg


class CountingRows:
    """``X`` as a data set larger than memory presents it (``X[a:b]``,
    ``X[rows]``), counting the rows each read returns."""

    def __init__(self, X: np.ndarray) -> None:
        self.X = X
        self.shape = X.shape
        self.dtype = X.dtype
        self.rows_read = 0

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key):
        out = self.X[key]
        self.rows_read += out.shape[0] if out.ndim == 2 else 1
        return out


@pytest.mark.parametrize("dataset, model", [("breast_cancer", "logistic_cel"),
                                            ("boston", "linear_mse")])
def test_one_pass_gives_the_losses_and_metrics_of_two(dataset, model, monkeypatch):
    # chunks of 2 KiB (a few rows each): the one-pass losses and metrics equal
    # raw_losses and task_metrics to the last bit (same arithmetic per chunk),
    # and read each row once where the two calls read it twice
    prep = harness.prepare(game_cfg(f"dataset={dataset}", "budget=2000", "checkpoints=1"))
    parts = prep.parts
    assert parts.names["model"] == model
    monkeypatch.setattr(stream, "CHUNK_BYTES", 2048)
    X = CountingRows(np.asarray(parts.dataset.X))
    y = parts.dataset.y
    w = np.random.default_rng(0).normal(0.0, 0.3, parts.model.n_params)
    raw, metrics = stream.losses_and_task_metrics(parts.model, w, X, y, 7)
    assert X.rows_read == X.shape[0]
    X.rows_read = 0
    two_raw = stream.raw_losses(parts.model, w, X, y)
    two_metrics = parts.model.task_metrics(w, X, y, 7)
    assert X.rows_read == 2 * X.shape[0]
    np.testing.assert_array_equal(raw, two_raw)
    assert metrics == two_metrics


def test_a_model_without_the_one_pass_method_is_read_twice():
    class TwoPass:
        def raw_losses(self, w, X, y):
            return np.asarray(X)[:, 0] * w[0]

        def task_metrics(self, w, X, y, k):
            return {"max_loss": float(np.max(np.asarray(X)[:, 0] * w[0]))}

    X = np.arange(12.0).reshape(6, 2)
    raw, metrics = stream.losses_and_task_metrics(TwoPass(), np.array([2.0]), X, None, 1)
    np.testing.assert_array_equal(raw, 2.0 * X[:, 0])
    assert metrics == {"max_loss": 20.0}


def test_a_game_checkpoint_reads_the_data_once_plus_the_support(monkeypatch):
    # the game's checkpoint on data read through CountingRows: one pass for the
    # losses and task metrics, plus the rows of a_bar's support gathered for the
    # certified inner minimum (at most the rows sampled so far)
    prep = harness.prepare(game_cfg("budget=400", "checkpoints=1", "constraint.k=5",
                                    "p_player=exp_ix_m"))
    harness.play(prep)
    game = prep.game
    n = prep.parts.dataset.X.shape[0]
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    counted = CountingRows(np.asarray(prep.parts.dataset.X))
    monkeypatch.setattr(prep.parts.dataset, "X", counted)
    support = int(np.count_nonzero(game.state.a_sum))
    assert 0 < support <= 400
    game.evaluate()
    assert counted.rows_read == n + support


@njit(cache=False)
def _touch(X, a, rows):
    prefetch_rows(X, rows)
    prefetch_entries(a, rows)
    return rows.size


@pytest.mark.parametrize("make", [
    lambda: np.arange(60.0).reshape(20, 3),             # C-ordered rows: prefetched
    lambda: np.asfortranarray(np.ones((20, 3))),        # any other layout: nothing
    lambda: np.ones((20, 0)),                           # no columns
    lambda: np.ones((20, 3), dtype=np.float32),
])
def test_prefetches_compile_for_any_data_and_change_nothing(make):
    X = make()
    before = X.copy()
    a = np.arange(20.0)
    assert _touch(X, a, np.array([0, 7, 19], dtype=np.int64)) == 3
    np.testing.assert_array_equal(X, before)
    np.testing.assert_array_equal(a, np.arange(20.0))
    assert _touch((1, 2), 3.0, np.array([1], dtype=np.int64)) == 1  # not arrays: nothing


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="reads x86 assembly")
def test_prefetches_become_prefetch_instructions():
    # the intrinsic is declared under the running LLVM's name for it: the
    # compiled kernel holds x86 prefetch instructions (a no-op would hold none)
    X, a, rows = np.ones((8, 20)), np.ones(8), np.array([1, 5], dtype=np.int64)
    _touch(X, a, rows)
    asm = _touch.inspect_asm(_touch.signatures[-1])
    assert "prefetcht0" in asm
