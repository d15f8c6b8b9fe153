"""The whole plugin contract of minimax-bench, on one page.

A plugin is any module or object with functions decorated by
``harness.hookimpl`` whose names match the specs below. Built-in plugins
(entry-point group ``minimax_bench.builtins``) and third-party packages
(entry-point group ``minimax_bench``) are registered through exactly these hooks.

Registration hooks receive a ``register`` callable; call it once per
component class. A component class has a class attribute ``name`` (the name
used in configs), a class attribute ``params`` (a ``dict[str, harness.Param]``
declaring every constructor argument), and satisfies the matching protocol in
``harness.protocols``.

Event hooks receive a ``harness.RunContext``; they are called at run start,
at each checkpoint and at run end, never per round. ``context.parts`` is a
read-only view of the run (``harness.context.RunView``): the components
(``dataset``, ``model``, ``constraint``, ``p_player``, ``w_player``), their
config ``names``, and ``horizon``, ``checkpoints``, ``rounds``,
``data_points``, ``wall_time_s``, ``resumed_from``. ``context.state`` is the
plugins' scratch space, each plugin under its own keys.

``before_prepare`` sees a run's composed config before anything is built.
A tracker also implements the command's ``prestart``, the sweep hooks
(``on_sweep_start``, ``on_sweep_end``: once per Hydra multirun) and the
report's ``read_runs``, ``save_report`` and ``view_lines``; the core names no
tracker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import numpy as np
    from omegaconf import DictConfig

    from harness.context import RunContext
    from harness.params import ConfigBlock
    from harness.runs import RunRecord

PROJECT = "minimax_bench"

hookspec = pluggy.HookspecMarker(PROJECT)

Register = Callable[[type], None]


@hookspec(historic=True)
def prestart(argv: list[str]) -> None:
    """Called by the ``minimax-bench`` command with its arguments, as soon as the
    plugin is registered: before the plugins after it, numpy, numba and Hydra
    load. A plugin starts here what takes long and can run meanwhile (the
    MLflow tracker starts a helper process that imports mlflow on another
    core). A plugin implementing it must import nothing heavy at module level
    (a built-in one comes first in the group ``minimax_bench.builtins``); the
    Python API never calls it."""


@hookspec
def register_constraint_sets(register: Register) -> None:
    """Register constraint-set classes (``harness.protocols.ConstraintSet``).

    Called once when the registry is built. Examples: ``simplex``, ``kset``,
    ``alphaset``. A set that reads the data set defines ``bind(dataset)``,
    which ``harness.prepare`` calls right after building it.
    """


@hookspec
def register_p_players(register: Register) -> None:
    """Register p-player classes (``harness.protocols.PPlayer``). A class may
    also offer a compiled form, ``compiled(constraint_form) -> harness.Compiled
    | None`` with kernels ``<prefix>_propose`` and ``<prefix>_observe``
    (``harness.engine``; docs/plugins.md, "A compiled form")."""


@hookspec
def register_w_players(register: Register) -> None:
    """Register w-player classes (``harness.protocols.WPlayer``); optional
    compiled form ``compiled() -> harness.Compiled`` with kernels
    ``<prefix>_iterate`` and ``<prefix>_step`` (``harness.engine``)."""


@hookspec
def register_models(register: Register) -> None:
    """Register model (loss) classes (``harness.protocols.Model``); optional
    compiled form ``compiled() -> harness.Compiled`` with kernels
    ``<prefix>_losses`` and ``<prefix>_grad`` (``harness.engine``)."""


@hookspec
def register_datasets(register: Register) -> None:
    """Register data-set classes (``harness.protocols.Dataset``)."""


@hookspec
def register_solvers(register: Register) -> None:
    """Register whole-algorithm solver classes (``harness.protocols.Solver``):
    algorithms that do not decompose into a p-player and a w-player, run on
    the problem ``F`` of ``harness.problem`` (``solver=<name>``). The game of
    Algorithm 1 is the built-in solver ``game``, composed from the
    ``p_player`` and ``w_player`` groups."""


@hookspec
def register_config_blocks(register: Callable[[ConfigBlock], None]) -> None:
    """Register the top-level config blocks this plugin reads
    (``harness.ConfigBlock``: a name, a ``Param`` table, the values that turn
    the plugin off). Called once when the registry is built. The CLI's config
    tree holds every block with its declared defaults, a config may carry
    only registered blocks, and a block name is owned by one plugin."""


@hookspec
def before_prepare(config: Mapping[str, Any]) -> None:
    """Called with a run's composed config (plain Python) before anything is
    built: no data set loaded, no component made, no kernel compiled. A hook
    that finds the run need not be played raises ``harness.RunSkipped`` here,
    as it would at ``on_run_start`` but without the cost of preparing the
    game (a tracker that already holds a FINISHED run of this very config
    when resuming); ``harness.prepare`` re-raises it and the command prints
    it and exits 0."""


@hookspec
def on_run_start(context: RunContext) -> None:
    """Called once per game after every component is built and validated,
    before the first round. ``context.params`` holds the resolved config and
    every theory-derived parameter; ``context.tags`` the run's tags.
    A tracker may store its handle in ``context.state``. A plugin that adds
    parameters to be recorded (e.g. the exact optimum ``opt``, computed from
    the components in ``context.parts``) implements this hook with
    ``tryfirst=True``, so that trackers see them. On a resumed run
    ``context.parts`` already holds the saved components.

    A hook that finds the run need not be played raises ``harness.RunSkipped``
    before anything has started (in a ``wrapper=True`` implementation, before
    its ``yield``): the game is not played, ``on_run_end`` is not called,
    ``harness.play`` re-raises it and the command prints it and exits 0."""


@hookspec
def checkpoint_metrics(
    context: RunContext, w_bar: np.ndarray, losses: np.ndarray
) -> Mapping[str, float] | None:
    """Called at each checkpoint, before ``on_checkpoint``, to add metrics.

    ``w_bar`` is the average iterate, ``losses`` its per-row losses scaled to
    [0, 1] (unclipped) over the whole data set; the components are in
    ``context.parts``. Return a mapping of extra metrics (or None); all
    returned mappings are merged into the checkpoint's metrics (the time spent
    here counts in its ``checkpoint_time_s``).
    """


@hookspec
def on_checkpoint(context: RunContext, step: int, metrics: Mapping[str, float]) -> None:
    """Called at each checkpoint with ``step`` = data points processed so far
    and the metrics computed there (dual gap, objective, task metrics, the
    plugins' metrics, ``checkpoint_time_s``, ...)."""


@hookspec
def on_run_end(context: RunContext, status: str, metrics: Mapping[str, Any]) -> None:
    """Called once when the game ends: ``status`` is ``"FINISHED"``,
    ``"FAILED"`` (an exception) or ``"KILLED"`` (interrupted); ``metrics``
    are the last checkpoint's metrics (empty if none was reached)."""


@hookspec
def summary_lines(
    context: RunContext, status: str, metrics: Mapping[str, Any]
) -> list[tuple[str, str]] | None:
    """Called by the ``minimax-bench`` command after the run has ended, to add
    lines to the summary it prints: ``status`` is ``"FINISHED"`` (the summary
    on stdout) or ``"KILLED"`` (the interrupted notice on stderr); ``metrics``
    are the last checkpoint's metrics.

    Return ``(label, text)`` pairs (or None). After a finished run each is
    printed as a row below the command's own rows (an empty label: ``text``
    alone); after an interrupt each is appended to the notice as ``label
    text``. Lines come in hook call order: a tracker saying where the run is
    recorded implements this hook with ``trylast=True``."""


@hookspec
def on_sweep_start(config: DictConfig) -> None:
    """Called once per Hydra multirun, in the launching process, before any job
    starts (``harness.sweep.SweepCallback``), with the sweep's composed config
    (``config.hydra.sweep.dir`` is shared by its jobs). A tracker makes the
    sweep's record here (MLflow: the experiment and a parent run) and leaves
    what its jobs need in the sweep folder."""


@hookspec
def on_sweep_end(config: DictConfig) -> None:
    """Called once when the multirun's jobs have all ended (not after an
    interrupt: a tracker closes what ``on_sweep_start`` opened at exit). A
    tuning sweep's record is in ``<sweep dir>/tuning.json`` by then
    (``harness.tune``)."""


@hookspec(firstresult=True)
def read_runs(source: str | None, experiment: str, query: str) -> list[RunRecord] | None:
    """Called by ``minimax-bench-report``: the runs of ``experiment`` in the
    store ``source`` (``--tracking-uri``; None: the tracker's default) that
    match ``query`` (``--filter``, in the tracker's own search syntax; "" for
    all), as ``harness.runs.RunRecord`` (sweeps' own records included). Return
    None if this tracker does not serve ``source``; raise ``LookupError`` with a
    one-line message if it does but the experiment is not there."""


@hookspec(firstresult=True)
def save_report(source: str | None, experiment: str, sweep: str | None,
                files: Sequence[Path]) -> str | None:
    """Called by ``minimax-bench-report`` (unless ``--no-log``) with the files
    it wrote: keep them with the sweep's record (``sweep``, the id of a record
    that ``read_runs`` returned with ``is_sweep``), or, when the report covers
    more than one sweep (None), with a record of their own that ``read_runs``
    leaves out. Return a line saying where they went (None: not kept here)."""


@hookspec(firstresult=True)
def view_lines(source: str | None, experiment: str, sweep: str | None,
               query: str) -> list[str] | None:
    """Called by ``minimax-bench-report`` after it has read the runs it reports:
    lines saying where the tracker shows those runs side by side (the MLflow
    tracker: a URL of a chart of the dual gap against data points, and the
    command that serves a local store). ``sweep``: the id of the sweep's
    record (None: every run, ``--all``); ``query``: ``--filter``. Return None
    if this tracker does not serve ``source``."""
