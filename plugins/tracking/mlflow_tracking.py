"""MLflow tracking as a plugin of the event hooks: one MLflow run per game.

Config (``tracking`` in ``conf/config.yaml``): ``enabled``, ``uri`` (default
``sqlite:///mlflow.db`` in the working directory, or ``$MLFLOW_TRACKING_URI``),
``experiment``, ``run_name`` (None: ``<algorithm>-<dataset>-k<k>-s<seed>``).
Metrics are logged in one batch per checkpoint with ``step`` = data points
processed. Every experiment it creates or files runs in is tagged a
model-training experiment (``mlflow.experimentKind``: MLflow 3's UI opens an
experiment without a kind on its GenAI overview). mlflow is imported only here
(and in ``plugins.tracking.mlflow_worker``), and only when tracking is enabled, at the
tracker's run start (the import and the store cost one to two seconds); the
early check of a tracking server needs
no mlflow. A single run of the ``minimax-bench`` command imports it in a
helper process from the command's start instead (``plugins.tracking.mlflow_worker``,
started by ``harness.command``), on the machine's other core, and logs
through it.

Faults: an unreachable tracking server stops a run before it computes
anything; a server that fails mid-run does not lose checkpoints: they are
buffered (in memory and in ``<state_dir>/pending-<run id>.jsonl``), sent when
it answers again, and left in that file for ``python -m
plugins.tracking.mlflow_tracking replay FILE`` if it never does.

A Hydra multirun gets one parent run: ``SweepCallback.on_multirun_start``
creates the experiment and the parent run once, in the launching process,
and writes their ids to ``<sweep dir>/sweep.json``; every job (in any
launcher's process or on any cluster node sharing the file system) files
its run under them (``sweep_record``, read at run start). Jobs that each
called ``set_experiment`` would race and could drop runs into the Default
experiment. The parent run is named after the sweep's preset or its swept
overrides (``sweep_name``).

Every run is tagged ``config_key``, the key of its game's resolved
parameters (seed included; the key of its saved state, ``harness.state``).
With ``resume=true``, a run whose experiment already holds a FINISHED run of
that key is not played again: the tracker raises ``AlreadyFinished`` before
any other plugin starts (an unfinished run's saved state is resumed as
before).

The command's end-of-run summary gains the run's id, its store and how to
open it; an interrupted run's notice says that the run is marked KILLED.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

import harness
from harness import ConfigError, Param, state, tune
from harness.params import validate
from plugins.tracking import mlflow_worker

SWEEP_FILE = "sweep.json"
#: the run tag holding the key of the run's resolved parameters (``harness.state.key``)
CONFIG_KEY_TAG = "config_key"
#: MLflow 3's experiment kind: a model-training experiment, not a GenAI one
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
#: the longest preset-or-overrides part of a sweep's parent run name
_MAX_SWEEP_LABEL = 100

_MAX_PARAMS_PER_BATCH = 100
_MAX_PARAM_LEN = 6000


#: the ``tracking`` config block
PARAMS: dict[str, Param] = {
    "enabled": Param(bool, default=True, doc="log the run to MLflow"),
    "uri": Param(str, nullable=True, doc="tracking URI; None: MLflow's default"),
    "experiment": Param(str, default="minimax-bench", nullable=True, doc="experiment name"),
    "run_name": Param(str, nullable=True,
                      doc="run name; None: <algorithm>-<dataset>-k<k>-s<seed>"),
    "tuning": Param(str, nullable=True, choices=("tune", "theory", "tuned", "both"),
                    doc="the run's role in a tuning sweep (hydra/sweeper=tune), its tag "
                        "'tuning'; set by that sweeper"),
}


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


def _experiment_id(client, name: str) -> str:
    """The id of experiment ``name``, created if missing; either way marked a
    model-training experiment (an existing one's own kind is kept)."""
    tag, kind = EXPERIMENT_KIND
    found = client.get_experiment_by_name(name)
    if found is None:
        try:
            return client.create_experiment(name, tags={tag: kind})
        except Exception:  # created concurrently by another job
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    if tag not in found.tags:
        client.set_experiment_tag(found.experiment_id, tag, kind)
    return found.experiment_id


def _run_experiment(client, name: str, *, create: bool = True) -> tuple[str | None, str | None]:
    """The experiment id a run files under, and its sweep's parent run id (None
    outside a sweep): the sweep's (``sweep_record``), else ``name``'s (None if
    it does not exist and ``create`` is false)."""
    sweep = sweep_record().get("mlflow")
    if sweep and sweep["uri"] == client.tracking_uri and sweep["experiment"] == name:
        return sweep["experiment_id"], sweep["parent_run_id"]
    if not create:
        found = client.get_experiment_by_name(name)
        return (None if found is None else found.experiment_id), None
    return _experiment_id(client, name), None


#: a tuning sweep's roles as they end a run name
ROLE_NAMES = {"tune": "tune", "theory": "theory", "tuned": "tuned", "both": "theory=tuned"}


def run_name(context, role: str | None = None) -> str:
    """``<algorithm>-<dataset>-k<k>-s<seed>``: the p-player of the game (or the
    whole-algorithm solver), the data set, the set's k and the seed; then each
    step-size multiplier that is not 1 (``-eta_scale=3``) and the run's role in
    a tuning sweep (``-tune``, ``-theory``, ``-tuned``, ``-theory=tuned``)."""
    tags = context.tags
    scales = [f"{key.rsplit('.', 1)[-1]}={float(value):.3g}"
              for key, value in sorted(context.params.items())
              if key.split(".", 1)[0] in tune.ALGORITHM_KEYS and key.endswith("_scale")
              and isinstance(value, int | float) and not isinstance(value, bool)
              and float(value) != 1.0]
    return "-".join([tags["algorithm"], tags["dataset"], f"k{context.parts.constraint.k}",
                     f"s{tags['seed']}", *scales] + ([ROLE_NAMES[role]] if role else []))


def _client(uri: str | None):
    """An MlflowClient that gives up on an unreachable server within seconds:
    a checkpoint is then buffered instead of stalling the game for minutes of
    retries (explicit MLFLOW_HTTP_REQUEST_* settings of the user win). In the
    command's helper process (``mlflow_worker.RemoteClient``) if it started one
    and this is a single run."""
    for key, value in mlflow_worker.HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    helper = mlflow_worker.started()
    if helper is not None and _single_run():
        return mlflow_worker.RemoteClient(helper, uri)
    mlflow_worker.release()  # a multirun's jobs (a preset's) keep mlflow in-process
    with _gc_paused():  # mlflow, and the store the client opens, are imported here
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=uri)


