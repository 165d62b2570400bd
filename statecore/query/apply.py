"""``state apply`` in DuckDB: run ``UPDATE``/``DELETE`` statements over a copy of a restore point
and tell which partitions (key groups or subtasks) of which tables they changed.

DuckDB's parser splits the statements and names their type; its tokenizer (which skips comments
and string literals as the parser does) gives the table each statement writes, the name that
follows ``UPDATE`` or ``DELETE FROM``. Only those tables are copied into DuckDB; every other view
stays a view, which DuckDB refuses to write. The connection is sandboxed as ``statecore sql``'s
(:func:`~statecore.query.sql.sandbox`) before any statement runs, so a statement reads nothing but
the state tables and writes no file.

>>> statement_target('UPDATE /* a comment */ clicks."total" SET value = 0')
['clicks', 'total']
>>> statement_target("DELETE FROM clicks.seen -- UPDATE clicks.total")
['clicks', 'seen']
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from statecore.catalog import TableVersion
from statecore.checkpoint.points import RestorePoint
from statecore.errors import StateRepairError
from statecore.progress import Progress, silent
from statecore.query.sql import connect, delta_scan, ident, sandbox, scan_errors, view_names
from statecore.snapshot.changelog import CHANGES
from statecore.snapshot.rewrite import table_layout

__all__ = ["TableChange", "apply_statements", "statement_target", "write_targets"]

KEY = "key"
_ROW = "__statecore_row"
_WORD = re.compile(r"\w+")
_NAME = re.compile(r'"(?:[^"]|"")*"|[^\W\d][\w$]*')
_NAME_TOKENS = (duckdb.token_type.identifier, duckdb.token_type.keyword)


@dataclass(frozen=True, kw_only=True)
class TableChange:
    """The partitions of one table that the statements changed, and their new rows."""

    view: str
    table: TableVersion
    parts: tuple[tuple[int, pa.Table], ...]
    rows_after: int

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(p for p, _ in self.parts)


def _name(query: str, start: int) -> str | None:
    found = _NAME.match(query, start)
    if found is None:
        return None
    text = found.group(0)
    return text[1:-1].replace('""', '"') if text.startswith('"') else text


def _keyword(query: str, token: tuple[int, duckdb.token_type]) -> str:
    start, kind = token
    found = _WORD.match(query, start) if kind == duckdb.token_type.keyword else None
    return found.group(0).upper() if found else ""


def statement_target(query: str) -> list[str]:
    """The qualified name (its parts) of the table an ``UPDATE`` or ``DELETE`` statement
    writes, as DuckDB's tokenizer reads it; ``[]`` when the statement does not start so."""
    tokens = duckdb.tokenize(query)
    first = [_keyword(query, token) for token in tokens[:2]]
    if first[:1] == ["UPDATE"]:
        rest = tokens[1:]
    elif first == ["DELETE", "FROM"]:
        rest = tokens[2:]
    else:
        return []
    parts: list[str] = []
    for index, (start, kind) in enumerate(rest):
        expect_name = index % 2 == 0
        if expect_name:
            name = _name(query, start) if kind in _NAME_TOKENS else None
            if name is None:
                return []
            parts.append(name)
        elif not (kind == duckdb.token_type.operator and query.startswith(".", start)):
            break
    return parts


