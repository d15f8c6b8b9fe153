"""Shared fixtures for the minimax-bench test suite.

* ``tiny_cfg``: a small, fully specified config (plain dict) for ``harness.run``;
  tracking is disabled, so it touches no MLflow store.
* ``tracking_uri``: an MLflow SQLite store URI in the test's ``tmp_path``
  (the file is created by MLflow on first use, which costs a few seconds).
* ``run_cli``: run ``python -m harness <overrides>`` as a subprocess in
  ``tmp_path`` with ``MLFLOW_TRACKING_URI`` removed from its environment;
  returns the ``subprocess.CompletedProcess`` (text stdout/stderr).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CLI_TIMEOUT_S = 300


@pytest.fixture
def tiny_cfg() -> dict[str, Any]:
    """A cheap game: EXP4.MP vs OGD on breast cancer, k=5, 20k data points, no tracking.

    A fresh dict per test, so a test may mutate it freely.
    """
    return {
        "constraint": {"name": "kset", "k": 5},
        "p_player": {"name": "exp4mp"},
        "w_player": {"name": "ogd"},
        "model": {"name": "auto"},
        "dataset": {"name": "breast_cancer"},
        "budget": 20000,
        "seed": 0,
        "checkpoints": 5,
        "tracking": {"enabled": False},
    }


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
