"""Recorded runs as a tracker reads them back: what the report works on.

A tracker implements the hook ``read_runs`` (``harness.hookspecs``) and
returns one ``RunRecord`` per run of an experiment, sweeps included; the
report (``harness.report``) groups, tables and plots them and knows nothing
of where they were stored. ``save_report`` hands the report's files back to
the tracker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

#: a metric's history: the steps (data points processed) and the values there, by step
History = tuple[np.ndarray, np.ndarray]


def _no_file(name: str) -> str | None:
    return None


@dataclass(frozen=True)
class RunRecord:
    """One recorded run (a game's, a solver's, or a sweep's own record).

    ``params`` and ``tags`` are the run's, as text (the run's ``context.params``
    and ``context.tags``, plus the tracker's own tags); ``metrics`` maps each
    metric to its history (a tracker may read it on first access: a report
    reads the histories of the runs it keeps only). ``sweep``: the id of the
    sweep the run ran in (None outside one); a sweep's own record has
    ``is_sweep`` and its command-line ``overrides``. ``read_file(name)``: the
    text of a file recorded with the run (a tuning sweep's ``tuning.json``),
    None if it has none."""

    id: str
    name: str
    #: ``"FINISHED"``, ``"FAILED"``, ``"KILLED"`` or ``"RUNNING"``
    status: str
    #: seconds since the epoch (0: unknown)
    start_time: float
    params: Mapping[str, str]
    tags: Mapping[str, str]
    metrics: Mapping[str, History] = field(default_factory=dict)
    sweep: str | None = None
    is_sweep: bool = False
    overrides: tuple[str, ...] = ()
    read_file: Callable[[str], str | None] = _no_file
