"""What a run prints, also in its run folder's log.

The command prints its summary, its errors and the plugins' notices to the
terminal (and Python its warnings); Hydra's job logging opens a log file
in the run folder (``outputs/<date>/<time>/cli.log``, one per job of a
``--multirun``) that nothing would write to. ``recorded`` copies each line
printed during a run to that file, through the file handlers Hydra's job
logging puts on the root logger, so the file takes their format and a user's
``hydra/job_logging`` choice decides where (or whether) it goes. What the
terminal shows is unchanged.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

#: the name the copied lines carry in the log
LOGGER = "minimax-bench"


class Echo:
    """A text stream that writes through to ``terminal`` and hands each complete
    line to ``handlers`` as a record at ``level``."""

    def __init__(self, terminal: TextIO, handlers: Sequence[logging.Handler], level: int) -> None:
        #: the stream written through to (a progress bar writes there alone: its
        #: redraws are no lines of the log)
        self.terminal = terminal
        self.handlers, self.level = list(handlers), level
        self._pending = ""
        self._lock = threading.Lock()  # a plugin's background thread may print

    def write(self, text: str) -> int:
        written = self.terminal.write(text)
        with self._lock:
            *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._record(line)
        return written

    def close_line(self) -> None:
        """Record what was printed without a final newline."""
        with self._lock:
            line, self._pending = self._pending, ""
        self._record(line)

    def _record(self, line: str) -> None:
        if not line.strip():
            return
        record = logging.LogRecord(LOGGER, self.level, __file__, 0, line, None, None)
        for handler in self.handlers:
            if record.levelno >= handler.level:
                handler.handle(record)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, ...
        return getattr(self.terminal, name)


@contextmanager
def recorded() -> Iterator[None]:
    """While the block runs, each line printed to stdout (at INFO) and stderr (at
    WARNING) also goes to the root logger's file handlers: the run folder's log
    of Hydra's job logging (none: nothing is copied)."""
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    if not files:
        yield
        return
    out, err = sys.stdout, sys.stderr
    echoes = Echo(out, files, logging.INFO), Echo(err, files, logging.WARNING)
    sys.stdout, sys.stderr = echoes
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
        for echo in echoes:
            echo.close_line()
