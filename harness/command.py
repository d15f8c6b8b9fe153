"""The ``minimax-bench`` command's first steps, before anything heavy loads.

``import harness`` is light (its public names load on first use), so this
module runs the built-in plugins' light start-up functions first
(``PRESTART``, by name, as ``harness.registry.DEFAULT_PLUGINS`` names the
plugin modules): the MLflow tracker's starts a helper process that imports
mlflow on the machine's other core, about 1.2 s, while this process loads
numpy, numba, Hydra and the plugins (about 0.4 s), composes the config and
prepares the game. Then it hands over to ``harness.cli.main``.
"""

from __future__ import annotations

import importlib
import sys

#: ``module:function`` of each built-in start-up function, called with the
#: command's arguments; it must import nothing heavy
PRESTART = ("plugins.tracking.mlflow_worker:prestart",)


def main() -> None:
    """``minimax-bench [overrides]``."""
    for ref in PRESTART:
        module, _, name = ref.partition(":")
        getattr(importlib.import_module(module), name)(sys.argv[1:])
    from harness.cli import main as command

    command()
