"""The run as plugins see it: ``context.parts`` (read-only, read-through), the
game's checkpoint timing metrics, the ``summary_lines`` hook, and a core that
knows no plugin."""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness
from harness import cli
from harness.context import RunView
from harness.game import TIMING_METRICS
from plugins.metrics import reference
from plugins.tracking import mlflow_runs, mlflow_sweeps

from conftest import StopAt

REPO = Path(harness.__file__).resolve().parents[1]


def _registry(*plugins) -> harness.Registry:
    return harness.Registry(harness.make_plugin_manager(plugins, load_entrypoints=False))


class Watcher:
    """Records what ``context.parts`` shows at run start and at each checkpoint."""

    def __init__(self) -> None:
        self.at_start: dict = {}
        self.at_checkpoints: list[dict] = []

    @harness.hookimpl
    def on_run_start(self, context):
        run = context.parts
        self.view = run
        self.at_start = {"p_player": run.p_player, "rounds": run.rounds,
                         "data_points": run.data_points, "resumed_from": run.resumed_from}

    @harness.hookimpl
    def on_checkpoint(self, context, step, metrics):
        run = context.parts
        self.at_checkpoints.append({"step": step, "rounds": run.rounds,
                                    "data_points": run.data_points,
                                    "wall_time_s": run.wall_time_s, "metrics": dict(metrics)})


# ---------------------------------------------------------------- the view


def test_the_view_is_read_only(tiny_cfg):
    prep = harness.prepare(tiny_cfg)
    run = prep.context.parts
    assert isinstance(run, RunView)
    for name in ("dataset", "model", "constraint", "p_player", "w_player", "names", "rounds",
                 "data_points", "horizon", "checkpoints", "wall_time_s", "resumed_from",
                 "_source", "anything"):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(run, name, None)
    with pytest.raises(AttributeError, match="read-only"):
        del run.dataset
    with pytest.raises(AttributeError):
        prep.context.parts = run  # type: ignore[misc]
    with pytest.raises(TypeError):
        run.names["model"] = "other"  # type: ignore[index]
    assert isinstance(run.checkpoints, tuple)
    assert run.checkpoints == tuple(int(r) for r in prep.checkpoints)
    assert run.checkpoints[-1] == run.horizon == prep.horizon


def test_the_view_shows_the_game_before_during_and_after_play(tiny_cfg):
    watcher = Watcher()
    prep = harness.prepare(tiny_cfg, _registry(watcher))
    run = prep.context.parts
    assert run.p_player is prep.parts.p_player and run.rounds == run.data_points == 0
    assert dict(run.names) == {"dataset": "breast_cancer", "constraint": "kset",
                               "p_player": "exp4mp", "w_player": "ogd", "model": "logistic_cel",
                               "solver": "game"}
    assert run.solver is None and run.problem.radius == prep.parts.w_player.radius
    metrics = harness.play(prep)
    assert watcher.view is run  # one view per context
    assert watcher.at_start == {"p_player": prep.parts.p_player, "rounds": 0,
                                "data_points": 0, "resumed_from": None}
    for seen in watcher.at_checkpoints:
        assert seen["step"] == seen["data_points"] == seen["metrics"]["data_points"]
        assert seen["rounds"] == seen["metrics"]["rounds"]
        assert seen["wall_time_s"] == seen["metrics"]["wall_time_s"]
    assert [s["rounds"] for s in watcher.at_checkpoints] == list(run.checkpoints)
    assert run.rounds == run.horizon and run.data_points == metrics["data_points"]


