"""Checkpoints the tracking store did not take: buffered, sent when it
answers again, and replayed by hand if it never does.

A store that fails mid-run loses no checkpoint: each record (a checkpoint's
metrics, then the run's final status) waits in memory and in
``<state_dir>/pending-<run id>.jsonl`` and goes out, in order, with the next
record the store takes. A run resumed after an interrupt sends what its
interrupted run left first. What is still there when the run ends is sent
with::

    python -m plugins.tracking.mlflow_pending replay FILE
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from plugins.tracking import mlflow_store


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pending_file(context, handle: dict[str, Any]) -> Path:
    folder = Path(context.config.get("state_dir") or ".minimax-bench")
    return folder / f"pending-{handle['run_id']}.jsonl"


def write_pending(path: Path, handle: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"uri": handle["uri"], "run_id": handle["run_id"], **r})
             for r in handle["pending"]]
    path.write_text("\n".join(lines) + "\n")


def take_over(context, handle: dict[str, Any]) -> None:
    """A resumed run first sends the checkpoints its interrupted run could not
    (its final status is dropped: this run sets its own); if the store fails
    again they stay buffered ahead of the new ones, in the same file."""
    path = pending_file(context, handle)
    if not path.is_file():
        return
    handle["pending"] = [r for r in read_records(path) if "status" not in r]
    try:
        flush(handle)
    except Exception as err:  # noqa: BLE001 - any transport or server error
        print(f"minimax-bench: {len(handle['pending'])} checkpoint(s) left in {path} by the "
              f"interrupted run are still unsent ({err!r}); they are kept and sent first.",
              file=sys.stderr)
        write_pending(path, handle)
        return
    path.unlink()
    print(f"minimax-bench: sent the checkpoints left in {path} by the interrupted run.",
          file=sys.stderr)


def flush(handle: dict[str, Any]) -> None:
    """Send buffered records in order; stop at the first failure (kept for later)."""
    client, pending = handle["client"], handle["pending"]
    while pending:
        record = pending[0]
        if "status" in record:
            client.set_terminated(handle["run_id"], status=record["status"])
        else:
            batch = [(k, v, record["timestamp"], record["step"])
                     for k, v in record["metrics"].items()]
            mlflow_store.log_batch(client, handle["run_id"], metrics=batch)
        pending.pop(0)


def send(context, handle: dict[str, Any], record: dict) -> None:
    """Send ``record`` after whatever is buffered; buffer it if the store fails."""
    had_pending = bool(handle["pending"])
    handle["pending"].append(record)
    try:
        flush(handle)
    except Exception as err:  # noqa: BLE001 - any transport or server error
        path = pending_file(context, handle)  # (flush stops at the first record unsent)
        if len(handle["pending"]) == 1:
            print(f"minimax-bench: the tracking store {handle['uri']} failed ({err!r}); "
                  f"checkpoints are kept in {path} and sent when it answers again.",
                  file=sys.stderr)
        write_pending(path, handle)
        return
    if had_pending:
        pending_file(context, handle).unlink(missing_ok=True)
        print(f"minimax-bench: the tracking store {handle['uri']} answers again; "
              "buffered checkpoints were sent.", file=sys.stderr)


def left_over(context, handle: dict[str, Any]) -> None:
    """At run end: say where the records the store never took are, and how to send them."""
    if handle["pending"]:
        path = pending_file(context, handle)
        print(f"minimax-bench: {len(handle['pending'])} record(s) of run {handle['run_id']} "
              f"could not be sent to {handle['uri']}; they are kept in {path}. Send them "
              f"with:  python -m plugins.tracking.mlflow_pending replay {path}", file=sys.stderr)


def replay(path: str | Path) -> int:
    """Send a pending file's records (checkpoints, then the final status) to their run."""
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
