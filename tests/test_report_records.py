"""The report reads runs through the trackers' hooks (``read_runs``,
``save_report``; ``harness.runs.RunRecord``) and knows no tracker: a tracker
written here, with the MLflow tracker's hooks blocked, serves it in full."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import harness
from harness import report, tune
from harness.runs import RunRecord

STEPS = np.array([1000.0, 2000.0, 4000.0])


def _run(run_id: str, algorithm: str, seed: int, gap: list[float], *, sweep: str | None,
         start: float, budget: str = "4000", role: str | None = None) -> RunRecord:
    tags = {"algorithm": algorithm, "dataset": "breast_cancer", "seed": str(seed)}
    if role:
        tags[tune.ROLE_TAG] = role
    return RunRecord(
        id=run_id, name=f"{algorithm}-s{seed}", status="FINISHED", start_time=start,
        params={"seed": str(seed), "budget": budget, "constraint.k": "5",
                "p_player.name": algorithm},
        tags=tags,
        metrics={"dual_gap": (STEPS, np.array(gap)),
                 "objective": (STEPS, np.array(gap) + 0.1)},
        sweep=sweep)


class RecordTracker:
    """A tracker that holds its runs in memory: one finished sweep of two
    algorithms and two seeds, a run outside it, a tuning-seed run, a failed run."""

    def __init__(self) -> None:
        self.saved: list[tuple] = []
        self.asked: list[tuple] = []
        sweep = RunRecord(id="sweep1", name="sweep p_player=exp4mp,ftrl seed=0,1",
                          status="FINISHED", start_time=10.0, params={},
                          tags={tune.TUNING_TAG: "1"}, is_sweep=True,
                          overrides=("p_player=exp4mp,ftrl", "seed=0,1"),
                          read_file=self._file)
        self.records = [
            sweep,
            _run("a0", "exp4mp", 0, [0.5, 0.2, 0.1], sweep="sweep1", start=11.0),
            _run("a1", "exp4mp", 1, [0.5, 0.3, 0.3], sweep="sweep1", start=12.0),
            _run("b0", "ftrl", 0, [0.6, 0.4, 0.2], sweep="sweep1", start=13.0),
            _run("b1", "ftrl", 1, [0.6, 0.4, 0.4], sweep="sweep1", start=14.0),
            _run("t0", "ftrl", 7, [0.9, 0.9, 0.9], sweep="sweep1", start=15.0, role="tune"),
            _run("x0", "exp4mp", 0, [0.9, 0.8, 0.7], sweep=None, start=1.0, budget="2000"),
            RunRecord(id="f0", name="failed", status="FAILED", start_time=16.0,
                      params={}, tags={"algorithm": "exp4mp"}, sweep="sweep1"),
        ]

    @staticmethod
    def _file(name: str) -> str | None:
        if name != tune.TUNING_FILE:
            return None
        return json.dumps({"rule": "r", "grid": [1.0], "selected": {}, "scores": {}})

    @harness.hookimpl
    def read_runs(self, source, experiment, query):
        self.asked.append((source, experiment, query))
        if source != "memory://":
            return None
        if experiment != "e":
            raise LookupError(f"no experiment named {experiment!r} in memory")
        if query == "algorithm=ftrl":
            return [r for r in self.records if r.tags.get("algorithm") == "ftrl"]
        return list(self.records)

    @harness.hookimpl
    def save_report(self, source, experiment, sweep, files):
        self.saved.append((source, experiment, sweep, sorted(Path(f).name for f in files)))
        return f"kept in memory with {sweep}"

    @harness.hookimpl
    def view_lines(self, source, experiment, sweep, query):
        return [f"the runs of {sweep} side by side: memory://{experiment}/view?q={query}"]


@pytest.fixture
def tracker(monkeypatch):
    found = RecordTracker()
    pm = harness.make_plugin_manager([found], load_entrypoints=False)
    # no MLflow reading: the report must not need it
    pm.set_blocked("plugins.tracking.mlflow_records")
    # a tuning record the summary table can read: only its presence is checked here
    monkeypatch.setattr(tune, "summary_table", lambda record: f"rule {record['rule']}\n")
    return found, pm


def test_the_report_reads_a_trackers_records_through_the_hook(tracker, tmp_path, capsys):
    found, pm = tracker
    out = tmp_path / "report"
    assert report.main(["--source", "memory://", "--experiment", "e", "--out", str(out)],
                       pm=pm) == 0
    printed = capsys.readouterr().out
    # the latest sweep, its tuning-seed run left out, the run outside it left out
    assert ("reporting sweep 'sweep p_player=exp4mp,ftrl seed=0,1' (parent run sweep1): "
            "4 finished runs; 1 other finished runs of the experiment are left out") in printed
    assert "1 runs on the tuning seeds left out" in printed
    table = (out / "final_values.md").read_text()
    rows = {line.split(" | ")[0][2:]: line for line in table.splitlines()
            if line.startswith("| exp4mp") or line.startswith("| ftrl")}
    # median [min, max] over the two seeds of the last dual gap (to the table's 4 digits)
    assert "| 0.2 [0.1, 0.3] |" in rows["exp4mp"] and "| 0.3 [0.2, 0.4] |" in rows["ftrl"]
    assert (out / "tuning.md").read_text().endswith("rule r\n")
    assert (out / "dual_gap.png").read_bytes().startswith(b"\x89PNG")
    # the files go back to the tracker, onto the sweep's record
    (source, experiment, sweep, names), = found.saved
    assert (source, experiment, sweep) == ("memory://", "e", "sweep1")
    assert {"final_values.md", "dual_gap.png", "tuning.md"} <= set(names)
    assert "kept in memory with sweep1" in printed
    # last, where the tracker shows the reported runs side by side
    assert printed.splitlines()[-1] == "the runs of sweep1 side by side: memory://e/view?q="


def test_all_runs_and_a_query_reach_the_tracker(tracker, tmp_path, capsys):
    found, pm = tracker
    grouped = report.load("memory://", "e", sweep="all", pm=pm)
    # every finished game run; the same configuration and seed twice keeps the later
    assert sorted(grouped) == ["exp4mp budget=2000", "exp4mp budget=4000", "ftrl"]
    assert len(grouped["ftrl"].runs) == 2
    found.asked.clear()
    grouped = report.load("memory://", "e", "algorithm=ftrl", sweep="all", pm=pm)
    assert sorted(grouped) == ["ftrl"]
    assert ("memory://", "e", "algorithm=ftrl") in found.asked
    run = next(iter(grouped["ftrl"].runs.values()))
    np.testing.assert_array_equal(run["dual_gap"][0], STEPS)


def test_a_missing_experiment_and_an_unserved_source_are_errors(tracker):
    _, pm = tracker
    with pytest.raises(SystemExit, match="no experiment named 'nope' in memory"):
        report.load("memory://", "nope", pm=pm)
    with pytest.raises(SystemExit, match="no tracking plugin reads runs from 'elsewhere://'"):
        report.load("elsewhere://", "e", pm=pm)