def _log_batch(client, run_id: str, **batch: list[tuple]) -> None:
    """``client.log_batch`` of plain ``params`` ``(key, value)`` or ``metrics``
    ``(key, value, timestamp, step)``: as entities for an in-process client."""
    if not isinstance(client, mlflow_worker.RemoteClient):
        with _gc_paused():
            batch = mlflow_worker.entities(batch)
    client.log_batch(run_id, **batch)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block.

    Importing mlflow and its store creates some 400,000 objects that live as
    long as the process, and hardly any garbage: collections during the
    import only walk them again and again, and so would every full collection
    after it. A single run of the ``minimax-bench`` command, which keeps its
    long-lived objects out of the collector's reach (``gc.freeze``), moves
    them there too at the end of the block, with everything else alive then
    (the process ends with the run). Nothing is frozen anywhere else (the
    Python API; the jobs of a multirun, which may share a process: what one
    job leaves behind must stay collectable).
    """
    freeze = gc.get_freeze_count() > 0 and _single_run()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


def _single_run() -> bool:
    """Whether this process plays one Hydra run (not a job of a multirun)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.RUN


def _resolved_uri(uri: str | None) -> str | None:
    """The URI a client of ``uri`` writes to, without importing mlflow: ``uri``;
    else a loaded mlflow's (``mlflow.set_tracking_uri`` included); else
    ``$MLFLOW_TRACKING_URI``; else None, MLflow's local default (never a server)."""
    if uri:
        return uri
    if "mlflow" in sys.modules:
        import mlflow

        return mlflow.get_tracking_uri()
    return os.environ.get("MLFLOW_TRACKING_URI") or None


