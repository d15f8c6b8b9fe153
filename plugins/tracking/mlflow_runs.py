"""MLflow tracking as a plugin of the event hooks: one MLflow run per game.

Config (``tracking`` in ``conf/config.yaml``, ``mlflow_store.PARAMS``):
``enabled``, ``uri`` (default ``sqlite:///mlflow.db`` in the working
directory, or ``$MLFLOW_TRACKING_URI``), ``experiment``, ``run_name`` (None:
``<algorithm> s<seed> k<k> <dataset>``), ``send_every_s``, ``connect_timeout_s``.
Each checkpoint's metrics are journalled to disk as it happens and logged in
batches (``plugins.tracking.mlflow_pending``) with ``step`` = data points processed.
Every experiment it creates or files runs in is tagged a model-training experiment
(``mlflow.experimentKind``: MLflow 3's UI opens an experiment without a kind on
its GenAI overview). The store is opened at the tracker's run start
(``plugins.tracking.mlflow_store``); a tracking server that does not answer
is waited for up to ``connect_timeout_s`` seconds (a restart), then stops a
run before it computes anything, and a server that fails mid-run loses no
checkpoint (``plugins.tracking.mlflow_pending``). Inside a multirun, the run files
under its sweep's experiment and parent run (``plugins.tracking.mlflow_sweeps``).

Every run is tagged ``config_key``, the key of its game's resolved
parameters (seed included; the key of its saved state, ``harness.state``).
With ``resume=true``, a run whose experiment already holds a FINISHED run of
that key is not played again: the tracker raises ``AlreadyFinished`` before
any other plugin starts (an unfinished run's saved state is resumed as
before). Runs are also tagged ``request_key``, the key of the composed config
they ran (``request_key``), which is looked up before anything is prepared
(``before_prepare``): a relaunched sweep skips its finished runs without
loading their data.

The command's end-of-run summary gains the run's id, its store and how to
open it; an interrupted run's notice says that the run is marked KILLED.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import harness
from harness import ConfigError, state, tune
from harness.params import validate
from plugins.tracking import mlflow_pending, mlflow_store
from plugins.tracking.mlflow_names import core_name, logged_name
from plugins.tracking.mlflow_store import PARAMS
from plugins.tracking.mlflow_sweeps import run_experiment

#: the run tag holding the key of the run's resolved parameters (``harness.state.key``)
CONFIG_KEY_TAG = "config_key"

_MAX_PARAMS_PER_BATCH = 100
_MAX_PARAM_LEN = 6000


class AlreadyFinished(harness.RunSkipped):
    """``resume=true`` found a FINISHED run of this config and seed: the run is not
    played again. ``run_id``, ``experiment_id``, ``uri``: where it is;
    ``metrics``: its final metrics."""

    def __init__(self, run_id: str, experiment_id: str, uri: str,
                 metrics: Mapping[str, float]) -> None:
        super().__init__(f"this config and seed already finished as MLflow run {run_id} "
                         f"(experiment id {experiment_id}) in {uri}; it is not run again "
                         "(without resume=true it is run as a new run).")
        self.run_id, self.experiment_id, self.uri = run_id, experiment_id, uri
        self.metrics = dict(metrics)


@harness.hookimpl
def register_config_blocks(register):
    register(harness.ConfigBlock("tracking", PARAMS, off={"enabled": False},
                                 doc="MLflow tracking: one run per game"))


def _settings(context) -> dict[str, Any] | None:
    """The validated ``tracking`` block if tracking is enabled, else None."""
    block = context.config.get("tracking")
    if block is None:  # a config without the block (the Python API's bare dicts) tracks nothing
        return None
    if not isinstance(block, Mapping):
        raise ConfigError(f"The 'tracking' config key must be a mapping. Got {block!r} instead.")
    values = validate("tracking", PARAMS, block)
    return values if values["enabled"] else None


#: a tuning sweep's roles as a run name says them
ROLE_NAMES = {"tune": "tune", "theory": "theory", "tuned": "tuned", "both": "theory=tuned"}


def run_name(context, role: str | None = None) -> str:
    """``<algorithm> s<seed> k<k> <dataset>`` (``exp4mp s0 k20 breast_cancer``):
    the p-player of the game (or the whole-algorithm solver) and the seed
    first, then each step-size multiplier that is not 1 (``eta_scale=3``) and
    the run's role in a tuning sweep (``tune``, ``theory``, ``tuned``,
    ``theory=tuned``), then the set's k (or the set's own short name where it
    has one: ``extremile r=2``) and the data set. MLflow's runs table shows
    about 21 characters of a name: what tells a sweep's runs apart comes
    first, and a long data set name is cut last."""
    tags = context.tags
    scales = [f"{key.rsplit('.', 1)[-1]}={float(value):.3g}"
              for key, value in sorted(context.params.items())
              if key.split(".", 1)[0] in tune.ALGORITHM_KEYS and key.endswith("_scale")
              and isinstance(value, int | float) and not isinstance(value, bool)
              and float(value) != 1.0]
    return " ".join([tags["algorithm"], f"s{tags['seed']}", *scales,
                     *([ROLE_NAMES[role]] if role else []),
                     tags.get("constraint_label") or f"k{context.parts.constraint.k}",
                     tags["dataset"]])


#: the run tag holding the key of its composed config (``request_key``)
REQUEST_KEY_TAG = "request_key"
#: top-level config keys that steer how a run is played or recorded, not what it computes
NOT_THE_RUN = ("progress", "resume", "state_dir", "tracking")


def request_key(config: Mapping[str, Any]) -> str:
    """The key of a run's composed config (seed included) without ``NOT_THE_RUN``,
    with the package's version (an upgrade may change a theory default) and
    the size and modification time of every file a config value names (a data
    file replaced under the same path is other data): known before anything
    is prepared. Two runs of one key compute the same thing; two spellings of
    one configuration (a step size null and the value it resolves to) have
    two keys, and the ``config_key`` of the resolved parameters finds those
    after preparing."""
    kept = {k: v for k, v in config.items() if k not in NOT_THE_RUN}
    return state.key({"config": kept, "version": harness.package_version(),
                      "files": sorted(_files(kept))})


def _files(value: Any) -> Iterator[tuple[str, int, int]]:
    """``(path, size, mtime_ns)`` of each existing file a config value names."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _files(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _files(item)
    elif isinstance(value, str) and value and len(value) < 4096:
        with contextlib.suppress(OSError, ValueError):
            found = os.stat(value)
            if stat.S_ISREG(found.st_mode):
                yield value, found.st_size, found.st_mtime_ns


