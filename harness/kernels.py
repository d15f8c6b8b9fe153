"""Kernel templates specialised per component, as the game's driver is.

A solver whose numba kernels call another component's kernels (a row solver
calls the model's ``row_loss`` and ``row_grad``) cannot take them as
arguments: numba cannot cache on disk a function specialised on a function
argument (``harness.engine``'s docstring says why). Such kernels are written
once as a *template*, a module whose source text calls free names, and
``specialise`` generates, per binding of those names, a module that imports
them by name and then holds the template's text, written once into
``harness.engine.cache_dir()`` and cached by numba like the driver (LLVM can
then inline the bound kernels into the template's loops).

A template is a ``.py`` file that is never imported as itself: its free
names (the bound kernels and ``njit``) are defined only by the header
``specialise`` writes above it, so it starts with a guard that raises
ImportError when those names are missing (``guard``). The generated file's
name hashes the template, the bound modules and what they import from their
packages (``harness.engine.source_digest``), and the numba caches of those
modules are refreshed first (``harness.engine.refresh_numba_caches``), so an
edit of any of them writes and compiles a new file.

The same text runs without numba: bound with ``njit`` as ``interpreted``
(the identity decorator) and the free names as Python functions, the
template's functions are plain Python, run by the interpreter. A component
with no compiled form (a third party's model with only the Python protocol)
so runs through the same code as the compiled ones, slowly.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.engine import kernel_modules, load_generated, refresh_numba_caches

#: ``njit`` of a compiled specialisation, and of an interpreted one
NUMBA, INTERPRETED = "numba:njit", "harness.kernels:interpreted"

_MODULES: dict[tuple[str, tuple[tuple[str, str], ...]], ModuleType] = {}


def interpreted(*args: Any, **kwargs: Any) -> Any:
    """``njit`` of an interpreted specialisation: the function itself, whether
    used as ``@njit`` or ``@njit(cache=True, ...)``."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda function: function


def guard(namespace: Mapping[str, Any], names: tuple[str, ...], template: str) -> None:
    """Raise ImportError unless ``names`` are bound in ``namespace`` (a
    template's ``globals()``): a template imported as itself has them free."""
    missing = [name for name in names if name not in namespace]
    if missing:
        raise ImportError(f"{template} is a kernel template (free names {missing}): "
                          f"build it with harness.kernels.specialise({template!r}, ...)")


def _split(ref: str) -> tuple[str, str]:
    module, _, attr = ref.partition(":")
    if not (attr.isidentifier() and all(part.isidentifier() for part in module.split("."))):
        raise ValueError(f"a kernel binding is 'module:name'; got {ref!r}")
    return module, attr


def _template_source(template: str) -> str:
    spec = importlib.util.find_spec(template)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ModuleNotFoundError(f"kernel template {template!r}: no such Python source file")
    return Path(spec.origin).read_text()


def specialise(template: str, bindings: Mapping[str, str],
               njit: str = NUMBA) -> ModuleType:
    """The module of ``template`` (a dotted module name; its source text is read,
    the module is not imported) with each free name of ``bindings`` (``name ->
    "module:attribute"``) imported as that attribute, and ``njit`` from
    ``njit`` (``NUMBA``, or ``INTERPRETED`` for plain Python). Generated once
    per template, binding and version of the modules involved (the template,
    the bound modules and those the template imports) into
    ``harness.engine.cache_dir()``, and loaded once per process."""
    key = (template, tuple(sorted({**bindings, "njit": njit}.items())))
    if key in _MODULES:
        return _MODULES[key]
    text = _template_source(template)
    lines = [f'"""{template} specialised by harness.kernels (generated; safe to delete)."""']
    modules = [template]
    for name, ref in key[1]:
        module, attr = _split(ref)
        if not name.isidentifier():
            raise ValueError(f"a kernel binding's name must be an identifier; got {name!r}")
        lines.append(f"from {module} import {attr} as {name}")
        if name != "njit":  # (numba's version is numba's cache's business)
            modules.append(module)
    source = "\n".join(lines) + "\n\n" + text
    # numba's caches of what the template calls first (the template itself is
    # never imported), then the name: both follow every module imported
    refresh_numba_caches([m for m in kernel_modules(modules) if m != template])
    module = load_generated(f"mmb_{template.rpartition('.')[2]}", source, modules)
    _MODULES[key] = module
    return module
