"""Step-size multipliers: one convention for every built-in algorithm.

A step-size parameter ``x`` whose ``None`` means "derive it" (the theory value,
or the algorithm's default rule) has a companion ``x_scale`` (a float > 0,
default 1) that multiplies the derived value. The value used is then
``x_scale * default``, logged in place of ``x``'s None, and ``x_scale`` is
logged as the config value it is. A scale tunes around the default only:
giving ``x`` as well as ``x_scale != 1`` is an error naming both (a grid over
``x_scale`` then never mixes in absolute steps). Defaults that follow the step
(EXP3-IX's ``gamma = eta / 2``, SGD's ``tau_lr = lr``) follow the scaled
value, so ``x_scale=s`` is the same run as ``x=s * default``.
"""

from __future__ import annotations

from harness import ConfigError, Param


def scale_param(name: str) -> Param:
    """The ``<name>_scale`` entry of a parameter table."""
    return Param(float, default=1.0, low=0.0, low_open=True,
                 doc=f"multiplies the default {name} (1: the default); not with {name}")


def check_scale(owner: str, name: str, given: float | None, scale: float) -> None:
    """Refuse ``name`` given together with ``<name>_scale != 1``."""
    if given is not None and scale != 1.0:
        raise ConfigError(
            f"The '{name}' and '{name}_scale' parameters of {owner} cannot both be set: "
            f"{name}_scale multiplies the default {name}. Got {name}={given!r} and "
            f"{name}_scale={scale!r}; give {name}={given * scale!r} or {name}_scale alone.")


def scaled_step(owner: str, name: str, given: float | None, scale: float,
                default: float) -> float:
    """The step used: ``given`` if set, else ``scale * default`` (``check_scale``
    first)."""
    check_scale(owner, name, given, scale)
    return float(given) if given is not None else scale * default