@harness.hookimpl
def before_prepare(config):
    """With ``resume=true``, a FINISHED run of this very composed config is found
    before the data is loaded and the game prepared (``AlreadyFinished``)."""
    if not config.get("resume") or config.get("tracking") is None:
        return
    settings = validate("tracking", PARAMS, config["tracking"])
    if settings["enabled"]:
        mlflow_store.probe(mlflow_store.resolved_uri(settings.get("uri") or None),
                           settings["connect_timeout_s"])
        with mlflow_store.gc_paused():  # mlflow and its store are imported here
            _refuse_finished(settings, REQUEST_KEY_TAG, request_key(config))


@harness.hookimpl(wrapper=True, specname="on_run_start")
def check_before_start(context):
    """Runs before every other ``on_run_start`` (the OPT solve included): a bad
    ``tracking`` block or an unreachable server stops the run before anything
    is computed, and so does a FINISHED run of the same config when resuming
    (``AlreadyFinished``)."""
    settings = _settings(context)
    if settings is not None:
        mlflow_store.probe(mlflow_store.resolved_uri(settings.get("uri") or None),
                           settings["connect_timeout_s"])
        # the game's own parameters, before plugins add theirs at run start:
        # the same key as its saved state's
        context.state[CONFIG_KEY_TAG] = state.key(context.params)
        if context.config.get("resume") and context.parts.resumed_from is None:
            with mlflow_store.gc_paused():  # mlflow and its store are imported here
                _refuse_finished(settings, CONFIG_KEY_TAG, context.state[CONFIG_KEY_TAG])
    return (yield)


def _refuse_finished(settings: dict[str, Any], tag: str, key: str) -> None:
    """Raise ``AlreadyFinished`` if the run's experiment holds a FINISHED run
    whose ``tag`` is ``key``; inside a sweep, one of that sweep (its parent
    run): a sweep's report then finds every run it reused, and another sweep
    computes its own."""
    client = mlflow_store.client(settings.get("uri") or None)
    experiment_id, parent = run_experiment(
        client, settings.get("experiment") or mlflow_store.DEFAULT_EXPERIMENT, create=False)
    if experiment_id is None:
        return
    inside = f" and tags.`mlflow.parentRunId` = '{parent}'" if parent else ""
    found = client.search_runs(
        [experiment_id],
        filter_string=(f"tags.{tag} = '{key}' "
                       f"and attributes.status = 'FINISHED'{inside}"),
        order_by=["attributes.start_time DESC"], max_results=1)
    if found:
        run = found[0]
        raise AlreadyFinished(run.info.run_id, experiment_id, client.tracking_uri,
                              {core_name(k): v for k, v in run.data.metrics.items()})


@harness.hookimpl
def on_run_start(context):
    settings = _settings(context)
    if settings is None:
        return
    with mlflow_store.gc_paused():  # mlflow and its store are imported here
        _start(context, settings)


