"""Checks, in headless Chromium, that MLflow's UI shows a sweep for comparing.

    python tools/check_mlflow_ui.py                          # a fresh 2 x 2 sweep, about 1 min
    python tools/check_mlflow_ui.py --store paper-results    # its mlflow.db, latest sweep
    python tools/check_mlflow_ui.py --screenshot shot.png    # default docs/mlflow_compare.png

Without ``--store`` it runs ``minimax-bench --multirun p_player=exp4mp,ru_sgd
seed=0,1 dataset=boston progress=false`` in a temporary folder (4 runs of 1e6
data points under one parent; the data set named, so that the screenshot's run
names do not follow the default's) and takes the view URL the sweep prints at
its end. A given store is copied first and the copy is served, so the store
itself is never written;
its most recent sweep (the parent run tagged ``minimax_bench_sweep``, its
runs by ``mlflow.parentRunId``) gets its view from the tracker's own
``plugins.tracking.mlflow_view``, written on the copy. It then starts ``mlflow
ui`` on a free port of 127.0.0.1 and opens pages in headless Chromium, driven
over its DevTools pipe (``--remote-debugging-pipe``, no other package), each
page read once what it waits for is there:

* the experiment's default runs view ``#/experiments/<id>/runs`` shows the
  sweep's parent run (its runs are folded under it there);
* the printed URL (the port of the served UI in place of 5000) shows one
  chart whose x-axis and y-axis are log (the Plotly graph's own layout), with
  a curve of each metric of the view for every run of the sweep, and a
  legend naming each as ``<run name> (<metric>)``, none of them cut;
* the same view as a table (the URL without ``compareRunsMode=CHART``) names
  every run by its full name (no name cut by its column) and has the view's
  metric columns;
* the screenshot (1600 x 1000 PNG) of the printed URL, taken after closing
  MLflow's assistant panel as a user does once (it opens by itself on a
  browser's first visit to a local UI), with the chart in the window.

Prints one ``ok: ...`` line per check and exits 0, or the failures and 1; 2
when Chromium is missing (``apt-get install chromium``). ``mlflow ui`` and
Chromium are always stopped.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SCREENSHOT = REPO / "docs" / "mlflow_compare.png"
SWEEP = ("--multirun", "p_player=exp4mp,ru_sgd", "seed=0,1", "dataset=boston", "progress=false")
WINDOW = (1600, 1000)
#: seconds a page may take to show what a check waits for (a fresh server's
#: first charts take about half a minute on 2 cores)
PAGE_TIMEOUT = 180.0
#: where the URLs a tracker prints point: ``mlflow ui``'s default address
PRINTED_UI = "http://127.0.0.1:5000"
SHARE_KEY = re.compile(r"viewStateShareKey=([\w.-]+)")
ASSISTANT_CLOSE = '[data-component-id="mlflow.assistant.chat_panel.close"]'
# Quiet, fast headless Chromium on a closed network, run as root.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")

# Whether an element's text shows whole: its laid-out text does not reach past
# the first ancestor that clips it (MLflow cuts names with an ellipsis there).
JS_WHOLE = """function whole(el) {
  const range = document.createRange(); range.selectNodeContents(el);
  const text = range.getBoundingClientRect();
  for (let e = el; e && e !== document.body; e = e.parentElement) {
    if (getComputedStyle(e).overflowX !== 'visible') {
      const box = e.getBoundingClientRect();
      return text.left >= box.left - 0.5 && text.right <= box.right + 0.5;
    }
  }
  return true;
}"""
# The links to run pages: [run id, text, shown whole].
JS_RUN_LINKS = "(() => {" + JS_WHOLE + """
return Array.from(document.querySelectorAll('a[href*="/runs/"]')).map(a => {
  const href = a.getAttribute('href');
  const id = (href.match(/#\\/experiments\\/[^/]+\\/runs\\/([0-9a-f]+)$/) || [])[1];
  return id ? [id, a.textContent.trim(), whole(a)] : null;
}).filter(x => x); })()"""
# Every Plotly graph: its card's title, axis types, curve names, and the texts
# of its card's legend entries "<name> (<metric>)" with whether each shows whole.
JS_GRAPHS = "(() => {" + JS_WHOLE + """
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => {
  const card = g.closest('[data-testid="experiment-view-compare-runs-card"]') || g.parentElement;
  const legend = Array.from(card.querySelectorAll('*'))
    .filter(e => e.children.length === 0 && / \\([^()]+\\)$/.test(e.textContent.trim()))
    .map(e => [e.textContent.trim(), whole(e)]);
  const title = card.querySelector('h4[title]');
  return {title: title ? title.getAttribute('title') : '',
          x: g._fullLayout ? g._fullLayout.xaxis.type : '',
          y: g._fullLayout ? g._fullLayout.yaxis.type : '',
          curves: (g.data || []).filter(d => d.type === 'scatter').length,
          legend: legend};
}); })()"""
# The ids of the runs table's columns (a metric's: metrics.`<key>`).
JS_COLUMNS = """Array.from(document.querySelectorAll('.ag-header-cell'))
  .map(e => e.getAttribute('col-id'))"""


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


def make_sweep(folder: Path) -> tuple[Path, str]:
    """Runs the small sweep ``SWEEP`` with ``folder`` as working directory:
    its store, ``folder/mlflow.db``, and what it printed."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run([sys.executable, "-m", "harness", *SWEEP], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"the sweep failed:\n{done.stderr[-3000:]}")
    return folder / "mlflow.db", done.stdout


