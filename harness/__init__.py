"""minimax-bench: a benchmark harness for minimax learning with online-bandit strategies.

Public API (stable names relied on by plugin authors and the contract tests)::

    import harness
    K = harness.build("constraint_set", "kset", n=569, k=20)
    result = harness.run(harness.compose(["dataset=boston"]))  # as `minimax-bench dataset=boston`
"""

from __future__ import annotations

import pluggy

from harness.hookspecs import PROJECT

hookimpl = pluggy.HookimplMarker(PROJECT)

from harness.api import build, package_version, play, prepare, run  # noqa: E402
from harness.config import compose  # noqa: E402
from harness.context import RunContext, RunView  # noqa: E402
from harness.engine import Compiled  # noqa: E402
from harness.game import GuardError  # noqa: E402
from harness.params import ConfigBlock, ConfigError, Param, RunSkipped, SetupError  # noqa: E402
from harness.protocols import Draw, EuclideanProjection, Proposal  # noqa: E402
from harness.registry import PluginError, Registry, make_plugin_manager  # noqa: E402

__all__ = [
    "Compiled",
    "ConfigBlock",
    "ConfigError",
    "Draw",
    "EuclideanProjection",
    "GuardError",
    "Param",
    "PluginError",
    "Proposal",
    "Registry",
    "RunContext",
    "RunSkipped",
    "RunView",
    "SetupError",
    "build",
    "compose",
    "hookimpl",
    "make_plugin_manager",
    "package_version",
    "play",
    "prepare",
    "run",
]
