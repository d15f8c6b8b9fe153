"""A helper process that imports mlflow for the ``minimax-bench`` command and
then serves the MLflow tracker's calls to one store.

Importing mlflow and its SQLAlchemy store takes about 1.2 s of one core. The
command starts this process (the hook ``prestart``, called as this module is
registered, first of the built-ins) before it loads anything heavy, so the
import runs on the machine's other core while the command loads numpy, numba
and the plugins, composes its config, loads the data and prepares the game;
at run start the tracker opens its store here (``RemoteClient``, made by
``plugins.tracking.mlflow_store.client``) and its calls go here. A call
(create the run, log the params, a batch of checkpoints mid-run) waits for
its answer, as a call of an ``MlflowClient`` in the command's process would,
and an error reaches the tracker's journal as before. A cast (``cast``: the
run's ``config.yaml``; its last checkpoints and final status, one
``SEQUENCE`` that stops at its first failing call) does not wait: its answer
goes to a callback when a later call reads it, or when the helper is closed
at the command's end. The helper serves every run of the command's process:
a single run, a sweep's parent run and each job of a multirun launched in
that process.

The protocol is pickled ``(number, client, method, args, kwargs)`` requests
on the process's stdin and ``(number, ok, value)`` answers on its stdout
(``"open"`` makes a client of a URI and answers its number); values are plain Python
(an MLflow entity becomes a ``types.SimpleNamespace`` of its properties), so
the command never imports mlflow. ``log_batch`` takes ``(key, value)``
params and ``(key, value, timestamp, step)`` metrics. The process runs in
a session of its own and ignores SIGINT, SIGTERM and SIGHUP (a Ctrl-C, or a
scheduler's signal to the whole job, reaches the command, which still sends
the run's KILLED status); it ends when its stdin closes: when the command
ends, however it ends. If it cannot be started or dies, the tracker
uses an in-process client instead (``RemoteClient`` switches itself over).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import subprocess
import sys
import types
from collections.abc import Callable
from typing import Any

import harness

#: set to 0 to keep mlflow in the command's own process
ENV_SWITCH = "MINIMAX_BENCH_MLFLOW_HELPER"
#: HTTP settings of the tracker's clients (explicit settings of the user win):
#: an unreachable server fails a call within seconds, not minutes of retries
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
#: the helper ``prestart`` started in this process, if any
_STARTED: list[Helper] = []


class HelperError(RuntimeError):
    """An error raised in the helper process: its type and message."""


class HelperGone(HelperError):
    """The helper process ended (or its pipes broke)."""


class Helper:
    """The helper process and its pipes."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.owner = os.getpid()  # a forked child has the pipes, not the helper
        self.used = False
        self.sent = 0  # requests sent; answers carry their number
        #: requests sent by ``cast`` whose answers are unread: number -> on_answer
        self.casts: dict[int, Callable[[bool, Any], None] | None] = {}

    def _send(self, client: int, name: str, args: tuple, kwargs: dict) -> int:
        self.used = True
        self.sent += 1
        pickle.dump((self.sent, client, name, args, kwargs), self.proc.stdin,
                    protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.flush()
        return self.sent

    def _answer(self) -> int:
        """Read one answer; a cast's goes to its ``on_answer``. Its number."""
        number, ok, value = pickle.load(self.proc.stdout)
        if number in self.casts:
            on_answer = self.casts.pop(number)
            if on_answer is not None:
                on_answer(ok, value)
        elif number == self.sent:
            self._last = (ok, value)
        return number

    def _gone(self, err: BaseException) -> HelperGone:
        """Stop the helper; the casts whose answers never came fail."""
        self.proc.kill()
        gone = HelperGone(f"the MLflow helper process ended ({err!r})")
        casts, self.casts = self.casts, {}
        for on_answer in casts.values():
            if on_answer is not None:
                on_answer(False, str(gone))
        return gone

    def call(self, client: int, name: str, *args: Any, **kwargs: Any) -> Any:
        """``name(*args, **kwargs)`` of the helper's client ``client`` (``"open"``:
        a new client of the URI ``args[0]`` in the folder ``args[1]``; its number
        is the answer), once the casts before it are done (their answers go to
        their ``on_answer`` on the way). An answer left unread by an
        interrupted call (a Ctrl-C while it waited) is skipped by the next one.
        Anything on the answer channel that is not an answer means the helper
        cannot be trusted: it is stopped (``HelperGone``)."""
        try:
            number = self._send(client, name, args, kwargs)
            while self._answer() != number:
                pass
        except Exception as err:  # noqa: BLE001 - a broken pipe, an end, a corrupt answer
            raise self._gone(err) from None
        ok, value = self._last
        if ok:
            return value
        raise HelperError(value)

    def cast(self, on_answer: Callable[[bool, Any], None] | None, client: int, name: str,
             *args: Any, **kwargs: Any) -> None:
        """Send ``name(*args, **kwargs)`` without waiting for it: the command
        goes on while the helper works. Its answer ``(ok, value)`` goes to
        ``on_answer`` when a later call reads it, or at ``close``; if the
        helper ends first, ``on_answer(False, why)``."""
        try:
            self.casts[self._send(client, name, args, kwargs)] = on_answer
        except Exception as err:  # noqa: BLE001 - a broken pipe
            raise self._gone(err) from None

    def close(self, timeout: float = 60.0) -> None:
        """Close its stdin (it ends once its work is done) and wait for it,
        reading the answers of the casts still out: the store is closed when
        the command ends. A helper never called (a config error, a run that
        did not track) is stopped at once, wherever its import is."""
        if not self.used:
            self.proc.kill()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            while self.casts:
                self._answer()
        except BaseException as err:  # noqa: BLE001 - it ended without answering them, or
            self._gone(err)  # a Ctrl-C cut the wait short: what is unanswered is reported
            if not isinstance(err, Exception):
                raise
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@harness.hookimpl
def prestart(argv: list[str]) -> None:
    """Start the helper for a command that may track: not with
    ``tracking.enabled=false``, or in a process that has loaded mlflow already.
    It is closed when the process ends. It serves every run this process
    records: a single run, the sweep's parent run, and each job of a multirun
    that runs in this process (Hydra's default launcher); a job in another
    process (joblib, submitit) opens a client of its own."""
    if _STARTED or "mlflow" in sys.modules:
        return
    if any(a.replace(" ", "").lower().lstrip("+~") == "tracking.enabled=false" for a in argv):
        return
    helper = start(HTTP_DEFAULTS)
    if helper is not None:
        _STARTED.append(helper)
        atexit.register(helper.close)


def started() -> Helper | None:
    """The helper ``prestart`` started in this process, if any."""
    return _STARTED[0] if _STARTED and _STARTED[0].owner == os.getpid() else None


def start(env: dict[str, str] | None = None) -> Helper | None:
    """Start the helper (importing mlflow at once), or None if it is switched off
    (``MINIMAX_BENCH_MLFLOW_HELPER=0``) or cannot be started. ``env``:
    variables to set in its environment if unset (the tracker's HTTP defaults)."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return None
    environ = dict(os.environ)
    for key, value in (env or {}).items():
        environ.setdefault(key, value)
    try:
        # -P: the working directory's own modules (a project's plugins/) stay out of its path
        proc = subprocess.Popen([sys.executable, "-P", "-m", __name__], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=environ, start_new_session=True)
    except OSError:
        return None
    return Helper(proc)


class RemoteClient:
    """The ``MlflowClient`` methods the tracker calls, run in the helper
    (``log_batch`` takes plain params and metrics, see the module docstring).
    If the helper fails to answer, the client switches to an ``MlflowClient``
    in this process for this call and every later one."""

    def __init__(self, helper: Helper, uri: str | None) -> None:
        self._helper: Helper | None = helper
        self._uri = uri
        self._direct: Any = None
        try:  # the working directory: a relative sqlite:///... means the same file
            self._id, self.tracking_uri = helper.call(0, "open", uri, os.getcwd())
        except HelperGone:
            self._switch()

    def _switch(self) -> None:
        from mlflow.tracking import MlflowClient

        self._helper = None
        self._direct = MlflowClient(tracking_uri=self._uri)
        self.tracking_uri = self._direct.tracking_uri

    def cast(self, on_answer: Callable[[bool, Any], None] | None, name: str, *args: Any,
             **kwargs: Any) -> None:
        """``name(*args, **kwargs)`` without waiting for it (``Helper.cast``); in
        this process, at once, if the helper is gone."""
        if self._helper is not None:
            try:
                return self._helper.cast(on_answer, self._id, name, *args, **kwargs)
            except HelperGone:
                self._switch()
        try:
            value = (sequence(self._direct, *args) if name == SEQUENCE else
                     getattr(self._direct, name)(*args, **entities(kwargs)))
        except Exception as err:  # noqa: BLE001 - every error goes to on_answer
            ok, value = False, f"{type(err).__name__}: {err}"
        else:
            ok = True
        if on_answer is not None:
            on_answer(ok, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._helper is not None:
                try:
                    return self._helper.call(self._id, name, *args, **kwargs)
                except HelperGone:
                    self._switch()
            return getattr(self._direct, name)(*args, **entities(kwargs))

        return call


#: the request that makes several calls in order, stopping at the first that fails
SEQUENCE = "sequence"


def sequence(client: Any, calls: list[tuple[str, tuple, dict]]) -> int:
    """Make ``calls`` (``(method, args, kwargs)``) of ``client`` in order; the
    first that fails raises (the later ones are not made: a run's final
    status never goes out ahead of a checkpoint batch that failed). Returns
    how many were made."""
    for name, args, kwargs in calls:
        getattr(client, name)(*args, **entities(kwargs))
    return len(calls)


def entities(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``log_batch``'s plain params and metrics as MLflow entities."""
    if "params" not in kwargs and "metrics" not in kwargs:
        return kwargs
    from mlflow.entities import Metric, Param

    out = dict(kwargs)
    if "params" in out:
        out["params"] = [Param(*p) for p in out["params"]]
    if "metrics" in out:
        out["metrics"] = [Metric(*m) for m in out["metrics"]]
    return out


def plain(value: Any) -> Any:
    """An MLflow entity as a ``SimpleNamespace`` of its properties, recursively."""
    from mlflow.entities._mlflow_object import _MlflowObject

    if isinstance(value, _MlflowObject):
        return types.SimpleNamespace(**{key: plain(item) for key, item in value})
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if type(value).__module__.startswith("mlflow"):  # unpickling it would import mlflow
        return str(value)
    return value


def serve() -> None:
    """The helper's loop: import mlflow, then answer requests until stdin
    closes; then the process ends at once."""
    import gc
    import signal

    gc.disable()  # a short-lived process: collections would only walk mlflow's objects
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # it ends when the command does
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    # nothing but answers on the answer channel: file descriptor 1 (C code,
    # child processes) and sys.stdout go to stderr; answers to a copy of the pipe
    requests = sys.stdin.buffer
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from mlflow.tracking import MlflowClient

    with contextlib.suppress(ImportError):  # the store of the command's default URI
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    clients: dict[int, Any] = {}
    while True:
        try:
            sent, number, name, args, kwargs = pickle.load(requests)
        except Exception as err:  # noqa: BLE001 - the command ended (or broke a request off)
            # every answer was sent after its write; no interpreter teardown of
            # mlflow's modules (half a second)
            sys.stderr.flush()
            os._exit(0 if isinstance(err, EOFError) else 1)
        try:
            if name == "open":
                os.chdir(args[1])
                number = len(clients) + 1
                clients[number] = MlflowClient(tracking_uri=args[0])
                answer = (sent, True, (number, clients[number].tracking_uri))
            elif name == SEQUENCE:
                answer = (sent, True, plain(sequence(clients[number], *args)))
            else:
                call = getattr(clients[number], name)
                answer = (sent, True, plain(call(*args, **entities(kwargs))))
        except Exception as err:  # noqa: BLE001 - every error goes back to the caller
            answer = (sent, False, f"{type(err).__name__}: {err}")
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


if __name__ == "__main__":
    serve()