def _start(context, settings: dict[str, Any]) -> None:
    """Open the store, then create the run (or take over a resumed one) and log
    its params; each call waits out a tracking server that restarts
    (``mlflow_store.retrying``)."""
    client = mlflow_store.client(settings.get("uri") or None)
    patiently = functools.partial(mlflow_store.retrying, client.tracking_uri,
                                  settings["connect_timeout_s"])
    name = settings.get("experiment") or mlflow_store.DEFAULT_EXPERIMENT
    resumed = (context.state.get("resume") or {}).get("mlflow")
    if resumed and resumed["uri"] == client.tracking_uri:
        patiently(client.update_run, resumed["run_id"], status="RUNNING")
        handle = {**resumed, "client": client, "pending": [],
                  "send_every_s": settings["send_every_s"]}
        context.state["mlflow"] = handle
        mlflow_pending.take_over(context, handle)
        try:
            last = _last_step(client, handle["run_id"])
        except Exception:  # noqa: BLE001 - the store failed again: what is buffered decides
            last = -1
        handle["logged_through"] = max([last] + [r["step"] for r in handle["pending"]])
        return
    tags = dict(context.tags)
    if settings.get("tuning"):
        tags[tune.ROLE_TAG] = settings["tuning"]
    if CONFIG_KEY_TAG in context.state:
        tags[CONFIG_KEY_TAG] = context.state[CONFIG_KEY_TAG]
    tags[REQUEST_KEY_TAG] = request_key(context.config)
    experiment_id, parent_run_id = patiently(run_experiment, client, name)
    if parent_run_id is not None:
        tags["mlflow.parentRunId"] = parent_run_id
    run = patiently(client.create_run, experiment_id, tags=tags,
                    run_name=settings.get("run_name") or run_name(context, settings.get("tuning")))
    run_id = run.info.run_id
    ids = {"run_id": run_id, "experiment_id": experiment_id, "uri": client.tracking_uri}
    context.state["mlflow"] = {**ids, "client": client, "pending": [],
                               "send_every_s": settings["send_every_s"]}
    context.state.setdefault("resume", {})["mlflow"] = ids  # saved with the game state
    params = [(k, str(v)[:_MAX_PARAM_LEN]) for k, v in sorted(context.params.items())]
    try:
        for start in range(0, len(params), _MAX_PARAMS_PER_BATCH):
            patiently(mlflow_store.log_batch, client, run_id,
                      params=params[start:start + _MAX_PARAMS_PER_BATCH])
        patiently(_log_config, client, run_id, context.config)
    except BaseException:
        context.state.pop("mlflow")
        client.set_terminated(run_id, status="FAILED")
        raise


def _log_config(client, run_id: str, config: Mapping[str, Any]) -> None:
    """The resolved config as the artifact ``config.yaml`` (a copy of the params
    the run already holds): without waiting where the client can ``cast``."""
    cast = getattr(client, "cast", None)
    if cast is None:
        client.log_dict(run_id, config, "config.yaml")
        return

    def answered(ok: bool, value: Any) -> None:
        if not ok:
            print(f"minimax-bench: the run's config.yaml could not be stored ({value}); "
                  "its params hold the same values.", file=sys.stderr)

    cast(answered, "log_dict", run_id, dict(config), "config.yaml")


def _last_step(client, run_id: str) -> int:
    """The last checkpoint step the run holds. A process killed outright (SIGKILL,
    out of memory) between logging a checkpoint and saving the game state
    resumes from the state before it and reaches that checkpoint again; it is
    not logged twice."""
    return max((m.step for key in client.get_run(run_id).data.metrics
                for m in client.get_metric_history(run_id, key)), default=-1)


@harness.hookimpl
def on_checkpoint(context, step: int, metrics: Mapping[str, float]):
    handle = context.state.get("mlflow")
    if handle is None or step <= handle.get("logged_through", -1):
        return
    record = {"step": int(step), "timestamp": int(time.time() * 1000),
              "metrics": {logged_name(k): float(v) for k, v in metrics.items()}}
    mlflow_pending.send(context, handle, record, every=handle["send_every_s"])


@harness.hookimpl
def on_run_end(context, status: str, metrics: Mapping[str, Any]):
    handle = context.state.get("mlflow")
    if handle is None:
        return
    mlflow_pending.finish(context, handle, status)
    if handle["pending"] and status != "KILLED":  # not after a Ctrl-C: the user wants out
        # the store failed: a server that is down (restarting) is waited for,
        # as at run start, then the journal is replayed, the status last
        timeout_s = _settings(context)["connect_timeout_s"]
        if mlflow_store.wait_for_server(handle["uri"], timeout_s,
                                        "to send what the run logged meanwhile") is None:
            with contextlib.suppress(Exception):  # failing again: the journal stays
                sent = mlflow_pending.replay(mlflow_pending.pending_file(context, handle))
                handle["pending"].clear()
                print(f"minimax-bench: the tracking store {handle['uri']} answers again; "
                      f"{sent} journalled record(s) were sent.", file=sys.stderr)
    mlflow_pending.left_over(context, handle)


@harness.hookimpl(trylast=True)
def summary_lines(context, status: str, metrics: Mapping[str, Any]):
    """Where the run is recorded and how to open it; after an interrupt, that
    it is marked KILLED."""
    handle = context.state.get("mlflow")
    if handle is None:
        return None
    run_id, experiment_id, uri = handle["run_id"], handle["experiment_id"], handle["uri"]
    if status != "FINISHED":
        return [("MLflow run", f"{run_id} is marked {status} with the checkpoints logged so far")]
    if uri.startswith("http"):
        where = f"open it at:    {uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
    else:
        where = (f"open it with:  mlflow ui --backend-store-uri {uri}  then "
                 f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{run_id}")
    return [("MLflow run", f"{run_id} (experiment id {experiment_id}) in {uri}"), ("", where)]
