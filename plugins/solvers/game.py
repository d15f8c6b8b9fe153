"""The game of Algorithm 1 as the built-in solver ``game`` (the default)."""

from __future__ import annotations

import harness
from harness.game import GameSolver


@harness.hookimpl
def register_solvers(register):
    register(GameSolver)
