"""The run's journal: every checkpoint is on disk before the tracking store
sees it, and goes to the store in a few batches.

Each record (a checkpoint's metrics, then the run's final status) is
appended to ``<state_dir>/pending-<run id>.jsonl`` and synced to disk
(``fsync``, about 0.1 ms) as it happens, and kept in memory. The records go
to the store together, in batches of at most ``MAX_METRICS`` metric values:
when the oldest unsent one is ``tracking.send_every_s`` seconds old (10 s by
default: a long run's curves stay live), when the run ends, and at once
after a store that failed answers again. Once the store has taken them the
journal is removed. A run of a few seconds thus costs the store one call
for its checkpoints instead of one per checkpoint (each about 10 ms on a
local SQLite store, more over HTTP).

Nothing journalled is lost:

* a store that fails keeps the records in the journal, and they go out, in
  order, with the next batch it takes;
* a process killed outright (SIGKILL, out of memory) leaves its journal: a
  run resumed after it (``resume=true``) sends what its interrupted run left
  first; otherwise, and for what a store never took, send it with::

      python -m plugins.tracking.mlflow_pending replay FILE

Sending a record twice (a batch the store took but did not confirm) logs
its values once: the store keeps one metric value per key, step, timestamp
and value.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from plugins.tracking import mlflow_store, mlflow_worker

#: metric values per ``log_batch`` call (MLflow's limit for one batch)
MAX_METRICS = 1000


def read_records(path: Path) -> list[dict]:
    """A journal's records; a last line cut short (the process died while
    appending it, before its sync) is left out."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines) - 1:
                raise
    return records


def pending_file(context, handle: dict[str, Any]) -> Path:
    folder = Path(context.config.get("state_dir") or ".minimax-bench")
    return folder / f"pending-{handle['run_id']}.jsonl"


def _line(handle: dict[str, Any], record: dict) -> str:
    return json.dumps({"uri": handle["uri"], "run_id": handle["run_id"], **record}) + "\n"