def printed_view(printed: str) -> str:
    """The view URL among a sweep's (or a report's) printed lines ("" if none)."""
    found = [line.strip() for line in printed.splitlines() if SHARE_KEY.search(line)]
    return found[-1].split()[-1] if found else ""


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


def view_of(tracking_uri: str, sweep: Sweep) -> str:
    """The view URL the tracker prints for ``sweep``, its view written in the store."""
    sys.path.insert(0, str(REPO))
    from mlflow.tracking import MlflowClient

    from plugins.tracking import mlflow_view

    lines = mlflow_view.view_lines(MlflowClient(tracking_uri), sweep.experiment_id,
                                   mlflow_view.sweep_filter(sweep.parent_id), "the sweep's")
    return printed_view("\n".join(lines))


def view_metrics(tracking_uri: str, sweep: Sweep, url: str) -> list[str]:
    """The metrics the chart of the view at ``url`` draws, as its state in the store says."""
    from mlflow.tracking import MlflowClient

    key = SHARE_KEY.search(url).group(1)
    tags = MlflowClient(tracking_uri).get_experiment(sweep.experiment_id).tags
    state = json.loads(tags.get(f"mlflow.sharedViewState.{key}", "{}"))
    return [m for chart in state.get("compareRunCharts", []) for m in chart["selectedMetricKeys"]]


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
    uvicorn and job workers, or Chromium), SIGKILL to what is left after
    ``timeout`` s."""
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


class Browser:
    """Headless Chromium with a fresh profile, driven over the DevTools protocol
    on a pipe (file descriptors 3 and 4 of its process): one page, the size of
    ``WINDOW``."""

    def __init__(self) -> None:
        exe = chromium()
        if exe is None:
            raise RuntimeError("chromium is not installed: apt-get install chromium")
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-")
        to_read, to_browser = os.pipe()
        from_browser, to_write = os.pipe()
        self._process = subprocess.Popen(
            [exe, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile.name}",
             f"--window-size={WINDOW[0]},{WINDOW[1]}", "--remote-debugging-pipe",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=lambda: _as_fds_3_and_4(to_read, to_write),
            start_new_session=True)
        os.close(to_read)
        os.close(to_write)
        self._send_to = os.fdopen(to_browser, "wb", buffering=0)
        self._receive = os.fdopen(from_browser, "rb", buffering=0)
        self._buffer, self._last_id, self._session = b"", 0, None
        page = next(t for t in self.command("Target.getTargets")["targetInfos"]
                    if t["type"] == "page")
        self._session = self.command("Target.attachToTarget", targetId=page["targetId"],
                                     flatten=True)["sessionId"]
        self.command("Emulation.setDeviceMetricsOverride", width=WINDOW[0], height=WINDOW[1],
                     deviceScaleFactor=1, mobile=False)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self.command("Browser.close")
        self._send_to.close()
        self._receive.close()
        stop_group(self._process, timeout=10.0)
        self._profile.cleanup()

    def command(self, method: str, **params: Any) -> dict:
        """Send one DevTools command (to the page once attached) and return its result."""
        self._last_id += 1
        message = {"id": self._last_id, "method": method, "params": params}
        if self._session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self._session
        self._send_to.write(json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = self._receive.read(1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed its DevTools pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._last_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def open(self, url: str) -> None:
        """Load ``url`` afresh (through a blank page: no element of the page
        before can answer a wait)."""
        self.command("Page.navigate", url="about:blank")
        self.wait("document.readyState === 'complete' && location.href === 'about:blank'", 30)
        self.command("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression on the page."""
        reply = self.command("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"script failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait(self, expression: str, timeout: float = PAGE_TIMEOUT) -> Any:
        """The first true value of ``expression``, polled every half second (the
        last value after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.5)

    def screenshot(self, path: Path) -> None:
        data = self.command("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))


def _as_fds_3_and_4(read_end: int, write_end: int) -> None:
    """In Chromium's process before it starts: the pipe ends as fds 3 and 4."""
    read_end, write_end = os.dup(read_end), os.dup(write_end)  # clear of 3 and 4
    os.dup2(read_end, 3)
    os.dup2(write_end, 4)


def run_links(browser: Browser) -> dict[str, list[tuple[str, bool]]]:
    """Run id -> (text, shown whole) of each link to that run's page."""
    links: dict[str, list[tuple[str, bool]]] = {}
    for run_id, text, whole in browser.evaluate(JS_RUN_LINKS):
        links.setdefault(run_id, []).append((text, whole))
    return links


def named(links: dict[str, list[tuple[str, bool]]], runs: dict[str, str],
          whole: bool = False) -> list[str]:
    """The names of ``runs`` (run id -> name) that a link to their run shows (in full)."""
    return [name for run_id, name in runs.items()
            if any(text == name and (shown or not whole) for text, shown in links.get(run_id, []))]


def runs_view_url(base: str, sweep: Sweep) -> str:
    return f"{base}/#/experiments/{sweep.experiment_id}/runs"


def check_default_view(browser: Browser, base: str, sweep: Sweep) -> Check:
    url = runs_view_url(base, sweep)
    parent = {sweep.parent_id: sweep.parent_name}
    browser.open(url)
    browser.wait(f"({JS_RUN_LINKS}).some(l => l[0] === {json.dumps(sweep.parent_id)})")
    links = run_links(browser)
    if not named(links, parent):
        return Check("default runs view", False,
                     f"no link named {sweep.parent_name!r} to the sweep's parent run", url)
    shown = sum(run_id in links for run_id in sweep.children)
    return Check("default runs view", True,
                 f"shows the sweep {sweep.parent_name!r}, "
                 f"{shown} of its {len(sweep.children)} runs unfolded", url)


def check_view_chart(browser: Browser, url: str, sweep: Sweep, metrics: list[str]) -> Check:
    """One chart of ``metrics``, log axes, every run in the legend by its full name."""
    expected = {f"{name} ({metric})" for name in sweep.children.values() for metric in metrics}
    browser.open(url)
    found = json.dumps(sorted(expected))
    browser.wait(f"({JS_GRAPHS}).some(g => {found}.every(e => g.legend.some(l => l[0] === e)))")
    graphs = browser.evaluate(JS_GRAPHS)
    chart = next((g for g in graphs if expected <= {text for text, _ in g["legend"]}), None)
    if not metrics or chart is None:
        seen = sorted({text for g in graphs for text, _ in g["legend"]})
        return Check("the view's chart", False,
                     f"no chart with a legend entry for each of {sorted(expected)}: {seen}", url)
    cut = sorted(text for text, whole in chart["legend"] if text in expected and not whole)
    problems = ([f"x-axis {chart['x']}"] * (chart["x"] != "log")
                + [f"y-axis {chart['y']}"] * (chart["y"] != "log")
                + [f"{chart['curves']} curves for {len(expected)}"]
                * (chart["curves"] < len(expected))
                + [f"legend entries cut: {cut}"] * bool(cut))
    if problems:
        return Check("the view's chart", False, "; ".join(problems), url)
    return Check("the view's chart", True,
                 f"{chart['title']!r}: x and y axes log, {chart['curves']} curves, every run "
                 f"of the sweep in the legend by its full name ({len(expected)} entries)", url)


def check_view_table(browser: Browser, url: str, sweep: Sweep, metrics: list[str]) -> Check:
    """The view as a table: every run by its full name, the metric columns."""
    url = url.replace("&compareRunsMode=CHART", "")
    browser.open(url)
    ids = json.dumps(sorted(sweep.children))
    browser.wait(f"{ids}.every(id => ({JS_RUN_LINKS}).some(l => l[0] === id && l[2]))", 60)
    links = run_links(browser)
    whole = named(links, sweep.children, whole=True)
    missing = [name for name in sweep.children.values() if name not in whole]
    shown = browser.evaluate(JS_COLUMNS)
    columns = [m for m in metrics if f"metrics.`{m}`" not in shown]
    if missing or columns:
        return Check("the view's table", False,
                     f"runs not named in full: {missing}; metric columns missing: {columns}", url)
    return Check("the view's table", True,
                 f"all {len(whole)} runs by their full names "
                 f"({', '.join(sorted(whole)[:4])}{', ...' if len(whole) > 4 else ''}), "
                 f"columns {', '.join(metrics)}", url)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header (0, 0 if it is not a PNG)."""
    head = path.read_bytes()[:24] if path.exists() else b""
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return 0, 0
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def take_screenshot(browser: Browser, url: str, sweep: Sweep, metrics: list[str],
                    path: Path) -> Check:
    """The printed URL after closing the assistant panel, the chart in the window."""
    expected = json.dumps(sorted(f"{n} ({m})" for n in sweep.children.values() for m in metrics))
    browser.open(url)
    browser.wait(f"({JS_GRAPHS}).some(g => {expected}.every(e => g.legend.some(l => l[0] === e)))")
    closed = browser.evaluate(f"(() => {{ const b = document.querySelector({ASSISTANT_CLOSE!r});"
                              f" if (b) b.click(); return Boolean(b); }})()")
    browser.wait(f"!document.querySelector({ASSISTANT_CLOSE!r})", 10)
    time.sleep(2)  # the chart widens into the room the panel leaves
    in_window = browser.evaluate(
        "(() => { const g = document.querySelector('.js-plotly-plot');"
        " if (!g) return false; const r = g.getBoundingClientRect();"
        f" return r.top >= 0 && r.bottom <= {WINDOW[1]} && r.right <= {WINDOW[0]}; }})()")
    panel = browser.evaluate(f"Boolean(document.querySelector({ASSISTANT_CLOSE!r}))")
    browser.screenshot(path)
    size = png_size(path)
    if size != WINDOW or panel or not in_window:
        return Check("screenshot", False,
                     f"{path}: {size[0]}x{size[1]}, assistant panel "
                     f"{'open' if panel else 'closed'}, chart in the window: {in_window}", url)
    return Check("screenshot", True,
                 f"{path} ({size[0]}x{size[1]}, {path.stat().st_size // 1024} KB): the view's "
                 f"chart, the assistant panel {'closed' if closed else 'never opened'}", url)


def run_checks(store: Path | None, screenshot: Path | None, folder: Path) -> list[Check]:
    """Every check on the latest sweep of ``store`` (a folder holding
    ``mlflow.db``, or the file; None: a fresh sweep in ``folder``)."""
    if store is None:
        db, printed = make_sweep(folder)
    else:
        source = store / "mlflow.db" if store.is_dir() else store
        if not source.is_file():
            raise RuntimeError(f"no MLflow store at {source}")
        db, printed = copy_store(source, folder), ""
    tracking_uri = f"sqlite:///{db}"
    try:
        sweep = find_sweep(tracking_uri)
    except RuntimeError as err:
        raise RuntimeError(f"{err} (a copy of {store})" if store else str(err)) from err
    url = printed_view(printed) if store is None else view_of(tracking_uri, sweep)
    if not url.startswith(PRINTED_UI):
        raise RuntimeError(f"the sweep printed no view URL on {PRINTED_UI}:\n{printed[-2000:]}")
    metrics = view_metrics(tracking_uri, sweep, url)
    with mlflow_ui(db) as base, Browser() as browser:
        url = base + url[len(PRINTED_UI):]
        checks = [check_default_view(browser, base, sweep),
                  check_view_chart(browser, url, sweep, metrics),
                  check_view_table(browser, url, sweep, metrics)]
        if screenshot is not None:
            checks.append(take_screenshot(browser, url, sweep, metrics, screenshot))
    if "dual_gap" not in metrics:
        checks.append(Check("the view's metrics", False, f"no dual_gap in {metrics}", url))
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="\n\n".join(__doc__.split("\n\n")[:2]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path,
                        help="folder holding mlflow.db, or the .db file (default: a fresh sweep)")
    parser.add_argument("--screenshot", type=Path, default=DEFAULT_SCREENSHOT,
                        help="PNG of the view (default docs/mlflow_compare.png)")
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
