"""A third party's compiled kernels are recompiled when a module they import changes.

numba keys a cached kernel on its own file only; a kernel that inlined a
function of another module keeps the old code after that module changes
(``harness.engine.refresh_numba_caches``, ``source_digest``). The package here
lives outside the source tree, as an installed third party's would: a w-player
whose kernel module imports a shared helper module of its own package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from harness import engine

SHARED = '''
"""The package's shared numerics."""
from numba import njit

#: the fraction of the gradient step taken
SCALE = {scale!r}


@njit(cache=True)
def scaled(g):
    return SCALE * g
'''

KERNELS = '''
"""A projected-gradient w-player whose step goes through the shared helper."""
import math
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param
from {package}.shared import scaled


class State(NamedTuple):
    w: np.ndarray
    w_sum: np.ndarray
    rounds: np.ndarray
    lr: float
    radius: float


class Scaled:
    name: ClassVar[str] = "scaled_ogd"
    params: ClassVar[dict[str, Param]] = {{
        "radius": Param(float, default=1.0, low=0.0, low_open=True, doc="radius B of W")}}

    def __init__(self, radius=1.0):
        self.radius = radius

    def setup(self, dim, horizon, grad_bound, lr_hint=None):
        self.state_ = State(np.zeros(dim), np.zeros(dim), np.zeros(1, dtype=np.int64),
                            self.radius * math.sqrt(2.0 / horizon), float(self.radius))
        return {{"lr": self.state_.lr}}

    @property
    def w(self):
        return self.state_.w

    @property
    def w_bar(self):
        return self.state_.w_sum / max(int(self.state_.rounds[0]), 1)

    def step(self, grad):
        scaled_step(self.state_, np.ascontiguousarray(grad, dtype=np.float64))

    def compiled(self):
        return Compiled("{package}.kernels:scaled", self.state_)

    def regret_bound(self, rounds):
        return None


@njit(cache=True)
def scaled_iterate(ws):
    return ws.w


@njit(cache=True)
def scaled_step(ws, grad):
    w = ws.w
    for i in range(w.size):
        ws.w_sum[i] += w[i]
        w[i] -= ws.lr * scaled(grad[i])
    ws.rounds[0] += 1
    norm = math.sqrt(np.sum(w * w))
    if norm > ws.radius:
        w *= ws.radius / norm


@harness.hookimpl
def register_w_players(register):
    register(Scaled)
'''

#: one run on the compiled engine in a fresh process: the final objective, the
#: step the Python method takes from w = 0 along a unit gradient, and the path
RUN = '''
import json, sys
import numpy as np
import harness
from harness.config import QUIET
from omegaconf import OmegaConf
import {package}.kernels as plugin

cfg = OmegaConf.to_container(harness.compose(
    [*QUIET, "w_player=scaled_ogd", "constraint.k=5", "budget=4000", "checkpoints=2",
     "engine=compiled"],
    registry=harness.Registry(harness.make_plugin_manager([plugin], load_entrypoints=False))),
    resolve=True)
metrics = harness.run(cfg, plugins=[plugin])
player = plugin.Scaled()
player.setup(3, 2, 1.0)
player.step(np.ones(3))
print(json.dumps({{"objective": metrics["objective"],
                  "step": -player.w[0] / player.state_.lr}}))
'''


def _write(root, package: str, scale: float) -> None:
    folder = root / package
    folder.mkdir(exist_ok=True)
    (folder / "__init__.py").write_text('"""A third party\'s plugin package."""\n')
    (folder / "shared.py").write_text(textwrap.dedent(SHARED.format(scale=scale)))
    (folder / "kernels.py").write_text(textwrap.dedent(KERNELS.format(package=package)))


def _run(root, package: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *sys.path]),
           "MINIMAX_BENCH_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run([sys.executable, "-c", RUN.format(package=package)], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_editing_a_shared_helper_of_a_third_party_kernel_recompiles_it(tmp_path):
    # a fresh process each run, numba caches in the package's own __pycache__:
    # the second run reads the kernels' cache of the first, the helper changed
    package = f"mmb_third_{uuid.uuid4().hex[:8]}"
    _write(tmp_path, package, 0.5)
    first = _run(tmp_path, package)
    cached = sorted(p.name for p in (tmp_path / package / "__pycache__").glob("kernels.*.nbi"))
    assert cached, "the kernels were not cached by numba"
    assert first["step"] == pytest.approx(0.5, rel=1e-12)
    again = _run(tmp_path, package)  # unchanged: the same numbers (seed 0)
    assert again["objective"] == first["objective"]

    (tmp_path / package / "shared.py").write_text(
        textwrap.dedent(SHARED.format(scale=0.05)))
    changed = _run(tmp_path, package)
    # the Python method and the compiled driver both call the new helper: the
    # step is a tenth, and with it the path and the final objective change
    assert changed["step"] == pytest.approx(0.05, rel=1e-12)
    assert abs(changed["objective"] - first["objective"]) > 1e-6


def test_the_digest_covers_a_kernel_modules_own_imports_and_only_those(tmp_path, monkeypatch):
    package = f"mmb_digest_{uuid.uuid4().hex[:8]}"
    _write(tmp_path, package, 0.5)
    (tmp_path / package / "unused.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"{package}.kernels"
    assert engine.kernel_modules([name]) == [f"{package}.shared", name]
    before = engine.source_digest("driver", [name])
    (tmp_path / package / "unused.py").write_text("VALUE = 2\n")
    assert engine.source_digest("driver", [name]) == before
    (tmp_path / package / "shared.py").write_text(textwrap.dedent(SHARED.format(scale=0.25)))
    assert engine.source_digest("driver", [name]) != before
    # kernels compiled in this process from their sources are current: a first
    # refresh only writes the stamp beside numba's cache, nothing recompiles
    import importlib

    import numpy as np

    module = importlib.import_module(name)
    player = module.Scaled()
    player.setup(2, 2, 1.0)
    player.step(np.ones(2))
    assert sum(module.scaled_step.stats.cache_misses.values()) == 1
    assert engine.refresh_numba_caches([name]) == []
    assert (tmp_path / package / "__pycache__" / f"kernels{engine.STAMP_SUFFIX}").is_file()
    assert engine.refresh_numba_caches([name]) == []
    # the built-ins: a kernel module's digest covers the plugins.lib modules it imports
    found = engine.kernel_modules(["plugins.models.glm"])
    assert "plugins.lib.vecmath" in found and found[-1] == "plugins.models.glm"
