"""A team's tracking server on a real database: ``mlflow server`` on
PostgreSQL (the recipe of docs/tracking.md, "A team server"), a 32-run joblib
sweep against it, and the server killed in the middle of the sweep and
started again on the same port and database a few seconds later. Every run
and every checkpoint must be in the database afterwards.

Needs a PostgreSQL server and a role that may create databases, given by
``$MINIMAX_BENCH_POSTGRES`` (default ``DEFAULT_ADMIN``; ``.ci/run`` installs
PostgreSQL, starts it and creates that role), and the ``postgres`` extra (the
psycopg driver). Without them the test is skipped, saying why. Each run of
the test creates a database of its own and drops it at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import cli_env

pytestmark = pytest.mark.postgres

#: a connection to a database of the server, as a role that may create databases
ADMIN_ENV = "MINIMAX_BENCH_POSTGRES"
DEFAULT_ADMIN = "postgresql://minimax_bench:minimax_bench@127.0.0.1:5432/postgres"
RUNS = 32
#: the sweep: small runs (2000 data points, 5 checkpoints), two at a time
SWEEP = ["budget=2000", "checkpoints=3", "progress=false", "reference.exact=false"]
#: the server is killed once this many runs of the sweep are in the store
KILL_AFTER_RUNS = 4
#: seconds between the kill and the restart (the restart itself takes more)
DOWN_S = 3.0
#: outages at most, should one miss a run in flight or a run starting (rare)
MAX_OUTAGES = 3


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh database on the PostgreSQL server; its SQLAlchemy URI for MLflow."""
    psycopg = pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not "
                                                    "installed: pip install -e '.[postgres]'")
    admin = os.environ.get(ADMIN_ENV, DEFAULT_ADMIN)
    try:
        conn = psycopg.connect(admin, autocommit=True, connect_timeout=5)
    except psycopg.Error as err:
        where = urllib.parse.urlsplit(admin)
        pytest.skip(f"no PostgreSQL server reachable as {where.username} at "
                    f"{where.hostname}:{where.port or 5432} (${ADMIN_ENV}; "
                    f"{str(err).strip().splitlines()[0]}); .ci/run sets one up")
    name = f"minimax_bench_test_{uuid.uuid4().hex[:12]}"
    with conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        try:
            url = urllib.parse.urlsplit(admin)
            yield urllib.parse.urlunsplit(("postgresql+psycopg", url.netloc, f"/{name}", "", ""))
        finally:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``mlflow server`` on PostgreSQL, as docs/tracking.md starts it, that can
    be killed (SIGKILL: a crash, not a shutdown) and started again."""

    def __init__(self, database: str, folder: Path) -> None:
        self.database, self.folder, self.port = database, folder, _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout_s: float = 180) -> None:
        self.starts += 1
        log = open(self.folder / f"server-{self.starts}.log", "wb")  # noqa: SIM115 - the server's
        # MLflow's job runners for its GenAI features (eight processes): no part of tracking
        env = {**cli_env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("mlflow")), "server",
             "--backend-store-uri", self.database,
             "--default-artifact-root", str(self.folder / "artifacts"),
             "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"],
            cwd=self.folder, env=env, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2):
                    return
            except OSError:
                assert self.proc.poll() is None, self.log()
                assert time.monotonic() < deadline, "mlflow server did not answer\n" + self.log()
                time.sleep(0.2)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def log(self) -> str:
        return (self.folder / f"server-{self.starts}.log").read_text(errors="replace")[-3000:]


class Outages(threading.Thread):
    """Kills the server (once ``KILL_AFTER_RUNS`` runs of the sweep are in the
    store and exactly one of them is running: one job is in flight, the other
    between two runs, so that its next run starts during the outage), waits
    ``DOWN_S`` and starts it again. Again, a few runs later, should the
    outage have missed one of the two (a job that created its run just as the
    server was killed, or a run that ended just then), at most
    ``MAX_OUTAGES`` times: ``outages`` holds when each began and when the
    server answered again; ``in_flight``, the runs created before an outage
    and ended after it; ``started``, the lines of runs that waited to start."""

    def __init__(self, server: Server, sweep: subprocess.Popen, log: Path) -> None:
        super().__init__(daemon=True)
        self.server, self.sweep, self.log = server, sweep, log
        self.outages: list[tuple[float, float]] = []
        self.in_flight: set[str] = set()
        self.started: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as err:  # noqa: BLE001 - reported by the test
            self.error = err

    def _run(self) -> None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.server.uri)
        kill_after = KILL_AFTER_RUNS
        while self.sweep.poll() is None and len(self.outages) < MAX_OUTAGES:
            runs = self._runs(client)
            if len(runs) < kill_after or sum(r.info.status == "RUNNING" for r in runs) != 1:
                time.sleep(0.1)
                continue
            self.server.kill()
            down = time.time()
            time.sleep(DOWN_S)
            self.server.start()
            self.outages.append((down, time.time()))
            self.started = [line for line in self.log.read_text().splitlines()
                            if "waiting up to" in line and "start" in line]
            # the runs in flight finish, now that the server is back
            runs, deadline = self._runs(client), time.monotonic() + 120
            while time.monotonic() < deadline and any(
                    r.info.status == "RUNNING" and r.info.start_time / 1000 < down for r in runs):
                time.sleep(0.2)
                runs = self._runs(client)
            self.in_flight |= {r.info.run_id for r in runs
                               if r.info.start_time / 1000 < down < (r.info.end_time or 0) / 1000}
            if self.in_flight and self.started:
                return
            kill_after = len(runs) + 2

    @staticmethod
    def _runs(client) -> list:
        found = client.get_experiment_by_name("team")
        return [] if found is None else client.search_runs(
            [found.experiment_id], filter_string="tags.algorithm = 'exp4mp'", max_results=1000)


def _reference_steps(tmp_path: Path) -> dict[str, list[int]]:
    """The steps of every metric of one run of the sweep's config, logged to a
    local store without an outage."""
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path}/reference.db"
    done = subprocess.run([sys.executable, "-m", "harness", *SWEEP, "seed=0",
                           f"tracking.uri={store}", "tracking.experiment=reference",
                           f"state_dir={tmp_path}/reference-state"],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("reference").experiment_id])
    return {key: sorted(m.step for m in client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics}


def test_a_sweep_survives_a_restart_of_its_postgresql_backed_server(database, tmp_path):
    import psycopg
    from mlflow.tracking import MlflowClient

    began = time.monotonic()
    server = Server(database, tmp_path)
    booting = threading.Thread(target=server.start)  # the database's tables are made first
    booting.start()
    reference = _reference_steps(tmp_path)  # meanwhile
    booting.join()
    assert server.proc is not None and server.proc.poll() is None, server.log()
    work, log = tmp_path / "work", tmp_path / "sweep.log"
    work.mkdir()
    sweep = subprocess.Popen(
        [sys.executable, "-m", "harness", "--multirun", "hydra/launcher=joblib",
         "hydra.launcher.n_jobs=2", f"seed=range(0,{RUNS})", *SWEEP,
         f"tracking.uri={server.uri}", "tracking.experiment=team",
         f"state_dir={work / 'state'}"],
        cwd=work, env=cli_env(), stdout=subprocess.DEVNULL, stderr=open(log, "w"),  # noqa: SIM115
        start_new_session=True)
    outages = Outages(server, sweep, log)
    try:
        outages.start()
        sweep.wait(timeout=600)
        err = log.read_text()
        outages.join(timeout=200)
        assert outages.error is None, f"{outages.error!r}\n{server.log()}"
        assert sweep.returncode == 0, err[-5000:]
        client = MlflowClient(server.uri)  # the restarted server, on the same database
        experiment = client.get_experiment_by_name("team")
        runs = client.search_runs([experiment.experiment_id], max_results=1000)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait()
        server.kill()
    (parent,) = [r for r in runs if r.data.tags.get("minimax_bench_sweep") == "1"]
    children = [r for r in runs if r is not parent]
    assert parent.info.status == "FINISHED"
    assert len(children) == RUNS
    assert Counter(r.info.status for r in children) == {"FINISHED": RUNS}, err[-5000:]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}
    assert sorted(int(r.data.tags["seed"]) for r in children) == list(range(RUNS))
    # the outage hit runs in flight and runs starting
    assert outages.outages, "the sweep ended before the server was killed"
    assert outages.in_flight, "no run was in flight while the server was down"
    assert outages.started, "no run started while the server was down"

    # every checkpoint of every run, once: the reference run's steps for every metric
    steps: dict[tuple[str, str], list[int]] = defaultdict(list)
    with psycopg.connect(database.replace("postgresql+psycopg", "postgresql")) as conn:
        for run_id, key, step in conn.execute("SELECT run_uuid, key, step FROM metrics"):
            steps[run_id, key].append(step)
    for run in children:
        got = {key: sorted(steps[run.info.run_id, key]) for key in run.data.metrics}
        assert got == reference, run.info.run_name
    assert list((work / "state").glob("pending-*.jsonl")) == []
    # and each run's config.yaml, written to the shared artifact folder
    assert len(list((tmp_path / "artifacts").rglob("config.yaml"))) == RUNS
    report = {"runs": len(children), "checkpoints_per_run": len(reference["dual_gap"]),
              "metrics_per_checkpoint": len(reference),
              "metric_values": sum(len(v) for v in steps.values()),
              "outages_s": [round(up - down, 1) for down, up in outages.outages],
              "in_flight": len(outages.in_flight),
              "waited": dict(Counter(line.split(" for it ", 1)[1].split(" (")[0]
                                     for line in err.splitlines() if "waiting up to" in line)),
              "wall_s": round(time.monotonic() - began, 1)}
    print("team server:", json.dumps(report))