def write_targets(sql: str, job: str, views: Sequence[str]) -> list[tuple[str, str]]:
    """The statements of ``sql`` (``UPDATE`` or ``DELETE`` only) and the view each one writes;
    :class:`StateRepairError` for any other statement or target."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise StateRepairError(f"SQL error: {exc}") from exc
    if not statements:
        raise StateRepairError("no statement to apply")
    out = []
    for statement in statements:
        if statement.type not in (duckdb.StatementType.UPDATE, duckdb.StatementType.DELETE):
            raise StateRepairError(
                f"only UPDATE and DELETE statements repair state, not {statement.type.name}: "
                f"{statement.query.strip()!r}"
            )
        if _ROW in statement.query:
            raise StateRepairError(f"{_ROW} is reserved")
        parts = statement_target(statement.query)
        if len(parts) != 2 or parts[0] != job or parts[1] not in views:
            raise StateRepairError(
                f"{statement.query.strip()!r} must write one of the views of job {job!r} (the "
                f"name after UPDATE or DELETE FROM): {', '.join(f'{job}.{v}' for v in views)}"
            )
        out.append((statement.query, parts[1]))
    return out


def apply_statements(
    point: RestorePoint, sql: str, *, progress: Progress = silent
) -> list[TableChange]:
    """Run the ``UPDATE``/``DELETE`` statements of ``sql`` over a copy of ``point``'s tables (the
    views ``<job>.<state>`` of ``statecore sql``); the tables whose rows changed, with the new
    rows of each changed partition. Nothing is written anywhere."""
    job = point.job
    tables = [t for t in point.tables if t.table_kind != CHANGES]  # empty: see require_materialized
    views = dict(zip(view_names(tables), tables))
    statements = write_targets(sql, job, list(views))
    written = sorted({view for _, view in statements})
    con = connect()
    try:
        with tempfile.TemporaryDirectory(prefix="statecore-apply-") as spill:
            with scan_errors(point.tables):
                _load(con, job, views, written)
                sandbox(con, [t.path for t in point.tables], temp_directory=spill)
                for query, _ in statements:
                    progress(f"state apply {job}: {query.strip()}")
                    try:
                        con.execute(query)
                    except duckdb.PermissionException as exc:
                        raise StateRepairError(
                            f"{query.strip()!r} reads or writes outside the state tables: {exc}"
                        ) from exc
                    except (duckdb.IOException, duckdb.InvalidInputException):
                        raise  # a snapshot file that cannot be read: scan_errors tells which
                    except duckdb.Error as exc:
                        raise StateRepairError(f"{query.strip()!r} failed: {exc}") from exc
                changes = [_changed(con, job, view, views[view], point) for view in written]
    finally:
        con.close()
    return [change for change in changes if change is not None]


def _load(
    con: duckdb.DuckDBPyConnection, job: str, views: dict[str, TableVersion], written: list[str]
) -> None:
    con.execute(f"CREATE SCHEMA {ident(job)}")
    con.execute("CREATE SCHEMA __statecore")
    for view, table in views.items():
        source = f"SELECT *, row_number() OVER () AS {_ROW} FROM {delta_scan(table)}"
        if view in written:
            con.execute(f"CREATE TABLE __statecore.{ident(view)} AS {source}")
            con.execute(
                f"CREATE TABLE {ident(job)}.{ident(view)} AS "
                f"SELECT * FROM __statecore.{ident(view)}"
            )
        else:
            con.execute(
                f"CREATE VIEW {ident(job)}.{ident(view)} AS SELECT * FROM {delta_scan(table)}"
            )


def _changed(
    con: duckdb.DuckDBPyConnection,
    job: str,
    view: str,
    table: TableVersion,
    point: RestorePoint,
) -> TableChange | None:
    layout = table_layout(table.path, table.version)
    partition = layout.partition
    after, before = f"{ident(job)}.{ident(view)}", f"__statecore.{ident(view)}"
    fixed = [c for c in (KEY, partition) if c in layout.schema.names]
    moved = " OR ".join(f"a.{ident(c)} IS DISTINCT FROM b.{ident(c)}" for c in fixed)
    changed_keys = con.execute(
        f"SELECT count(*) FROM {after} a JOIN {before} b USING ({_ROW}) WHERE {moved}"
    ).fetchone()
    if changed_keys and changed_keys[0]:
        raise StateRepairError(
            f"the statements change the {' or '.join(fixed)} column of {changed_keys[0]} rows of "
            f"{job}.{view}: keys decide where state lives and cannot change; delete those rows "
            "instead. Nothing was written."
        )
    columns = [ident(c) for c in layout.rows_schema.names]
    fingerprint = f"sum(hash({', '.join(columns)})::HUGEINT), count(*)"
    per_partition = f"SELECT {ident(partition)} AS p, {fingerprint} FROM {{}} GROUP BY p"
    old = {row[0]: row[1:] for row in con.execute(per_partition.format(before)).fetchall()}
    new = {row[0]: row[1:] for row in con.execute(per_partition.format(after)).fetchall()}
    changed = sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))
    if not changed:
        return None
    schema = point.rows_schema(table) or layout.rows_schema
    rows = con.execute(
        f"SELECT {', '.join(columns)}, {ident(partition)} AS __p FROM {after} "
        f"WHERE {ident(partition)} IN ({', '.join(str(int(p)) for p in changed)}) "
        f"ORDER BY {_ROW}"
    ).to_arrow_table()
    groups = rows.column("__p").to_numpy(zero_copy_only=False)
    rows = rows.drop_columns(["__p"])
    try:
        rows = rows.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
        raise StateRepairError(
            f"{job}.{view}: the repaired rows no longer fit the state's schema: {exc}"
        ) from exc
    rows_after = (
        table.rows
        - sum(old.get(p, (0, 0))[1] for p in changed)
        + int(np.count_nonzero(np.isin(groups, changed)))
    )
    return TableChange(
        view=view,
        table=table,
        parts=tuple((int(p), rows.filter(pa.array(groups == p))) for p in changed),
        rows_after=rows_after,
    )
