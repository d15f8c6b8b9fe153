"""Held-out metrics at each checkpoint, for a run on a data set's training split.

A data set with ``held_out()`` (every built-in one, ``plugins.data.split``)
hands over, under ``split=train``, its held-out rows prepared as fitted on the
training rows. At run start the split's row counts are recorded as the
parameters ``dataset.n_train`` and ``dataset.n_test``, and the problem is
rebuilt on the held-out rows: the same model (its loss scale included), the
constraint set's class with the run's parameters and ``n = n_test`` (bound to
the held-out data set when it reads one), the same ``mu``, ``nu`` and ball.
Each checkpoint then adds, at ``w_bar``:

* ``test_objective``: ``F`` on the held-out rows (a fixed ``k`` stays ``k``;
  ``constraint.level`` keeps the share of rows);
* ``test_mse`` (regression, a model with ``predict``): the mean squared error
  ``(predict(w, x) - y)^2`` over the held-out rows, unscaled;
* ``test_accuracy`` (classification): the model's ``accuracy`` on them.

One pass over the held-out rows per metric, counted in the checkpoint's
``checkpoint_time_s``, never in the run's clock. A set that cannot be rebuilt
for ``n_test`` rows (``k > n_test``, caps given row by row) is warned about at
run start, and ``test_objective`` is left out.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import harness
from harness import ConfigError, stream
from harness.params import validate
from harness.problem import Problem


@dataclass
class HeldOut:
    """The held-out rows of a run and its problem rebuilt on them (None: not rebuilt)."""

    data: Any
    problem: Problem | None


def held_out_problem(context: Any, data: Any) -> Problem | None:
    """The run's problem on the held-out data set ``data`` (see the module
    docstring); None, with a warning, when its constraint set cannot be rebuilt."""
    run = context.parts
    problem, constraint = run.problem, run.constraint
    given = {k: v for k, v in (context.config.get("constraint") or {}).items() if k != "name"}
    name = run.names.get("constraint", type(constraint).__name__)
    n = int(data.X.shape[0])
    try:
        cls = type(constraint)
        rebuilt = cls(**validate(name, cls.params, {**given, "n": n}))
        bind = getattr(rebuilt, "bind", None)
        if bind is not None:
            bind(data)
    except ConfigError as err:
        warnings.warn(f"minimax-bench: test_objective is not logged: the constraint set "
                      f"'{name}' cannot be rebuilt for the n_test={n} held-out rows ({err})",
                      RuntimeWarning, stacklevel=2)
        return None
    return Problem(data.X, data.y, problem.model, rebuilt, problem.mu, problem.nu,
                   problem.radius, problem.penalty)


def mean_squared_error(model: Any, w: np.ndarray, X: Any, y: np.ndarray) -> float:
    """``mean_i (predict(w, x_i) - y_i)^2``, read in row chunks."""
    total = 0.0
    for Xc, yc in stream.row_chunks(X, y):
        r = model.predict(w, Xc) - yc
        total += float(r @ r)
    return total / y.size


@harness.hookimpl(tryfirst=True)
def on_run_start(context) -> None:
    dataset = context.parts.dataset
    counts = getattr(dataset, "split_counts", None) or {}
    context.params.update({f"dataset.{key}": int(value) for key, value in counts.items()})
    held_out = getattr(dataset, "held_out", None)
    data = held_out() if callable(held_out) else None
    if data is not None:
        context.state["held_out"] = HeldOut(data, held_out_problem(context, data))


@harness.hookimpl
def checkpoint_metrics(context, w_bar, losses) -> Mapping[str, float] | None:
    found = context.state.get("held_out")
    if found is None:
        return None
    data, model = found.data, context.parts.model
    metrics = {}
    if found.problem is not None:
        metrics["test_objective"] = found.problem.value(w_bar)
    if data.task == "regression" and callable(getattr(model, "predict", None)):
        metrics["test_mse"] = mean_squared_error(model, w_bar, data.X, data.y)
    elif data.task == "classification":
        k = min(int(getattr(context.parts.constraint, "k", 1)), int(data.X.shape[0]))
        accuracy = model.task_metrics(w_bar, data.X, data.y, k).get("accuracy")
        if accuracy is not None:
            metrics["test_accuracy"] = float(accuracy)
    return metrics


@harness.hookimpl
def summary_lines(context, status, metrics) -> list[tuple[str, str]] | None:
    """The last checkpoint's held-out metrics, after a finished run on a training split."""
    found = context.state.get("held_out")
    if status != "FINISHED" or found is None:
        return None
    shown = [f"{label} {metrics[key]:.6g}" for key, label in (
        ("test_objective", "objective"), ("test_mse", "MSE"), ("test_accuracy", "accuracy"))
        if key in metrics]
    return [(f"held-out rows ({found.data.X.shape[0]:,})", ", ".join(shown))] if shown else None
