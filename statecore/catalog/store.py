"""What the catalog's stores share: sessions over one engine, and the clock.

Each store (:mod:`~statecore.catalog.jobs`, :mod:`~statecore.catalog.checkpoints`,
:mod:`~statecore.catalog.savepoints`, :mod:`~statecore.catalog.leases`,
:mod:`~statecore.catalog.live`) owns the queries of one concept; :class:`~statecore.catalog.Catalog`
is the facade over all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from statecore.catalog.engine import WRITE

__all__ = ["Sessions", "Store", "database_now", "now"]


@dataclass(frozen=True)
class Sessions:
    """Read sessions, and write sessions whose transaction takes the write lock first."""

    read: sessionmaker[Session]
    write: sessionmaker[Session]

    @classmethod
    def of(cls, engine: sa.Engine) -> Sessions:
        return cls(
            read=sessionmaker(engine, expire_on_commit=False),
            write=sessionmaker(engine.execution_options(**WRITE), expire_on_commit=False),
        )


class Store:
    """A store of the catalog: the queries of one concept, over the shared sessions."""

    def __init__(self, sessions: Sessions) -> None:
        self._read = sessions.read
        self._write = sessions.write


def now() -> datetime:
    """The current time, aware UTC, as the catalog stores it."""
    return datetime.now(UTC)


def database_now(session: Session) -> datetime:
    """The current time on the catalog database's own clock, aware UTC: what every client of
    the catalog agrees on, whatever its own clock says (a lease's expiry is judged on it).
    PostgreSQL's ``clock_timestamp()``; SQLite's ``'now'`` (one file: the clock of the machine
    its clients share)."""
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        text = session.scalar(sa.text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"))
        return datetime.fromisoformat(str(text)).replace(tzinfo=UTC)
    function = sa.func.clock_timestamp() if dialect == "postgresql" else sa.func.current_timestamp()
    value = session.scalar(sa.select(function))
    if not isinstance(value, datetime):
        raise TypeError(f"the catalog's clock answered {value!r}, not a timestamp")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
