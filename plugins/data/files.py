"""Data sets read from disk, larger than memory if need be.

* ``file``: a ``.npy`` array, memory-mapped (a round reads only the k rows it
  asks for), or a Parquet file read through pyarrow, row group by row group
  on demand (the extra ``data``); the target is a named column.
* ``synthetic``: n x d rows written to disk in chunks (never all in memory),
  with a given fraction of hard rows (flipped labels or targets), then opened
  as a ``file``; written once per parameter set and reused.

Features must lie in [0, 1] (the models' loss bounds assume it). With
``scale="minmax"`` (default) each column is scaled by its minimum and maximum,
found in one streamed pass when the data set is opened, and rows are scaled
as they are read; with ``scale="none"`` the same pass checks that the file's
features already lie in [0, 1] and the rows are used as stored.

Both take ``split`` (``plugins.data.split``): the rows of scikit-learn's
``train_test_split`` (``n`` row indices held in memory), read through the
split's row indices; ``minmax`` is then fitted on the training rows (one
streamed pass over them), and held-out features may fall outside [0, 1].
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import harness
from harness import ConfigError, Param
from harness.state import cache_root
from harness.stream import chunk_rows, row_slices
from plugins.data.split import PARAMS as SPLIT_PARAMS
from plugins.data.split import Rows, Splittable, split_rows

_TASKS = ("classification", "regression")
#: the synthetic generator writes (and draws) this many bytes of rows at a time
GEN_CHUNK_BYTES = 1 << 25
_MODELS = {"classification": "logistic_cel", "regression": "linear_mse"}


class ColumnRows:
    """Rows of a 2-D array ``source`` (e.g. a memmap), restricted to
    ``columns`` and mapped to ``(x - lo) / span``, computed on each read:
    ``X[rows]`` reads only those rows, ``X[a:b]`` one slice. With ``rows``
    (indices into ``source``, a split's), row ``i`` is ``source[rows[i]]``."""

    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(self, source: Any, columns: np.ndarray | None = None,
                 lo: np.ndarray | None = None, span: np.ndarray | None = None,
                 rows: np.ndarray | None = None) -> None:
        self.source = source
        self.columns = columns
        self.lo = lo
        self.inv_span = None if span is None else 1.0 / span
        self.rows = rows
        d = source.shape[1] if columns is None else columns.size
        self.shape = (source.shape[0] if rows is None else rows.size, d)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        if self.rows is not None:
            key = self.rows[key]
        block = np.asarray(self.source[key], dtype=np.float64)
        if self.columns is not None:
            block = block[..., self.columns]
        if self.lo is not None:
            block = (block - self.lo) * self.inv_span
        return block

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)


class ParquetRows:
    """The feature columns of a Parquet file as rows: ``X[rows]`` reads the row
    groups holding them (kept in a least-recently-used cache of at most
    ``cache_bytes``), ``X[a:b]`` reads the groups it spans."""

    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(self, path: Path, columns: list[str], cache_bytes: int) -> None:
        import pyarrow.parquet as pq

        self.file = pq.ParquetFile(path)
        self.columns = columns
        meta = self.file.metadata
        sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        self.starts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        self.shape = (int(meta.num_rows), len(columns))
        self.cache_bytes = cache_bytes
        self.cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self.group_reads = 0

    def __len__(self) -> int:
        return self.shape[0]

    def group(self, g: int) -> np.ndarray:
        block = self.cache.get(g)
        if block is not None:
            self.cache.move_to_end(g)
            return block
        table = self.file.read_row_group(g, columns=self.columns)
        block = np.column_stack([np.asarray(c.to_numpy(), dtype=np.float64)
                                 for c in table.columns]) if self.columns else np.empty(
            (table.num_rows, 0))
        self.group_reads += 1
        if block.nbytes <= self.cache_bytes:
            self.cache[g] = block
            while sum(b.nbytes for b in self.cache.values()) > self.cache_bytes:
                self.cache.popitem(last=False)
        return block

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                return self[np.arange(start, stop, step)]
            first = int(np.searchsorted(self.starts, start, side="right")) - 1
            parts = []
            for g in range(max(first, 0), self.starts.size - 1):
                lo, hi = int(self.starts[g]), int(self.starts[g + 1])
                if lo >= stop:
                    break
                parts.append(self.group(g)[max(start, lo) - lo:min(stop, hi) - lo])
            return np.concatenate(parts) if parts else np.empty((0, self.shape[1]))
        rows = np.asarray(key)
        if rows.ndim == 0:
            return self[rows.reshape(1)][0]
        rows = np.where(rows < 0, rows + self.shape[0], rows)
        groups = np.searchsorted(self.starts, rows, side="right") - 1
        out = np.empty((rows.size, self.shape[1]))
        for g in np.unique(groups):
            at = groups == g
            out[at] = self.group(int(g))[rows[at] - self.starts[g]]
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)


