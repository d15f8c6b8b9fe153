"""Faults injected into real runs: interruptions and resume, signals, a tracking
server down at start or mid-run, plugins that break the contract, bad config
values of every built-in plugin. No checkpoint may be lost, no NaN may pass."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import harness
from harness import Param
from harness.game import TIMING_METRICS
from harness.protocols import refusal
from harness.registry import Registry
from plugins.models.glm import LogisticCEL
from plugins.p_players.exp4mp import Exp4MP
from plugins.tracking import mlflow_pending as pending_records
from plugins.tracking.mlflow_names import core_name
from plugins.w_players.ogd import OGD

from conftest import StopAt, game_cfg

# ---------------------------------------------------------------- fixtures


class Flaky(Exp4MP):
    """EXP4.MP that raises KeyboardInterrupt on a chosen call of ``observe``."""

    name: ClassVar[str] = "flaky"
    fail_at: ClassVar[int | None] = None
    calls: ClassVar[int] = 0

    def observe(self, losses):
        Flaky.calls += 1
        if Flaky.calls == Flaky.fail_at:
            raise KeyboardInterrupt("injected")
        return super().observe(losses)


class Escaping(Exp4MP):
    """Reports a p_t outside the k-set after 100 rounds."""

    name: ClassVar[str] = "escaping"

    @property
    def p(self):
        p = self.p_.copy()
        if self.constraint_.n and getattr(self, "_t", 0) > 100:
            p[0] = 0.9
        return p

    def observe(self, losses):
        self._t = getattr(self, "_t", 0) + 1
        return super().observe(losses)


class BadLoss(LogisticCEL):
    """Cross-entropy that returns NaN for row 3."""

    name: ClassVar[str] = "bad_loss"

    def losses(self, w, X, y):
        out = super().losses(w, X, y)
        is_row3 = np.all(np.equal(X, self.row3_), axis=1)
        out[is_row3] = np.nan
        return out

    def setup(self, dataset, radius):
        self.row3_ = dataset.X[3]
        return super().setup(dataset, radius)


class NanAction(Exp4MP):
    """Hands the game a NaN action a_t from round 50 on (its p stays valid)."""

    name: ClassVar[str] = "nan_action"

    def propose(self, rng):
        prop = super().propose(rng)
        self._t = getattr(self, "_t", 0) + 1
        if self._t < 50:
            return prop
        return prop._replace(action_rows=prop.rows, action_values=np.full(prop.rows.size, np.nan))


class NanWeights(Exp4MP):
    """Its p_t turns NaN at round 50, so its own sampler fails."""

    name: ClassVar[str] = "nan_weights"

    def observe(self, losses):
        super().observe(losses)
        self._t = getattr(self, "_t", 0) + 1
        if self._t == 49:
            self.p_ = np.full_like(self.p_, np.nan)


class NanOGD(OGD):
    """OGD whose iterate turns NaN in coordinate 2 after 30 steps."""

    name: ClassVar[str] = "nan_ogd"

    def step(self, grad):
        super().step(grad)
        self._t = getattr(self, "_t", 0) + 1
        if self._t == 30:
            self.w_ = self.w_.copy()
            self.w_[2] = np.nan


class Faulty:
    @harness.hookimpl
    def register_w_players(self, register):
        register(NanOGD)

    @harness.hookimpl
    def register_p_players(self, register):
        register(Flaky)
        register(Escaping)
        register(NanAction)
        register(NanWeights)

    @harness.hookimpl
    def register_models(self, register):
        register(BadLoss)


@pytest.fixture(autouse=True)
def save_at_every_checkpoint(monkeypatch):
    """The state saved at each checkpoint (not once a second): these runs are
    short, and the tests interrupt them between two given checkpoints."""
    from harness import api

    monkeypatch.setattr(api, "SAVE_EVERY_S", 0.0)


def _registry(*extra) -> Registry:
    return Registry(harness.make_plugin_manager([Faulty(), *extra], load_entrypoints=False))


def _cfg(tmp_path: Path, **changes) -> dict:
    return game_cfg("budget=20000", "seed=3", "checkpoints=8", "resume=true",
                    f"state_dir={tmp_path / 'state'}", "tracking.enabled=true",
                    f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", "tracking.experiment=faults",
                    registry=_registry(),
                    **{"p_player": {"name": "flaky"}, "constraint": {"name": "kset", "k": 5},
                       **changes})


#: data points of the command runs that a test stops mid-game: about 1e6
#: compiled OL-EXP.4M rounds on breast cancer, 6-8 s on a 2-core machine, so a signal sent a
#: second or two after the first saved state still finds the game running
LONG_RUN = 20_000_000


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _steps(client, run_id: str, key: str = "dual_gap") -> list[int]:
    return [m.step for m in client.get_metric_history(run_id, key)]


def untimed(metrics) -> dict:
    """The metrics of the game, without those that measure time."""
    return {k: v for k, v in metrics.items() if k not in TIMING_METRICS}


def core_names(logged) -> dict:
    """A run's metrics as MLflow holds them, by the game's names."""
    return {core_name(k): v for k, v in logged.items()}


# ---------------------------------------------------------------- interruptions


def test_interrupted_runs_resume_to_identical_numbers(tmp_path):
    # 20 interruptions at random rounds (seed 7) of a 4000-round game; each is
    # resumed; final metrics must equal the uninterrupted run's exactly
    # (wall time aside), the MLflow run must end FINISHED with every
    # checkpoint once, and no state file may remain.
    Flaky.calls, Flaky.fail_at = 0, None
    reference = harness.run(_cfg(tmp_path, resume=False, tracking={"enabled": False}),
                            plugins=[Faulty()])
    reference = untimed(reference)
    rng = np.random.default_rng(7)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    for i, at in enumerate(rng.integers(1, 4000, size=20)):
        cfg = _cfg(tmp_path, state_dir=str(tmp_path / f"state{i}"),
                   tracking={"enabled": True, "uri": uri, "experiment": f"kill{i}"})
        Flaky.calls, Flaky.fail_at = 0, int(at)
        with pytest.raises(KeyboardInterrupt):
            harness.run(cfg, plugins=[Faulty()])
        client = _client(uri)
        exp = client.get_experiment_by_name(f"kill{i}")
        (run,) = client.search_runs([exp.experiment_id])
        assert run.info.status == "KILLED"
        kept = _steps(client, run.info.run_id)
        Flaky.fail_at = None
        final = harness.run(cfg, plugins=[Faulty()])
        assert untimed(final) == reference, f"interrupted at round {at}"
        (run,) = client.search_runs([exp.experiment_id])
        steps = _steps(client, run.info.run_id)
        assert run.info.status == "FINISHED"
        assert steps[: len(kept)] == kept and len(steps) == len(set(steps))
        assert steps[-1] == 20_000
        assert list((tmp_path / f"state{i}").glob("state-*.pkl")) == []


@pytest.mark.parametrize("every", [0.0, 3600.0])
def test_the_state_is_saved_at_the_first_checkpoint_then_once_a_second(tmp_path, monkeypatch,
                                                                        every):
    # every=0: a save at each checkpoint; every=3600: at the first checkpoint
    # only, so an interrupt resumes from there (the same tracked run, its
    # checkpoints logged once) to the uninterrupted numbers
    from harness import api, state

    monkeypatch.setattr(api, "SAVE_EVERY_S", every)
    saves: list[int] = []
    real = state.save
    monkeypatch.setattr(state, "save", lambda *a: saves.append(1) or real(*a))
    Flaky.calls, Flaky.fail_at = 0, None
    reference = untimed(harness.run(_cfg(tmp_path, resume=False, tracking={"enabled": False}),
                                    plugins=[Faulty()]))
    n_checkpoints = len(_checkpoint_rounds(_cfg(tmp_path)))
    assert len(saves) == (n_checkpoints if every == 0.0 else 1)
    cfg = _cfg(tmp_path, tracking={"enabled": True, "uri": f"sqlite:///{tmp_path}/m.db",
                                   "experiment": "saves"})
    Flaky.calls, Flaky.fail_at = 0, 3000
    with pytest.raises(KeyboardInterrupt):
        harness.run(cfg, plugins=[Faulty()])
    (saved,) = (tmp_path / "state").glob("state-*.pkl")
    Flaky.calls, Flaky.fail_at = 0, None
    prep = harness.prepare(cfg, _registry())
    assert untimed(harness.play(prep)) == reference
    first = _checkpoint_rounds(cfg)[0]
    assert prep.resumed_from == (first if every else max(r for r in _checkpoint_rounds(cfg)
                                                          if r < 3000))
    client = _client(f"sqlite:///{tmp_path}/m.db")
    (run,) = client.search_runs([client.get_experiment_by_name("saves").experiment_id])
    steps = _steps(client, run.info.run_id)
    assert run.info.status == "FINISHED" and steps == sorted(set(steps)) and steps[-1] == 20_000
    assert not saved.exists()


def test_a_component_whose_state_version_changed_starts_afresh(tmp_path, monkeypatch):
    # interrupted at round 3000 of 4000 (seed 3), then the p-player's
    # state_version is raised: the saved state is not resumed, a warning names
    # the p-player and both versions, and the run plays all 4000 rounds from the
    # start (and the game's probe round) to the uninterrupted run's numbers.
    # With the version unchanged the same saved state resumes (from the last
    # checkpoint before round 3000: fewer than 4000 rounds played).
    Flaky.calls, Flaky.fail_at = 0, None
    reference = untimed(harness.run(_cfg(tmp_path, resume=False, tracking={"enabled": False}),
                                    plugins=[Faulty()]))
    cfg = _cfg(tmp_path, tracking={"enabled": False})
    for bump in (True, False):
        Flaky.calls, Flaky.fail_at = 0, 3000
        with pytest.raises(KeyboardInterrupt):
            harness.run(cfg, plugins=[Faulty()])
        assert list((tmp_path / "state").glob("state-*.pkl"))
        Flaky.calls, Flaky.fail_at = 0, None
        with monkeypatch.context() as patch:
            if bump:
                patch.setattr(Flaky, "state_version", Flaky.state_version + 1)
                with pytest.warns(RuntimeWarning, match=(
                        r"not resumed \(the p-player \S+:Flaky saved it with state_version "
                        rf"{Flaky.state_version - 1}; it is now {Flaky.state_version}\); "
                        r"the run starts afresh")):
                    final = harness.run(cfg, plugins=[Faulty()])
                assert Flaky.calls >= 4000
            else:
                final = harness.run(cfg, plugins=[Faulty()])
                assert Flaky.calls < 4000
        assert untimed(final) == reference
    # a file of another layout (an older FORMAT) is not resumed either
    from harness import state

    path = tmp_path / "old" / "state-x.pkl"
    path.parent.mkdir()
    path.write_bytes(__import__("pickle").dumps({"format": state.FORMAT - 1}))
    with pytest.warns(RuntimeWarning, match=rf"its format is {state.FORMAT - 1}, this version "
                                            rf"writes {state.FORMAT}"):
        assert state.load(path, None) is None


def _player_set_pairs() -> list[tuple[str, str]]:
    registry = Registry(harness.make_plugin_manager(load_entrypoints=False))
    pairs = []
    sets = {c: registry.build("constraint_set", c, n=569, **({} if c == "simplex" else {"k": 5}))
            for c in ("kset", "simplex", "alphaset")}
    for name in registry.names("p_player"):
        player = registry.get("p_player", name).cls
        pairs += [(name, c) for c, K in sets.items() if refusal(player, K, c) is None]
    return pairs


@pytest.mark.parametrize(("p_player", "constraint"), _player_set_pairs())
def test_every_p_player_resumes_to_identical_numbers(tmp_path, p_player, constraint):
    # interrupted right after its 5th checkpoint (so resumed from the 4th
    # saved state, replaying rounds); the final metrics must equal an
    # uninterrupted run's exactly (wall time aside)

    base = _cfg(tmp_path, p_player={"name": p_player}, budget=6000, tracking={"enabled": False},
                constraint={"name": constraint} | ({} if constraint == "simplex" else {"k": 5}))
    reference = harness.run({**base, "resume": False})
    with pytest.raises(KeyboardInterrupt):
        harness.run(base, plugins=[StopAt(5)])
    assert list((tmp_path / "state").glob("state-*.pkl"))
    final = harness.run(base)
    assert untimed(final) == untimed(reference)


def test_sigterm_ends_the_cli_run_killed_and_resume_finishes_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = [sys.executable, "-m", "harness", "dataset=breast_cancer", f"budget={LONG_RUN}",
            "checkpoints=40", f"tracking.uri={uri}", "tracking.experiment=term",
            "progress=false"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((tmp_path / ".minimax-bench").glob("state-*.pkl")):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "resume=true" in err
    client = _client(uri)
    exp = client.get_experiment_by_name("term")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "KILLED"
    kept = _steps(client, run.info.run_id)
    assert len(kept) >= 1 and kept[-1] < LONG_RUN
    done = subprocess.run(args + ["resume=true"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from round" in done.stdout
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED"
    steps = _steps(client, run.info.run_id)
    assert steps[: len(kept)] == kept and steps[-1] == LONG_RUN


def test_killed_between_logging_and_saving_logs_each_checkpoint_once(tmp_path, monkeypatch):
    # the narrowest window of an outright kill: checkpoint 4 is logged, then
    # the process dies before the game state is saved; resume starts from
    # checkpoint 3, reaches 4 again, and must not log it twice
    from harness import state

    Flaky.calls, Flaky.fail_at = 0, None
    reference = harness.run(_cfg(tmp_path, resume=False, tracking={"enabled": False}),
                            plugins=[Faulty()])
    real_save, saves = state.save, [0]

    def dying_save(*args):
        saves[0] += 1
        if saves[0] == 4:
            raise KeyboardInterrupt("killed before the state was saved")
        return real_save(*args)

    cfg = _cfg(tmp_path)
    monkeypatch.setattr(state, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        harness.run(cfg, plugins=[Faulty()])
    monkeypatch.setattr(state, "save", real_save)
    client = _client(cfg["tracking"]["uri"])
    (run,) = client.search_runs([client.get_experiment_by_name("faults").experiment_id])
    assert len(_steps(client, run.info.run_id)) == 4
    final = harness.run(cfg, plugins=[Faulty()])
    assert untimed(final) == untimed(reference)
    steps = _steps(client, run.info.run_id)
    assert len(steps) == len(set(steps)) and steps == sorted(steps) and steps[-1] == 20_000


def test_sigkill_mid_run_resumes_to_the_uninterrupted_numbers(tmp_path):
    # kill -9 (nothing runs in the process after it) at a random moment after
    # the first saved state (seed 11 draws the delay, 0-2 s); resume must end
    # with the final metrics of an uninterrupted run, each checkpoint logged once
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    common = ["dataset=breast_cancer", f"budget={LONG_RUN}", "checkpoints=40",
              "progress=false", "seed=5"]
    args = [sys.executable, "-m", "harness", *common, f"tracking.uri={uri}",
            "tracking.experiment=sigkill"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((tmp_path / ".minimax-bench").glob("state-*.pkl")):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    time.sleep(float(np.random.default_rng(11).uniform(0.0, 2.0)))
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.kill()
    proc.wait(timeout=60)
    client = _client(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("sigkill").experiment_id])
    assert run.info.status == "RUNNING"  # nobody could end it
    # every checkpoint reached is in the store or in the run's journal on disk
    # (sent in batches: a run of a few seconds sends them at its end)
    journal = tmp_path / ".minimax-bench" / f"pending-{run.info.run_id}.jsonl"
    kept = sorted({*_steps(client, run.info.run_id),
                   *(r["step"] for r in (pending_records.read_records(journal)
                                         if journal.exists() else []))})
    assert kept and kept[-1] < LONG_RUN
    done = subprocess.run([*args, "resume=true"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from round" in done.stdout
    (run,) = client.search_runs([client.get_experiment_by_name("sigkill").experiment_id])
    assert run.info.status == "FINISHED"
    steps = _steps(client, run.info.run_id)
    assert steps[: len(kept)] == kept and len(steps) == len(set(steps))
    assert not journal.exists()
    uninterrupted = [sys.executable, "-m", "harness", *common, f"tracking.uri={uri}",
                     "tracking.experiment=uninterrupted"]
    subprocess.run(uninterrupted, cwd=tmp_path, env=env, check=True, capture_output=True,
                   timeout=600)
    (ref,) = client.search_runs([client.get_experiment_by_name("uninterrupted").experiment_id])
    want, got = ref.data.metrics, client.get_run(run.info.run_id).data.metrics
    assert untimed(core_names(got)) == untimed(core_names(want)) and len(want) > 5


def test_a_signal_before_the_first_round_interrupts_at_once(tmp_path):
    # a setup step that runs long (the OPT solve, say) must not hold a
    # scheduler's SIGTERM until the game starts
    reached: list[int] = []

    class SlowStart:
        @harness.hookimpl
        def on_run_start(self, context):
            # never the default handler: that would end the test session
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
            os.kill(os.getpid(), signal.SIGTERM)
            for i in range(50):
                time.sleep(0.02)
                reached.append(i)

    cfg = _cfg(tmp_path, p_player={"name": "exp4mp"}, resume=False,
               tracking={"enabled": False})
    with pytest.raises(KeyboardInterrupt):
        harness.run(cfg, plugins=[SlowStart()])
    assert len(reached) < 50


@pytest.mark.parametrize("fail_at_start", [False, True])
def test_a_signal_while_the_final_status_is_sent_is_honoured_after_it(tmp_path, fail_at_start):
    # Ctrl-C arrives while the status is being sent (after a finished game, or
    # after a setup step failed): the status is sent in full, then the
    # interrupt is raised, not dropped
    class SignalAtEnd:
        @harness.hookimpl(trylast=True)
        def on_run_start(self, context):
            if fail_at_start:
                raise RuntimeError("setup failed")

        @harness.hookimpl(tryfirst=True)
        def on_run_end(self, context, status, metrics):
            assert signal.getsignal(signal.SIGINT) not in (signal.SIG_DFL, signal.SIG_IGN)
            os.kill(os.getpid(), signal.SIGINT)

    uri = f"sqlite:///{tmp_path}/m.db"
    cfg = _cfg(tmp_path, p_player={"name": "exp4mp"}, resume=False,
               tracking={"enabled": True, "uri": uri, "experiment": "end"})
    # Python's own Ctrl-C handler, whatever this process inherited (a job
    # started in the background of a shell ignores SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(RuntimeError if fail_at_start else KeyboardInterrupt):
            harness.run(cfg, plugins=[SignalAtEnd()])
    finally:
        signal.signal(signal.SIGINT, previous)
    client = _client(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("end").experiment_id])
    assert run.info.status == ("FAILED" if fail_at_start else "FINISHED")
    if not fail_at_start:
        assert "dual_gap" in run.data.metrics


# ---------------------------------------------------------------- tracking server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A real ``mlflow server`` on 127.0.0.1 that can be stopped and started again."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port, self.proc = folder, _free_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        exe = Path(sys.executable).with_name("mlflow")
        self.proc = subprocess.Popen(
            [str(exe), "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{self.folder}/server.db",
             "--artifacts-destination", str(self.folder / "artifacts"), "--workers", "1"],
            cwd=self.folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2):
                    return
            except OSError:
                assert time.monotonic() < deadline and self.proc.poll() is None
                time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)


def test_tracking_server_down_at_start_stops_before_computing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        [sys.executable, "-m", "harness", f"tracking.uri=http://127.0.0.1:{_free_port()}",
         "tracking.connect_timeout_s=0", "budget=2000"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "tracking server at http://127.0.0.1" in done.stderr
    assert "unreachable" in done.stderr and "certified dual gap" not in done.stdout


def test_server_down_at_start_stops_before_the_reference_solve(tmp_path, monkeypatch):
    # the OPT solve (reference.exact=true, seconds to minutes) is the first
    # thing a run computes; the tracking check must come before it
    from plugins.metrics import reference

    solves: list[int] = []
    monkeypatch.setattr(reference, "compute", lambda *a, **k: solves.append(1))
    cfg = _cfg(tmp_path, p_player={"name": "exp4mp"}, resume=False,
               reference={"exact": "true"},
               tracking={"enabled": True, "uri": f"http://127.0.0.1:{_free_port()}",
                         "connect_timeout_s": 0})
    with pytest.raises(harness.SetupError, match="unreachable"):
        harness.run(cfg)
    assert solves == []


def test_checkpoints_are_on_disk_before_the_store_has_them(tmp_path):
    # batched sending: at each checkpoint the journal holds every checkpoint
    # so far, synced, and the store none of them; at the run's end the store
    # has them all, each once, and the journal is gone
    seen: list[tuple[int, int, int]] = []
    uri = f"sqlite:///{tmp_path}/mlflow.db"

    class Look:
        @harness.hookimpl(trylast=True)
        def on_checkpoint(self, context, step, metrics):
            run_id = context.state["mlflow"]["run_id"]
            journal = tmp_path / "state" / f"pending-{run_id}.jsonl"
            steps = [r["step"] for r in pending_records.read_records(journal)]
            seen.append((len(steps), steps[-1] == step, len(_steps(_client(uri), run_id))))

    Flaky.calls, Flaky.fail_at = 0, None
    cfg = _cfg(tmp_path, resume=False, tracking={"enabled": True, "uri": uri,
                                                 "experiment": "journal",
                                                 "send_every_s": 3600.0})
    metrics = harness.run(cfg, plugins=[Faulty(), Look()])
    assert seen == [(i + 1, True, 0) for i in range(len(seen))] and len(seen) >= 8
    client = _client(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("journal").experiment_id])
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "dual_gap")
    assert len(history) == len(seen) == len({m.step for m in history})
    assert max(history, key=lambda m: m.step).value == metrics["dual_gap"]
    assert not list((tmp_path / "state").glob("pending-*.jsonl"))


@pytest.mark.parametrize("every", [0.0, 3600.0])
def test_tracking_server_down_mid_run_loses_no_checkpoint(tmp_path, every):
    # every=0: each checkpoint is sent at once, so the outage is met mid-run
    # and the checkpoints journalled during it go out when the server is back;
    # every=3600: batched, the run's checkpoints go out at its end
    server = Server(tmp_path)
    server.start()
    events: list[str] = []

    class Outage:
        """Stops the server after checkpoint 3, restarts it after checkpoint 6,
        stops it again after the last checkpoint (so the final status is buffered)."""

        count = 0

        @harness.hookimpl(trylast=True)
        def on_checkpoint(self, context, step, metrics):
            Outage.count += 1
            if Outage.count in (3, len(context.parts.checkpoints)):
                server.stop()
                events.append(f"down after checkpoint {Outage.count}")
            elif Outage.count == 6:
                server.start()
                events.append("up after checkpoint 6")

    Flaky.calls, Flaky.fail_at = 0, None
    cfg = _cfg(tmp_path, resume=False,  # (connect_timeout_s=0: no wait for the server at the end)
               tracking={"enabled": True, "uri": server.uri, "experiment": "outage",
                         "send_every_s": every, "connect_timeout_s": 0})
    sent_mid_run: list[int] = []

    class Count:
        @harness.hookimpl(trylast=True)
        def on_checkpoint(self, context, step, metrics):
            if Outage.count in (6, 7):  # the server is back after checkpoint 6
                sent_mid_run.append(len(context.state["mlflow"]["pending"]))

    try:
        metrics = harness.run(cfg, plugins=[Faulty(), Outage(), Count()])
        # sent at once: checkpoints 4-6, met by the outage, wait until the
        # first checkpoint after it; batched: all of them wait for the end
        assert sent_mid_run == ([3, 0] if every == 0.0 else [6, 7])
        n_checkpoints = Outage.count
        pending = list((tmp_path / "state").glob("pending-*.jsonl"))
        assert len(pending) == 1  # the final status, sent after the server went down
        records = [json.loads(x) for x in pending[0].read_text().splitlines()]
        assert records[-1]["status"] == "FINISHED"
        server.start()
        assert pending_records.replay(pending[0]) == len(records)
        client = _client(server.uri)
        exp = client.get_experiment_by_name("outage")
        (run,) = client.search_runs([exp.experiment_id])
        assert run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, "dual_gap")
        assert len(history) == n_checkpoints == len({m.step for m in history})
        assert history[-1].value == metrics["dual_gap"] or math.isclose(
            sorted(history, key=lambda m: m.step)[-1].value, metrics["dual_gap"])
        assert not pending[0].exists()
    finally:
        server.stop()
    assert events[0] == "down after checkpoint 3" and events[1] == "up after checkpoint 6"


def test_through_the_helper_a_failed_last_batch_keeps_the_journal_and_the_run_open(
        tmp_path, monkeypatch, capfd):
    # the command's path: the run's last batch and its status go to the helper
    # process without waiting; the server is gone by then, so the helper's
    # answer (read when it is closed) says so: the run is not marked FINISHED
    # ahead of its checkpoints, the journal keeps every record, and a replay
    # once the server is back sends them all
    from plugins.tracking import mlflow_store, mlflow_worker

    server = Server(tmp_path)
    server.start()
    helper = mlflow_worker.start(mlflow_worker.HTTP_DEFAULTS)
    monkeypatch.setattr(mlflow_worker, "_STARTED", [helper])
    # the path of a local store (a tracking server's end is sent while waiting,
    # for its restart): a server stands in for a store that fails at the end
    monkeypatch.setattr(mlflow_store, "is_server", lambda uri: False)

    class DownAtTheEnd:
        count = 0

        @harness.hookimpl(trylast=True)
        def on_checkpoint(self, context, step, metrics):
            DownAtTheEnd.count += 1
            if DownAtTheEnd.count == len(context.parts.checkpoints):
                server.stop()

    Flaky.calls, Flaky.fail_at = 0, None
    cfg = _cfg(tmp_path, resume=False, tracking={"enabled": True, "uri": server.uri,
                                                 "experiment": "cast", "send_every_s": 3600.0})
    try:
        metrics = harness.run(cfg, plugins=[Faulty(), DownAtTheEnd()])
        (journal,) = (tmp_path / "state").glob("pending-*.jsonl")  # not yet answered
        helper.close()
        assert "did not take the last records" in capfd.readouterr().err
        records = pending_records.read_records(journal)
        assert len(records) == DownAtTheEnd.count + 1 and records[-1]["status"] == "FINISHED"
        server.start()
        client = _client(server.uri)
        (run,) = client.search_runs([client.get_experiment_by_name("cast").experiment_id])
        assert run.info.status == "RUNNING" and _steps(client, run.info.run_id) == []
        assert pending_records.replay(journal) == len(records)
        run = client.get_run(run.info.run_id)
        history = client.get_metric_history(run.info.run_id, "dual_gap")
        assert run.info.status == "FINISHED" and len(history) == DownAtTheEnd.count
        assert max(history, key=lambda m: m.step).value == metrics["dual_gap"]
        assert not journal.exists()
    finally:
        helper.close()
        server.stop()


def test_resume_sends_what_the_interrupted_run_buffered(tmp_path):
    # the server goes down after checkpoint 3, the run is interrupted at round
    # 3500 of 4000 with checkpoints 3.. buffered; the server returns and the
    # resumed run must send them first: every checkpoint once, the same final
    # numbers as an uninterrupted run, no pending file left
    Flaky.calls, Flaky.fail_at = 0, None
    reference = harness.run(_cfg(tmp_path, resume=False, tracking={"enabled": False}),
                            plugins=[Faulty()])
    server = Server(tmp_path)
    server.start()

    class DownAfter3:
        count = 0

        @harness.hookimpl(trylast=True)
        def on_checkpoint(self, context, step, metrics):
            DownAfter3.count += 1
            if DownAfter3.count == 3:
                server.stop()

    cfg = _cfg(tmp_path, tracking={"enabled": True, "uri": server.uri, "experiment": "again"})
    try:
        Flaky.calls, Flaky.fail_at = 0, 3500
        with pytest.raises(KeyboardInterrupt):
            harness.run(cfg, plugins=[Faulty(), DownAfter3()])
        (pending,) = (tmp_path / "state").glob("pending-*.jsonl")
        buffered = [json.loads(x) for x in pending.read_text().splitlines()]
        assert buffered[-1] == {**buffered[-1], "status": "KILLED"} and len(buffered) >= 3
        server.start()
        Flaky.calls, Flaky.fail_at = 0, None
        final = harness.run(cfg, plugins=[Faulty()])
        client = _client(server.uri)
        (run,) = client.search_runs([client.get_experiment_by_name("again").experiment_id])
        history = client.get_metric_history(run.info.run_id, "dual_gap")
    finally:
        server.stop()
    assert untimed(final) == untimed(reference) and run.info.status == "FINISHED"
    steps = sorted(m.step for m in history)
    assert len(steps) == len(set(steps)) == len(_checkpoint_rounds(cfg)) and steps[-1] == 20_000
    assert not pending.exists()


def _checkpoint_rounds(cfg: dict) -> list[int]:
    return list(harness.prepare({**cfg, "tracking": {"enabled": False}},
                                _registry()).checkpoints)


# ---------------------------------------------------------------- contract breaches


def test_p_outside_the_set_stops_the_run_naming_the_plugin(tmp_path):
    cfg = _cfg(tmp_path, p_player={"name": "escaping"}, resume=False,
               tracking={"enabled": True, "uri": f"sqlite:///{tmp_path}/m.db",
                         "experiment": "escape"})
    with pytest.raises(harness.GuardError, match="p-player 'escaping' has p_t outside"):
        harness.run(cfg, plugins=[Faulty()])
    client = _client(f"sqlite:///{tmp_path}/m.db")
    (run,) = client.search_runs([client.get_experiment_by_name("escape").experiment_id])
    assert run.info.status == "FAILED" and _steps(client, run.info.run_id)  # earlier kept


def test_nan_loss_stops_the_run_naming_model_round_and_row(tmp_path):
    cfg = _cfg(tmp_path, p_player={"name": "uniform"}, model={"name": "bad_loss"},
               resume=False, tracking={"enabled": False})
    with pytest.raises(harness.GuardError,
                       match=r"model 'bad_loss' gave loss nan for row 3 at round \d+"):
        harness.run(cfg, plugins=[Faulty()])


def test_nan_iterate_stops_the_run_naming_the_w_player_and_coordinate(tmp_path):
    cfg = _cfg(tmp_path, p_player={"name": "exp4mp"}, w_player={"name": "nan_ogd"},
               resume=False, tracking={"enabled": False})
    with pytest.raises(harness.GuardError,
                       match=r"w-player 'nan_ogd' produced a non-finite iterate before round 31: "
                             r"coordinate 2 is nan"):
        harness.run(cfg, plugins=[Faulty()])


def test_nan_action_stops_the_run_at_that_round(tmp_path):
    # a_t enters a_bar and the dual gap's inner solve: a NaN there used to make
    # the solve backtrack for ever; it is now stopped at the round it appears
    cfg = _cfg(tmp_path, p_player={"name": "nan_action"}, resume=False,
               tracking={"enabled": False})
    with pytest.raises(harness.GuardError,
                       match=r"p-player 'nan_action' gave a non-finite action a_t at round 50"):
        harness.run(cfg, plugins=[Faulty()])


def test_failure_inside_a_p_player_names_it_and_the_round(tmp_path):
    cfg = _cfg(tmp_path, p_player={"name": "nan_weights"}, resume=False,
               tracking={"enabled": False})
    with pytest.raises(harness.GuardError,
                       match=r"p-player 'nan_weights' failed in propose at round 50: "
                             r"ValueError: DepRound"):
        harness.run(cfg, plugins=[Faulty()])


def test_non_finite_metrics_are_never_logged(tmp_path):
    # a loss scale of 1e-300 passes validation (a positive float) but makes the
    # dual gap's inner objective overflow: the first checkpoint stops the run
    # naming the model, the MLflow run holds no metric and ends FAILED
    uri = f"sqlite:///{tmp_path}/m.db"
    cfg = _cfg(tmp_path, p_player={"name": "exp4mp"}, resume=False,
               model={"name": "logistic_cel", "loss_scale": 1e-300},
               tracking={"enabled": True, "uri": uri, "experiment": "inf"})
    with pytest.raises(harness.GuardError,
                       match=r"round 1 cannot be computed: .* not finite .*model 'logistic_cel'"):
        harness.run(cfg, plugins=[Faulty()])
    client = _client(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("inf").experiment_id])
    assert run.info.status == "FAILED" and run.data.metrics == {}


def test_a_plugin_metric_that_is_not_finite_stops_the_run_unlogged(tmp_path):
    class InfMetric:
        @harness.hookimpl
        def checkpoint_metrics(self, context, w_bar, losses):
            return {"broken_metric": math.inf}

    uri = f"sqlite:///{tmp_path}/m.db"
    cfg = _cfg(tmp_path, p_player={"name": "exp4mp"}, resume=False,
               tracking={"enabled": True, "uri": uri, "experiment": "infmetric"})
    with pytest.raises(harness.GuardError,
                       match=r"non-finite metric\(s\) \{'broken_metric': inf\} at round 1"):
        harness.run(cfg, plugins=[Faulty(), InfMetric()])
    client = _client(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("infmetric").experiment_id])
    assert run.info.status == "FAILED" and run.data.metrics == {}


def test_inner_solve_refuses_a_non_finite_objective():
    from harness.gap import certified_min

    def value_grad(w):
        return float("nan"), np.full_like(w, np.nan)

    with pytest.raises(FloatingPointError, match="inner objective is not finite"):
        certified_min(value_grad, np.zeros(3), 1.0)


# ---------------------------------------------------------------- config values


def _invalid_values(spec: Param) -> list[object]:
    """Values outside a declared parameter: wrong type, out of range, not a choice."""
    bad: list[object] = [[1, 2]]
    if spec.type in (int, float):
        bad.append("x")
        if spec.type is int:
            bad.append(1.5)
        else:
            bad += [math.inf, -math.inf, math.nan]
        if isinstance(spec.low, int | float):
            bad.append(spec.low - 1 if spec.type is int else spec.low - 0.5)
            if spec.low_open:
                bad.append(spec.low)
        if isinstance(spec.high, int | float):
            bad.append(spec.high + 1)
            if spec.high_open:
                bad.append(spec.high)
        if not spec.nullable:
            bad.append(None)
    elif spec.type is str:
        bad.append(5)
        if spec.choices:
            bad.append("no-such-choice")
    elif spec.type is bool:
        bad.append("yes")
    return bad


def _builtin_param_cases() -> list[tuple[str, str, str, object]]:
    registry = Registry(harness.make_plugin_manager(load_entrypoints=False))
    cases = []
    for kind in ("constraint_set", "p_player", "w_player", "model", "dataset"):
        for name in registry.names(kind):
            cls = registry.get(kind, name).cls
            for param, spec in cls.params.items():
                cases += [(kind, name, param, v) for v in _invalid_values(spec)]
    return cases


BUILTIN_CASES = _builtin_param_cases()


@pytest.mark.parametrize(("kind", "name", "param", "value"), BUILTIN_CASES)
def test_every_invalid_value_of_every_builtin_parameter_is_refused(kind, name, param, value):
    registry = Registry(harness.make_plugin_manager(load_entrypoints=False))
    cls = registry.get(kind, name).cls
    example = getattr(cls, "contract_params", None)  # valid values of required parameters
    base = dict(example(50)) if example is not None else ({"n": 50} if "n" in cls.params else {})
    base.pop(param, None)
    with pytest.raises(harness.ConfigError) as err:
        registry.build(kind, name, **base, **{param: value})
    message = str(err.value)
    assert f"'{param}'" in message and name in message and "Got" in message


@pytest.mark.parametrize(("key", "value", "message"), [
    ("resume", "no", "The 'resume' parameter of the game must be a bool. Got 'no' instead."),
    ("progress", 1, "The 'progress' parameter of the game must be a bool. Got 1 instead."),
    ("state_dir", 5, "The 'state_dir' parameter of the game must be a str or None. Got 5"),
    ("tracking", {"enabled": "false"},
     "The 'enabled' parameter of tracking must be a bool. Got 'false' instead."),
    ("tracking", {"enabled": True, "experimnt": "x"},
     "Unknown parameter(s) ['experimnt'] for tracking."),
    ("tracking", "off", "The 'tracking' config key must be a mapping. Got 'off' instead."),
])
def test_run_switches_and_the_tracking_block_are_validated(tmp_path, key, value, message):
    cfg = _cfg(tmp_path, p_player={"name": "exp4mp"}, resume=False,
               tracking={"enabled": False})
    cfg[key] = value
    with pytest.raises(harness.ConfigError) as err:
        harness.run(cfg)
    assert str(err.value).startswith(message)


def test_unknown_keys_are_refused_for_every_builtin():
    registry = Registry(harness.make_plugin_manager(load_entrypoints=False))
    for kind in ("constraint_set", "p_player", "w_player", "model", "dataset"):
        for name in registry.names(kind):
            with pytest.raises(harness.ConfigError, match=rf"Unknown parameter\(s\) \['bogus'\] "
                                                           rf"for {name}"):
                registry.build(kind, name, bogus=1)
