"""Checks, in a headless browser, that MLflow's UI shows a sweep readably.

    python tools/check_mlflow_ui.py                          # a fresh 2 x 2 sweep, about 1 min
    python tools/check_mlflow_ui.py --store paper-results    # its mlflow.db, latest sweep
    python tools/check_mlflow_ui.py --screenshot shot.png    # default docs/mlflow_runs.png

Without ``--store`` it runs ``minimax-bench --multirun p_player=exp4mp,ru_sgd
seed=0,1 dataset=breast_cancer budget=20000 progress=false`` in a temporary
folder (4 runs under one parent; the data set named, so that the screenshot's
run names do not follow the default's). A given store is copied first and the
copy is served, so the store itself is never written. It then starts
``mlflow ui`` on a free port of 127.0.0.1, finds the most recent sweep (the
parent run tagged ``minimax_bench_sweep``, its children by
``mlflow.parentRunId``) through ``MlflowClient``, opens pages in headless
Chromium (``--dump-dom``) and checks:

* the default runs view ``#/experiments/<id>/runs`` shows the parent run's
  name (the sweep's runs are folded under it there: MLflow nests child runs
  while the table is sorted by creation time, its default; folded runs have
  no curves in the chart view either, which then shows "Model metrics (0)");
* the runs table of the sweep, ``#/experiments/<id>/runs?searchFilter=
  tags.`mlflow.parentRunId` = '<parent id>'&orderByKey=metrics.`dual_gap`
  &orderByAsc=true``, lists every child run as a link to its own run id with
  its descriptive name (``exp4mp-breast_cancer-k20-s0``): sorted by a metric,
  the table is flat, no run folded;
* the chart view of the same table (``&compareRunsMode=CHART``) has a chart
  titled ``dual_gap`` with plotted traces and a legend entry for every child run;
* the screenshot (1600 x 1000 PNG) of the whole experiment's runs table,
  sorted by ``dual_gap``, with the run name column as wide as the runs' names
  and the columns ``dual_gap``, ``objective`` and ``accuracy`` (``topk_mse``
  for regression). Column widths are no URL parameter: they come from a
  shared view, the experiment tag ``mlflow.sharedViewState.<key>`` (written on
  the served copy) opened with ``?viewStateShareKey=<key>``, so the page shows
  MLflow's "You're viewing a shared view" banner. The check is that the page
  lists every child run.

Prints one ``ok: ...`` line per check and exits 0, or the failures and 1; 2
when Chromium is missing (``apt-get install chromium``). ``mlflow ui`` is
always stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SCREENSHOT = REPO / "docs" / "mlflow_runs.png"
SWEEP = ("--multirun", "p_player=exp4mp,ru_sgd", "seed=0,1", "dataset=breast_cancer",
         "budget=20000", "progress=false")
WINDOW = (1600, 1000)
# Chromium's --virtual-time-budget: a runs table is there after 15 s of virtual
# time; the charts of a freshly started server only after about 35 s.
VIRTUAL_TIME_MS = (15000, 60000)
SHARE_KEY = "minimax-bench-check"
SCREENSHOT_METRICS = ("dual_gap", "objective", "accuracy", "topk_mse")  # the first 3 logged
# Quiet, fast headless Chromium on a closed network, run as root.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")


@dataclass(frozen=True)
class Sweep:
    """A sweep as the store holds it: the parent run and its children by id."""

    experiment_id: str
    parent_id: str
    parent_name: str
    children: dict[str, str]  # run id -> run name


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    url: str = ""

    def line(self) -> str:
        status = "ok" if self.ok else "FAILED"
        where = f"\n    {self.url}" if self.url else ""
        return f"{status}: {self.name}: {self.detail}{where}"


def chromium() -> str | None:
    return shutil.which("chromium")


def make_sweep(folder: Path) -> Path:
    """Runs the small sweep ``SWEEP`` with ``folder`` as working directory and
    returns its store, ``folder/mlflow.db``."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run([sys.executable, "-m", "harness", *SWEEP], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"the sweep failed:\n{done.stderr[-3000:]}")
    return folder / "mlflow.db"


