"""A sweep's runs side by side in MLflow's UI, behind one URL.

MLflow 3's UI takes no URL parameter for a chart's axes on its runs page, and
its metric page (``#/metric/<key>?runs=[...]&plot_metric_keys=[...]
&y_axis_scale=log``) draws a log y-axis but always a linear x-axis, on which
log-spaced checkpoints bunch at the left. What the runs page can be told is a
shared view: the state its "share" button stores as the experiment tag
``mlflow.sharedViewState.<key>`` and opens with ``?viewStateShareKey=<key>``.
The tracker writes one per set of runs (``write_view``): the runs of a search
filter (a sweep's: its parent run's id), sorted by the dual gap, in one chart of
``dual_gap`` and ``suboptimality`` (those logged) against MLflow's step (data
points processed), both axes log, every run in its legend by name, above
MLflow's own charts; the runs list folded away; in the table view the name
column as wide as the names and the metrics compared first as columns.

The page loads runs 100 at a time (a sweep's with the smallest dual gap
first) and the chart draws those loaded; a larger sweep is narrowed in the
page's search box. ``view_lines`` writes the view and says how to open it:
``mlflow_sweeps.on_sweep_end`` prints them after a sweep, and the report
through the hook ``view_lines`` (``mlflow_records``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from plugins.tracking.mlflow_names import logged_name

#: the experiment tag MLflow's UI reads a shared view from: this prefix and its key
SHARED_VIEW_TAG = "mlflow.sharedViewState."
#: the metrics the chart draws, those the runs log (else ``FALLBACK_METRICS``)
CHART_METRICS = ("dual_gap", "suboptimality")
FALLBACK_METRICS = ("objective",)
#: the metric columns of the view's table, those the runs log
COLUMN_METRICS = ("dual_gap", "suboptimality", "objective", "accuracy", "topk_mse")
#: the runs MLflow's runs page loads at once (more come with "Load more")
PAGE_SIZE = 100
#: where ``mlflow ui`` serves by default
LOCAL_UI = "http://127.0.0.1:5000"
#: the runs of a view read to size it
_MAX_RUNS = 50000
_SECTION = "minimax-bench-compare"
_RUN_NAME_COLUMN = "attributes.`Run Name`"


def sweep_filter(parent_run_id: str) -> str:
    """The search filter of a sweep's runs: the children of its parent run."""
    return f"tags.`mlflow.parentRunId` = '{parent_run_id}'"


def view_key(search_filter: str) -> str:
    """The share key of the view of ``search_filter``'s runs (the same runs, the same key)."""
    return "minimax-bench-" + hashlib.sha256(search_filter.encode()).hexdigest()[:12]


def view_state(search_filter: str, chart: list[str], columns: list[str],
               longest_name: int) -> dict[str, Any]:
    """MLflow's runs page state (what its share button stores): the runs of
    ``search_filter`` sorted by ``chart[0]``, one chart of the ``chart``
    metrics against the step with both axes log, the ``columns`` metrics
    in the table, its name column wide enough for ``longest_name`` characters."""
    card = {"uuid": f"{_SECTION}-chart", "type": "LINE", "metricSectionId": _SECTION,
            "isGenerated": False, "deleted": False,
            "metricKey": chart[0], "selectedMetricKeys": chart,
            "xAxisKey": "step", "xAxisScaleType": "log", "scaleType": "log",
            "yAxisKey": "METRIC", "yAxisExpressions": [], "selectedXAxisMetricKey": "",
            "lineSmoothness": 0, "ignoreOutliers": False,
            "useGlobalXaxisKey": False, "useGlobalLineSmoothing": False}
    section = {"uuid": _SECTION, "name": f"{' and '.join(chart)} against data points (step)",
               "display": True, "isReordered": False, "deleted": False, "isGenerated": False,
               "columns": 1, "cardHeight": 600}
    metric_columns = [f"metrics.`{m}`" for m in columns]
    widths = {_RUN_NAME_COLUMN: min(480, 60 + 8 * longest_name), "runDateAndNestInfo": 150,
              "duration": 80, **{column: 115 for column in metric_columns}}
    return {"searchFilter": search_filter,
            "orderByKey": f"metrics.`{chart[0]}`", "orderByAsc": True,
            "compareRunCharts": [card], "compareRunSections": [section],
            "isAccordionReordered": True, "hideEmptyCharts": True,
            "runsHiddenMode": "SHOW_ALL", "runListHidden": True,
            "selectedColumns": metric_columns, "columnOrder": list(widths),
            "columnWidths": widths}


def write_view(client, experiment_id: str, search_filter: str) -> tuple[str, int, list[str]]:
    """Write (or refresh) the view of ``search_filter``'s runs in the
    experiment: its key, how many runs it has and the metrics it charts."""
    runs = client.search_runs([experiment_id], filter_string=search_filter,
                              max_results=_MAX_RUNS)
    logged = {key for run in runs for key in run.data.metrics}
    chart = ([logged_name(m) for m in CHART_METRICS if logged_name(m) in logged]
             or [logged_name(m) for m in FALLBACK_METRICS])
    columns = [logged_name(m) for m in COLUMN_METRICS if logged_name(m) in logged]
    longest = max((len(run.info.run_name or "") for run in runs), default=20)
    key = view_key(search_filter)
    client.set_experiment_tag(experiment_id, SHARED_VIEW_TAG + key,
                              json.dumps(view_state(search_filter, chart, columns, longest)))
    return key, len(runs), chart


def view_url(base: str, experiment_id: str, key: str) -> str:
    """The address of the view ``key`` on the UI at ``base``, in its model-training mode."""
    return (f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?viewStateShareKey={key}"
            "&compareRunsMode=CHART&workflowType=machine_learning")


def view_lines(client, experiment_id: str, search_filter: str, whose: str) -> list[str]:
    """Write the view of ``search_filter``'s runs and say how to open it:
    ``whose`` runs they are ("the sweep's"), the ``mlflow ui`` command a local
    store needs, the URL, and how to narrow a view of more runs than a page holds."""
    key, count, chart = write_view(client, experiment_id, search_filter)
    uri = client.tracking_uri
    lines = [f"MLflow view of {whose} {count} run{'s' * (count != 1)}: "
             f"{' and '.join(chart)} against data points, log axes"]
    if uri.startswith(("http://", "https://")):
        lines.append(f"  open it at:    {view_url(uri, experiment_id, key)}")
    else:
        lines += [f"  open it with:  mlflow ui --backend-store-uri {uri}  then",
                  f"  {view_url(LOCAL_UI, experiment_id, key)}"]
    if count > PAGE_SIZE:
        lines.append(f"  the chart draws the {PAGE_SIZE} runs of smallest {chart[0]} (the page "
                     "loads runs 100 at a time); narrow them in its search box, e.g. with  "
                     "and tags.dataset = '<name>'")
    return lines
