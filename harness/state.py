"""Saved game state, so an interrupted run resumes from its last checkpoint.

At every checkpoint the game's state — every component but the data set
(iterates, averages, p-player state), the accumulators and counters, and the
random generator — is pickled to ``<state_dir>/state-<key>.pkl``, where the
key hashes the run's resolved parameters. ``resume=true`` with the same
config continues from there and produces the same numbers as an
uninterrupted run with the same seed; the file is removed when a run
finishes. Plugins keep what they need to continue (e.g. a tracker's run id)
in ``context.state["resume"]``, which is saved and restored with it.

Each component versions its own saved state: a class attribute
``state_version`` (an int, 0 when absent), raised by the component's author
whenever what it pickles changes meaning. The file holds a header (the
record's ``FORMAT`` and, per kind of component, its class as
``module:qualname`` and its ``state_version``) followed by the record; a
state whose header differs from the run's components (another class, another
version) or from ``FORMAT`` is not resumed: the run starts afresh, with a
warning that names the component.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

#: the layout of the saved file (header and record), not of what the components
#: pickle (their ``state_version``); a file of another format is not resumed
FORMAT = 6

#: the kinds of component whose class and ``state_version`` the header records
KINDS = ("constraint", "p_player", "w_player", "model", "solver")


def versions(parts: Any) -> dict[str, list]:
    """``{kind: [module:qualname, state_version]}`` of the run's components
    (``harness.game.Components``); kinds absent from the run are left out."""
    out = {}
    for kind in KINDS:
        component = getattr(parts, kind, None)
        if component is None:
            continue
        cls = type(component)
        out[kind] = [f"{cls.__module__}:{cls.__qualname__}",
                     int(getattr(cls, "state_version", 0))]
    return out


def mismatch(saved: dict[str, list], current: dict[str, list]) -> str | None:
    """Why a state saved with the components ``saved`` cannot resume a run of
    ``current`` (both ``versions``), or None."""
    for kind in sorted(set(saved) | set(current)):
        was, now = saved.get(kind), current.get(kind)
        if was == now:
            continue
        label = kind.replace("_", "-")
        if was is None or now is None:
            return f"the saved state has {'no' if was is None else 'a'} {label}"
        if was[0] != now[0]:
            return f"its {label} was {was[0]}, this run's is {now[0]}"
        return (f"the {label} {now[0]} saved it with state_version {was[1]}; "
                f"it is now {now[1]}")
    return None


def cache_root() -> Path:
    """The folder of everything minimax-bench caches (exact optima, compiled
    drivers under ``engine/``, synthetic data under ``synthetic/``):
    ``$XDG_CACHE_HOME/minimax-bench``, else ``~/.cache/minimax-bench``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "minimax-bench"


def key(params: dict[str, Any]) -> str:
    text = json.dumps(params, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def path_for(prepared: Any) -> Path | None:
    """``<state_dir>/state-<key>.pkl``; None when the config sets no ``state_dir``
    (the CLI's config always does; the Python API saves nothing unless asked).
    Take it before the run starts: plugins may add parameters at run start."""
    folder = prepared.context.config.get("state_dir")
    if not folder:
        return None
    return Path(folder) / f"state-{key(prepared.context.params)}.pkl"


def save(path: Path | None, prepared: Any, game: Any) -> None:
    """Write the state atomically (a crash while writing keeps the previous one)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT, "versions": versions(game.parts)}
    record = {
        # the data set (and the problem, which reads it) are put back on load
        "parts": dataclasses.replace(game.parts, dataset=None, problem=None),
        "state": game.state,
        "rng": game.rng,
        "resume": prepared.context.state.get("resume", {}),
    }
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(header, f, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.dump(record, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def load(path: Path | None, prepared: Any) -> dict[str, Any] | None:
    """The saved state of this config, with the data set put back, or None:
    no file, or one that cannot resume this run (another ``FORMAT``, a
    component of another class or ``state_version``: a ``RuntimeWarning``
    says which, and the run starts afresh)."""
    if path is None or not path.is_file():
        return None
    with open(path, "rb") as f:
        try:
            header = pickle.load(f)
        except (pickle.UnpicklingError, AttributeError, ImportError, EOFError, TypeError,
                ValueError) as err:  # a file of an older layout whose classes have gone
            header = {"format": f"unreadable ({type(err).__name__}: {err})"}
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            found = header.get("format") if isinstance(header, dict) else None
            why = f"its format is {found}, this version writes {FORMAT}"
        else:
            why = mismatch(header.get("versions", {}), versions(prepared.parts))
        if why is not None:
            warnings.warn(f"The saved state {path} is not resumed ({why}); the run starts "
                          "afresh.", RuntimeWarning, stacklevel=2)
            return None
        record = pickle.load(f)
    parts = record["parts"]
    problem = dataclasses.replace(prepared.parts.problem, model=parts.model,
                                  constraint=parts.constraint)
    record["parts"] = dataclasses.replace(parts, dataset=prepared.parts.dataset,
                                          problem=problem)
    return record


def discard(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)