def copy_store(db: Path, folder: Path) -> Path:
    """A consistent copy of the SQLite store ``db`` in ``folder`` (the backup API)."""
    copy = folder / "mlflow.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as source, \
            contextlib.closing(sqlite3.connect(copy)) as target:
        source.backup(target)
    return copy


def find_sweep(tracking_uri: str) -> Sweep:
    """The most recently started sweep of the store: its parent run (tag
    ``minimax_bench_sweep``) and the runs tagged with the parent's id."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    parents = client.search_runs(experiments, "tags.minimax_bench_sweep = '1'",
                                 order_by=["attributes.start_time DESC"], max_results=1)
    if not parents:
        raise RuntimeError(f"no sweep (a run tagged minimax_bench_sweep) in {tracking_uri}")
    parent = parents[0]
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
                                  max_results=1000)
    return Sweep(parent.info.experiment_id, parent.info.run_id, parent.info.run_name,
                 {run.info.run_id: run.info.run_name for run in children})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mlflow_ui(db: Path, timeout: float = 120.0) -> Iterator[str]:
    """``mlflow ui`` on the store ``db`` at a free port of 127.0.0.1; yields its
    address once it answers HTTP and stops it (its process group) on exit."""
    port = free_port()
    log = db.parent / "mlflow-ui.log"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", f"sqlite:///{db}",
             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            cwd=db.parent, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while not _answers(f"{base}/health"):
            if server.poll() is not None:
                raise RuntimeError(f"mlflow ui exited:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow ui did not answer within {timeout:.0f} s")
            time.sleep(0.5)
        yield base
    finally:
        stop_group(server)


def stop_group(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM to the process group led by ``process`` (``mlflow ui`` with its
    uvicorn and job workers), SIGKILL to what is left after ``timeout`` s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        process.poll()
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def browse(url: str, screenshot: Path | None = None, height: int = WINDOW[1],
           virtual_time_ms: int = VIRTUAL_TIME_MS[0]) -> str:
    """Opens ``url`` in headless Chromium with a fresh profile: returns the page's
    DOM, or writes a PNG to ``screenshot`` (and returns "")."""
    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium is not installed: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        action = f"--screenshot={screenshot}" if screenshot else "--dump-dom"
        done = subprocess.run(
            [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
             f"--window-size={WINDOW[0]},{height}", f"--virtual-time-budget={virtual_time_ms}",
             action, url],
            capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"chromium failed on {url}:\n{done.stderr[-2000:]}")
    return "" if screenshot else done.stdout


def settled(url: str, done: Callable[[str], bool], height: int = WINDOW[1],
            budgets: tuple[int, ...] = VIRTUAL_TIME_MS) -> tuple[str, int]:
    """The DOM of ``url`` after the first virtual time budget in ``budgets`` for
    which ``done(dom)`` holds (else after the last), and that budget."""
    for budget in budgets:
        dom = browse(url, height=height, virtual_time_ms=budget)
        if done(dom):
            break
    return dom, budget


class _RunLinks(HTMLParser):
    """Collects the text of every link to a run page, by run id."""

    def __init__(self) -> None:
        super().__init__()
        self.links: dict[str, set[str]] = {}
        self._run: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href") or ""
        found = re.fullmatch(r"#/experiments/[^/]+/runs/([0-9a-f]+)", href)
        if tag == "a" and found:
            self._run, self._text = found.group(1), []

    def handle_data(self, data):
        if self._run:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._run:
            self.links.setdefault(self._run, set()).add("".join(self._text).strip())
            self._run = None


def run_links(dom: str) -> dict[str, set[str]]:
    """Run id -> the texts of the links to that run's page in ``dom``."""
    parser = _RunLinks()
    parser.feed(dom)
    return parser.links


