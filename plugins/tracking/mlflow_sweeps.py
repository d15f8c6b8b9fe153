"""A Hydra multirun as MLflow records it: one experiment and one parent run,
made before any job starts, and a name for that parent run.

The core's sweep callback (``harness.sweep.SweepCallback``) calls
``on_sweep_start`` once, in the launching process: it creates the experiment
and the parent run and writes their ids to ``<sweep dir>/sweep.json``; every
job (in any launcher's process or on any cluster node sharing the file
system) files its run under them (``sweep_record``, read at run start by
``plugins.tracking.mlflow_runs``). Jobs that each called ``set_experiment``
would race and could drop runs into the Default experiment. The parent run is
named after the sweep's preset or its swept overrides (``sweep_name``) and
tagged ``SWEEP_TAG``; ``on_sweep_end`` closes it, with a tuning sweep's
record (``harness.tune``) on it, and prints the URL of the sweep's runs side
by side in MLflow's UI (``plugins.tracking.mlflow_view``).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

import harness
from harness import tune
from harness.params import validate
from plugins.tracking import mlflow_store, mlflow_view

SWEEP_FILE = "sweep.json"
#: the tag of a sweep's parent run
SWEEP_TAG = "minimax_bench_sweep"
#: the tag of a sweep's parent run holding ``sweep_key``
SWEEP_KEY_TAG = "minimax_bench_sweep_key"
#: the tag of a sweep's parent run holding its command-line overrides
OVERRIDES_TAG = "overrides"
#: the longest preset-or-overrides part of a sweep's parent run name
_MAX_SWEEP_LABEL = 100
#: the parent run this process opened and has not closed: (client, run id)
_OPEN: list[tuple[Any, str]] = []


def sweep_record() -> dict[str, Any]:
    """What ``on_sweep_start`` left for the jobs of this Hydra multirun in
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


def run_experiment(client, name: str, *, create: bool = True) -> tuple[str | None, str | None]:
    """The experiment id a run files under, and its sweep's parent run id (None
    outside a sweep): the sweep's (``sweep_record``), else ``name``'s (None if
    it does not exist and ``create`` is false)."""
    sweep = sweep_record().get("mlflow")
    if sweep and sweep["uri"] == client.tracking_uri and sweep["experiment"] == name:
        return sweep["experiment_id"], sweep["parent_run_id"]
    if not create:
        found = client.get_experiment_by_name(name)
        return (None if found is None else found.experiment_id), None
    return mlflow_store.experiment_id(client, name), None


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
    kept = sorted(o for o in overrides if not o.lstrip("+~").startswith("resume="))
    text = "\n".join(kept) + "\n" + json.dumps(sweeper or {}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@harness.hookimpl
def on_sweep_start(config) -> None:
    """One MLflow experiment and parent run per multirun, made before any job
    starts; their ids go to ``<sweep dir>/sweep.json``."""
    block = config.get("tracking") or {}
    tracking = validate("tracking", mlflow_store.PARAMS, {k: block[k] for k in block})
    if not tracking["enabled"]:
        return
    mlflow_store.probe(mlflow_store.resolved_uri(tracking.get("uri") or None),
                       tracking["connect_timeout_s"])
    client = mlflow_store.client(tracking.get("uri") or None)
    name = tracking.get("experiment") or mlflow_store.DEFAULT_EXPERIMENT
    experiment_id = mlflow_store.experiment_id(client, name)
    sweep_dir = Path(config.hydra.sweep.dir)
    overrides = " ".join(config.hydra.overrides.task)
    sweeper = OmegaConf.to_container(config.hydra.sweeper, resolve=True)
    key = sweep_key(config.hydra.overrides.task, sweeper)
    parent_id = None
    if config.get("resume"):  # the sweep it finishes keeps one parent: its runs stay together
        found = client.search_runs(
            [experiment_id], filter_string=f"tags.{SWEEP_KEY_TAG} = '{key}'",
            order_by=["attributes.start_time DESC"], max_results=1)
        if found:
            parent_id = found[0].info.run_id
            client.update_run(parent_id, status="RUNNING")
    if parent_id is None:
        parent_id = client.create_run(
            experiment_id,
            tags={SWEEP_TAG: "1", "sweep_dir": str(sweep_dir.resolve()),
                  OVERRIDES_TAG: overrides[:5000], SWEEP_KEY_TAG: key,
                  "minimax_bench_version": harness.package_version()},
            run_name=sweep_name(config),
        ).info.run_id
    sweep_dir.mkdir(parents=True, exist_ok=True)
    record = {"mlflow": {"uri": client.tracking_uri, "experiment": name,
                         "experiment_id": experiment_id, "parent_run_id": parent_id}}
    (sweep_dir / SWEEP_FILE).write_text(json.dumps(record, indent=2))
    # a sweep that stops before its end (a refused sweeper config, an interrupt)
    # leaves its parent run FAILED rather than RUNNING; a relaunch with
    # resume=true takes it up again
    if not _OPEN:
        atexit.register(_abandon)
    _OPEN[:] = [(client, parent_id)]


def _abandon() -> None:
    while _OPEN:
        client, parent = _OPEN.pop()
        with contextlib.suppress(Exception):
            client.set_terminated(parent, status="FAILED")


@harness.hookimpl
def on_sweep_end(config) -> None:
    """Close the parent run (a tuning sweep's ``tuning.json`` goes onto it
    first), then print the URL of the view of the sweep's runs side by side
    (``mlflow_view``)."""
    path = Path(config.hydra.sweep.dir) / SWEEP_FILE
    if not path.is_file():
        return
    record = json.loads(path.read_text())["mlflow"]
    client = mlflow_store.client(record["uri"])
    parent = record["parent_run_id"]
    tuning = Path(config.hydra.sweep.dir) / tune.TUNING_FILE
    if tuning.is_file():
        found = json.loads(tuning.read_text())
        client.log_artifact(parent, str(tuning))
        client.set_tag(parent, tune.TUNING_TAG, "1")
        client.set_tag(parent, "tuning_rule", found["rule"][:5000])
        client.set_tag(parent, "tuning_grid", ", ".join(f"{m:.6g}" for m in found["grid"]))
    client.set_terminated(parent)
    _OPEN.clear()
    try:
        lines = mlflow_view.view_lines(client, record["experiment_id"],
                                       mlflow_view.sweep_filter(parent), "the sweep's")
    except Exception as err:  # noqa: BLE001 - the sweep is recorded; only its view is missing
        print(f"minimax-bench: no MLflow view of the sweep's runs ({err!r}).", file=sys.stderr)
        return
    print("\n".join(lines))
