"""The command's default sweeper, ``hydra/sweeper=basic`` (Hydra's default:
``conf/hydra/sweeper/basic.yaml`` comes before Hydra's own entry in the
search path): Hydra's basic sweeper, with its up-front check of a batch made
once per shape of job instead of once per job.

Before launching a batch, Hydra's basic sweeper composes every job's config
(``validate_batch_is_legal``) to catch a composition error before any job
runs; the launcher then composes each again. Composing this project's config
costs about as much as a 20,000-data-point game, so the check alone added a
third to a sweep of short runs. A composition error depends on which keys a
job overrides and on the options it picks in config groups (``dataset=...``,
``p_player=...``), not on the values it gives plain keys (``seed=3``; a value
the project refuses is refused with its own message when the job prepares).
So one job of each shape is composed: its overridden keys, and the option of
each group it overrides. A sweep of 1,000 seeds over two p-players composes
two jobs up front, not 1,000.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


def job_shapes(batch: Sequence[Sequence[str]], is_group: Any) -> list[Sequence[str]]:
    """The first job of each shape in ``batch``: the keys it overrides, with the
    value of those that name a config group (``is_group(key)``)."""
    seen: set[tuple[str, ...]] = set()
    first: list[Sequence[str]] = []
    for overrides in batch:
        shape = []
        for override in overrides:
            key, _, value = override.partition("=")
            shape.append(override if is_group(key.lstrip("+~")) else key)
        if tuple(sorted(shape)) not in seen:
            seen.add(tuple(sorted(shape)))
            first.append(overrides)
    return first


def validate_shapes(sweeper: Any, batch: Sequence[Sequence[str]]) -> None:
    """Hydra's ``validate_batch_is_legal`` on one job of each shape (``job_shapes``)."""
    loader = sweeper.hydra_context.config_loader
    groups: dict[str, bool] = {}

    def is_group(key: str) -> bool:
        if key not in groups:
            try:
                groups[key] = bool(loader.get_group_options(key.replace(".", "/")))
            except Exception:  # noqa: BLE001 - not a group (or not a path Hydra knows)
                groups[key] = False
        return groups[key]

    for overrides in job_shapes(batch, is_group):
        loader.load_sweep_config(master_config=sweeper.config, sweep_overrides=list(overrides))


class MinimaxBenchSweeper(BasicSweeper):
    """Hydra's basic sweeper (same parameters, same jobs, same order), whose
    check of a batch composes one job per shape (``validate_shapes``)."""

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        validate_shapes(self, batch)
