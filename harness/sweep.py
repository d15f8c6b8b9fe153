"""The Hydra callback of a multirun: it hands the sweep's start and end to the
plugins (the hooks ``on_sweep_start`` and ``on_sweep_end``), so the config
names no tracker (``hydra.callbacks`` in ``conf/config.yaml``)."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepCallback(Callback):
    """Calls ``on_sweep_start`` in the launching process before any job starts
    (Hydra's ``on_multirun_start``), and ``on_sweep_end`` after the last job
    (``on_multirun_end``)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.registry import default_registry

        default_registry().pm.hook.on_sweep_start(config=config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.registry import default_registry

        default_registry().pm.hook.on_sweep_end(config=config)