def _probe(uri: str | None) -> None:
    """Refuse to start when a tracking server is unreachable (before any computing)."""
    if uri is None or not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=10):
            pass
    except OSError as err:
        raise harness.SetupError(
            f"The MLflow tracking server at {uri} is unreachable ({err}). Start it, or run "
            "with tracking.uri=sqlite:///mlflow.db (a local store) or tracking.enabled=false."
        ) from err


@harness.hookimpl(wrapper=True, specname="on_run_start")
def check_before_start(context):
    """Runs before every other ``on_run_start`` (the OPT solve included): a bad
    ``tracking`` block or an unreachable server stops the run before anything
    is computed, and so does a FINISHED run of the same config when resuming
    (``AlreadyFinished``)."""
    settings = _settings(context)
    if settings is not None:
        _probe(_resolved_uri(settings.get("uri") or None))
        # the game's own parameters, before plugins add theirs at run start:
        # the same key as its saved state's
        context.state[CONFIG_KEY_TAG] = state.key(context.params)
        if context.config.get("resume") and context.parts.resumed_from is None:
            with _gc_paused():  # mlflow and its store are imported here
                _refuse_finished(context, settings)
    return (yield)


def _refuse_finished(context, settings: dict[str, Any]) -> None:
    """Raise ``AlreadyFinished`` if the run's experiment holds a FINISHED run
    tagged with this run's config key; inside a sweep, one of that sweep (its
    parent run): a sweep's report then finds every run it reused, and another
    sweep computes its own."""
    client = _client(settings.get("uri") or None)
    experiment_id, parent = _run_experiment(
        client, settings.get("experiment") or "minimax-bench", create=False)
    if experiment_id is None:
        return
    inside = f" and tags.`mlflow.parentRunId` = '{parent}'" if parent else ""
    found = client.search_runs(
        [experiment_id],
        filter_string=(f"tags.{CONFIG_KEY_TAG} = '{context.state[CONFIG_KEY_TAG]}' "
                       f"and attributes.status = 'FINISHED'{inside}"),
        order_by=["attributes.start_time DESC"], max_results=1)
    if found:
        run = found[0]
        raise AlreadyFinished(run.info.run_id, experiment_id, client.tracking_uri,
                              run.data.metrics)


@harness.hookimpl
def on_run_start(context):
    settings = _settings(context)
    if settings is None:
        return
    with _gc_paused():  # mlflow and its store are imported here
        _start(context, settings)


def _start(context, settings: dict[str, Any]) -> None:
    """Open the store, then create the run (or take over a resumed one) and log its params."""
    client = _client(settings.get("uri") or None)
    name = settings.get("experiment") or "minimax-bench"
    resumed = (context.state.get("resume") or {}).get("mlflow")
    if resumed and resumed["uri"] == client.tracking_uri:
        client.update_run(resumed["run_id"], status="RUNNING")
        handle = {**resumed, "client": client, "pending": []}
        context.state["mlflow"] = handle
        _take_over_pending(context, handle)
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
    experiment_id, parent_run_id = _run_experiment(client, name)
    if parent_run_id is not None:
        tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment_id, tags=tags,
                            run_name=settings.get("run_name")
                            or run_name(context, settings.get("tuning")))
    run_id = run.info.run_id
    ids = {"run_id": run_id, "experiment_id": experiment_id, "uri": client.tracking_uri}
    context.state["mlflow"] = {**ids, "client": client, "pending": []}
    context.state.setdefault("resume", {})["mlflow"] = ids  # saved with the game state
    params = [(k, str(v)[:_MAX_PARAM_LEN]) for k, v in sorted(context.params.items())]
    try:
        for start in range(0, len(params), _MAX_PARAMS_PER_BATCH):
            _log_batch(client, run_id, params=params[start:start + _MAX_PARAMS_PER_BATCH])
        client.log_dict(run_id, context.config, "config.yaml")
    except BaseException:
        context.state.pop("mlflow")
        client.set_terminated(run_id, status="FAILED")
        raise


