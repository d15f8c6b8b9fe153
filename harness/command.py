"""The ``minimax-bench`` command's first steps, before anything heavy loads.

``import harness`` is light (its public names load on first use), so this
module builds the registry first, with the plugins' ``prestart`` hook called
as each plugin is registered (``harness.registry.make_plugin_manager``): the
MLflow tracker's, registered first, starts a helper process that imports
mlflow on the machine's other core, about 1.2 s, while this process loads
numpy, numba, Hydra and the other plugins (about 0.4 s), composes the config
and prepares the game. Then it hands over to ``harness.cli.main``.
"""

from __future__ import annotations

import sys


def main() -> None:
    """``minimax-bench [overrides]``."""
    from harness.registry import default_registry

    default_registry(argv=sys.argv[1:])
    from harness.cli import main as command

    command()
