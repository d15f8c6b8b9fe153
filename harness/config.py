"""The config tree: one source of defaults for the CLI and the Python API.

Every option of a component group (``p_player=exp4mp``, ``dataset=boston``,
...) is generated from the registered class's ``Param`` table and stored in
Hydra's ConfigStore, so a component's defaults live in one place and a
plugin package needs no YAML for its components. A YAML file of the same
group and name on Hydra's search path (the shipped ``conf/`` tree, a
plugin package's ``conf/``, a user's ``hydra.searchpath``) is merged onto the
generated option (Hydra's schema matching), so it may set only the values
it changes; ``tests/test_config.py`` checks that the shipped options hold
the declared defaults. The shipped tree keeps YAML only for
options that are not a registered class (``model=auto``) or that preset
values (``constraint=alphaset_groups``, ``experiment=...``).

``compose(overrides)`` returns the config the ``minimax-bench`` command
would build from the same overrides, so that::

    harness.run(harness.compose(["dataset=boston"]))

plays the game ``minimax-bench dataset=boston`` plays.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.registry import Registry, default_registry

#: config group -> component kind
GROUPS: dict[str, str] = {
    "constraint": "constraint_set",
    "p_player": "p_player",
    "w_player": "w_player",
    "model": "model",
    "dataset": "dataset",
    "solver": "solver",
}

#: overrides of the game's own keys for a run that leaves nothing behind (the
#: plugins' blocks add theirs: ``quiet_overrides()``)
QUIET_CORE: tuple[str, ...] = ("state_dir=null", "progress=false")

#: the name of the root config holding every plugin's block (``conf/config.yaml``'s defaults)
BLOCKS_CONFIG = "plugin_blocks"

#: parameters the harness sets itself, never given in a config
SET_BY_HARNESS: dict[str, frozenset[str]] = {"constraint_set": frozenset({"n"})}


def config_dir() -> str:
    """The shipped config tree: inside the installed package, or ``conf/`` of a
    source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError(f"minimax-bench config tree not found near {here}")


def option_node(kind: str, cls: type) -> dict[str, Any]:
    """The config option of a component class: its name and every parameter's default."""
    skip = SET_BY_HARNESS.get(kind, frozenset())
    node: dict[str, Any] = {"name": cls.name}
    for key, spec in cls.params.items():
        if key not in skip:
            node[key] = copy.deepcopy(spec.default)
    return node


def register_options(registry: Registry | None = None) -> list[tuple[str, str]]:
    """Store one Hydra option per registered component (``group/name``); return them."""
    from hydra.core.config_store import ConfigStore

    # A YAML option named like a registered component is merged onto the
    # generated one (Hydra's schema matching): a plugin's YAML may be partial.
    warnings.filterwarnings("ignore", message=r"\s*'[^']+' is validated against ConfigStore "
                            r"schema with the same name", category=UserWarning)
    registry = registry or default_registry()
    store = ConfigStore.instance()
    stored = []
    for group, kind in GROUPS.items():
        for name in registry.names(kind):
            node = option_node(kind, registry.get(kind, name).cls)
            store.store(group=group, name=name, node=node, provider="minimax-bench")
            stored.append((group, name))
    from harness.problem import PROBLEM_PARAMS

    tables = {name: block.params for name, (block, _) in registry.blocks.items()}
    tables["problem"] = PROBLEM_PARAMS  # the game's own block, beside the plugins'
    blocks = {name: {key: copy.deepcopy(spec.default) for key, spec in table.items()}
              for name, table in tables.items()}
    store.store(name=BLOCKS_CONFIG, node=blocks, provider="minimax-bench")
    return stored


def _override_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def quiet_overrides(registry: Registry | None = None) -> tuple[str, ...]:
    """Overrides for a run that records nothing and leaves nothing behind: no
    saved state, no progress bar, and every plugin block's ``off`` values (no
    MLflow store, no exact-optimum solve for the built-ins)."""
    registry = registry or default_registry()
    off = [f"{name}.{key}={_override_value(value)}"
           for name, (block, _) in sorted(registry.blocks.items())
           for key, value in block.off.items()]
    return (*QUIET_CORE, *off)


def __getattr__(name: str) -> Any:
    if name == "QUIET":  # ``from harness.config import QUIET``: of the default registry
        return quiet_overrides()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compose(overrides: Iterable[str] = (), *, quiet: bool = False,
            registry: Registry | None = None) -> Any:
    """The config ``minimax-bench *overrides`` builds (a DictConfig, without the
    ``hydra`` node), through Hydra's compose API over the shipped tree and the
    plugin packages' options. ``quiet``: ``quiet_overrides()`` go first (a
    run that records nothing). Works inside a running Hydra app too."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_options(registry)
    outer = GlobalHydra.instance()
    saved = outer.hydra if outer.is_initialized() else None
    outer.clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=config_dir(),
                                   job_name="minimax-bench"):
            first = quiet_overrides(registry) if quiet else ()
            return hydra_compose("config", overrides=[*first, *overrides])
    finally:
        GlobalHydra.instance().clear()
        if saved is not None:
            GlobalHydra.instance().initialize(saved)


def group_options(group: str) -> list[str]:
    """Every option Hydra finds for ``group`` (shipped YAML, plugin packages,
    generated from the registry); the user's own ``hydra.searchpath`` aside."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    outer = GlobalHydra.instance()
    saved = outer.hydra if outer.is_initialized() else None
    outer.clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=config_dir()):
            return sorted(GlobalHydra.instance().config_loader().get_group_options(group))
    finally:
        GlobalHydra.instance().clear()
        if saved is not None:
            GlobalHydra.instance().initialize(saved)


def unknown_option(args: Sequence[str]) -> str | None:
    """The message for the first command-line override that picks an option no
    config group has (``p_player=nope``, ``+experiment=nope``,
    ``hydra/launcher=nope``), or None. Overrides that Hydra expands itself
    (sweeps by glob or range), deletions, and runs with a user's own
    ``hydra.searchpath`` or ``--config-dir`` are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if any(a.startswith(("--config-dir", "-cd", "--config-path", "-cp")) for a in args):
        return None
    plain = [a for a in args if "=" in a and not a.startswith("-")]
    if any(a.split("=", 1)[0].lstrip("+~") == "hydra.searchpath" for a in plain):
        return None
    try:
        parsed = OverridesParser.create().parse_overrides(overrides=plain)
    except Exception:  # noqa: BLE001 - a syntax error is Hydra's to report
        return None
    groups = (*GROUPS, "experiment")
    for override in parsed:
        group = override.key_or_group
        if ((group not in groups and not group.startswith("hydra/"))
                or override.package is not None or override.is_delete()):
            continue
        try:
            if override.is_sweep_override():
                if not override.is_choice_sweep():
                    continue
                values = list(override.sweep_string_iterator())
            else:
                values = [override.get_value_element_as_str()]
        except Exception:  # noqa: BLE001 - a sweep form Hydra expands itself
            continue
        options = group_options(group)
        missing = [v for v in values if v not in options and v != "null"]
        if missing:
            what = {"experiment": "experiment preset"}.get(group, f"{group} option")
            return (f"Unknown {what} '{missing[0]}' in '{override.input_line}'. "
                    f"Available: {options}.")
    return None
