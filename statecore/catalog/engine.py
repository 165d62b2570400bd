"""The SQLAlchemy engine behind a catalog URL.

SQLite is set up so that a Spark driver and a CLI can share one file: write-ahead logging, a
busy timeout, foreign keys on, and transactions that really begin (``BEGIN``, or
``BEGIN IMMEDIATE`` for a connection with the ``statecore_write`` execution option, so that a
read-then-write transaction takes the write lock first and never fails on a lock upgrade).
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from statecore.errors import ConfigError

__all__ = [
    "WRITE",
    "catalog_location",
    "create_engine",
    "discard_engine",
    "redacted",
    "shared_engine",
]

WRITE = {"statecore_write": True}
"""Execution options of a connection that writes: its transaction takes the write lock first."""

_BUSY_TIMEOUT = timedelta(seconds=30)


def redacted(url: sa.URL | str) -> str:
    """The URL without its password, for messages."""
    url = sa.make_url(url) if isinstance(url, str) else url
    return url.render_as_string(hide_password=True)


def catalog_location(engine: sa.Engine) -> str:
    """The file of a SQLite catalog, else its URL without the password: for messages."""
    url = engine.url
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return f"file {Path(url.database).resolve()}"
    return redacted(url)


_SHARED: dict[tuple[Any, ...], sa.Engine] = {}
_SHARED_LOCK = threading.Lock()


def shared_engine(url: str) -> sa.Engine:
    """The engine for ``url`` this process shares between the catalogs it opens, so that its
    cache of compiled statements (and, for a server database, its connection pool) outlives one
    catalog: a point lookup and every micro-batch of a stream open the catalog anew, and
    compiling their statements again cost more than running them. Keyed by process (a forked
    child makes its own). A SQLite engine keeps no connection open between uses, so a catalog
    file replaced in place (a backup restored) is read as it is now, as before; and a catalog
    whose folder was deleted since is made again in a new folder, as on its first open."""
    key = (os.getpid(), url)
    with _SHARED_LOCK:
        engine = _SHARED.get(key)
        if engine is None:
            return _SHARED.setdefault(key, create_engine(url, shared=True))
    _make_sqlite_folder(url, engine.url)
    return engine


def discard_engine(engine: sa.Engine) -> None:
    """Forget and dispose of ``engine`` (a catalog that could not be opened through it)."""
    with _SHARED_LOCK:
        for k in [k for k, e in _SHARED.items() if e is engine]:
            del _SHARED[k]
    engine.dispose()


def create_engine(url: str, *, shared: bool = False) -> sa.Engine:
    """Create the engine for ``url``; for a SQLite file, create its parent directory. A
    ``shared`` SQLite engine opens a connection per use (no pool)."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ConfigError(f"checkpoint catalog URL {url!r} is not a SQLAlchemy URL") from exc
    is_sqlite = parsed.get_backend_name() == "sqlite"
    database = parsed.database or ":memory:"
    _make_sqlite_folder(url, parsed)
    try:
        options: dict[str, Any] = {"pool_pre_ping": not is_sqlite}
        if shared and is_sqlite and database != ":memory:":
            options["poolclass"] = sa.pool.NullPool
        engine = sa.create_engine(parsed, **options)
    except (sa.exc.ArgumentError, ImportError) as exc:
        raise ConfigError(f"cannot open checkpoint catalog {redacted(parsed)}: {exc}") from exc
    if is_sqlite:
        _configure_sqlite(engine)
    return engine


def _make_sqlite_folder(url: str, parsed: sa.URL) -> None:
    """Create the folder of a SQLite catalog file (nothing for another database)."""
    database = parsed.database or ":memory:"
    if parsed.get_backend_name() != "sqlite" or database == ":memory:":
        return
    if database.startswith("file:"):
        return
    try:
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create checkpoint catalog {url!r}: {exc}") from exc


def _configure_sqlite(engine: sa.Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the sqlite3 module, decide where transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT.total_seconds() * 1000)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        write = connection.get_execution_options().get("statecore_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
