"""minimax-bench: a benchmark harness for minimax learning with online-bandit strategies.

Public API (stable names relied on by plugin authors and the contract tests)::

    import harness
    K = harness.build("constraint_set", "kset", n=569, k=20)
    result = harness.run(harness.compose(["dataset=boston"]))  # as `minimax-bench dataset=boston`
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import pluggy

from harness.hookspecs import PROJECT

hookimpl = pluggy.HookimplMarker(PROJECT)

#: the public names, each loaded from its module on first use: ``import
#: harness`` stays light (the ``minimax-bench`` command starts its helpers
#: before it loads numpy, numba and the plugins; ``harness.command``)
_EXPORTS = {
    "build": "api", "package_version": "api", "play": "api", "prepare": "api", "run": "api",
    "compose": "config", "RunContext": "context", "RunView": "context",
    "Compiled": "engine", "GuardError": "game",
    "ConfigBlock": "params", "ConfigError": "params", "Param": "params",
    "RunSkipped": "params", "SetupError": "params",
    "Draw": "protocols", "EuclideanProjection": "protocols", "Proposal": "protocols",
    "PluginError": "registry", "Registry": "registry", "make_plugin_manager": "registry",
    "RunRecord": "runs", "cache_root": "state",
}


def __getattr__(name: str) -> Any:
    """A public name (``_EXPORTS``), or a submodule (``harness.config``), loaded on first use."""
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"harness.{module}"), name)
    elif importlib.util.find_spec(f"harness.{name}") is not None:
        value = importlib.import_module(f"harness.{name}")
    else:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = sorted(["hookimpl", *_EXPORTS])
