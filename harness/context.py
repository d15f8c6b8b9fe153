"""The object event hooks receive: one per game."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunContext:
    """What a tracker needs to know about one game.

    ``config``: the resolved configuration as plain containers.
    ``params``: flat parameters to record (config values with theory-derived
    values filled in, plus derived quantities such as the horizon T).
    ``tags``: algorithm, dataset, constraint, seed, package version.
    ``state``: scratch space for plugins (e.g. a tracker's run id).
    """

    config: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