def test_the_view_reads_through_to_the_resumed_components(tiny_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(harness.api, "SAVE_EVERY_S", 0.0)  # a save at each checkpoint
    cfg = dict(tiny_cfg, resume=True, state_dir=str(tmp_path / "state"))
    stop = StopAt(4)
    first = harness.prepare(cfg, _registry(stop))
    with pytest.raises(KeyboardInterrupt):
        harness.play(first)
    saved_at = first.context.parts.checkpoints[2]  # the state saved before checkpoint 4
    assert first.context.parts.rounds == first.context.parts.checkpoints[3]

    watcher = Watcher()
    again = harness.prepare(cfg, _registry(watcher))
    run = again.context.parts  # taken before the resumed game swaps its components
    built = again.parts.p_player
    assert run.p_player is built and run.resumed_from is None
    metrics = harness.play(again)
    assert run.p_player is again.parts.p_player is not built  # the saved one
    assert run.w_player is again.parts.w_player and run.dataset is again.parts.dataset
    assert watcher.at_start["p_player"] is run.p_player
    assert watcher.at_start["rounds"] == watcher.at_start["resumed_from"] == saved_at
    assert run.resumed_from == saved_at
    assert run.rounds == run.horizon and run.data_points == metrics["data_points"]


# ---------------------------------------------------------------- timing metrics


class SlowMetric:
    """A plugin metric that takes at least 20 ms per checkpoint."""

    @harness.hookimpl
    def checkpoint_metrics(self, context, w_bar, losses):
        time.sleep(0.02)
        return {"slow": 1.0}


def test_checkpoint_time_is_logged_by_the_game(tiny_cfg):
    watcher = Watcher()
    prep = harness.prepare(tiny_cfg, _registry(watcher, SlowMetric()))
    final = harness.play(prep)
    logged = [seen["metrics"] for seen in watcher.at_checkpoints]
    assert len(logged) == len(prep.checkpoints)
    total = 0.0
    for metrics in logged:
        assert set(TIMING_METRICS) <= set(metrics)
        assert metrics["checkpoint_time_s"] >= 0.02  # the plugins' metrics count in it
        total += metrics["checkpoint_time_s"]
        assert metrics["checkpoint_time_total_s"] == pytest.approx(total, rel=1e-12)
    # wall time times the rounds alone: the 4,000 rounds of this game take far
    # less than one checkpoint's 20 ms, which the clock leaves out
    for before, after in zip(logged, logged[1:], strict=False):
        assert before["wall_time_s"] <= after["wall_time_s"]
    assert logged[-1]["wall_time_s"] < 0.02 * (len(logged) - 1)
    assert final == logged[-1]


# ---------------------------------------------------------------- the summary hook


class Reporter:
    @harness.hookimpl
    def summary_lines(self, context, status, metrics):
        return [("acme status", f"{status} after {context.parts.rounds:,} rounds, "
                                f"gap {metrics.get('dual_gap', float('nan')):.3g}"),
                ("", "acme: a line of its own")]


class Silent:
    @harness.hookimpl
    def summary_lines(self, context, status, metrics):
        return None


def test_plugin_summary_lines_appear_after_a_finished_run(tiny_cfg):
    prep = harness.prepare(tiny_cfg, _registry(Reporter(), Silent()))
    metrics = harness.play(prep)
    lines = cli.summary(prep, metrics).splitlines()
    assert lines[0].startswith("minimax-bench: exp4mp vs ogd on breast_cancer (kset, k=5")
    assert lines[1].startswith("  certified dual gap")
    assert lines[-3].startswith("  data points processed")
    assert lines[-2] == (f"  {'acme status':<36} FINISHED after {prep.horizon:,} rounds, "
                         f"gap {metrics['dual_gap']:.3g}")
    assert lines[-1] == "  acme: a line of its own"


def test_plugin_summary_lines_appear_after_an_interrupt(tiny_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(harness.api, "SAVE_EVERY_S", 0.0)  # a save at each checkpoint
    cfg = dict(tiny_cfg, state_dir=str(tmp_path / "state"))
    prep = harness.prepare(cfg, _registry(Reporter(), StopAt(3)))
    with pytest.raises(KeyboardInterrupt):
        harness.play(prep)
    text = cli.interrupted(prep)
    done = prep.context.parts.checkpoints[2]
    saved = prep.context.parts.checkpoints[1]  # (StopAt raises before checkpoint 3's save)
    assert text.startswith(f"minimax-bench: interrupted at round {done:,}; its state at "
                           f"round {saved:,} (its last save, at a checkpoint) is saved")
    gap = prep.game.state.last_metrics["dual_gap"]
    assert text.endswith(f"; acme status KILLED after {done:,} rounds, gap {gap:.3g}"
                         "; acme: a line of its own")


def test_reference_lines_follow_the_core_rows(tiny_cfg, tmp_path):
    cfg = dict(tiny_cfg, reference={"exact": "true", "cache_dir": str(tmp_path)})
    prep = harness.prepare(cfg)
    metrics = harness.play(prep)
    lines = cli.summary(prep, metrics).splitlines()
    core = lines.index(next(line for line in lines if "data points processed" in line))
    if "kernels compiled or loaded" in lines[core + 1]:  # the core's last row, on a first use
        core += 1
    params = prep.context.params
    digits = reference.certified_digits(prep.context.state["reference"]["optimum"])
    # the reference plugin's rows come after every core row, in this order
    assert lines[core + 1:core + 4] == [
        f"  {'suboptimality (objective - OPT)':<36} at most {metrics['suboptimality']:.6g}",
        f"  {'exact optimum OPT':<36} {params['opt']:.{digits}g} "
        f"({params['opt_solver']}, {params['opt_status']}), certified to "
        f"{params['opt'] - params['opt_lower']:.2g}",
        f"  {'trivial solution w = 0':<36} {params['trivial_objective']:.6g} "
        f"(relative suboptimality {params['trivial_relative_suboptimality']:.3g})"]
    assert not any("OPT" in line for line in cli.interrupted(prep).split("; "))


def test_the_tracker_says_where_the_run_is_and_that_it_was_killed():
    handle = {"run_id": "abc123", "experiment_id": "7", "uri": "sqlite:///x/mlflow.db"}
    context = SimpleNamespace(state={"mlflow": handle})
    local = mlflow_runs.summary_lines(context, "FINISHED", {})
    assert local == [
        ("MLflow run", "abc123 (experiment id 7) in sqlite:///x/mlflow.db"),
        ("", "open it with:  mlflow ui --backend-store-uri sqlite:///x/mlflow.db  then "
             "http://127.0.0.1:5000/#/experiments/7/runs/abc123")]
    handle["uri"] = "http://mlflow.example:5000/"
    assert mlflow_runs.summary_lines(context, "FINISHED", {})[1] == (
        "", "open it at:    http://mlflow.example:5000/#/experiments/7/runs/abc123")
    assert mlflow_runs.summary_lines(context, "KILLED", {}) == [
        ("MLflow run", "abc123 is marked KILLED with the checkpoints logged so far")]
    assert mlflow_runs.summary_lines(SimpleNamespace(state={}), "FINISHED", {}) is None


def test_sweep_record_is_empty_outside_a_multirun():
    assert mlflow_sweeps.sweep_record() == {}
    assert not hasattr(cli, "sweep_record")


# ---------------------------------------------------------------- the core knows no plugin


GAME_KEY = re.compile(r"""state\s*\[\s*["']game["']\s*\]|state\.get\(\s*["']game["']""")


def test_nothing_reads_the_game_from_the_plugins_scratch_space():
    # the one place that names the old key is the error telling a plugin where it went
    told = {REPO / "docs" / "plugins.md", REPO / "harness" / "context.py"}
    found = []
    for folder in ("harness", "plugins", "tools", "tests", "docs"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in (".py", ".md") or path in told:
                continue
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if GAME_KEY.search(line):
                    found.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_core_imports_no_plugin_module():
    found = []
    for path in sorted((REPO / "harness").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name == "plugins" or name.startswith("plugins."):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert not found, "\n".join(found)


#: a plugin module's dotted name (``plugins.tracking.mlflow_sweeps``), not ``docs/plugins.md``
PLUGIN_NAME = re.compile(r"(?<![\w/])plugins\.(?!md\b)\w")


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def test_the_core_names_no_plugin_outside_docstrings_and_comments():
    # no plugin module by name in the core's code (strings, attributes; the
    # built-ins are listed in the package metadata); comments are not in the
    # tree, docstrings are skipped
    found = []
    for path in sorted((REPO / "harness").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            text = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.Attribute):
                text = ast.unparse(node)
            if text is not None and id(node) not in skip and PLUGIN_NAME.search(text):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {text[:80]!r}")
    assert not found, "\n".join(found)


def test_the_scan_of_the_core_sees_a_plugin_name_in_code():
    # the scan above would catch a name in a string or an attribute chain
    code = '''"""Docstring naming plugins.tracking.mlflow_sweeps is fine."""
BUILTINS = ("plugins.sets.kset",)
# a comment naming plugins.tracking.mlflow_sweeps is fine
HOOK = "plugins.tracking.mlflow_worker:prestart"
see = "docs/plugins.md"
'''
    tree = ast.parse(code)
    skip = _docstrings(tree)
    named = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
             and isinstance(node.value, str) and id(node) not in skip
             and PLUGIN_NAME.search(node.value)]
    assert sorted(named) == ["plugins.sets.kset", "plugins.tracking.mlflow_worker:prestart"]


def test_a_plugin_asking_for_the_old_game_key_is_told_where_it_went():
    context, old = harness.RunContext(config={}), "ga" + "me"  # the grep above stays clean
    with pytest.raises(KeyError, match=r"removed in minimax-bench 0\.2: .*context\.parts"):
        context.state[old]
    with pytest.raises(KeyError):
        context.state["anything else"]
    assert context.state.get(old) is None
