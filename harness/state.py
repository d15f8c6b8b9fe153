"""Saved game state, so an interrupted run resumes from its last checkpoint.

At every checkpoint the game's state — every component but the data set
(iterates, averages, p-player state), the accumulators and counters, and the
random generator — is pickled to ``<state_dir>/state-<key>.pkl``, where the
key hashes the run's resolved parameters. ``resume=true`` with the same
config continues from there and produces the same numbers as an
uninterrupted run with the same seed; the file is removed when a run
finishes. Plugins keep what they need to continue (e.g. a tracker's run id)
in ``context.state["resume"]``, which is saved and restored with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

#: the saved states' format; a state of another format is not resumed (the run
#: starts afresh). 3: EXP4.MP's and dense EXP-IX-M's state tuples changed, and
#: DepRound's pairing (a resumed run would not match an uninterrupted one). 4:
#: DepRound's pairing again, the kernels' exp and log (``plugins.lib.vecmath``),
#: and FTRL's state tuple. 5: the row solvers' counters (``counts_``) and SGD's
#: schedule state
FORMAT = 5


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
    record = {
        "format": FORMAT,
        # the data set (and the problem, which reads it) are put back on load
        "parts": dataclasses.replace(game.parts, dataset=None, problem=None),
        "state": game.state,
        "rng": game.rng,
        "resume": prepared.context.state.get("resume", {}),
    }
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(record, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def load(path: Path | None, prepared: Any) -> dict[str, Any] | None:
    """The saved state of this config, with the data set put back, or None."""
    if path is None or not path.is_file():
        return None
    with open(path, "rb") as f:
        record = pickle.load(f)
    if record.get("format") != FORMAT:
        return None
    parts = record["parts"]
    problem = dataclasses.replace(prepared.parts.problem, model=parts.model,
                                  constraint=parts.constraint)
    record["parts"] = dataclasses.replace(parts, dataset=prepared.parts.dataset,
                                          problem=problem)
    return record


def discard(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)