def journal(path: Path, lines: list[str], *, append: bool = True) -> None:
    """Write ``lines`` to the journal at ``path`` and sync them to disk before
    returning: appended, or in place of what it holds (written beside it,
    then renamed over it: a crash keeps the old journal or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target = path if append else path.with_suffix(".tmp")
    with open(target, "a" if append else "w", encoding="utf-8") as out:
        out.writelines(lines)
        out.flush()
        os.fsync(out.fileno())
    if not append:
        os.replace(target, path)


def write_pending(path: Path, handle: dict[str, Any]) -> None:
    """The journal holds exactly the unsent records (none: it is removed)."""
    if handle["pending"]:
        journal(path, [_line(handle, r) for r in handle["pending"]], append=False)
    else:
        path.unlink(missing_ok=True)


def take_over(context, handle: dict[str, Any]) -> None:
    """A resumed run first sends the checkpoints its interrupted run left in
    its journal (its final status is dropped: this run sets its own); if the
    store fails again they stay in the journal ahead of the new ones."""
    path = pending_file(context, handle)
    if not path.is_file():
        return
    handle["pending"] = [r for r in read_records(path) if "status" not in r]
    write_pending(path, handle)
    try:
        flush(handle)
    except Exception as err:  # noqa: BLE001 - any transport or server error
        print(f"minimax-bench: {len(handle['pending'])} checkpoint(s) left in {path} by the "
              f"interrupted run are still unsent ({err!r}); they are kept and sent first.",
              file=sys.stderr)
        write_pending(path, handle)
        handle["failing"] = True
        return
    path.unlink(missing_ok=True)
    print(f"minimax-bench: sent the checkpoints left in {path} by the interrupted run.",
          file=sys.stderr)


def _calls(records: list[dict]) -> Iterator[tuple[str, dict]]:
    """The store calls that send ``records`` in order, with how many records
    each completes: the checkpoints in ``log_batch`` calls of at most
    ``MAX_METRICS`` values, a final status as ``set_terminated``."""
    at = 0
    while at < len(records):
        if "status" in records[at]:
            yield "set_terminated", {"status": records[at]["status"], "done": 1}
            at += 1
            continue
        batch: list[tuple] = []
        count = 0
        while at + count < len(records) and "status" not in records[at + count]:
            record = records[at + count]
            values = [(k, v, record["timestamp"], record["step"])
                      for k, v in record["metrics"].items()]
            if batch and len(batch) + len(values) > MAX_METRICS:
                break
            batch += values
            count += 1
        for start in range(0, len(batch), MAX_METRICS):  # (one record above the limit)
            last = start + MAX_METRICS >= len(batch)
            yield "log_batch", {"metrics": batch[start:start + MAX_METRICS],
                                "done": count if last else 0}
        at += count


def flush(handle: dict[str, Any]) -> None:
    """Send the unsent records in order, the checkpoints in batches of at most
    ``MAX_METRICS`` values; stop at the first failure (what is unsent stays)."""
    client, pending = handle["client"], handle["pending"]
    for name, call in list(_calls(pending)):
        done = call.pop("done")
        if name == "set_terminated":
            client.set_terminated(handle["run_id"], **call)
        else:
            mlflow_store.log_batch(client, handle["run_id"], **call)
        del pending[:done]


def send(context, handle: dict[str, Any], record: dict, *, every: float = 0.0) -> None:
    """Journal ``record``, then send what is unsent if it is due: a final
    status, records ``every`` seconds old, ``MAX_METRICS`` values waiting, or a
    store that failed before (tried again at each record until it answers)."""
    path = pending_file(context, handle)
    journal(path, [_line(handle, record)])
    pending = handle["pending"]
    pending.append(record)
    now = time.monotonic()
    since = handle.setdefault("unsent_since", now)
    waiting = sum(len(r.get("metrics", ())) for r in pending)
    if not ("status" in record or handle.get("failing") or now - since >= every
            or waiting >= MAX_METRICS):
        return
    try:
        flush(handle)
    except Exception as err:  # noqa: BLE001 - any transport or server error
        if not handle.get("failing"):
            print(f"minimax-bench: the tracking store {handle['uri']} failed ({err!r}); "
                  f"checkpoints are kept in {path} and sent when it answers again.",
                  file=sys.stderr)
        handle["failing"] = True
        write_pending(path, handle)  # (what a partial flush sent is no longer journalled)
        return
    handle.pop("unsent_since", None)
    path.unlink(missing_ok=True)
    if handle.pop("failing", False):
        print(f"minimax-bench: the tracking store {handle['uri']} answers again; "
              "journalled checkpoints were sent.", file=sys.stderr)


def finish(context, handle: dict[str, Any], status: str) -> None:
    """The run's end: journal its final status and send what is unsent. With
    the command's helper process (a client that can ``cast``) the calls go
    out without waiting: the command goes on (the next job of a multirun
    prepares) while the helper writes, and the journal is removed once the
    helper's answers say the store took everything (at the next call, or when
    the command ends). Otherwise (no helper, a tracking server, or a store
    that is failing) it waits; what stays unsent is in ``handle["pending"]``
    (``left_over`` says where)."""
    cast = getattr(handle["client"], "cast", None)
    if cast is None or handle.get("failing") or mlflow_store.is_server(handle["uri"]):
        # (a tracking server's outage at the end is waited out by the tracker)
        send(context, handle, {"status": status})
        return
    path = pending_file(context, handle)
    records = [*handle["pending"], {"status": status}]
    journal(path, [_line(handle, records[-1])])
    handle["pending"] = []

    def done(ok: bool, value: Any) -> None:
        if ok:
            path.unlink(missing_ok=True)
            return
        print(f"minimax-bench: the tracking store {handle['uri']} did not take the last "
              f"records of run {handle['run_id']} ({value}); they are kept in {path}. "
              f"Send them with:  python -m plugins.tracking.mlflow_pending replay {path}",
              file=sys.stderr)

    calls = []
    for name, call in _calls(records):
        call.pop("done")
        calls.append((name, (handle["run_id"],), call))
    # one request: the helper makes the calls in order and stops at the first
    # that fails (the status never goes out ahead of a batch that failed)
    cast(done, mlflow_worker.SEQUENCE, calls)


def left_over(context, handle: dict[str, Any]) -> None:
    """At run end: say where the records the store never took are, and how to send them."""
    if handle["pending"]:
        path = pending_file(context, handle)
        print(f"minimax-bench: {len(handle['pending'])} record(s) of run {handle['run_id']} "
              f"could not be sent to {handle['uri']}; they are kept in {path}. Send them "
              f"with:  python -m plugins.tracking.mlflow_pending replay {path}", file=sys.stderr)


def replay(path: str | Path) -> int:
    """Send a journal's records (checkpoints, then the final status) to their run."""
    path = Path(path)
    records = read_records(path)
    if not records:
        return 0
    handle = {"client": mlflow_store.client(records[0]["uri"]), "run_id": records[0]["run_id"],
              "pending": list(records)}
    flush(handle)
    path.unlink()
    return len(records)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "replay":
        sys.exit("usage: python -m plugins.tracking.mlflow_pending replay PENDING_FILE")
    print(f"sent {replay(sys.argv[2])} record(s)")
