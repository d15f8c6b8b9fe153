"""The MLflow helper process of the ``minimax-bench`` command (``plugins.tracking.mlflow_worker``).

* calls through the helper reach the store as an in-process client's would
  (read back by an ``MlflowClient`` of this process), and their answers are
  plain Python;
* an error in the helper comes back with its type and message;
* a helper that dies is replaced by an in-process client, call by call;
* a helper never called is stopped at once when the command ends;
* a single run of the command logs through the helper and never loads mlflow
  itself; with ``MINIMAX_BENCH_MLFLOW_HELPER=0`` it loads mlflow in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from plugins.tracking import mlflow_store, mlflow_worker

from conftest import cli_env

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def helper():
    started = mlflow_worker.start()
    assert started is not None
    yield started
    started.close()


def test_calls_through_the_helper_reach_the_store(tmp_path, helper):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow_worker.RemoteClient(helper, uri)
    assert client.tracking_uri == uri
    experiment = client.create_experiment("helper", tags={"kind": "test"})
    run = client.create_run(experiment, tags={"t": "1"}, run_name="through-the-helper")
    assert isinstance(run, types.SimpleNamespace)
    run_id = run.info.run_id
    mlflow_store.log_batch(client, run_id, params=[("eta", "0.5"), ("k", "20")])
    mlflow_store.log_batch(client, run_id, metrics=[("gap", 0.25, 1000, 40),
                                                        ("gap", 0.125, 2000, 80)])
    client.set_terminated(run_id, status="FINISHED")
    # the answers are plain Python: no mlflow needed to read them
    found = client.get_experiment_by_name("helper")
    assert found.experiment_id == experiment and found.tags["kind"] == "test"
    assert [m.step for m in client.get_metric_history(run_id, "gap")] == [40, 80]
    # and the store holds what an in-process client reads
    stored = MlflowClient(uri).get_run(run_id)
    assert stored.data.params == {"eta": "0.5", "k": "20"}
    assert stored.data.metrics == {"gap": 0.125}
    assert stored.info.status == "FINISHED" and stored.info.run_name == "through-the-helper"


def test_an_error_in_the_helper_comes_back_with_its_type(tmp_path, helper):
    client = mlflow_worker.RemoteClient(helper, f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(mlflow_worker.HelperError, match="MlflowException: Run .*not found"):
        client.get_run("0" * 32)
    assert client.get_experiment_by_name("none") is None  # and it goes on answering


def test_a_helper_that_dies_is_replaced_by_an_in_process_client(tmp_path, helper):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow_worker.RemoteClient(helper, uri)
    experiment = client.create_experiment("before")
    helper.proc.kill()
    helper.proc.wait()
    run = client.create_run(experiment)  # in this process from here on
    mlflow_store.log_batch(client, run.info.run_id, metrics=[("gap", 0.5, 1, 3)])
    assert MlflowClient(uri).get_run(run.info.run_id).data.metrics == {"gap": 0.5}
    # a new client of the dead helper starts in-process too
    assert mlflow_worker.RemoteClient(helper, uri).get_experiment_by_name("before") is not None


def test_a_helper_never_called_is_stopped_at_once():
    started = mlflow_worker.start()
    started.close()
    assert started.proc.returncode == -9  # killed, not waited for mid-import


def test_the_helper_can_be_switched_off(monkeypatch):
    monkeypatch.setenv(mlflow_worker.ENV_SWITCH, "0")
    assert mlflow_worker.start() is None


# a command run (as the console script runs it) that reports, at its exit,
# whether this process loaded mlflow
COMMAND = """
    import atexit, json, sys
    import harness.command
    atexit.register(lambda: print(json.dumps({{"mlflow": "mlflow" in sys.modules}})))
    sys.argv = ["minimax-bench", "budget=2000", "checkpoints=2", "progress=false",
                "state_dir=null", "reference.exact=false", "tracking.uri={uri}"]
    harness.command.main()
