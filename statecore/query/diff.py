"""Compare state: per-table checksums of a restore point, and the keys that differ between two.

A row's fingerprint is DuckDB's ``hash()`` of every column but the partition (``key_group`` or
``subtask``), so the same state at another parallelism or max parallelism has the same checksum.
A table's checksum is the number of rows and keys and the sum of its rows' fingerprints; a key
changed when the fingerprints of its rows differ. Tables without a ``key`` column (operator
state) are compared row by row: rows appear or disappear, they never change. DuckDB runs in the
sandbox of ``statecore sql``: it reads the points' tables and nothing else.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import duckdb

from statecore.catalog import TableVersion
from statecore.checkpoint.points import RestorePoint
from statecore.query.sql import connect, delta_scan, ident, sandbox, scan_errors, state_scan
from statecore.snapshot.changelog import CHANGES

__all__ = ["StateDiff", "TableChecksum", "checksums", "diff_points", "state_tables"]

_PARTITIONS = ("key_group", "subtask")


@dataclass(frozen=True, kw_only=True)
class TableChecksum:
    """Rows, distinct keys (``None`` without a key column) and the fingerprint sum of a table."""

    operator: str
    table_kind: str
    state: str
    rows: int
    keys: int | None
    checksum: str  # a 128-bit sum, as text so that JSON and XCom keep every digit

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class StateDiff:
    """How one table differs from A to B: keys (rows, without keys) added, removed, changed."""

    operator: str
    table_kind: str
    state: str
    added: int
    removed: int
    changed: int
    unchanged: int
    examples: tuple[str, ...] = ()  # some of the keys that differ, as text

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "examples": list(self.examples)}


@contextmanager
def _sandboxed(tables: Sequence[TableVersion]) -> Iterator[duckdb.DuckDBPyConnection]:
    """A sandboxed connection reading ``tables``; errors reading them name table and file."""
    con = connect()
    try:
        with tempfile.TemporaryDirectory(prefix="statecore-diff-") as spill:
            sandbox(con, [t.path for t in tables], temp_directory=spill)
            with scan_errors(tables):
                yield con
    finally:
        con.close()


def _columns(con: duckdb.DuckDBPyConnection, scan: str) -> list[str]:
    return [row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()]


def _fingerprint(columns: list[str]) -> str:
    values = [ident(c) for c in columns if c not in _PARTITIONS]
    return f"hash({', '.join(values)})"


def state_tables(point: RestorePoint) -> list[tuple[TableVersion, str]]:
    """Each table of ``point`` but its changes tables, with the SQL expression reading it: a
    keyed state's rows with its pending changes applied (changelog checkpoints), so the same
    state compares equal however much of it is materialized."""
    changes = {(t.operator, t.state): t for t in point.tables if t.table_kind == CHANGES}
    return [
        (
            t,
            f"({state_scan(t, changes[t.operator, t.state]).strip()})"
            if t.table_kind == "keyed" and (t.operator, t.state) in changes
            else delta_scan(t),
        )
        for t in point.tables
        if t.table_kind != CHANGES
    ]


def _checksum(con: duckdb.DuckDBPyConnection, table: TableVersion, scan: str) -> TableChecksum:
    columns = _columns(con, scan)
    keys = "count(DISTINCT key)" if "key" in columns else "NULL"
    rows, key_count, total = con.execute(
        f"SELECT count(*), {keys}, coalesce(sum({_fingerprint(columns)}::HUGEINT), 0) FROM {scan}"
    ).fetchone() or (0, None, 0)
    return TableChecksum(
        operator=table.operator,
        table_kind=table.table_kind,
        state=table.state,
        rows=int(rows),
        checksum=str(total),
        keys=None if key_count is None else int(key_count),
    )


def checksums(point: RestorePoint) -> list[TableChecksum]:
    """The checksum of every table of ``point``."""
    with _sandboxed(point.tables) as con:
        return [_checksum(con, table, scan) for table, scan in state_tables(point)]


def _per_key(con: duckdb.DuckDBPyConnection, scan: str | None, name: str, keyed: bool) -> str:
    if scan is None:
        return f"{name} AS (SELECT NULL::VARCHAR AS k, 0 AS n, 0::HUGEINT AS h WHERE false)"
    fingerprint = _fingerprint(_columns(con, scan))
    if keyed:
        return (
            f"{name} AS (SELECT key::VARCHAR AS k, count(*) AS n, "
            f"sum({fingerprint}::HUGEINT) AS h FROM {scan} GROUP BY key)"
        )
    return (
        f"{name} AS (SELECT {fingerprint}::VARCHAR AS k, count(*) AS n, 0::HUGEINT AS h "
        f"FROM {scan} GROUP BY k)"
    )


def _has_key(con: duckdb.DuckDBPyConnection, scan: str | None) -> bool:
    return scan is not None and "key" in _columns(con, scan)


def _diff_table(
    con: duckdb.DuckDBPyConnection,
    a: tuple[TableVersion, str] | None,
    b: tuple[TableVersion, str] | None,
    examples: int,
) -> StateDiff:
    scan_a, scan_b = (None if a is None else a[1]), (None if b is None else b[1])
    keyed = _has_key(con, scan_a) or _has_key(con, scan_b)
    query = f"""
        WITH {_per_key(con, scan_a, "a", keyed)}, {_per_key(con, scan_b, "b", keyed)},
        joined AS (
            SELECT coalesce(a.k, b.k) AS k,
                   CASE WHEN a.k IS NULL THEN 'added' WHEN b.k IS NULL THEN 'removed'
                        WHEN a.n <> b.n OR a.h <> b.h THEN 'changed' ELSE 'unchanged' END AS how
            FROM a FULL OUTER JOIN b ON a.k = b.k)
        SELECT count(*) FILTER (WHERE how = 'added'), count(*) FILTER (WHERE how = 'removed'),
               count(*) FILTER (WHERE how = 'changed'), count(*) FILTER (WHERE how = 'unchanged'),
               (list(how || ' ' || k ORDER BY k) FILTER (WHERE how <> 'unchanged'))[1:{examples}]
        FROM joined"""
    added, removed, changed, unchanged, sample = con.execute(query).fetchone() or (0, 0, 0, 0, [])
    either = a or b
    assert either is not None
    any_table = either[0]
    return StateDiff(
        operator=any_table.operator,
        table_kind=any_table.table_kind,
        state=any_table.state,
        added=int(added),
        removed=int(removed),
        changed=int(changed),
        unchanged=int(unchanged),
        examples=tuple(sample or ()) if examples else (),
    )


def _by_name(point: RestorePoint) -> dict[tuple[str, str, str], tuple[TableVersion, str]]:
    return {(t.operator, t.table_kind, t.state): (t, scan) for t, scan in state_tables(point)}


def diff_points(a: RestorePoint, b: RestorePoint, *, examples: int = 5) -> list[StateDiff]:
    """Per table of either point: the keys added, removed and changed from ``a`` to ``b``."""
    left, right = _by_name(a), _by_name(b)
    with _sandboxed([*a.tables, *b.tables]) as con:
        return [
            _diff_table(con, left.get(name), right.get(name), examples)
            for name in sorted(set(left) | set(right))
        ]
