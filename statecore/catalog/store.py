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

__all__ = ["Sessions", "Store", "now"]


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
