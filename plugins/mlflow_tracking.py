"""MLflow tracking as a plugin of the event hooks: one MLflow run per game.

Config (``tracking`` in ``conf/config.yaml``): ``enabled``, ``uri`` (default
``sqlite:///mlflow.db`` in the working directory, or ``$MLFLOW_TRACKING_URI``),
``experiment``, ``run_name``. Metrics are logged in one batch per checkpoint
with ``step`` = data points processed. mlflow is imported only here, and only
when tracking is enabled (the import costs about a second).

A Hydra multirun gets one parent run: ``SweepCallback.on_multirun_start``
creates the experiment and the parent run once, in the launching process,
and writes their ids to ``<sweep dir>/sweep.json``; every job (in any
launcher's process or on any cluster node sharing the file system) files
its run under them. Jobs that each called ``set_experiment`` would race and
could drop runs into the Default experiment.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

import harness

SWEEP_FILE = "sweep.json"

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
    name = settings.get("experiment") or "minimax-bench"
    tags = dict(context.tags)
    sweep = (context.state.get("sweep") or {}).get("mlflow")
    if sweep and sweep["uri"] == client.tracking_uri and sweep["experiment"] == name:
        experiment_id = sweep["experiment_id"]
        tags["mlflow.parentRunId"] = sweep["parent_run_id"]
    else:
        experiment_id = _experiment_id(client, name)
    run = client.create_run(experiment_id, tags=tags, run_name=settings.get("run_name") or None)
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


class SweepCallback(Callback):
    """Hydra callback: one MLflow experiment and parent run per multirun, made
    before any job starts (``hydra.callbacks`` in ``conf/config.yaml``)."""

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        tracking = config.get("tracking") or {}
        if not tracking.get("enabled", False):
            return
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=tracking.get("uri") or None)
        name = tracking.get("experiment") or "minimax-bench"
        experiment_id = _experiment_id(client, name)
        sweep_dir = Path(config.hydra.sweep.dir)
        overrides = " ".join(config.hydra.overrides.task)
        parent = client.create_run(
            experiment_id,
            tags={"minimax_bench_sweep": "1", "sweep_dir": str(sweep_dir.resolve()),
                  "overrides": overrides[:5000],
                  "minimax_bench_version": harness.package_version()},
            run_name=f"sweep {sweep_dir.name}",
        )
        sweep_dir.mkdir(parents=True, exist_ok=True)
        record = {"mlflow": {"uri": client.tracking_uri, "experiment": name,
                             "experiment_id": experiment_id,
                             "parent_run_id": parent.info.run_id}}
        (sweep_dir / SWEEP_FILE).write_text(json.dumps(record, indent=2))

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        path = Path(config.hydra.sweep.dir) / SWEEP_FILE
        if not path.is_file():
            return
        from mlflow.tracking import MlflowClient

        record = json.loads(path.read_text())["mlflow"]
        MlflowClient(tracking_uri=record["uri"]).set_terminated(record["parent_run_id"])
