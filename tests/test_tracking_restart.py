"""A tracking server that restarts: a run that starts while it is down waits
for it (``tracking.connect_timeout_s``), then starts as usual; after the bound
it stops with the usual error. A run that ends while it is down, its
records journalled, waits for it in the same way to send them. A stand-in
server answers ``/health`` (200 when up, 503 when down) and a stand-in client
fails while it is down, so the outage is exactly where the test puts it. The
same with a real ``mlflow server`` on PostgreSQL, killed in the middle of a
sweep: ``tests/test_team_server.py``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

import harness
from plugins.tracking import mlflow_runs, mlflow_store

from conftest import game_cfg


class Health(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.server.up else 503)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    """A stand-in tracking server on 127.0.0.1: ``/health`` answers 200 while
    ``server.up``, 503 otherwise; ``server.uri``; ``server.back_in(s)`` brings
    it up after ``s`` seconds."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    httpd.up = True
    httpd.uri = f"http://127.0.0.1:{httpd.server_address[1]}"
    timers: list[threading.Timer] = []

    def back_in(seconds: float) -> None:
        httpd.up = False
        timers.append(threading.Timer(seconds, lambda: setattr(httpd, "up", True)))
        timers[-1].start()

    httpd.back_in = back_in
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    for timer in timers:
        timer.cancel()
    httpd.shutdown()
    httpd.server_close()


def _dead_uri() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_probe_waits_for_a_server_that_comes_back(server, capsys):
    server.back_in(1.5)
    began = time.monotonic()
    mlflow_store.probe(server.uri, timeout_s=30)
    assert 1.4 < time.monotonic() - began < 10
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and f"tracking server at {server.uri} does not answer" in lines[0]
    assert "waiting up to 30 s for it before the run starts" in lines[0]


def test_probe_gives_up_after_the_bound_with_the_usual_error(capsys):
    uri = _dead_uri()
    began = time.monotonic()
    with pytest.raises(harness.SetupError,
                       match=rf"The MLflow tracking server at {uri} is unreachable after 1.5 s"):
        mlflow_store.probe(uri, timeout_s=1.5)
    assert 1.4 < time.monotonic() - began < 10
    assert "waiting up to 1.5 s" in capsys.readouterr().err


def test_probe_of_a_server_that_answers_neither_waits_nor_says_anything(server, capsys):
    began = time.monotonic()
    mlflow_store.probe(server.uri, timeout_s=30)
    assert time.monotonic() - began < 1 and capsys.readouterr().err == ""


def test_a_call_that_fails_during_an_outage_is_made_again_when_the_server_is_back(server):
    calls: list[bool] = []

    def create_run():
        calls.append(server.up)
        if not server.up:
            raise ConnectionError("connection refused")
        return "run"

    server.back_in(1.0)
    assert mlflow_store.retrying(server.uri, 30, create_run) == "run"
    assert calls == [False, True]


def test_an_error_of_a_server_that_answers_is_raised_at_once(server):
    calls: list[int] = []

    def refused():
        calls.append(1)
        raise ValueError("INVALID_PARAMETER_VALUE")

    began = time.monotonic()
    with pytest.raises(ValueError, match="INVALID_PARAMETER_VALUE"):
        mlflow_store.retrying(server.uri, 30, refused)
    assert calls == [1] and time.monotonic() - began < 1


def test_a_server_that_stays_away_ends_the_retries_after_the_bound(server):
    server.back_in(60)
    began = time.monotonic()
    with pytest.raises(ConnectionError):
        mlflow_store.retrying(server.uri, 1.0, lambda: (_ for _ in ()).throw(ConnectionError()))
    assert 0.9 < time.monotonic() - began < 10


class Client:
    """The MlflowClient calls of a run, failing while the stand-in server is down."""

    def __init__(self, server) -> None:
        self.server, self.tracking_uri, self.calls = server, server.uri, []
        self.steps: list[int] = []  # of the checkpoints it took

    def __getattr__(self, name: str):
        if name.startswith("_") or name == "cast":  # an MlflowClient: every call waits
            raise AttributeError(name)

        def call(*args, **kwargs):
            self.calls.append((name, self.server.up))
            if not self.server.up:
                raise ConnectionError(f"{name}: connection refused")
            if name == "log_batch" and kwargs.get("metrics"):
                self.steps += sorted({m.step for m in kwargs["metrics"]})
            if name == "create_run":
                return SimpleNamespace(info=SimpleNamespace(run_id="r1"))
            if name == "get_experiment_by_name":
                return SimpleNamespace(experiment_id="1", tags={})
            return None

        return call


