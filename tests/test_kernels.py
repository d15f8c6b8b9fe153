"""Kernel templates specialised per binding (``harness.kernels``): a template
is never imported as itself, each binding writes one module into the cache
folder (numba caches it there), and the interpreted binding runs the same
text as plain Python."""

from __future__ import annotations

import importlib
import textwrap
import uuid

import pytest
from numba.core.dispatcher import Dispatcher

from harness import kernels

TEMPLATE = '''
"""A template calling the free name m_f."""
# ruff: noqa: F821
from harness.kernels import guard

guard(globals(), ("njit", "m_f"), __name__)


@njit(cache=True)
def twice(x):
    return 2.0 * m_f(x)
'''

FUNCTIONS = '''
from numba import njit


@njit(cache=True)
def square(x):
    return x * x


@njit(cache=True)
def cube(x):
    return x * x * x
'''


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A fresh package (a unique name: modules are specialised once per process)
    holding the template and the functions, and an empty cache folder."""
    name = f"mmb_kernels_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "src" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "tpl_kernels.py").write_text(textwrap.dedent(TEMPLATE))
    (folder / "functions.py").write_text(textwrap.dedent(FUNCTIONS))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.setenv("MINIMAX_BENCH_CACHE_DIR", str(tmp_path / "cache"))
    importlib.invalidate_caches()
    return name


def test_a_template_imported_as_itself_says_how_to_build_it(package):
    with pytest.raises(ImportError, match=r"kernel template .*'m_f'.*specialise"):
        importlib.import_module(f"{package}.tpl_kernels")


def test_each_binding_is_one_generated_module(package, tmp_path):
    template = f"{package}.tpl_kernels"
    squared = kernels.specialise(template, {"m_f": f"{package}.functions:square"})
    cubed = kernels.specialise(template, {"m_f": f"{package}.functions:cube"})
    assert isinstance(squared.twice, Dispatcher)
    assert squared.twice(3.0) == 18.0 and cubed.twice(3.0) == 54.0
    assert kernels.specialise(template, {"m_f": f"{package}.functions:square"}) is squared
    files = sorted(p.name for p in (tmp_path / "cache").glob("mmb_tpl_kernels_*.py"))
    assert len(files) == 2  # one file per binding, named by the sources' digest
    assert squared.__file__.endswith(files[0]) or squared.__file__.endswith(files[1])
    text = (tmp_path / "cache" / files[0]).read_text()
    assert "import square as m_f" in text or "import cube as m_f" in text
    assert "from numba import njit as njit" in text and "def twice(x):" in text


def test_the_interpreted_binding_runs_the_same_text_as_python(package):
    module = kernels.specialise(f"{package}.tpl_kernels",
                                {"m_f": f"{package}.functions:square"},
                                njit=kernels.INTERPRETED)
    assert not isinstance(module.twice, Dispatcher) and module.twice(3.0) == 18.0
    assert kernels.interpreted(len) is len
    assert kernels.interpreted(cache=True, error_model="numpy")(len) is len


@pytest.mark.parametrize("ref", ["no_colon", "a.b:", ":f", "a-b:f", "a:f g"])
def test_a_malformed_binding_is_refused(package, ref):
    with pytest.raises(ValueError, match="kernel binding"):
        kernels.specialise(f"{package}.tpl_kernels", {"m_f": ref})
