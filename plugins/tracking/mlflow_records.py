"""The MLflow tracker's runs read back for the report (``minimax-bench-report``).

``read_runs`` turns each MLflow run of an experiment into a
``harness.runs.RunRecord``: params and tags as logged, metric histories read
on first access (the report reads those of the runs it keeps only), the sweep
a run ran in (its parent run, ``mlflow.parentRunId``), and a sweep's own
record (the parent run ``plugins.tracking.mlflow_sweeps`` made: tag ``SWEEP_TAG``,
its overrides, its artifacts such as a tuning sweep's ``tuning.json``).
``save_report`` logs the report's files as artifacts of the sweep's parent run
(``report/``), or of a summary run (tag ``REPORT_TAG``) when the report
covers more than one sweep; summary runs are not read back. ``view_lines``
writes the view of the reported runs in MLflow's UI and says how to open it
(``mlflow_view``). Metric histories go by the core's names
(``mlflow_names``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import harness
from harness.runs import History, RunRecord
from plugins.tracking import mlflow_store, mlflow_view
from plugins.tracking.mlflow_names import core_name
from plugins.tracking.mlflow_sweeps import OVERRIDES_TAG, SWEEP_TAG

#: the tag of a report's summary run
REPORT_TAG = "minimax_bench_report"
#: the tag MLflow gives a child run: the id of its parent (a sweep's)
PARENT_TAG = "mlflow.parentRunId"
#: where a sweep's report goes among its parent run's artifacts
PARENT_ARTIFACT_PATH = "report"
#: the most runs one report reads
MAX_RUNS = 5000


def _client(source: str | None):
    return mlflow_store.client(
        source or os.environ.get("MLFLOW_TRACKING_URI") or mlflow_store.DEFAULT_URI)


@harness.hookimpl
def read_runs(source: str | None, experiment: str, query: str) -> list[RunRecord]:
    """Every run of ``experiment`` in the store ``source`` (an MLflow tracking
    URI; None: ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``) that
    matches ``query`` (an MLflow search filter, "" for all), reports' summary
    runs left out. ``LookupError`` if the experiment is not there."""
    client = _client(source)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise LookupError(f"no experiment named {experiment!r} in {client.tracking_uri}")
    runs = client.search_runs([found.experiment_id], filter_string=query,
                              max_results=MAX_RUNS)
    return [_record(client, run) for run in runs if REPORT_TAG not in run.data.tags]


def _record(client, run) -> RunRecord:
    tags, run_id = dict(run.data.tags), run.info.run_id
    start = run.info.start_time
    return RunRecord(
        id=run_id, name=run.info.run_name or run_id, status=run.info.status,
        start_time=start / 1000.0 if start else 0.0, params=dict(run.data.params), tags=tags,
        metrics=_Histories(client, run_id, list(run.data.metrics)),
        sweep=tags.get(PARENT_TAG), is_sweep=tags.get(SWEEP_TAG) == "1",
        overrides=tuple(tags.get(OVERRIDES_TAG, "").split()),
        read_file=lambda name: _artifact(client, run_id, name))


class _Histories(Mapping[str, History]):
    """A run's metric histories by the core's names (``mlflow_names``), each read
    from the store when first asked for."""

    def __init__(self, client, run_id: str, keys: list[str]) -> None:
        self._client, self._run_id = client, run_id
        self._keys = {core_name(key): key for key in keys}  # the core's names: MLflow keys
        self._read: dict[str, History] = {}

    def __getitem__(self, key: str) -> History:
        if key not in self._keys:
            raise KeyError(key)
        if key not in self._read:
            history = sorted(self._client.get_metric_history(self._run_id, self._keys[key]),
                             key=lambda m: m.step)
            self._read[key] = (np.array([m.step for m in history], dtype=float),
                               np.array([m.value for m in history], dtype=float))
        return self._read[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _artifact(client, run_id: str, name: str) -> str | None:
    """The text of the run's artifact ``name``; None if it has none."""
    quiet = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    with tempfile.TemporaryDirectory() as folder, _environ(quiet):
        try:
            path = client.download_artifacts(run_id, name, folder)
        except Exception:  # noqa: BLE001 - no such artifact (an unfinished sweep's)
            return None
        return Path(path).read_text()


@contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """Environment variables set for the block (the user's own settings win)."""
    saved = {k: os.environ.get(k) for k in values}
    for key, value in values.items():
        os.environ.setdefault(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)


@harness.hookimpl
def save_report(source: str | None, experiment: str, sweep: str | None,
                files: Sequence[Path]) -> str:
    """The report's ``files`` as artifacts of the sweep's parent run (``report/``),
    or of a new summary run of ``experiment`` when ``sweep`` is None."""
    client = _client(source)
    if sweep is not None:
        for path in files:
            client.log_artifact(sweep, str(path), PARENT_ARTIFACT_PATH)
        return f"logged as artifacts ({PARENT_ARTIFACT_PATH}/) of the sweep's parent run {sweep}"
    found = client.get_experiment_by_name(experiment)
    run = client.create_run(found.experiment_id, tags={REPORT_TAG: "1"},
                            run_name=f"report-{experiment}")
    for path in files:
        client.log_artifact(run.info.run_id, str(path))
    client.set_terminated(run.info.run_id)
    return f"logged as artifacts of run {run.info.run_id} in experiment {experiment!r}"


@harness.hookimpl
def view_lines(source: str | None, experiment: str, sweep: str | None,
               query: str) -> list[str] | None:
    """The URL of the reported runs side by side in MLflow's UI
    (``mlflow_view``): the sweep's runs, or every game run (tag ``algorithm``),
    narrowed by ``query``."""
    client = _client(source)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    scope = mlflow_view.sweep_filter(sweep) if sweep else "tags.algorithm LIKE '%'"
    whose = "the sweep's" if sweep else "the experiment's"
    try:
        return mlflow_view.view_lines(client, found.experiment_id,
                                      f"{scope} and {query}" if query else scope, whose)
    except Exception as err:  # noqa: BLE001 - a store that takes no tag: the report stands
        return [f"no MLflow view of the reported runs ({err!r})"]
