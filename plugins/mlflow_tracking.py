"""MLflow tracking as a plugin of the event hooks: one MLflow run per game.

Config (``tracking`` in ``conf/config.yaml``): ``enabled``, ``uri`` (default
``sqlite:///mlflow.db`` in the working directory, or ``$MLFLOW_TRACKING_URI``),
``experiment``, ``run_name``. Metrics are logged in one batch per checkpoint
with ``step`` = data points processed. mlflow is imported only here, and only
when tracking is enabled (the import costs about a second).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import harness

_MAX_PARAMS_PER_BATCH = 100
_MAX_PARAM_LEN = 6000


def _settings(context) -> dict[str, Any] | None:
    tracking = context.config.get("tracking") or {}
    return tracking if tracking.get("enabled", False) else None


def _experiment_id(client, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # created concurrently by another job
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


@harness.hookimpl
def on_run_start(context):
    settings = _settings(context)
    if settings is None:
        return
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    uri = settings.get("uri") or None
    client = MlflowClient(tracking_uri=uri)
    experiment_id = _experiment_id(client, settings.get("experiment") or "minimax-bench")
    run = client.create_run(experiment_id, tags=dict(context.tags),
                            run_name=settings.get("run_name") or None)
    run_id = run.info.run_id
    context.state["mlflow"] = {"client": client, "run_id": run_id,
                               "experiment_id": experiment_id, "uri": client.tracking_uri}
    params = [Param(k, str(v)[:_MAX_PARAM_LEN]) for k, v in sorted(context.params.items())]
    try:
        for start in range(0, len(params), _MAX_PARAMS_PER_BATCH):
            client.log_batch(run_id, params=params[start:start + _MAX_PARAMS_PER_BATCH])
        client.log_dict(run_id, context.config, "config.yaml")
    except BaseException:
        context.state.pop("mlflow")
        client.set_terminated(run_id, status="FAILED")
        raise


@harness.hookimpl
def on_checkpoint(context, step: int, metrics: Mapping[str, float]):
    handle = context.state.get("mlflow")
    if handle is None:
        return
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, int(step)) for k, v in metrics.items()]
    handle["client"].log_batch(handle["run_id"], metrics=batch)


@harness.hookimpl
def on_run_end(context, status: str, metrics: Mapping[str, Any]):
    handle = context.state.get("mlflow")
    if handle is None:
        return
    handle["client"].set_terminated(handle["run_id"], status=status)
