"""The MLflow store as the tracker's modules open it: the client, the early
check of a tracking server, the wait for one that is briefly down, and the
experiment a run files under.

mlflow is imported only here (and in ``plugins.tracking.mlflow_worker``), and
only when a client is made: the import and the store cost one to two
seconds, and the check of a tracking server needs no mlflow. A single run of
the ``minimax-bench`` command gets a client of its helper process
(``mlflow_worker.RemoteClient``, started by the worker's ``prestart`` hook
while the command loads), on the machine's other core.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import harness
from harness import Param
from plugins.tracking import mlflow_worker

#: MLflow 3's experiment kind: a model-training experiment, not a GenAI one
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
#: the experiment of a run or a report when none is named
DEFAULT_EXPERIMENT = "minimax-bench"
#: the store of a report when neither ``--tracking-uri`` nor ``$MLFLOW_TRACKING_URI`` names one
DEFAULT_URI = "sqlite:///mlflow.db"

#: the ``tracking`` config block (registered by ``plugins.tracking.mlflow_runs``)
PARAMS: dict[str, Param] = {
    "enabled": Param(bool, default=True, doc="log the run to MLflow"),
    "uri": Param(str, nullable=True, doc="tracking URI; None: MLflow's default"),
    "experiment": Param(str, default=DEFAULT_EXPERIMENT, nullable=True,
                        doc="experiment name"),
    "run_name": Param(str, nullable=True,
                      doc="run name; None: <algorithm> s<seed> k<k> <dataset>"),
    "send_every_s": Param(float, default=10.0, low=0.0,
                          doc="checkpoints are journalled to disk as they happen and sent "
                              "to the store in batches: when the oldest unsent one is this "
                              "many seconds old, and when the run ends (0: each at once)"),
    "tuning": Param(str, nullable=True, choices=("tune", "theory", "tuned", "both"),
                    doc="the run's role in a tuning sweep (hydra/sweeper=tune), its tag "
                        "'tuning'; set by that sweeper"),
    "connect_timeout_s": Param(float, default=60.0, low=0.0,
                               doc="seconds a run waits for a tracking server that does not "
                                   "answer as it starts or ends (a restart), then stops; "
                                   "0: stop at once"),
}

#: seconds between two checks of a tracking server that does not answer
POLL_S = 1.0

T = TypeVar("T")


def client(uri: str | None):
    """An MlflowClient that gives up on an unreachable server within seconds:
    a checkpoint is then buffered instead of stalling the game for minutes of
    retries (explicit MLFLOW_HTTP_REQUEST_* settings of the user win). In the
    command's helper process (``mlflow_worker.RemoteClient``) if it started one
    and this is a single run."""
    for key, value in mlflow_worker.HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    helper = mlflow_worker.started()
    if helper is not None:
        return mlflow_worker.RemoteClient(helper, uri)
    with gc_paused():  # mlflow, and the store the client opens, are imported here
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=uri)


def log_batch(client, run_id: str, **batch: list[tuple]) -> None:
    """``client.log_batch`` of plain ``params`` ``(key, value)`` or ``metrics``
    ``(key, value, timestamp, step)``: as entities for an in-process client."""
    if not isinstance(client, mlflow_worker.RemoteClient):
        with gc_paused():
            batch = mlflow_worker.entities(batch)
    client.log_batch(run_id, **batch)


@contextmanager
def gc_paused() -> Iterator[None]:
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
    enabled = gc.isenabled()
    gc.disable()
    freeze = False
    try:
        freeze = gc.get_freeze_count() > 0 and single_run()  # (imports Hydra's config)
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


def single_run() -> bool:
    """Whether this process plays one Hydra run (not a job of a multirun)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.RUN


def resolved_uri(uri: str | None) -> str | None:
    """The URI a client of ``uri`` writes to, without importing mlflow: ``uri``;
    else a loaded mlflow's (``mlflow.set_tracking_uri`` included); else
    ``$MLFLOW_TRACKING_URI``; else None, MLflow's local default (never a server)."""
    if uri:
        return uri
    if "mlflow" in sys.modules:
        import mlflow

        return mlflow.get_tracking_uri()
    return os.environ.get("MLFLOW_TRACKING_URI") or None


def is_server(uri: str | None) -> bool:
    """Whether ``uri`` names a tracking server (not a local store)."""
    return uri is not None and uri.startswith(("http://", "https://"))


def health(uri: str, timeout_s: float = 10.0) -> OSError | None:
    """None if the tracking server at ``uri`` answers ``/health``, else why not."""
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s):
            return None
    except OSError as err:
        return err


def wait_for_server(uri: str | None, timeout_s: float, why: str) -> OSError | None:
    """Wait until the tracking server at ``uri`` answers, for at most ``timeout_s``
    seconds, saying so in one line on stderr (``why``: what the run waits to
    do). None once it answers (at once for a local store), else the last error."""
    if not is_server(uri):
        return None
    error = health(uri)
    if error is None or timeout_s <= 0:
        return error
    deadline = time.monotonic() + timeout_s
    print(f"minimax-bench: the MLflow tracking server at {uri} does not answer ({error}); "
          f"waiting up to {round(timeout_s, 1):g} s for it {why} (tracking.connect_timeout_s).",
          file=sys.stderr)
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(POLL_S, left))
        error = health(uri, timeout_s=max(1.0, min(10.0, deadline - time.monotonic())))
        if error is None:
            return None
    return error


def probe(uri: str | None, timeout_s: float = 0.0) -> None:
    """Refuse to start when a tracking server is unreachable (before any
    computing), after waiting up to ``timeout_s`` seconds for it: a server
    that restarts is waited for."""
    error = wait_for_server(uri, timeout_s, "before the run starts")
    if error is not None:
        waited = f" after {timeout_s:g} s" if timeout_s > 0 else ""
        raise harness.SetupError(
            f"The MLflow tracking server at {uri} is unreachable{waited} ({error}). Start it, "
            "or run with tracking.uri=sqlite:///mlflow.db (a local store) or "
            "tracking.enabled=false."
        ) from error


def retrying(uri: str | None, timeout_s: float, call: Callable[..., T], *args: Any,
             **kwargs: Any) -> T:
    """``call(*args, **kwargs)`` (a call that starts a run), called again if it
    failed while the tracking server at ``uri`` did not answer, once it answers
    again: up to ``timeout_s`` seconds from the first failure. An error while
    the server answers (the server refused the call) is raised at once, and so
    is the last error when the server stays away."""
    deadline = None
    while True:
        try:
            return call(*args, **kwargs)
        except Exception:
            if not is_server(uri) or health(uri) is None:
                raise
            if deadline is None:
                deadline = time.monotonic() + timeout_s
            if wait_for_server(uri, deadline - time.monotonic(), "to start the run") is not None:
                raise


def experiment_id(client, name: str) -> str:
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
