"""``minimax-bench-plugins``: every registered component by kind, with its
plugin, source package and parameters with defaults.

    minimax-bench-plugins                 # all kinds
    minimax-bench-plugins p_player        # one kind
    minimax-bench-plugins --markdown      # the same as Markdown tables (docs/components.md)
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Sequence
from importlib.metadata import packages_distributions

from harness.params import Param
from harness.registry import KINDS, Registry, make_plugin_manager

_OWN_MODULES = {"harness": "minimax-bench", "plugins": "minimax-bench"}

#: how docs/components.md is written (the built-ins only)
MARKDOWN_COMMAND = ("MINIMAX_BENCH_DISABLE_PLUGIN_AUTOLOAD=1 minimax-bench-plugins --markdown "
                    "> docs/components.md")


def package_of(cls: type) -> str:
    """The distribution that ships ``cls`` (``?`` when it is not installed as one)."""
    top = cls.__module__.split(".")[0]
    if top in _OWN_MODULES:
        return _OWN_MODULES[top]
    names = packages_distributions().get(top)
    return ", ".join(sorted(set(names))) if names else "?"


def sets_text(player: type, markdown: bool = False) -> str:
    """The sets a p-player plays on: its ``constraints`` names, and what its
    ``supports`` asks of a set (the first line of its docstring)."""
    names = getattr(player, "constraints", None)
    supports = getattr(player, "supports", None)
    need = (supports.__doc__ or "").strip().splitlines()[0].rstrip(".") if supports else ""
    if names:
        text = ", ".join(f"`{s}`" if markdown else s for s in names)
        return text + (f" ({need})" if need else "") + ("." if markdown else "")
    return (need or "any") + ("." if markdown else "")


def describe_param(name: str, spec: Param) -> str:
    if spec.default is None and spec.nullable:
        default = "None (derived)"
    elif spec.default is None:
        default = "required"
    else:
        default = repr(spec.default)
    text = f"{name} = {default}  ({spec.describe({})})"
    return f"{text}  {spec.doc}" if spec.doc else text


def listing(registry: Registry, kinds: Sequence[str]) -> str:
    lines: list[str] = []
    for kind in kinds:
        lines.append(f"{kind}:")
        for name in registry.names(kind):
            entry = registry.get(kind, name)
            extra = ""
            if kind == "p_player":
                extra = f"  constraint sets: {sets_text(entry.cls)}"
            lines.append(f"  {name}  [plugin {entry.plugin}, package {package_of(entry.cls)}]"
                         + extra)
            lines += [f"      {describe_param(p, spec)}" for p, spec in entry.cls.params.items()]
        lines.append("")
    return "\n".join(lines)


def summary(cls: type) -> str:
    """The first paragraph of the class docstring, on one line."""
    doc = inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default_cell(spec: Param) -> str:
    if spec.default is None:
        return "`None`" if spec.nullable else "required"
    return f"`{spec.default!r}`"


def markdown(registry: Registry, kinds: Sequence[str]) -> str:
    """Per kind, a table of its components, then each one's parameter table."""
    lines = ["# Components", "",
             "Every registered component by kind: the first paragraph of its docstring,",
             "then its parameters with their defaults, allowed values and meaning. A",
             "`None` default is filled in when the run starts (a theory value, a value",
             "from the data, a default folder: the meaning says which). Generated from",
             "the parameter tables the config is validated against; refresh with", "",
             f"    {MARKDOWN_COMMAND}", ""]
    for kind in kinds:
        names = registry.names(kind)
        lines += [f"## {kind}", "", "| name | what it is | parameters |", "|---|---|---|"]
        for name in names:
            cls = registry.get(kind, name).cls
            params = ", ".join(f"`{p}`" for p in cls.params) or "none"
            lines.append(f"| [`{name}`](#{kind}-{name}) | {_cell(summary(cls))} | {params} |")
        lines.append("")
        for name in names:
            entry = registry.get(kind, name)
            cls = entry.cls
            lines += [f"### {kind} `{name}`", "",
                      _cell(summary(cls)) or "(no docstring)", "",
                      f"Plugin `{entry.plugin}`, package `{package_of(cls)}`."]
            if kind == "p_player":
                lines[-1] += f" Constraint sets: {sets_text(cls, markdown=True)}"
            lines.append("")
            if not cls.params:
                lines += ["No parameters.", ""]
                continue
            lines += ["| parameter | default | allowed | meaning |", "|---|---|---|---|"]
            lines += [f"| `{p}` | {_default_cell(spec)} | {_cell(spec.describe({}))} "
                      f"| {_cell(spec.doc)} |" for p, spec in cls.params.items()]
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minimax-bench-plugins",
                                     description="List registered minimax-bench components.")
    parser.add_argument("kinds", nargs="*", metavar="KIND",
                        help=f"one or more of {list(KINDS)} (default: all)")
    parser.add_argument("--markdown", action="store_true",
                        help="print Markdown tables (the format of docs/components.md)")
    args = parser.parse_args(argv)
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown kind(s) {unknown}; choose from {list(KINDS)}")
    registry = Registry(make_plugin_manager())
    kinds = args.kinds or list(KINDS)
    if args.markdown:
        sys.stdout.write(markdown(registry, kinds))
    else:
        print(listing(registry, kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
