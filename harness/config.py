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
import difflib
import functools
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.params import ConfigError
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
    run that records nothing). Works inside a running Hydra app too. An
    unknown option or key raises ``ConfigError`` with the command's message."""
    from hydra.errors import HydraException

    given = [*(quiet_overrides(registry) if quiet else ()), *overrides]
    try:
        return _hydra_compose(given, registry)
    except HydraException as err:
        message = unknown_option(given) or unknown_key(given, registry)
        if message is None:
            raise
        raise ConfigError(message) from err


def _hydra_compose(overrides: Sequence[str], registry: Registry | None = None, *,
                   hydra_node: bool = False) -> Any:
    """Hydra's compose of the shipped tree; a Hydra app running around it is put back."""
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
            return hydra_compose("config", overrides=list(overrides),
                                 return_hydra_config=hydra_node)
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


#: command-line flags that pick another config tree or primary config: the user's
#: own groups and keys, which these checks leave to Hydra
OWN_CONFIG_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")


def _parsed_overrides(args: Sequence[str]) -> list[Any] | None:
    """Hydra's parse of the overrides among ``args``, or None where Hydra reports
    alone: a syntax error, a user's own ``hydra.searchpath`` or config tree."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if any(a.startswith(OWN_CONFIG_FLAGS) for a in args):
        return None
    plain = [a for a in args if "=" in a and not a.startswith("-")]
    if any(a.split("=", 1)[0].lstrip("+~") == "hydra.searchpath" for a in plain):
        return None
    try:
        return OverridesParser.create().parse_overrides(overrides=plain)
    except Exception:  # noqa: BLE001 - a syntax error is Hydra's to report
        return None


def _is_group(key: str) -> bool:
    return key in GROUPS or key == "experiment" or key.startswith("hydra/")


def _picked(override: Any) -> list[str] | None:
    """The options a group override picks (each of a choice sweep), or None for
    a sweep Hydra expands itself (by glob or range)."""
    try:
        if override.is_sweep_override():
            if not override.is_choice_sweep():
                return None
            return [str(v) for v in override.sweep_string_iterator()]
        return [override.get_value_element_as_str()]
    except Exception:  # noqa: BLE001 - a sweep form Hydra expands itself
        return None


def unknown_option(args: Sequence[str]) -> str | None:
    """The message for the first command-line override that picks an option no
    config group has (``p_player=nope``, ``+experiment=nope``,
    ``hydra/launcher=nope``), or None. Overrides that Hydra expands itself
    (sweeps by glob or range), deletions, and runs with a user's own config
    tree (``_parsed_overrides``) are left to Hydra."""
    parsed = _parsed_overrides(args)
    for override in parsed or ():
        group = override.key_or_group
        if not _is_group(group) or override.package is not None or override.is_delete():
            continue
        values = _picked(override)
        if values is None:
            continue
        options = group_options(group)
        missing = [v for v in values if v not in options and v != "null"]
        if missing:
            what = {"experiment": "experiment preset"}.get(group, f"{group} option")
            return (f"Unknown {what} '{missing[0]}' in '{override.input_line}'. "
                    f"Available: {options}.")
    return None


@functools.cache
def default_choices() -> dict[str, str]:
    """The option ``conf/config.yaml`` picks for each group by default."""
    import yaml

    primary = yaml.safe_load((Path(config_dir()) / "config.yaml").read_text())
    return {str(k): str(v) for entry in primary.get("defaults", ())
            if isinstance(entry, dict) for k, v in entry.items()}


def unknown_key(args: Sequence[str], registry: Registry | None = None) -> str | None:
    """The message for the first command-line override that sets a key the
    config does not have (``budjet=1000``, ``p_player.etaa=0.1``: a group's keys
    are those of the option picked, on the command line or by default), with
    the closest known keys; or None. Hydra's explicit adds (``+key=value``,
    ``++key=value``), deletions and ``hydra.`` keys are Hydra's, and so is a
    run with a user's own config tree (``_parsed_overrides``).

    A key the registry's tables vouch for is checked without composing (the
    game's keys, the plugins' blocks, the params of a registered option the
    command line or ``conf/config.yaml`` picks); any other is looked up in the
    config Hydra composes for each option of its group the command line picks."""
    parsed = _parsed_overrides(args)
    if parsed is None:
        return None
    registry = registry or default_registry()
    picked: dict[str, list[str] | None] = {}
    added: list[str] = []
    keys = []
    for override in parsed:
        key = override.key_or_group
        if _is_group(key):
            if override.package is None and not override.is_delete():
                picked[key] = _picked(override)
        elif key == "hydra" or key.startswith("hydra."):
            continue
        elif override.is_add() or override.is_force_add():
            added.append(key)
        elif not override.is_delete() and override.package is None:
            keys.append(override)
    # keys under one the command line adds exist once Hydra adds it
    keys = [o for o in keys if not any(
        o.key_or_group == a or o.key_or_group.startswith(f"{a}.") for a in added)]
    suspects = [o for o in keys if not _vouched(o.key_or_group.split("."), picked, registry)]
    return _absent(suspects, picked, registry) if suspects else None


def _vouched(path: list[str], picked: Mapping[str, list[str] | None],
             registry: Registry) -> bool:
    """Whether the registry's tables say the config has the key ``path`` (False:
    not known without composing)."""
    from harness.problem import PROBLEM_PARAMS
    from harness.registry import CORE_KEYS

    head = path[0]
    if len(path) == 1:
        return head in CORE_KEYS or head in registry.blocks
    if len(path) > 2:
        return False
    tables = {name: block.params for name, (block, _) in registry.blocks.items()}
    tables["problem"] = PROBLEM_PARAMS
    if head in tables:
        return path[1] in tables[head]
    if head not in GROUPS or any(v != "null" for v in picked.get("experiment") or ()):
        return False  # a preset may pick another option of the group
    kind = GROUPS[head]
    options = picked.get(head, [default_choices().get(head, "")])
    if options is None:
        return False
    known = set(registry.names(kind))
    return all(name in known and (path[1] == "name" or (
        path[1] in registry.get(kind, name).cls.params
        and path[1] not in SET_BY_HARNESS.get(kind, ()))) for name in options)


def _absent(suspects: Sequence[Any], picked: Mapping[str, list[str] | None],
            registry: Registry) -> str | None:
    """The message for the first of ``suspects`` that the composed config lacks,
    for any option its group's override picks (and any preset picked)."""
    presets = picked.get("experiment", ["null"])
    if presets is None:
        return None
    composed: dict[tuple[str, ...], dict[str, Any] | None] = {}
    for override in suspects:
        group = override.key_or_group.split(".")[0]
        # "": the option the defaults (or the preset) pick
        options = picked.get(group, [""]) if group in GROUPS else [""]
        for preset in presets:
            for option in options or ():
                choice = (*([f"experiment={preset}"] if preset != "null" else []),
                          *([f"{group}={option}"] if option else []))
                if choice not in composed:
                    composed[choice] = _composed(choice, registry)
                cfg = composed[choice]
                if cfg is not None:
                    message = _missing_key(override, cfg, preset)
                    if message is not None:
                        return message
    return None