def _last_step(client, run_id: str) -> int:
    """The last checkpoint step the run holds. A process killed outright (SIGKILL,
    out of memory) between logging a checkpoint and saving the game state
    resumes from the state before it and reaches that checkpoint again; it is
    not logged twice."""
    return max((m.step for key in client.get_run(run_id).data.metrics
                for m in client.get_metric_history(run_id, key)), default=-1)


def _read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _take_over_pending(context, handle) -> None:
    """A resumed run first sends the checkpoints its interrupted run could not
    (its final status is dropped: this run sets its own); if the store fails
    again they stay buffered ahead of the new ones, in the same file."""
    path = _pending_file(context, handle)
    if not path.is_file():
        return
    handle["pending"] = [r for r in _read_records(path) if "status" not in r]
    try:
        _flush(handle)
    except Exception as err:  # noqa: BLE001 - any transport or server error
        print(f"minimax-bench: {len(handle['pending'])} checkpoint(s) left in {path} by the "
              f"interrupted run are still unsent ({err!r}); they are kept and sent first.",
              file=sys.stderr)
        _write_pending(path, handle)
        return
    path.unlink()
    print(f"minimax-bench: sent the checkpoints left in {path} by the interrupted run.",
          file=sys.stderr)


def _write_pending(path: Path, handle) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"uri": handle["uri"], "run_id": handle["run_id"], **r})
             for r in handle["pending"]]
    path.write_text("\n".join(lines) + "\n")


def _pending_file(context, handle) -> Path:
    folder = Path(context.config.get("state_dir") or ".minimax-bench")
    return folder / f"pending-{handle['run_id']}.jsonl"


def _flush(handle) -> None:
    """Send buffered records in order; stop at the first failure (kept for later)."""
    client, pending = handle["client"], handle["pending"]
    while pending:
        record = pending[0]
        if "status" in record:
            client.set_terminated(handle["run_id"], status=record["status"])
        else:
            batch = [(k, v, record["timestamp"], record["step"])
                     for k, v in record["metrics"].items()]
            _log_batch(client, handle["run_id"], metrics=batch)
        pending.pop(0)


def _buffer(context, handle, record: dict, err: Exception) -> None:
    path = _pending_file(context, handle)
    if not handle["pending"]:
        print(f"minimax-bench: the tracking store {handle['uri']} failed ({err!r}); "
              f"checkpoints are kept in {path} and sent when it answers again.",
              file=sys.stderr)
    handle["pending"].append(record)
    _write_pending(path, handle)


def _send(context, handle, record: dict) -> None:
    had_pending = bool(handle["pending"])
    handle["pending"].append(record)
    try:
        _flush(handle)
    except Exception as err:  # noqa: BLE001 - any transport or server error
        handle["pending"].pop()
        _buffer(context, handle, record, err)
        return
    if had_pending:
        _pending_file(context, handle).unlink(missing_ok=True)
        print(f"minimax-bench: the tracking store {handle['uri']} answers again; "
              "buffered checkpoints were sent.", file=sys.stderr)


@harness.hookimpl
def on_checkpoint(context, step: int, metrics: Mapping[str, float]):
    handle = context.state.get("mlflow")
    if handle is None or step <= handle.get("logged_through", -1):
        return
    record = {"step": int(step), "timestamp": int(time.time() * 1000),
              "metrics": {k: float(v) for k, v in metrics.items()}}
    _send(context, handle, record)


