"""Plugin manager and the registry of components it collects.

Built-in plugins (entry-point group ``minimax_bench.builtins`` of this
package, ``builtin_plugins``) and third-party packages (entry-point group
``minimax_bench``) are registered the same way; the registry then asks every
plugin's registration hooks for its component classes. The core names no
plugin: the list of built-ins is the package's metadata.
"""

from __future__ import annotations

import functools
import importlib
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pluggy

from harness import hookspecs
from harness.params import ConfigBlock, ConfigError, validate

#: the entry-point group of the built-in plugins (``pyproject.toml``), registered
#: always and in the order of their entry-point names, before the third parties'
#: group ``minimax_bench``
BUILTINS_GROUP = "minimax_bench.builtins"

#: top-level config keys of the game itself (plugins add blocks of their own)
CORE_KEYS: frozenset[str] = frozenset({
    "constraint", "p_player", "w_player", "model", "dataset", "budget", "budget_passes", "seed",
    "checkpoints", "progress", "resume", "state_dir", "engine", "solver", "problem"})

#: set to a non-empty value to skip loading entry-point plugins
DISABLE_AUTOLOAD_ENV = "MINIMAX_BENCH_DISABLE_PLUGIN_AUTOLOAD"

#: component kind -> registration hook name
KINDS: dict[str, str] = {
    "constraint_set": "register_constraint_sets",
    "p_player": "register_p_players",
    "w_player": "register_w_players",
    "model": "register_models",
    "dataset": "register_datasets",
    "solver": "register_solvers",
}


class PluginError(RuntimeError):
    """A plugin broke the contract; ``.plugin`` names it."""

    def __init__(self, plugin: str, message: str) -> None:
        super().__init__(message)
        self.plugin = plugin


def make_plugin_manager(
    extra: Iterable[Any] = (), *, load_entrypoints: bool | None = None,
    argv: Sequence[str] | None = None,
) -> pluggy.PluginManager:
    """A fresh plugin manager with the built-ins, installed packages and ``extra``.

    ``argv``: the ``minimax-bench`` command's arguments; each plugin's
    ``prestart`` is then called with them as soon as it is registered (a
    historic hook), before the plugins after it are imported."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    if argv is not None:
        pm.hook.prestart.call_historic(kwargs={"argv": list(argv)})
    for module_name in builtin_plugins():
        pm.register(importlib.import_module(module_name), name=module_name)
    if load_entrypoints is None:
        load_entrypoints = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    if load_entrypoints:
        _load_entrypoints(pm)
    for plugin in extra:
        pm.register(plugin, name=_plugin_name(pm, plugin))
    pm.check_pending()
    return pm


def _plugin_name(pm: pluggy.PluginManager, plugin: Any) -> str:
    """A readable, unique name for a plugin object or module (errors name plugins by it)."""
    base = getattr(plugin, "__name__", None)
    if not isinstance(base, str):
        cls = type(plugin)
        base = f"{cls.__module__}.{cls.__qualname__}"
    name, i = base, 1
    while pm.get_plugin(name) is not None or pm.is_blocked(name):
        i += 1
        name = f"{base}#{i}"
    return name


@functools.cache
def builtin_plugins() -> tuple[str, ...]:
    """The built-in plugins' modules, in registration order: the entry points of
    group ``BUILTINS_GROUP`` in this package's own metadata, by name (the first
    one's ``prestart`` starts the tracker's helper before the rest loads)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        points = distribution("minimax-bench").entry_points
    except PackageNotFoundError:
        points = ()
    found = tuple(ep.value for ep in sorted(points, key=lambda ep: ep.name)
                  if ep.group == BUILTINS_GROUP)
    if not found:
        raise RuntimeError(f"minimax-bench's built-in plugins are not installed (no entry "
                           f"points in group '{BUILTINS_GROUP}'): install the package, "
                           "e.g. pip install -e . in its source folder")
    return found


