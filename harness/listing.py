"""``minimax-bench-plugins``: every registered component by kind, with its
plugin, source package and parameters with defaults.

    minimax-bench-plugins            # all kinds
    minimax-bench-plugins p_player   # one kind
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import packages_distributions

from harness.params import Param
from harness.registry import KINDS, Registry, make_plugin_manager

_OWN_MODULES = {"harness": "minimax-bench", "plugins": "minimax-bench"}


def package_of(cls: type) -> str:
    """The distribution that ships ``cls`` (``?`` when it is not installed as one)."""
    top = cls.__module__.split(".")[0]
    if top in _OWN_MODULES:
        return _OWN_MODULES[top]
    names = packages_distributions().get(top)
    return ", ".join(sorted(set(names))) if names else "?"


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
            fits = getattr(entry.cls, "constraints", None)
            if kind == "p_player":
                extra = f"  constraint sets: {list(fits) if fits else 'any'}"
            lines.append(f"  {name}  [plugin {entry.plugin}, package {package_of(entry.cls)}]"
                         + extra)
            lines += [f"      {describe_param(p, spec)}" for p, spec in entry.cls.params.items()]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minimax-bench-plugins",
                                     description="List registered minimax-bench components.")
    parser.add_argument("kinds", nargs="*", metavar="KIND",
                        help=f"one or more of {list(KINDS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown kind(s) {unknown}; choose from {list(KINDS)}")
    registry = Registry(make_plugin_manager())
    print(listing(registry, args.kinds or list(KINDS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