@harness.hookimpl
def on_run_end(context, status: str, metrics: Mapping[str, Any]):
    handle = context.state.get("mlflow")
    if handle is None:
        return
    _send(context, handle, {"status": status})
    if handle["pending"]:
        path = _pending_file(context, handle)
        print(f"minimax-bench: {len(handle['pending'])} record(s) of run {handle['run_id']} "
              f"could not be sent to {handle['uri']}; they are kept in {path}. Send them "
              f"with:  python -m plugins.tracking.mlflow_tracking replay {path}", file=sys.stderr)


def replay(path: str | Path) -> int:
    """Send a pending file's records (checkpoints, then the final status) to their run."""
    path = Path(path)
    records = _read_records(path)
    if not records:
        return 0
    handle = {"client": _client(records[0]["uri"]), "run_id": records[0]["run_id"],
              "pending": list(records)}
    _flush(handle)
    path.unlink()
    return len(records)


def sweep_record() -> dict[str, Any]:
    """What ``SweepCallback`` left for the jobs of this Hydra multirun in
    ``<sweep dir>/sweep.json`` ({} outside a multirun, or without the file)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return {}
    path = Path(hc.sweep.dir) / SWEEP_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


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


def sweep_name(config, now: datetime | None = None) -> str:
    """A sweep's parent run name: ``sweep <preset> <date time>`` for a preset
    (``experiment=problems``), with the overrides swept on the command line
    after it; else ``sweep <swept overrides> <date time>`` (``sweep
    p_player=exp4mp,ftrl seed=0,1 ...``); else the overrides given. The label
    is cut to about 100 characters (``+N more``); the tag ``overrides`` keeps
    them all."""
    hc = config.hydra
    task = [str(o) for o in hc.overrides.task]
    swept, fixed = _split_swept(task)
    choices = hc.get("runtime", {}).get("choices", {}) or {}
    preset = choices.get("experiment") or next(
        (o.split("=", 1)[1] for o in task if o.lstrip("+~").startswith("experiment=")), None)
    if preset:
        words = [str(preset)] + [o for o in swept if not o.lstrip("+~").startswith("experiment=")]
    else:
        params = hc.get("sweeper", {}).get("params") or {}
        given = {o.lstrip("+~").split("=", 1)[0] for o in swept}
        words = swept + [f"{k}={v}" for k, v in params.items() if k not in given]
        words = words or [o for o in fixed if not o.lstrip("+~").startswith("tracking.")]
        if str(hc.get("sweeper", {}).get("_target_", "")).endswith("TuneSweeper"):
            algorithms = [str(a) for a in hc.sweeper.get("algorithms") or []]
            words = ["tune"] + ([",".join(algorithms)] if algorithms else []) + [
                w for w in words if not w.startswith("hydra.sweeper.algorithms=")]
    stamp = (now or datetime.now()).strftime("%Y-%m-%d %H:%M")
    return " ".join(["sweep", *_cut(words, _MAX_SWEEP_LABEL), stamp])


def _split_swept(overrides: list[str]) -> tuple[list[str], list[str]]:
    """The overrides that sweep (``seed=0,1``, ``range(...)``, ...) and the others."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        flags = [o.is_sweep_override() for o in parsed]
    except Exception:  # noqa: BLE001 - a name is no reason to fail a sweep
        flags = ["," in o.split("=", 1)[-1] for o in overrides]
    return ([o for o, f in zip(overrides, flags, strict=True) if f],
            [o for o, f in zip(overrides, flags, strict=True) if not f])