def _load_entrypoints(pm: pluggy.PluginManager) -> None:
    """Like pluggy's loader, but one broken package only warns (names it) and the rest load."""
    from importlib.metadata import entry_points  # (20 ms: after the plugins' prestart)

    for ep in entry_points(group=hookspecs.PROJECT):
        if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
            continue
        try:
            plugin = ep.load()
        except Exception as err:  # noqa: BLE001 - any import failure of a third party
            dist = getattr(ep, "dist", None)
            package = dist.name if dist is not None else ep.value
            warnings.warn(
                f"minimax-bench plugin '{ep.name}' from package '{package}' failed to "
                f"import and was skipped: {err!r}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        pm.register(plugin, name=ep.name)


@dataclass(frozen=True)
class Entry:
    """One registered component class and the plugin that registered it."""

    cls: type
    plugin: str


class Registry:
    """Component classes by kind and name, collected through the registration hooks."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self.entries: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}
        for kind, hook_name in KINDS.items():
            for impl in getattr(pm.hook, hook_name).get_hookimpls():
                impl.function(register=self._registrar(kind, impl.plugin_name))
        #: top-level config blocks by name, with the plugin that owns each
        self.blocks: dict[str, tuple[ConfigBlock, str]] = {}
        for impl in pm.hook.register_config_blocks.get_hookimpls():
            impl.function(register=self._block_registrar(impl.plugin_name))

    def _block_registrar(self, plugin: str):
        def register(block: ConfigBlock) -> None:
            if not isinstance(block, ConfigBlock):
                raise PluginError(plugin, f"Plugin '{plugin}' registered {block!r} as a config "
                                          "block; register a harness.ConfigBlock.")
            if block.name in CORE_KEYS:
                raise PluginError(plugin, f"Plugin '{plugin}' registered the config block "
                                          f"'{block.name}', a key of the game itself.")
            previous = self.blocks.get(block.name)
            if previous is not None:
                raise PluginError(plugin, f"The config block '{block.name}' is registered "
                                          f"twice: by plugin '{previous[1]}' and by plugin "
                                          f"'{plugin}'.")
            self.blocks[block.name] = (block, plugin)

        return register

    def _registrar(self, kind: str, plugin: str):
        def register(cls: type) -> None:
            name = getattr(cls, "name", None)
            if not isinstance(name, str) or not name:
                raise PluginError(plugin, f"Plugin '{plugin}' registered a {kind} "
                                          f"{cls!r} without a string 'name' attribute.")
            if not isinstance(getattr(cls, "params", None), dict):
                raise PluginError(plugin, f"Plugin '{plugin}' registered {kind} '{name}' "
                                          "without a 'params' dict of harness.Param.")
            previous = self.entries[kind].get(name)
            if previous is not None:
                raise PluginError(
                    plugin,
                    f"The {kind} name '{name}' is registered twice: by plugin "
                    f"'{previous.plugin}' and by plugin '{plugin}'.",
                )
            self.entries[kind][name] = Entry(cls, plugin)

        return register

    def names(self, kind: str) -> list[str]:
        return sorted(self._kind(kind))

    def _kind(self, kind: str) -> dict[str, Entry]:
        if kind not in self.entries:
            raise ConfigError(f"Unknown component kind '{kind}'. Known kinds: {list(KINDS)}.")
        return self.entries[kind]

    def get(self, kind: str, name: str) -> Entry:
        entries = self._kind(kind)
        if name not in entries:
            raise ConfigError(
                f"Unknown {kind} '{name}'. Registered {kind} names: {sorted(entries)}."
            )
        return entries[name]

    def build(self, kind: str, name: str, **params: Any) -> Any:
        """Validate ``params`` against the class's table, then construct it."""
        return self.build_with_values(kind, name, **params)[0]

    def build_with_values(self, kind: str, name: str, **params: Any) -> tuple[Any, dict[str, Any]]:
        """Like ``build``, also returning the validated values (defaults filled in)."""
        entry = self.get(kind, name)
        values = validate(name, entry.cls.params, params)
        component = entry.cls(**values)
        if kind == "constraint_set":
            _check_constraint_set(component, name, entry.plugin)
        return component, values


def _check_constraint_set(K: Any, name: str, plugin: str) -> None:
    """Refuse a constraint set without the members declared since 0.2, naming them
    (a set written against 0.1 would otherwise fail deep inside a p-player)."""
    missing = []
    if not callable(getattr(K, "row_caps", None)):
        missing.append("row_caps()")
    if not isinstance(getattr(K, "sampler", None), str):
        missing.append("sampler")
    if missing:
        raise PluginError(
            plugin,
            f"The constraint set '{name}' of plugin '{plugin}' lacks {' and '.join(missing)}, "
            "which constraint sets declare since minimax-bench 0.2 (and sample(p, rng) "
            "returns a harness.Draw(rows, multiplicities)); see docs/plugins.md.",
        )


_default: Registry | None = None


def default_registry(argv: Sequence[str] | None = None) -> Registry:
    """The registry of built-ins and installed packages (built once per process;
    ``argv``: the command's arguments for the plugins' ``prestart``, when this
    call builds it)."""
    global _default
    if _default is None:
        _default = Registry(make_plugin_manager(argv=argv))
    return _default
