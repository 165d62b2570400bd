"""What of a component's output reaches ``make up``'s console: warnings, errors and tracebacks,
never INFO (the API server's access log, the scheduler's loop and next-run lines). Every line
goes to the component's log file whatever it says.

The components log through structlog (``2026-01-01T00:00:00.000000Z [warning  ] message ...``);
some lines come from the standard library's logging (``[2026-...] {file.py:12} WARNING - ...``)
or are bare (a traceback, a warning printed by :mod:`warnings`, PostgreSQL's ``LOG:``). A line
that opens a record sets its level; the lines after it (a traceback, a multi-line message)
follow that record.
"""

from __future__ import annotations

import re
import sys
import threading
import time

__all__ = ["Echo", "say"]

_RECORD = re.compile(
    r"^(?:\S+\s+)?\[?\d{4}-\d\d-\d\d[T ][\d:.,]+\S*\]?\s"  # a timestamp opens a record
    r"|^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s"  # uvicorn's own prefix
)
_LOUD_LEVEL = re.compile(
    r"\[\s*(?:warning|error|critical|exception)\s*\]"  # structlog
    r"|\b(?:WARNING|ERROR|CRITICAL|FATAL|PANIC)\b"  # logging, uvicorn, PostgreSQL
)
_BARE_LOUD = re.compile(r"^Traceback |Error\b|Exception\b|Warning:|^\s*raise |Killed")
_QUIET = (
    # SimpleAuthManager (make up's login) warns on any database but SQLite that the deployment
    # looks like production: make up is for one developer, on 127.0.0.1 by default
    "SimpleAuthManager is active but the deployment shape looks like production",
    # Airflow 3.3's own start-up noise in every component, nothing a user can act on
    "Using `httpx` with `starlette.testclient` is deprecated",
    "ASGI app factory detected",
    # the triggerer's second SIGTERM at make down (airflow_up ends its wait for a gone runner)
    "Forcing exit due to second exit signal",
)

_lock = threading.Lock()


def say(text: str, *, loud: bool = False) -> None:
    """A line of the supervisor's own (``!!!`` marks what needs the user's attention)."""
    stamp = time.strftime("%H:%M:%S")
    mark = "!!! " if loud else ""
    with _lock:
        for line in text.splitlines() or [""]:
            print(f"{stamp} statecore: {mark}{line}", file=sys.stderr if loud else sys.stdout)
        sys.stdout.flush()
        sys.stderr.flush()


class Echo:
    """Decides, line after line of one component, what the console shows."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loud = False  # the level of the current record

    def __call__(self, line: str) -> None:
        if _RECORD.match(line):
            self.loud = bool(_LOUD_LEVEL.search(line)) and not any(q in line for q in _QUIET)
        elif line.startswith("Traceback ") or (not line[:1].isspace() and _BARE_LOUD.search(line)):
            self.loud = True
        if self.loud:
            with _lock:
                print(f"{self.name:>13} | {line}", flush=True)
