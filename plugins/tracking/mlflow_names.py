"""The keys the MLflow tracker logs the core's metrics under, and back.

MLflow's chart view draws one chart per metric, in order of name, and puts
metrics named ``<section>/<name>`` in sections of their own *before* its
"Model metrics" section (MLflow 3's UI). So the metrics a user compares first
(``dual_gap``, ``objective``, the suboptimalities, the task metrics) keep their
names, and the bookkeeping ones (counters, timings, the certificates' inner
bounds) are logged as ``zz.<name>``: the prefix sorts them after every other
metric of the same section, in the chart view, the runs table's column list
and the compare page alike. The core, the report and the Python API use the
core's names: ``mlflow_records`` maps the keys back, so runs logged before
the prefix existed (under the core's names) read the same.
"""

from __future__ import annotations

#: the prefix of a bookkeeping metric's key in MLflow
BOOKKEEPING_PREFIX = "zz."
#: the core's metrics logged under ``BOOKKEEPING_PREFIX``
BOOKKEEPING = frozenset({
    "rounds", "data_points", "grad_evals", "passes",
    "wall_time_s", "compile_time_s", "checkpoint_time_s", "checkpoint_time_total_s",
    "clipped_losses", "inner_min_lower", "inner_solver_slack", "dual_lower",
})


def logged_name(name: str) -> str:
    """The MLflow key of the core's metric ``name``."""
    return BOOKKEEPING_PREFIX + name if name in BOOKKEEPING else name


def core_name(key: str) -> str:
    """The core's name of the MLflow key ``key`` (a key without the prefix is its own)."""
    name = key.removeprefix(BOOKKEEPING_PREFIX)
    return name if name in BOOKKEEPING else key
