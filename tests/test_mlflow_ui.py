"""MLflow's UI, in headless Chromium, on a real sweep: the runs table names
every run, the chart view has the dual gap, the screenshot is taken
(``tools/check_mlflow_ui.py``). Skipped without ``chromium``."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TOOL = Path(__file__).resolve().parent.parent / "tools" / "check_mlflow_ui.py"


def _load_tool():
    spec = importlib.util.spec_from_file_location("check_mlflow_ui", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tool():
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return _load_tool()


@pytest.fixture(scope="module")
def ui(tool, tmp_path_factory):
    """A fresh sweep's store served by ``mlflow ui``: (address, sweep, tracking URI)."""
    db = tool.make_sweep(tmp_path_factory.mktemp("sweep"))
    uri = f"sqlite:///{db}"
    with tool.mlflow_ui(db) as base:
        yield base, tool.find_sweep(uri), uri


def test_the_sweep_has_descriptive_run_names(ui):
    _, sweep, _ = ui
    assert sorted(sweep.children.values()) == [
        "exp4mp s0 k20 breast_cancer", "exp4mp s1 k20 breast_cancer",
        "ru_sgd s0 k20 breast_cancer", "ru_sgd s1 k20 breast_cancer"]
    assert sweep.parent_name.startswith("sweep p_player=exp4mp,ru_sgd seed=0,1")


def test_default_view_shows_the_sweep(tool, ui):
    base, sweep, _ = ui
    check = tool.check_default_view(base, sweep)
    assert check.ok, check.line()


def test_runs_table_names_every_run(tool, ui):
    base, sweep, _ = ui
    check = tool.check_run_names(base, sweep)
    assert check.ok, check.line()


def test_a_name_not_in_the_table_fails_the_check(tool, ui):
    base, sweep, _ = ui
    run_id = next(iter(sweep.children))
    other = f"run-{uuid.uuid4().hex[:8]}"
    renamed = dataclasses.replace(sweep, children={**sweep.children, run_id: other})
    check = tool.check_run_names(base, renamed)
    assert not check.ok and other in check.detail, check.line()


def test_chart_view_has_the_dual_gap(tool, ui):
    base, sweep, _ = ui
    check = tool.check_dual_gap_chart(base, sweep)
    assert check.ok, check.line()


def test_screenshot_of_the_runs_table(tool, ui, tmp_path):
    base, sweep, uri = ui
    path = tmp_path / "runs.png"
    check = tool.take_screenshot(base, sweep, uri, path)
    assert check.ok, check.line()
    assert tool.png_size(path) == tool.WINDOW
