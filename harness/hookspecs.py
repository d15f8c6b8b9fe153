"""The whole plugin contract of minimax-bench, on one page.

A plugin is any module or object with functions decorated by
``harness.hookimpl`` whose names match the specs below. Built-in plugins
(``harness.registry.DEFAULT_PLUGINS``) and third-party packages (entry-point
group ``minimax_bench``) are registered through exactly these hooks.

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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import numpy as np

    from harness.context import RunContext
    from harness.params import ConfigBlock

PROJECT = "minimax_bench"

hookspec = pluggy.HookspecMarker(PROJECT)

Register = Callable[[type], None]


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
