"""Declared parameter tables and validation at the boundary.

Every component class declares ``params: dict[str, Param]``. ``validate``
checks a mapping of values against it and raises ``ConfigError`` with one
message shape::

    The 'k' parameter of kset must be an int in [1, n=569]. Got 600 instead.

A bound may name another parameter of the same table (``high="n"``), which is
how relations such as ``k <= n`` are declared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A configuration value is invalid; raised before any run starts."""


class SetupError(RuntimeError):
    """Something a run needs is unavailable (e.g. its tracking server); raised
    before the first round."""


class RunSkipped(Exception):
    """Raised by a ``before_prepare`` hook, or by an ``on_run_start`` hook before
    anything has started (a ``wrapper=True`` implementation, before its
    ``yield``): this run need not be
    played, e.g. a tracker holds a finished run of the same config and seed.
    ``metrics``: that run's final metrics, if known."""

    def __init__(self, message: str, metrics: Mapping[str, float] | None = None) -> None:
        super().__init__(message)
        self.metrics = dict(metrics or {})


_TYPE_WORDS = {int: "an int", float: "a float", str: "a str", bool: "a bool"}


@dataclass(frozen=True)
class Param:
    """One declared constructor argument of a component.

    ``type`` is int, float, str or bool; a float must be finite. ``low``/``high``
    are numbers or the name of another parameter; ``low_open``/``high_open`` make that end
    exclusive. ``choices`` restricts a str. ``nullable`` allows None (meaning
    "derive from theory" for step sizes and similar).
    """

    type: type
    default: Any = None
    low: float | str | None = None
    high: float | str | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    nullable: bool = False
    doc: str = ""

    def describe(self, values: Mapping[str, Any]) -> str:
        """What is allowed, in words, with named bounds resolved."""
        word = _TYPE_WORDS.get(self.type, self.type.__name__)
        if self.choices is not None:
            text = f"one of {list(self.choices)}"
        elif self.low is not None or self.high is not None:
            lo = _bound_text(self.low, values, "-inf")
            hi = _bound_text(self.high, values, "inf")
            left = "(" if self.low_open or self.low is None else "["
            right = ")" if self.high_open or self.high is None else "]"
            text = f"{word} in {left}{lo}, {hi}{right}"
        else:
            text = "a finite float" if self.type is float else word
        return text + (" or None" if self.nullable else "")


@dataclass(frozen=True)
class ConfigBlock:
    """A top-level config block that a plugin owns and reads (``tracking``,
    ``reference``). Its defaults come from ``params`` (the CLI's config tree
    holds them, generated); ``off`` are the values under which the plugin
    records and computes nothing (``harness.compose(quiet=True)`` sets them).
    A config without the block leaves the plugin off."""

    name: str
    params: Mapping[str, Param]
    off: Mapping[str, Any] = field(default_factory=dict)
    doc: str = ""


def _bound_text(bound: float | str | None, values: Mapping[str, Any], inf: str) -> str:
    if bound is None:
        return inf
    if isinstance(bound, str):
        return f"{bound}={values[bound]}" if values.get(bound) is not None else bound
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _resolve(bound: float | str | None, values: Mapping[str, Any]) -> float | None:
    if isinstance(bound, str):
        value = values.get(bound)
        return None if value is None else float(value)
    return bound


def _coerce(value: Any, spec: Param) -> Any:
    """Convert config-typed values (YAML floats like 1e7, ints for floats) or raise TypeError."""
    if spec.type is bool:
        if isinstance(value, bool):
            return value
        raise TypeError
    if spec.type is int:
        if isinstance(value, bool):
            raise TypeError
        if isinstance(value, int):
            return value
        if isinstance(value, float) and math.isfinite(value) and value == int(value):
            return int(value)
        raise TypeError
    if spec.type is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError
        return float(value)
    if spec.type is str:
        if isinstance(value, str):
            return value
        raise TypeError
    return value


def validate(owner: str, table: Mapping[str, Param], given: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``given`` against ``table`` and return the full set of values.

    Unknown keys are errors; missing keys take their defaults. ``owner`` names
    the component in messages (e.g. ``"kset"``).
    """
    unknown = sorted(set(given) - set(table))
    if unknown:
        raise ConfigError(
            f"Unknown parameter(s) {unknown} for {owner}. "
            f"Allowed parameters: {sorted(table)}."
        )
    values: dict[str, Any] = {name: spec.default for name, spec in table.items()}
    values.update(given)
    for name, spec in table.items():
        value = values[name]
        if value is None and spec.nullable:
            continue
        try:
            value = _coerce(value, spec)
        except TypeError:
            raise ConfigError(_message(owner, name, spec, values, given.get(name))) from None
        values[name] = value
    for name, spec in table.items():
        value = values[name]
        if value is None and spec.nullable:
            continue
        if not _allowed(value, spec, values):
            raise ConfigError(_message(owner, name, spec, values, given.get(name, value)))
    return values


def _allowed(value: Any, spec: Param, values: Mapping[str, Any]) -> bool:
    if spec.choices is not None:
        return value in spec.choices
    if spec.type in (int, float):
        if isinstance(value, float) and not math.isfinite(value):
            return False  # nan, and inf, which no step size, radius or scale means
        lo, hi = _resolve(spec.low, values), _resolve(spec.high, values)
        if lo is not None and (value < lo or (spec.low_open and value == lo)):
            return False
        if hi is not None and (value > hi or (spec.high_open and value == hi)):
            return False
    return True


def _message(owner: str, name: str, spec: Param, values: Mapping[str, Any], got: Any) -> str:
    return (
        f"The '{name}' parameter of {owner} must be {spec.describe(values)}. "
        f"Got {got!r} instead."
    )


def check(owner: str, name: str, spec: Param, value: Any) -> Any:
    """Validate one value outside a component table (e.g. the game's ``budget``)."""
    return validate(owner, {name: spec}, {name: value})[name]
