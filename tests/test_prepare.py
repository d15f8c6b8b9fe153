"""What ``harness.prepare`` refuses before any round: data a game cannot play."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

import harness
from harness import Param

from conftest import game_cfg


class _Labels:
    """12 rows, two classes; ``labels`` decides how y is stored."""

    name: ClassVar[str] = "prepare_labels"
    params: ClassVar[dict[str, Param]] = {
        "labels": Param(str, default="int", choices=("int", "float", "outside")),
    }
    task, n_classes, default_model = "classification", 2, "logistic_cel"
    provenance: ClassVar[dict[str, str]] = {"source": "tests/test_prepare.py"}

    def __init__(self, labels: str = "int") -> None:
        self.X = np.linspace(0.0, 1.0, 24).reshape(12, 2)
        y = np.arange(12) % 2
        self.y = {"int": y, "float": y.astype(np.float64), "outside": y + 1}[labels]


class _Plugin:
    @harness.hookimpl
    def register_datasets(self, register):
        register(_Labels)


@pytest.mark.parametrize(("labels", "message"), [
    ("float", r"integer class codes in \[0, n_classes=2\)\. Got dtype float64"),
    ("outside", r"Got y\[1\] = 2 \(6 labels outside\)"),
])
def test_classification_labels_must_be_integer_codes(labels, message):
    registry = harness.Registry(harness.make_plugin_manager([_Plugin()]))
    cfg = game_cfg("dataset=prepare_labels", f"dataset.labels={labels}", "constraint.k=2",
                   "budget=400", registry=registry)
    with pytest.raises(harness.ConfigError, match=message):
        harness.prepare(cfg, registry)
    cfg["dataset"]["labels"] = "int"
    assert harness.prepare(cfg, registry).parts.dataset.y.dtype.kind == "i"
