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
at each checkpoint and at run end, never per round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import numpy as np

    from harness.context import RunContext

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
    """Register p-player classes (``harness.protocols.PPlayer``)."""


@hookspec
def register_w_players(register: Register) -> None:
    """Register w-player classes (``harness.protocols.WPlayer``)."""


@hookspec
def register_models(register: Register) -> None:
    """Register model (loss) classes (``harness.protocols.Model``)."""


@hookspec
def register_datasets(register: Register) -> None:
    """Register data-set classes (``harness.protocols.Dataset``)."""


@hookspec
def on_run_start(context: RunContext) -> None:
    """Called once per game after every component is built and validated,
    before the first round. ``context.params`` holds the resolved config and
    every theory-derived parameter; ``context.tags`` the run's tags.
    A tracker may store its handle in ``context.state``. A plugin that adds
    parameters to be recorded (e.g. the exact optimum ``opt``) implements this
    hook with ``tryfirst=True``, so that trackers see them; the game and its
    components are ``context.state["game"]``."""


@hookspec
def checkpoint_metrics(
    context: RunContext, w_bar: np.ndarray, losses: np.ndarray
) -> Mapping[str, float] | None:
    """Called at each checkpoint, before ``on_checkpoint``, to add metrics.

    ``w_bar`` is the average iterate, ``losses`` its per-row losses scaled to
    [0, 1] (unclipped) over the whole data set; the game and its components are
    ``context.state["game"]``. Return a mapping of extra metrics (or None);
    all returned mappings are merged into the checkpoint's metrics.
    """


@hookspec
def on_checkpoint(context: RunContext, step: int, metrics: Mapping[str, float]) -> None:
    """Called at each checkpoint with ``step`` = data points processed so far
    and the metrics computed there (dual gap, objective, task metrics, ...)."""


@hookspec
def on_run_end(context: RunContext, status: str, metrics: Mapping[str, Any]) -> None:
    """Called once when the game ends: ``status`` is ``"FINISHED"``,
    ``"FAILED"`` (an exception) or ``"KILLED"`` (interrupted); ``metrics``
    are the last checkpoint's metrics (empty if none was reached)."""