"""


@pytest.mark.parametrize("multirun", [False, True])
@pytest.mark.parametrize("switch", ["1", "0"])
def test_a_command_run_logs_through_the_helper_without_loading_mlflow(tmp_path, switch,
                                                                      multirun):
    # a single run, and a multirun whose jobs run in the command's process
    # (Hydra's default launcher): the sweep's parent run and every job's run
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**cli_env(), mlflow_worker.ENV_SWITCH: switch,
           "PYTHONPATH": os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH"))
                                         if p)}
    code = textwrap.dedent(COMMAND.format(uri=uri))
    if multirun:
        code = code.replace('"budget=2000",', '"--multirun", "seed=0,1", "budget=2000",')
    proc = subprocess.run([sys.executable, "-c", code],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"mlflow": switch == "0"}
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("minimax-bench").experiment_id])
    games = [run for run in runs if "budget" in run.data.params]
    assert len(games) == (2 if multirun else 1) and len(runs) == len(games) + multirun
    for run in runs:
        assert run.info.status == "FINISHED"
    # the journals are gone once the store had everything (read at the command's end)
    assert not list(tmp_path.glob(".minimax-bench/pending-*.jsonl"))
    for run in games:
        assert run.data.params["budget"] == "2000"
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "dual_gap")]
        assert len(steps) >= 2 and steps == sorted(set(steps)) and steps[-1] == 2000


def test_an_answer_left_by_an_interrupted_call_is_skipped(tmp_path, helper, monkeypatch):
    # a Ctrl-C while a call waits for its answer: the next call reads its own
    client = mlflow_worker.RemoteClient(helper, f"sqlite:///{tmp_path / 'mlflow.db'}")
    real_load = mlflow_worker.pickle.load

    def interrupted(stream):
        monkeypatch.setattr(mlflow_worker.pickle, "load", real_load)
        raise KeyboardInterrupt

    monkeypatch.setattr(mlflow_worker.pickle, "load", interrupted)
    with pytest.raises(KeyboardInterrupt):
        client.create_experiment("first")
    experiment = client.get_experiment_by_name("first")  # not create_experiment's answer
    assert experiment.name == "first"
    assert client.create_experiment("second") != experiment.experiment_id


def test_a_corrupt_answer_stops_the_helper_and_the_client_goes_on(tmp_path, helper):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow_worker.RemoteClient(helper, uri)
    # what C code or a child process writing to file descriptor 1 would have
    # done to the answer channel, had the helper not moved it to stderr
    helper.proc.stdout = __import__("io").BufferedReader(__import__("io").BytesIO(b"INFO x\n"))
    experiment = client.create_experiment("after")  # in this process now
    assert helper.proc.wait(timeout=60) is not None
    assert MlflowClient(uri).get_experiment(experiment).name == "after"


def test_a_forked_child_opens_a_client_of_its_own(tmp_path, monkeypatch):
    # a child forked from the command has the helper's pipes, but the helper
    # answers its parent: the child's runs go through an in-process client
    started = mlflow_worker.start()
    try:
        monkeypatch.setattr(mlflow_worker, "_STARTED", [started])
        assert mlflow_worker.started() is started
        monkeypatch.setattr(started, "owner", os.getpid() + 1)
        assert mlflow_worker.started() is None
        client = mlflow_store.client(f"sqlite:///{tmp_path / 'mlflow.db'}")
        assert isinstance(client, MlflowClient)
    finally:
        started.close()


@pytest.mark.parametrize(("argv", "starts"), [
    (["budget=4000"], True),
    (["-m", "seed=0,1"], True),
    (["+tracking.enabled=false"], False),
    (["tracking.enabled = False"], False),
])
def test_which_command_lines_start_the_helper(monkeypatch, argv, starts):
    monkeypatch.setattr(mlflow_worker, "_STARTED", [])
    monkeypatch.delitem(sys.modules, "mlflow", raising=False)
    calls = []
    monkeypatch.setattr(mlflow_worker, "start", lambda env=None: calls.append(env) or None)
    mlflow_worker.prestart(argv)
    assert bool(calls) is starts


def test_casts_are_answered_at_the_next_call_and_at_close(tmp_path):
    # a cast does not wait: its answer reaches on_answer when a later call
    # reads the answers before its own, or when the helper is closed
    started = mlflow_worker.start()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow_worker.RemoteClient(started, uri)
    experiment = client.create_experiment("casts")
    run_id = client.create_run(experiment).info.run_id
    answers: list[tuple[str, bool]] = []
    client.cast(lambda ok, value: answers.append(("batch", ok)), "log_batch", run_id,
                metrics=[("gap", 0.5, 1, 3)])
    client.cast(lambda ok, value: answers.append(("missing run", ok)), "set_terminated",
                "0" * 32)
    assert answers == [] and len(started.casts) == 2
    assert client.get_run(run_id).data.metrics == {"gap": 0.5}
    assert answers == [("batch", True), ("missing run", False)] and not started.casts
    client.cast(lambda ok, value: answers.append(("end", ok)), "set_terminated", run_id)
    started.close()
    assert answers[-1] == ("end", True)
    assert MlflowClient(uri).get_run(run_id).info.status == "FINISHED"


def test_casts_of_a_helper_that_dies_fail(tmp_path):
    started = mlflow_worker.start()
    client = mlflow_worker.RemoteClient(started, f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("dies")
    answers: list[bool] = []
    started.proc.kill()
    started.proc.wait()
    client.cast(lambda ok, value: answers.append(ok), "create_run", experiment)
    # a cast on a dead pipe runs in this process at once (the client switched)
    assert answers == [True]
    other = mlflow_worker.start()
    remote = mlflow_worker.RemoteClient(other, f"sqlite:///{tmp_path / 'mlflow.db'}")
    remote.cast(lambda ok, value: answers.append(ok), "get_experiment", experiment)
    other.proc.stdout = __import__("io").BufferedReader(__import__("io").BytesIO(b"junk"))
    other.close()
    assert answers == [True, False]  # its answer never came: reported failed


def test_a_sequence_stops_at_its_first_failing_call(tmp_path, helper):
    # a run's final status never goes out ahead of a checkpoint batch that failed
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow_worker.RemoteClient(helper, uri)
    run_id = client.create_run(client.create_experiment("seq")).info.run_id
    answers: list[tuple[bool, object]] = []
    calls = [("log_batch", ("0" * 32,), {"metrics": [("gap", 0.5, 1, 3)]}),
             ("set_terminated", (run_id,), {})]
    client.cast(lambda ok, value: answers.append((ok, value)), mlflow_worker.SEQUENCE, calls)
    assert client.get_run(run_id).info.status == "RUNNING"
    assert answers and answers[0][0] is False
    client.cast(lambda ok, value: answers.append((ok, value)), mlflow_worker.SEQUENCE,
                [("log_batch", (run_id,), {"metrics": [("gap", 0.5, 1, 3)]}), calls[1]])
    assert client.get_run(run_id).info.status == "FINISHED" and answers[1] == (True, 2)
