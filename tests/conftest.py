"""Shared fixtures for the minimax-bench test suite.

* ``game_cfg(*overrides, **values)``: the CLI's config (``harness.compose``)
  as a plain dict, quiet (no tracking, no OPT solve, no saved state, no
  progress bar: ``harness.config.QUIET``), on the suite's data set
  (``SUITE_DATASET``: breast cancer, whatever the CLI's default), with
  command-line ``overrides`` and then ``values`` set:
  a group given as a dict with a ``name`` picks that option and sets its keys.
* ``tiny_cfg``: a cheap game from ``game_cfg`` (breast cancer, k = 5, 20k
  data points, 5 checkpoints), a fresh dict per test.
* ``tracking_uri``: an MLflow SQLite store URI in the test's ``tmp_path``
  (the file is created by MLflow on first use, which costs a few seconds).
* ``run_cli``: run ``python -m harness <overrides>`` as a subprocess in
  ``tmp_path`` with ``MLFLOW_TRACKING_URI`` removed from its environment;
  returns the ``subprocess.CompletedProcess`` (text stdout/stderr).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import harness

CLI_TIMEOUT_S = 300
#: the data set of ``game_cfg`` unless its overrides name another: the tests'
#: numbers (n = 569, two classes, accuracy) are breast cancer's, not the CLI default's
SUITE_DATASET = "dataset=breast_cancer"


def game_cfg(*overrides: str, registry: Any = None, **values: Any) -> dict[str, Any]:
    """``harness.compose`` of ``QUIET + SUITE_DATASET + overrides`` as a plain dict, then ``values``
    set on it (``constraint={"name": "alphaset", "caps": ...}`` picks the option
    ``constraint=alphaset`` and sets ``caps``). ``registry``: options of a
    registry with test plugins (default: the built-ins and installed ones)."""
    from omegaconf import OmegaConf

    groups = [f"{key}={value['name']}" for key, value in values.items()
              if isinstance(value, dict) and "name" in value]
    composed = harness.compose([*harness.config.QUIET, SUITE_DATASET, *overrides, *groups],
                               registry=registry)
    cfg = OmegaConf.to_container(composed, resolve=True)
    for key, value in values.items():
        if isinstance(value, dict) and "name" in value:
            cfg[key].update(value)
        else:
            cfg[key] = value
    return cfg


class OraclesOnly:
    """A test double: the set ``inner`` seen through its oracles only (``lmo``,
    ``euclidean_project``, ``project``, ``contains``), without row caps, a
    spectrum or a sampler, so that a solver reads it as it reads a third party's
    set (``Problem.inner``, the set's own projections)."""

    name = "oracles_only"
    sampler = "none"

    def __init__(self, inner) -> None:
        self.inner, self.n, self.k = inner, inner.n, inner.k

    def row_caps(self):
        return None

    def lmo(self, losses):
        return self.inner.lmo(losses)

    def euclidean_project(self, v):
        return self.inner.euclidean_project(v)

    def project(self, weights, gamma=0.0, *, log_domain=False, return_capped=False):
        return self.inner.project(weights, gamma, log_domain=log_domain,
                                  return_capped=return_capped)

    def contains(self, p, atol=1e-9):
        return self.inner.contains(p, atol)


class StopAt:
    """A plugin that interrupts the game at its ``at``-th checkpoint
    (KeyboardInterrupt; the state saved is the one before)."""

    def __init__(self, at: int) -> None:
        self.at, self.count = at, 0

    @harness.hookimpl
    def on_checkpoint(self, context, step, metrics):
        self.count += 1
        if self.count == self.at:
            raise KeyboardInterrupt(f"stop at checkpoint {self.at}")


@pytest.fixture
def tiny_cfg() -> dict[str, Any]:
    """A cheap game: EXP4.MP vs OGD on breast cancer, k=5, 20k data points, no tracking.

    A fresh dict per test, so a test may mutate it freely.
    """
    return game_cfg("constraint.k=5", "budget=20000", "checkpoints=5")


@pytest.fixture
def tracking_uri(tmp_path: Path) -> str:
    """``sqlite:///<tmp_path>/mlflow.db``: a private MLflow store for one test."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def cli_env() -> dict[str, str]:
    """The current environment without ``MLFLOW_TRACKING_URI`` (so the config decides)."""
    return {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}


def run_harness_cli(
    *overrides: str, cwd: Path, timeout: float = CLI_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """``python -m harness *overrides`` in ``cwd``; never raises on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "harness", *overrides],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_cli(*overrides, cwd=None)`` runs the CLI in ``cwd`` (default ``tmp_path``).

    Hydra writes its ``outputs/`` (or ``multirun/``) directory into ``cwd``.
    """

    def run(*overrides: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return run_harness_cli(*overrides, cwd=cwd or tmp_path)

    return run


def prospect_instance(n: int, d: int, seed: int, k: int | None = None, mu: float = 0.0,
                      nu: float = 0.0, radius: float = math.inf):
    """Prospect's problem on random data (seeded): squared loss / 2 (``loss_scale
    = 2``), no bias, the k-set (default k = n/2)."""
    from types import SimpleNamespace

    import numpy as np

    from harness.problem import Problem

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    model = harness.build("model", "linear_mse", bias=False, loss_scale=2.0)
    model.setup(SimpleNamespace(X=X, y=y, n_classes=0), 1.0)
    K = harness.build("constraint_set", "kset", n=n, k=k or n // 2)
    return Problem(X, y, model, K, mu, nu, radius)