def unnamed(dom: str, runs: dict[str, str]) -> list[str]:
    """The names of ``runs`` (run id -> name) that no link to their run shows in ``dom``."""
    links = run_links(dom)
    return [name for run_id, name in runs.items() if name not in links.get(run_id, set())]


def runs_view_url(base: str, sweep: Sweep) -> str:
    return f"{base}/#/experiments/{sweep.experiment_id}/runs"


def sweep_table_url(base: str, sweep: Sweep, mode: str = "") -> str:
    """The runs table of the sweep's children, sorted by ``dual_gap`` (flat)."""
    query = {"searchFilter": f"tags.`mlflow.parentRunId` = '{sweep.parent_id}'",
             "orderByKey": "metrics.`dual_gap`", "orderByAsc": "true"}
    if mode:
        query["compareRunsMode"] = mode
    encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    return f"{runs_view_url(base, sweep)}?{encoded}"


def _height(rows: int) -> int:
    # the grid renders only rows near the viewport: make room for all of them
    return max(WINDOW[1], 400 + 45 * rows)


def check_default_view(base: str, sweep: Sweep) -> Check:
    url = runs_view_url(base, sweep)
    parent = {sweep.parent_id: sweep.parent_name}
    dom, _ = settled(url, lambda dom: not unnamed(dom, parent))
    missing = unnamed(dom, parent)
    shown = sum(run_id in run_links(dom) for run_id in sweep.children)
    if missing:
        return Check("default runs view", False,
                     f"no link named {sweep.parent_name!r} to the sweep's parent run", url)
    return Check("default runs view", True,
                 f"shows the sweep {sweep.parent_name!r}, "
                 f"{shown} of its {len(sweep.children)} runs unfolded", url)


def check_run_names(base: str, sweep: Sweep) -> Check:
    url = sweep_table_url(base, sweep)
    dom, _ = settled(url, lambda dom: not unnamed(dom, sweep.children),
                     height=_height(len(sweep.children)))
    missing = unnamed(dom, sweep.children)
    if not sweep.children or missing:
        detail = (f"missing {missing}" if missing else "the sweep has no runs")
        return Check("run names in the runs table", False, detail, url)
    names = sorted(sweep.children.values())
    return Check("run names in the runs table", True,
                 f"all {len(names)} runs of the sweep by name ({', '.join(names[:4])}"
                 f"{', ...' if len(names) > 4 else ''})", url)


def dual_gap_chart(dom: str) -> str:
    """The part of ``dom`` from the chart title ``dual_gap`` to the next chart's
    title ("" if no chart has that title)."""
    start = re.search(r'<h4[^>]*title="dual_gap"', dom)
    if not start:
        return ""
    following = re.compile(r"<h4[^>]*title=").search(dom, start.end())
    return dom[start.start():following.start() if following else len(dom)]


def check_dual_gap_chart(base: str, sweep: Sweep) -> Check:
    url = sweep_table_url(base, sweep, mode="CHART")
    dom, _ = settled(url, dual_gap_chart, height=2400, budgets=VIRTUAL_TIME_MS[-1:])
    chart = dual_gap_chart(dom)
    if not chart:
        return Check("dual_gap chart", False, "no chart titled dual_gap", url)
    legend = {html.unescape(text) for text in re.findall(r">([^<>]*) \(dual_gap\)<", chart)}
    missing = [name for name in sweep.children.values() if name not in legend]
    traces = chart.count('class="trace scatter')
    if missing or not traces:
        return Check("dual_gap chart", False,
                     f"{traces} plotted traces; runs missing from its legend: {missing}", url)
    return Check("dual_gap chart", True,
                 f"titled dual_gap, {traces} plotted traces, every run of the sweep in its legend",
                 url)


