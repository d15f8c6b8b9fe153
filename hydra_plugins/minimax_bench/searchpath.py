"""Hydra finds the configs that plugin packages ship.

A package in the entry-point group ``minimax_bench`` may keep a ``conf/``
folder inside it (beside the plugin module) (one sub-folder per config group:
``p_player/``, ``dataset/``, ...); it is appended to Hydra's search path, so
``p_player=<its option>`` works like a built-in option. The module is located,
not imported. ``MINIMAX_BENCH_DISABLE_PLUGIN_AUTOLOAD`` turns this off too.
"""

from __future__ import annotations

import importlib.util
import os
from importlib.metadata import entry_points
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

GROUP = "minimax_bench"
DISABLE_ENV = "MINIMAX_BENCH_DISABLE_PLUGIN_AUTOLOAD"


def plugin_config_dirs() -> list[Path]:
    dirs = []
    for ep in entry_points(group=GROUP):
        try:
            spec = importlib.util.find_spec(ep.module)
        except (ImportError, ValueError):
            continue
        if spec is None or spec.origin is None:
            continue
        # a top-level single module lies in site-packages, whose conf/ is not its own
        if spec.submodule_search_locations is None and "." not in ep.module:
            continue
        conf = Path(spec.origin).parent / "conf"  # inside the module's package
        if conf.is_dir() and conf not in dirs:
            dirs.append(conf)
    return dirs


class MinimaxBenchPluginConfigs(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if os.environ.get(DISABLE_ENV):
            return
        for conf in plugin_config_dirs():
            search_path.append(provider="minimax-bench-plugin", path=f"file://{conf}")