def column_ranges(X: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-column minimum and maximum of ``X`` in one pass over row chunks."""
    n, d = X.shape
    lo, hi = np.full(d, np.inf), np.full(d, -np.inf)
    for s in row_slices(n, d):
        block = np.asarray(X[s])
        np.minimum(lo, block.min(axis=0), out=lo)
        np.maximum(hi, block.max(axis=0), out=hi)
    return lo, hi


def _labels(raw: np.ndarray, task: str, scale: str,
            rows: Rows) -> tuple[np.ndarray, int, list[str]]:
    """Targets of the kept ``rows`` as the models take them: class codes 0..C-1
    over every row's classes (classification) or floats, min-max scaled to
    [0, 1] as fitted on ``rows`` if the features are (regression)."""
    if task == "classification":
        classes, codes = np.unique(raw, return_inverse=True)
        return (rows.kept(codes).astype(np.int64), int(classes.size),
                [str(c) for c in classes[:20]])
    y = np.asarray(raw, dtype=np.float64)
    ref = rows.fitted(y)
    ref = y if ref is None else ref
    y = rows.kept(y)
    if scale == "minmax" and ref.size:
        lo, hi = float(np.min(ref)), float(np.max(ref))
        y = (y - lo) / (hi - lo if hi > lo else 1.0)
    return y, 0, []


class FileDataset(Splittable):
    """A data set in a ``.npy`` or Parquet file (see the module docstring).

    ``.npy``: a 2-D numeric array, memory-mapped. ``target`` is the index of
    the target column in it (``"-1"``: the last) or the path of a 1-D ``.npy``
    file of n targets (relative to the array's folder). Parquet: ``target`` is
    a column name; every other column is a feature, in file order; targets are
    read whole (one column), features by row group.
    """

    name: ClassVar[str] = "file"
    params: ClassVar[dict[str, Param]] = {
        "path": Param(str, doc="a .npy array or a Parquet file"),
        "target": Param(str, default="target",
                        doc="Parquet: the target column's name; .npy: its column index "
                            "(e.g. -1) or a .npy file of targets"),
        "task": Param(str, default="classification", choices=_TASKS,
                      doc="classification (targets are class labels) or regression"),
        "scale": Param(str, default="minmax", choices=("minmax", "none"),
                       doc="minmax: scale each feature to [0, 1] (one streamed pass); "
                           "none: features must already lie in [0, 1] (checked)"),
        "cache_mb": Param(int, default=256, low=0,
                          doc="Parquet: memory for row groups kept after a read"),
        **SPLIT_PARAMS,
    }

    def __init__(self, path: str, target: str = "target", task: str = "classification",
                 scale: str = "minmax", cache_mb: int = 256, split: str = "all",
                 test_size: float = 0.2, split_seed: int = 42) -> None:
        self.target, self.scale, self.cache_mb = target, scale, cache_mb
        self.split, self.test_size, self.split_seed = split, test_size, split_seed
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise ConfigError(f"The 'path' parameter of {self.name} must name an existing "
                              f".npy or Parquet file. Got {path!r} instead.")
        suffix = self.path.suffix.lower()
        if suffix == ".npy":
            source, raw = self._open_npy(target)
        elif suffix in (".parquet", ".pq"):
            source, raw = self._open_parquet(target, cache_mb << 20)
        else:
            raise ConfigError(f"The 'path' parameter of {self.name} must name a .npy or "
                              f".parquet file. Got {path!r} instead.")
        self.task = task
        self.default_model = _MODELS[task]
        rows = self.rows_ = split_rows(self.name, source.shape[0], split, test_size, split_seed)
        self.y, self.n_classes, classes = _labels(raw, task, scale, rows)
        self.X = self._scaled(source, scale, rows)
        stat = self.path.stat()
        self.provenance = {"source": str(self.path), "format": suffix.lstrip("."),
                           "bytes": str(stat.st_size), "modified": str(int(stat.st_mtime)),
                           "target": target, "scale": scale}
        if classes:
            self.provenance["classes"] = ",".join(classes)
        if split != "all":
            self.provenance["split"] = rows.describe(test_size, split_seed)

    @classmethod
    def contract_params(cls, n: int) -> dict[str, Any]:
        """A small .npy file (n x 3 features, a two-class target column) in a
        temporary folder removed at exit, for ``harness.contract``."""
        rng = np.random.default_rng(0)
        X = rng.normal(0.0, 2.0, (n, 3))
        y = np.arange(n) % 2
        path = _temporary_folder() / "data.npy"
        np.save(path, np.column_stack((X, y)))
        return {"path": str(path), "target": "-1"}

    def _open_npy(self, target: str) -> tuple[Any, np.ndarray]:
        array = np.load(self.path, mmap_mode="r")
        if array.ndim != 2:
            raise ConfigError(f"The file {self.path} must hold a 2-D array. "
                              f"Got shape {array.shape} instead.")
        if target.lower().endswith(".npy"):
            y_path = Path(target).expanduser()
            y_path = y_path if y_path.is_absolute() else self.path.parent / y_path
            if not y_path.is_file():
                raise ConfigError(f"The 'target' parameter of {self.name} names the file "
                                  f"{str(y_path)!r}, which does not exist.")
            y = np.load(y_path)
            if y.shape != (array.shape[0],):
                raise ConfigError(f"The targets in {y_path} must have shape "
                                  f"({array.shape[0]},). Got {y.shape} instead.")
            return array, y
        try:
            j = int(target)
        except ValueError:
            raise ConfigError(
                f"The 'target' parameter of {self.name} must be, for a .npy file, a column "
                f"index (e.g. -1) or the path of a .npy file of targets. Got {target!r} "
                "instead.") from None
        d = array.shape[1]
        if not -d <= j < d or d < 2:
            raise ConfigError(f"The 'target' parameter of {self.name} must be a column index "
                              f"in [-{d}, {d - 1}] of {self.path}. Got {target!r} instead.")
        j %= d
        y = np.array(array[:, j])
        if j == d - 1:
            return array[:, :-1], y
        if j == 0:
            return array[:, 1:], y
        return ColumnRows(array, np.delete(np.arange(d), j)), y

    def _open_parquet(self, target: str, cache_bytes: int) -> tuple[Any, np.ndarray]:
        try:
            import pyarrow.parquet as pq
        except ImportError as err:
            raise ConfigError("Reading Parquet files needs pyarrow: "
                              "pip install 'minimax-bench[data]'.") from err
        names = pq.ParquetFile(self.path).schema_arrow.names
        if target not in names:
            raise ConfigError(f"The 'target' parameter of {self.name} must name a column of "
                              f"{self.path}: one of {names}. Got {target!r} instead.")
        y = pq.read_table(self.path, columns=[target]).column(0).to_numpy()
        features = [c for c in names if c != target]
        return ParquetRows(self.path, features, cache_bytes), y

    def _scaled(self, source: Any, scale: str, rows: Rows) -> Any:
        """The features of the kept ``rows``: checked to lie in [0, 1] (``none``),
        or min-max scaled as fitted on ``rows``."""
        base, columns = ((source.source, source.columns) if isinstance(source, ColumnRows)
                         else (source, None))
        if scale == "none":
            kept = source if rows.keep is None else ColumnRows(base, columns, rows=rows.keep)
            lo, hi = column_ranges(kept)
            bad = np.flatnonzero((lo < 0.0) | (hi > 1.0))
            if bad.size:
                j = int(bad[0])
                raise ConfigError(
                    f"The data set '{self.name}' must have features in [0, 1] with "
                    f"scale=none. Got column {j} in [{lo[j]:.6g}, {hi[j]:.6g}] "
                    f"({bad.size} column(s) outside [0, 1]); use scale=minmax.")
            return kept
        fit = source if rows.fit is None else ColumnRows(base, columns, rows=rows.fit)
        lo, hi = column_ranges(fit)
        span = np.where(hi > lo, hi - lo, 1.0)
        return ColumnRows(base, columns, lo, span, rows.keep)


def _temporary_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="minimax-bench-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def default_cache_dir() -> Path:
    return cache_root() / "synthetic"


def write_synthetic(folder: Path, n: int, d: int, hard: float, seed: int, task: str) -> Path:
    """Write ``X.npy`` (n x d float64 in [0, 1]), ``y.npy`` and ``meta.json`` into
    ``folder`` chunk by chunk (memory: one chunk of rows plus the n targets).

    Rows are uniform on ``[0, 1]^d``; the score is ``s = <x - 1/2, beta>`` for a
    fixed random unit ``beta``. Classification: ``y = 1[s > 0]``; regression:
    ``y = 1/2 + s / (2 smax)`` in [0, 1] with ``smax = ||beta||_1 / 2``. Each row
    is hard with probability ``hard``: its label is flipped (its target becomes
    ``1 - y``), so no model fits it and the top-k loss concentrates there.
    Chunk j's numbers come from ``default_rng([seed, j])``: the file depends on
    (n, d, hard, seed, task) only. Written under a temporary name, then renamed.
    """
    need = 8 * n * (d + 1) + (1 << 20)
    folder.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder.parent).free
    if free < need:
        raise ConfigError(f"The synthetic data set needs {need / 2**30:.2f} GiB in "
                          f"{folder.parent}; {free / 2**30:.2f} GiB are free "
                          "(set dataset.cache_dir).")
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    beta = np.random.default_rng([seed, 2**32 - 1]).standard_normal(d)
    beta /= np.linalg.norm(beta)
    s_max = 0.5 * float(np.abs(beta).sum())
    y = np.empty(n, dtype=np.int64 if task == "classification" else np.float64)
    hard_rows = 0
    with open(tmp / "X.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": np.dtype(np.float64).str, "fortran_order": False, "shape": (n, d)})
        for j, s in enumerate(row_slices(n, d, GEN_CHUNK_BYTES)):
            rng = np.random.default_rng([seed, j])
            X = rng.random((s.stop - s.start, d))
            score = (X - 0.5) @ beta
            flip = rng.random(score.size) < hard
            hard_rows += int(flip.sum())
            if task == "classification":
                y[s] = (score > 0) ^ flip
            else:
                t = 0.5 + score / (2 * s_max)
                y[s] = np.where(flip, 1.0 - t, t)
            f.write(X.tobytes())
    np.save(tmp / "y.npy", y)
    meta = {"n": n, "d": d, "hard": hard, "seed": seed, "task": task, "hard_rows": hard_rows,
            "chunk_rows": chunk_rows(d, GEN_CHUNK_BYTES), "features": "uniform on [0, 1]^d",
            "generator": "plugins/data/files.py write_synthetic"}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    try:
        os.replace(tmp, folder)
    except OSError:  # written meanwhile by another process: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


class SyntheticDataset(FileDataset):
    """n x d synthetic rows on disk with a fraction ``hard`` of hard rows
    (``write_synthetic``), written once under ``cache_dir`` and memory-mapped."""

    name: ClassVar[str] = "synthetic"
    params: ClassVar[dict[str, Param]] = {
        "n": Param(int, default=100_000, low=2, doc="rows"),
        "d": Param(int, default=20, low=1, doc="features"),
        "hard": Param(float, default=0.01, low=0.0, high=0.5,
                      doc="share of hard rows (flipped labels or targets)"),
        "seed": Param(int, default=0, low=0,
                      doc="seed of the generated data (its identity; not the run's seed)"),
        "task": Param(str, default="classification", choices=_TASKS,
                      doc="classification (two classes) or regression (targets in [0, 1])"),
        "cache_dir": Param(str, nullable=True,
                           doc="where the files are kept; None: $XDG_CACHE_HOME/minimax-bench/"
                               "synthetic, else ~/.cache/minimax-bench/synthetic"),
        **SPLIT_PARAMS,
    }

    @classmethod
    def contract_params(cls, n: int) -> dict[str, Any]:
        """n x 3 rows in a temporary folder removed at exit (``harness.contract``)."""
        return {"n": n, "d": 3, "hard": 0.1, "cache_dir": str(_temporary_folder())}

    def __init__(self, n: int = 100_000, d: int = 20, hard: float = 0.01, seed: int = 0,
                 task: str = "classification", cache_dir: str | None = None,
                 split: str = "all", test_size: float = 0.2, split_seed: int = 42) -> None:
        self.n, self.d, self.hard, self.seed, self.cache_dir = n, d, hard, seed, cache_dir
        self.split, self.test_size, self.split_seed = split, test_size, split_seed
        root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        folder = root / f"{task}-n{n}-d{d}-hard{hard:g}-seed{seed}"
        if not (folder / "meta.json").is_file():
            write_synthetic(folder, n, d, hard, seed, task)
        self.path = folder / "X.npy"
        X = np.load(self.path, mmap_mode="r")
        if X.shape != (n, d):
            raise ConfigError(f"The synthetic data in {folder} has shape {X.shape}, "
                              f"expected ({n}, {d}): remove the folder to write it again.")
        rows = self.rows_ = split_rows(self.name, n, split, test_size, split_seed)
        # uniform on [0, 1]^d by construction: no pass over the features, no scaling
        self.X = X if rows.keep is None else ColumnRows(X, rows=rows.keep)
        self.y = rows.kept(np.load(folder / "y.npy"))
        self.n_classes = 2 if task == "classification" else 0
        self.task = task
        self.default_model = _MODELS[task]
        meta = json.loads((folder / "meta.json").read_text())
        self.provenance = {"source": "synthetic, plugins/data/files.py write_synthetic",
                           "folder": str(folder), "hard_rows": str(meta["hard_rows"]),
                           "generator": f"numpy default_rng([seed, chunk]); n={n}, d={d}, "
                                        f"hard={hard}, seed={seed}, task={task}"}
        if split != "all":
            self.provenance["split"] = rows.describe(test_size, split_seed)


@harness.hookimpl
def register_datasets(register):
    register(FileDataset)
    register(SyntheticDataset)