def shared_view(sweep: Sweep, metrics: list[str]) -> dict:
    """MLflow's shared view state for the screenshot: sorted by ``dual_gap``,
    the run name column wide enough for the names, the given metric columns."""
    name = "attributes.`Run Name`"
    columns = [f"metrics.`{m}`" for m in metrics]
    longest = max(map(len, sweep.children.values()), default=20)
    widths = {name: min(400, 60 + 8 * longest), "runDateAndNestInfo": 150, "duration": 80,
              **{column: 115 for column in columns}}
    return {"orderByKey": "metrics.`dual_gap`", "orderByAsc": True,
            "selectedColumns": columns, "columnOrder": list(widths), "columnWidths": widths}


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header (0, 0 if it is not a PNG)."""
    head = path.read_bytes()[:24] if path.exists() else b""
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return 0, 0
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def take_screenshot(base: str, sweep: Sweep, tracking_uri: str, path: Path) -> Check:
    """Writes the shared view (tag on the served store) and screenshots it."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    logged = set()
    for run_id in sweep.children:
        logged |= set(client.get_run(run_id).data.metrics)
    metrics = [m for m in SCREENSHOT_METRICS if m in logged][:3]
    client.set_experiment_tag(sweep.experiment_id, f"mlflow.sharedViewState.{SHARE_KEY}",
                              json.dumps(shared_view(sweep, metrics)))
    url = f"{runs_view_url(base, sweep)}?viewStateShareKey={SHARE_KEY}"
    dom, budget = settled(url, lambda dom: not unnamed(dom, sweep.children))
    missing = unnamed(dom, sweep.children)
    path.parent.mkdir(parents=True, exist_ok=True)
    browse(url, screenshot=path, virtual_time_ms=budget)
    size = png_size(path)
    if missing or size != WINDOW:
        return Check("screenshot", False,
                     f"{path}: {size[0]}x{size[1]}; runs not named on the page: {missing}", url)
    return Check("screenshot", True,
                 f"{path} ({size[0]}x{size[1]}, {path.stat().st_size // 1024} KB), "
                 f"sorted by dual_gap, columns {', '.join(metrics)}", url)


def run_checks(store: Path | None, screenshot: Path | None, folder: Path) -> list[Check]:
    """Every check on the latest sweep of ``store`` (a folder holding
    ``mlflow.db``, or the file; None: a fresh sweep in ``folder``)."""
    if store is None:
        db = make_sweep(folder)
    else:
        source = store / "mlflow.db" if store.is_dir() else store
        if not source.is_file():
            raise RuntimeError(f"no MLflow store at {source}")
        db = copy_store(source, folder)
    tracking_uri = f"sqlite:///{db}"
    try:
        sweep = find_sweep(tracking_uri)
    except RuntimeError as err:
        raise RuntimeError(f"{err} (a copy of {store})" if store else str(err)) from err
    with mlflow_ui(db) as base:
        checks = [check_default_view(base, sweep), check_run_names(base, sweep),
                  check_dual_gap_chart(base, sweep)]
        if screenshot is not None:
            checks.append(take_screenshot(base, sweep, tracking_uri, screenshot))
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="\n\n".join(__doc__.split("\n\n")[:2]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path,
                        help="folder holding mlflow.db, or the .db file (default: a fresh sweep)")
    parser.add_argument("--screenshot", type=Path, default=DEFAULT_SCREENSHOT,
                        help="PNG of the runs table (default docs/mlflow_runs.png)")
    parser.add_argument("--no-screenshot", action="store_true", help="skip the screenshot")
    args = parser.parse_args(argv)
    if chromium() is None:
        print("check_mlflow_ui: chromium is not installed; install it with "
              "`apt-get install chromium`", file=sys.stderr)
        return 2
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="check-mlflow-ui-") as folder:
        try:
            checks = run_checks(args.store, None if args.no_screenshot else args.screenshot,
                                Path(folder))
        except RuntimeError as err:
            print(f"FAILED: {err}", file=sys.stderr)
            return 1
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed in "
          f"{time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