def _composed(overrides: Sequence[str], registry: Registry) -> dict[str, Any] | None:
    """The plain config of ``overrides``, with Hydra's node (its choices); None if
    it does not compose."""
    from omegaconf import OmegaConf

    try:
        cfg = _hydra_compose(overrides, registry, hydra_node=True)
    except Exception:  # noqa: BLE001 - whatever does not compose is Hydra's to report
        return None
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def _missing_key(override: Any, cfg: dict[str, Any], preset: str) -> str | None:
    """The message if the plain config ``cfg`` (with Hydra's node) has no key
    ``override`` sets, else None."""
    path = override.key_or_group.split(".")
    plain = {k: v for k, v in cfg.items() if k != "hydra"}
    node: Any = plain
    for depth, part in enumerate(path):  # noqa: B007 - depth: where the key is missing
        if isinstance(node, list):
            return None  # an index into a list: Hydra's
        if not (isinstance(node, dict) and part in node):
            break
        node = node[part]
    else:
        return None
    block = ".".join(path[:depth])
    known = sorted(node) if isinstance(node, dict) else []
    closest = _closest(path, depth, known, _paths(plain))
    choices = cfg.get("hydra", {}).get("runtime", {}).get("choices", {})
    where = (f"{block}={choices.get(block, '?')}" if depth == 1 and block in GROUPS
             else block or "the top level")
    if preset != "null":
        where += f" (experiment={preset})"
    available = (f"Available at {where}: {known}." if not block else
                 f"Available in {where}: {known}." if isinstance(node, dict) else
                 f"'{block}' is a value, not a block of keys.")
    return (f"Unknown config key '{override.key_or_group}' in '{override.input_line}'. "
            f"Closest: {closest or 'none'}. {available}")


def _closest(path: list[str], depth: int, known: list[str], paths: list[str]) -> list[str]:
    """Up to three keys close to ``path[depth]``: among ``known`` (its level; with
    the rest of the path where that exists: ``pplayer.eta`` -> ``p_player.eta``),
    else any key of ``paths`` by its last name (``k`` -> ``constraint.k``)."""
    head = "".join(f"{p}." for p in path[:depth])
    rest = "".join(f".{p}" for p in path[depth + 1:])
    near = [head + key for key in difflib.get_close_matches(path[depth], known, n=3)]
    if near:
        return [key + rest if key + rest in paths else key for key in near]
    leaves: defaultdict[str, list[str]] = defaultdict(list)
    for key in paths:
        leaves[key.rsplit(".", 1)[-1]].append(key)
    return [key for leaf in difflib.get_close_matches(path[depth], list(leaves), n=3)
            for key in leaves[leaf]][:3]


def _paths(node: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a plain config."""
    if not isinstance(node, dict):
        return [prefix] if prefix else []
    out = [prefix] if prefix else []
    for key, value in node.items():
        out += _paths(value, f"{prefix}.{key}" if prefix else str(key))
    return out