def _cut(words: Iterable[str], limit: int) -> list[str]:
    """As many of ``words`` as fit in ``limit`` characters (each cut to half of
    it), then ``+N more``."""
    words = [w if len(w) <= limit // 2 else w[:limit // 2 - 1] + "…" for w in words]
    kept: list[str] = []
    for word in words:
        if sum(len(w) + 1 for w in kept) + len(word) > limit:
            return kept + [f"+{len(words) - len(kept)} more"]
        kept.append(word)
    return kept


def sweep_key(overrides: Iterable[str], sweeper: Mapping[str, Any] | None = None) -> str:
    """What identifies a sweep across relaunches: a hash of its command-line
    overrides without ``resume=...`` and of its sweeper's settings (a preset's
    swept values, a tuning sweep's grid, seeds and algorithms): a relaunch with
    ``resume=true`` finishes the sweep it names, under the same parent run, and
    a sweep with another grid gets a parent of its own."""
    import hashlib

    kept = sorted(o for o in overrides if not o.lstrip("+~").startswith("resume="))
    text = "\n".join(kept) + "\n" + json.dumps(sweeper or {}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SweepCallback(Callback):
    """Hydra callback: one MLflow experiment and parent run per multirun, made
    before any job starts (``hydra.callbacks`` in ``conf/config.yaml``)."""

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        block = config.get("tracking") or {}
        tracking = validate("tracking", PARAMS, {k: block[k] for k in block})
        if not tracking["enabled"]:
            return
        _probe(_resolved_uri(tracking.get("uri") or None))
        client = _client(tracking.get("uri") or None)
        name = tracking.get("experiment") or "minimax-bench"
        experiment_id = _experiment_id(client, name)
        sweep_dir = Path(config.hydra.sweep.dir)
        overrides = " ".join(config.hydra.overrides.task)
        sweeper = OmegaConf.to_container(config.hydra.sweeper, resolve=True)
        key = sweep_key(config.hydra.overrides.task, sweeper)
        parent_id = None
        if config.get("resume"):  # the sweep it finishes keeps one parent: its runs stay together
            found = client.search_runs(
                [experiment_id], filter_string=f"tags.minimax_bench_sweep_key = '{key}'",
                order_by=["attributes.start_time DESC"], max_results=1)
            if found:
                parent_id = found[0].info.run_id
                client.update_run(parent_id, status="RUNNING")
        if parent_id is None:
            parent_id = client.create_run(
                experiment_id,
                tags={"minimax_bench_sweep": "1", "sweep_dir": str(sweep_dir.resolve()),
                      "overrides": overrides[:5000], "minimax_bench_sweep_key": key,
                      "minimax_bench_version": harness.package_version()},
                run_name=sweep_name(config),
            ).info.run_id
        sweep_dir.mkdir(parents=True, exist_ok=True)
        record = {"mlflow": {"uri": client.tracking_uri, "experiment": name,
                             "experiment_id": experiment_id,
                             "parent_run_id": parent_id}}
        (sweep_dir / SWEEP_FILE).write_text(json.dumps(record, indent=2))
        # a sweep that stops before its end (a refused sweeper config, an interrupt)
        # leaves its parent run FAILED rather than RUNNING; a relaunch with
        # resume=true takes it up again
        self._open = (client, parent_id)
        atexit.register(self._abandon)

    def _abandon(self) -> None:
        opened, self._open = getattr(self, "_open", None), None
        if opened is not None:
            with contextlib.suppress(Exception):
                opened[0].set_terminated(opened[1], status="FAILED")

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        """Close the parent run; a tuning sweep's ``tuning.json`` goes onto it first."""
        path = Path(config.hydra.sweep.dir) / SWEEP_FILE
        if not path.is_file():
            return
        record = json.loads(path.read_text())["mlflow"]
        client = _client(record["uri"])
        parent = record["parent_run_id"]
        tuning = Path(config.hydra.sweep.dir) / tune.TUNING_FILE
        if tuning.is_file():
            found = json.loads(tuning.read_text())
            client.log_artifact(parent, str(tuning))
            client.set_tag(parent, tune.TUNING_TAG, "1")
            client.set_tag(parent, "tuning_rule", found["rule"][:5000])
            client.set_tag(parent, "tuning_grid", ", ".join(f"{m:.6g}" for m in found["grid"]))
        client.set_terminated(parent)
        self._open = None


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "replay":
        sys.exit("usage: python -m plugins.tracking.mlflow_tracking replay PENDING_FILE")
    print(f"sent {replay(sys.argv[2])} record(s)")