def _cfg(server, tmp_path) -> dict:
    return game_cfg("budget=2000", "checkpoints=3", f"state_dir={tmp_path}",
                    tracking={"enabled": True, "uri": server.uri, "connect_timeout_s": 30})


def test_a_run_whose_start_meets_an_outage_waits_for_the_server(server, tmp_path, monkeypatch,
                                                                 capsys):
    # the server goes down between the check before the run and the run's
    # creation: the run is created, its params logged, once it is back
    client = Client(server)

    def open_store(uri):
        server.back_in(1.5)
        return client

    monkeypatch.setattr(mlflow_store, "client", open_store)
    harness.run(_cfg(server, tmp_path))
    names = [name for name, up in client.calls]
    assert client.calls[:2] == [("get_experiment_by_name", False), ("get_experiment_by_name", True)]
    assert names.count("create_run") == 1 and "log_dict" in names
    assert names[-1] == "set_terminated" and all(up for _, up in client.calls[1:])
    assert capsys.readouterr().err.count("waiting up to 30 s for it to start the run") == 1
    assert not list(tmp_path.glob("pending-*.jsonl"))


def test_the_params_are_logged_when_the_server_is_back(server, tmp_path, monkeypatch):
    client = Client(server)
    create_run = client.__getattr__("create_run")

    def create_then_go_down(*args, **kwargs):
        run = create_run(*args, **kwargs)
        server.back_in(1.0)
        return run

    client.create_run = create_then_go_down
    monkeypatch.setattr(mlflow_store, "client", lambda uri: client)
    harness.run(_cfg(server, tmp_path))
    params = [up for name, up in client.calls if name == "log_batch"][:2]
    assert params == [False, True]
    assert [name for name, _ in client.calls].count("set_terminated") == 1


class DownAt:
    """Takes the stand-in server down for ``seconds`` after checkpoint ``at``
    (-1: the last); interrupts the run at checkpoint ``stop`` if set."""

    def __init__(self, server, at: int, seconds: float, stop: int | None = None) -> None:
        self.server, self.at, self.seconds, self.stop, self.count = server, at, seconds, stop, 0

    @harness.hookimpl(trylast=True)
    def on_checkpoint(self, context, step, metrics):
        self.count += 1
        last = len(context.parts.checkpoints)
        if self.count in (self.at, last if self.at == -1 else None):
            self.server.back_in(self.seconds)
        if self.count == self.stop:
            raise KeyboardInterrupt


@pytest.mark.parametrize("every", [0, 10], ids=["sent_at_once", "sent_at_the_end"])
@pytest.mark.parametrize("at", [1, -1], ids=["mid_run", "after_the_last_checkpoint"])
def test_a_run_that_ends_during_an_outage_waits_to_send_what_it_journalled(
        server, tmp_path, monkeypatch, capsys, at, every):
    client = Client(server)
    monkeypatch.setattr(mlflow_store, "client", lambda uri: client)
    down = DownAt(server, at=at, seconds=2.0)
    cfg = _cfg(server, tmp_path)
    cfg["tracking"]["send_every_s"] = every
    harness.run(cfg, plugins=[down])
    assert down.count >= 3 and len(client.steps) == len(set(client.steps)) == down.count
    assert client.calls[-1] == ("set_terminated", True)
    err = capsys.readouterr().err
    assert "waiting up to 30 s for it to send what the run logged meanwhile" in err
    assert not list(tmp_path.glob("pending-*.jsonl"))


def test_an_interrupted_run_does_not_wait_for_the_server(server, tmp_path, monkeypatch):
    client = Client(server)
    monkeypatch.setattr(mlflow_store, "client", lambda uri: client)
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        harness.run(_cfg(server, tmp_path), plugins=[DownAt(server, at=1, seconds=60, stop=2)])
    assert time.monotonic() - began < 20
    (pending,) = tmp_path.glob("pending-*.jsonl")
    assert '"status": "KILLED"' in pending.read_text().splitlines()[-1]


def test_the_tracking_block_declares_the_bound():
    assert mlflow_runs.PARAMS["connect_timeout_s"].default == 60.0
    with pytest.raises(harness.ConfigError, match="'connect_timeout_s' parameter of tracking"):
        harness.run(game_cfg("budget=2000", tracking={"enabled": True, "uri": "sqlite:///x.db",
                                                      "connect_timeout_s": -1}))
