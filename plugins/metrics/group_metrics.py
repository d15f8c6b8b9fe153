"""Per-group losses at each checkpoint, for data sets with a group column.

When the data set declares ``group_column`` (a key of its ``columns``), each
checkpoint adds ``group_loss.<group>``, the mean unscaled loss of ``w_bar``
over the group's rows, and ``worst_group_loss``, the largest of them. Data
sets without a group column get nothing. O(n) per checkpoint (one
``bincount``), never per round.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

import harness

_NOT_IN_METRIC_NAME = re.compile(r"[^0-9A-Za-z_\-. /]")


def group_codes(labels: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Group names (as metric-name-safe text), each row's group code, group sizes."""
    names, codes = np.unique(np.asarray(labels).astype(str), return_inverse=True)
    safe = [_NOT_IN_METRIC_NAME.sub("_", str(g)) for g in names]
    return safe, codes, np.bincount(codes, minlength=len(names))


def group_losses(losses: np.ndarray, codes: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Mean of ``losses`` over each group."""
    return np.bincount(codes, weights=losses, minlength=sizes.size) / sizes


@harness.hookimpl
def checkpoint_metrics(context, w_bar, losses) -> Mapping[str, float] | None:
    dataset = context.parts.dataset
    column = getattr(dataset, "group_column", None)
    if column is None:
        return None
    groups = context.state.get("group_metrics")
    if groups is None:
        columns = getattr(dataset, "columns", None) or {}
        if column not in columns:
            raise ValueError(f"The data set '{dataset.name}' declares group_column "
                             f"{column!r} but has columns {sorted(columns)}.")
        groups = group_codes(columns[column])
        context.state["group_metrics"] = groups
    names, codes, sizes = groups
    means = group_losses(losses * context.parts.model.scale_, codes, sizes)
    metrics = {f"group_loss.{g}": float(v) for g, v in zip(names, means, strict=True)}
    metrics["worst_group_loss"] = float(means.max())
    return metrics
