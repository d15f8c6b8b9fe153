"""MLflow's UI, in headless Chromium, on a real sweep: the URL the sweep prints
opens a chart of every run with log axes and full names, its table names
every run in full, the screenshot is taken (``tools/check_mlflow_ui.py``); and
each check fails on a page that is wrong. Skipped without ``chromium``."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

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
    """A fresh sweep's store served by ``mlflow ui``, and one browser on it."""
    db, printed = tool.make_sweep(tmp_path_factory.mktemp("sweep"))
    uri = f"sqlite:///{db}"
    sweep = tool.find_sweep(uri)
    printed_url = tool.printed_view(printed)
    with tool.mlflow_ui(db) as base, tool.Browser() as browser:
        yield SimpleNamespace(
            base=base, sweep=sweep, uri=uri, printed=printed, browser=browser,
            url=base + printed_url[len(tool.PRINTED_UI):],
            metrics=tool.view_metrics(uri, sweep, printed_url))


def test_the_sweep_has_descriptive_run_names(ui):
    assert sorted(ui.sweep.children.values()) == [
        "exp4mp s0 k20 boston", "exp4mp s1 k20 boston",
        "ru_sgd s0 k20 boston", "ru_sgd s1 k20 boston"]
    assert ui.sweep.parent_name.startswith("sweep p_player=exp4mp,ru_sgd seed=0,1")


def test_the_sweep_prints_the_url_of_its_view(tool, ui):
    assert "  open it with:  mlflow ui --backend-store-uri sqlite:///mlflow.db  then" \
        in ui.printed.splitlines()
    assert tool.printed_view(ui.printed).startswith(
        f"http://127.0.0.1:5000/#/experiments/{ui.sweep.experiment_id}/runs?viewStateShareKey=")
    assert ui.metrics == ["dual_gap", "suboptimality"]


def test_default_view_shows_the_sweep(tool, ui):
    check = tool.check_default_view(ui.browser, ui.base, ui.sweep)
    assert check.ok, check.line()


def test_the_view_is_one_chart_of_every_run_with_log_axes(tool, ui):
    check = tool.check_view_chart(ui.browser, ui.url, ui.sweep, ui.metrics)
    assert check.ok, check.line()
    assert "x and y axes log" in check.detail and "(8 entries)" in check.detail


def test_a_chart_with_a_linear_x_axis_fails_the_check(tool, ui):
    from mlflow.tracking import MlflowClient

    from plugins.tracking import mlflow_view

    state = mlflow_view.view_state(mlflow_view.sweep_filter(ui.sweep.parent_id), ui.metrics,
                                   ui.metrics, 27)
    state["compareRunCharts"][0]["xAxisScaleType"] = "linear"
    MlflowClient(ui.uri).set_experiment_tag(
        ui.sweep.experiment_id, f"{mlflow_view.SHARED_VIEW_TAG}linear-x", json.dumps(state))
    url = mlflow_view.view_url(ui.base, ui.sweep.experiment_id, "linear-x")
    check = tool.check_view_chart(ui.browser, url, ui.sweep, ui.metrics)
    assert not check.ok and check.detail == "x-axis linear", check.line()


def test_the_view_as_a_table_names_every_run_in_full(tool, ui):
    check = tool.check_view_table(ui.browser, ui.url, ui.sweep, ui.metrics)
    assert check.ok, check.line()


def test_names_cut_by_their_column_fail_the_table_check(tool, ui):
    # the view with a name column of 80 pixels: "exp4mp s…"
    from mlflow.tracking import MlflowClient

    from plugins.tracking import mlflow_view

    state = mlflow_view.view_state(mlflow_view.sweep_filter(ui.sweep.parent_id), ui.metrics,
                                   ui.metrics, 20)
    state["columnWidths"]["attributes.`Run Name`"] = 80
    MlflowClient(ui.uri).set_experiment_tag(
        ui.sweep.experiment_id, f"{mlflow_view.SHARED_VIEW_TAG}narrow", json.dumps(state))
    url = mlflow_view.view_url(ui.base, ui.sweep.experiment_id, "narrow")
    check = tool.check_view_table(ui.browser, url, ui.sweep, ui.metrics)
    assert not check.ok, check.line()
    assert all(name in check.detail for name in ui.sweep.children.values()), check.line()


def test_a_name_not_in_the_table_fails_the_check(tool, ui):
    run_id = next(iter(ui.sweep.children))
    other = f"run-{uuid.uuid4().hex[:8]}"
    renamed = dataclasses.replace(ui.sweep, children={**ui.sweep.children, run_id: other})
    check = tool.check_view_table(ui.browser, ui.url, renamed, ui.metrics)
    assert not check.ok and other in check.detail, check.line()


def test_screenshot_of_the_view(tool, ui, tmp_path):
    path = tmp_path / "view.png"
    check = tool.take_screenshot(ui.browser, ui.url, ui.sweep, ui.metrics, path)
    assert check.ok, check.line()
    assert tool.png_size(path) == tool.WINDOW
