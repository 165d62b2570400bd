"""Repair state: erase a key everywhere, or run SQL ``UPDATE``/``DELETE`` over a copy of the state.

Neither ever touches a completed checkpoint: the repaired state is written as a NEW savepoint
(only the key groups that changed are rewritten, every other file is copied), which the job then
restores from (``keyed_process(restore_from=...)``, ``--from-savepoint``, ``statecore savepoints
restore``). A statement that would change a key or a partition column is refused before anything
is written (:class:`~statecore.errors.StateRepairError`): a key decides the key group its rows
live in, so keys are deleted, never renamed.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statecore.catalog import Catalog, TableVersion
from statecore.config import StatecoreConfig
from statecore.errors import KeyTypeError, StateRepairError
from statecore.keygroups import assign_to_key_group
from statecore.maintenance import maintenance_lock
from statecore.progress import Progress, silent
from statecore.query import connect, delta_scan, ident, view_names
from statecore.restore_point import RestorePoint, resolve_point
from statecore.savepoint import Rewrite, write_savepoint
from statecore.snapshot.maintenance import TableLayout, read_files, table_files, table_layout

__all__ = ["RepairResult", "TableRepair", "apply_sql", "delete_key"]

KEY = "key"
_ROW = "__statecore_row"
_IDENT = r'"(?:[^"]|"")+"|[\w$]+'
_TARGET = re.compile(rf"\b(?:UPDATE|DELETE\s+FROM)\s+({_IDENT})\s*\.\s*({_IDENT})(?!\s*\.)",
                     re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class TableRepair:
    """One table the repair changed."""

    operator: str
    table_kind: str
    state: str
    partitions: tuple[int, ...]  # the key groups (subtasks) rewritten
    rows_before: int
    rows_after: int


@dataclass(frozen=True, kw_only=True)
class RepairResult:
    """The tables changed and the savepoint holding the repaired state (``None``: no change)."""

    job: str
    source: str
    changes: tuple[TableRepair, ...]
    savepoint: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "source": self.source, "savepoint": self.savepoint,
                "changes": [{**asdict(c), "partitions": list(c.partitions)}
                            for c in self.changes]}


def _source(catalog: Catalog, job: str, source: str | None) -> RestorePoint:
    point = resolve_point(catalog, job, source)
    if point.job != job:
        point = point.for_job(job)
    return point


def _write(catalog: Catalog, config: StatecoreConfig, point: RestorePoint, plans: dict[
        tuple[str, str, str], tuple[Rewrite, TableRepair]], *, reason: str, name: str | None,
           target: str | None, progress: Progress) -> RepairResult:
    if not plans:
        progress(f"{reason} {point.job}: nothing changed; no savepoint written")
        return RepairResult(job=point.job, source=point.label, changes=(), savepoint=None)

    def rewrite(table: TableVersion, layout: TableLayout) -> Rewrite | None:
        found = plans.get((table.operator, table.table_kind, table.state))
        return None if found is None else found[0]

    saved = write_savepoint(catalog, config, point, reason=reason, name=name, target=target,
                            rewrite=rewrite, progress=progress)
    return RepairResult(job=point.job, source=point.label, savepoint=saved.savepoint,
                        changes=tuple(repair for _, repair in plans.values()))


def _key_value(key: str, key_type: pa.DataType, job: str) -> Any:
    if pa.types.is_integer(key_type):
        try:
            return int(key)
        except ValueError:
            raise KeyTypeError(f"job {job!r} has integer keys; {key!r} is not one") from None
    if pa.types.is_binary(key_type) or pa.types.is_large_binary(key_type):
        return key.encode("utf-8")
    return key


def delete_key(
    config: StatecoreConfig, catalog: Catalog, job: str, key: str, *, source: str | None = None,
    name: str | None = None, target: str | None = None, progress: Progress = silent,
) -> RepairResult:
    """Erase ``key`` from every state and timer of ``job`` (a GDPR erasure) into a new
    savepoint; ``source`` is the checkpoint id, savepoint name or folder to start from (default:
    the latest checkpoint)."""
    with maintenance_lock(catalog, job, "state-delete"):
        point = _source(catalog, job, source)
        plans: dict[tuple[str, str, str], tuple[Rewrite, TableRepair]] = {}
        for table in point.tables:
            layout = table_layout(table.path, table.version)
            if layout.partition != "key_group" or KEY not in layout.rows_schema.names:
                continue
            value = _key_value(key, layout.rows_schema.field(KEY).type, job)
            key_group = assign_to_key_group(value, point.max_parallelism)
            files = [f for f in table_files(table.path, table.version)
                     if f.key_group == key_group]
            parts = [rows for _, rows in read_files(table.path, files)]
            if not parts:
                continue
            rows = pa.concat_tables(parts)
            wanted = pa.scalar(value, rows.schema.field(KEY).type)
            kept = rows.filter(pc.invert(pc.equal(rows.column(KEY), wanted)))
            if kept.num_rows == rows.num_rows:
                continue
            progress(f"state delete {job}: {rows.num_rows - kept.num_rows} rows of "
                     f"{table.state} in key group {key_group}")
            plans[(table.operator, table.table_kind, table.state)] = (
                Rewrite(parts=[(key_group, kept)], replaced=frozenset({key_group})),
                TableRepair(operator=table.operator, table_kind=table.table_kind,
                            state=table.state, partitions=(key_group,),
                            rows_before=table.rows,
                            rows_after=table.rows - rows.num_rows + kept.num_rows))
        return _write(catalog, config, point, plans, reason="state-delete", name=name,
                      target=target, progress=progress)


def _unquote(identifier: str) -> str:
    if identifier.startswith('"'):
        return identifier[1:-1].replace('""', '"')
    return identifier


def _targets(sql: str, job: str, views: dict[str, TableVersion]) -> list[list[str]]:
    """The statements of ``sql`` (UPDATE or DELETE only) and the view each one writes."""
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
                f"{statement.query.strip()!r}")
        if _ROW in statement.query:
            raise StateRepairError(f"{_ROW} is reserved")
        found = _TARGET.search(statement.query)
        parts = [_unquote(part) for part in found.groups()] if found else []
        if len(parts) != 2 or parts[0] != job or parts[1] not in views:
            raise StateRepairError(
                f"{statement.query.strip()!r} must write one of the views of job {job!r}: "
                f"{', '.join(f'{job}.{v}' for v in views)}")
        out.append([statement.query, parts[1]])
    return out


def apply_sql(
    config: StatecoreConfig, catalog: Catalog, job: str, sql: str, *, source: str | None = None,
    name: str | None = None, target: str | None = None, progress: Progress = silent,
) -> RepairResult:
    """Run ``UPDATE``/``DELETE`` statements over a copy of ``job``'s state (views
    ``<job>.<state>``, as in ``statecore sql``) and write the result as a new savepoint."""
    with maintenance_lock(catalog, job, "state-apply"):
        point = _source(catalog, job, source)
        views = dict(zip(view_names(point.tables), point.tables))
        statements = _targets(sql, job, views)
        written = sorted({view for _, view in statements})
        con = connect()
        try:
            return _apply(config, catalog, point, con, views, statements, written, name=name,
                          target=target, progress=progress)
        finally:
            con.close()


def _apply(config: StatecoreConfig, catalog: Catalog, point: RestorePoint,
           con: duckdb.DuckDBPyConnection, views: dict[str, TableVersion],
           statements: list[list[str]], written: list[str], *, name: str | None,
           target: str | None, progress: Progress) -> RepairResult:
    job = point.job
    con.execute(f"CREATE SCHEMA {ident(job)}")
    con.execute("CREATE SCHEMA __statecore")
    for view, table in views.items():
        source = f"SELECT *, row_number() OVER () AS {_ROW} FROM {delta_scan(table)}"
        if view in written:
            con.execute(f"CREATE TABLE __statecore.{ident(view)} AS {source}")
            con.execute(f"CREATE TABLE {ident(job)}.{ident(view)} AS "
                        f"SELECT * FROM __statecore.{ident(view)}")
        else:
            con.execute(f"CREATE VIEW {ident(job)}.{ident(view)} AS "
                        f"SELECT * FROM {delta_scan(table)}")
    for query, _ in statements:
        progress(f"state apply {job}: {query.strip()}")
        try:
            con.execute(query)
        except duckdb.Error as exc:
            raise StateRepairError(f"{query.strip()!r} failed: {exc}") from exc
    plans: dict[tuple[str, str, str], tuple[Rewrite, TableRepair]] = {}
    for view in written:
        table = views[view]
        plan = _changed_partitions(con, job, view, table, point)
        if plan is not None:
            plans[(table.operator, table.table_kind, table.state)] = plan
    return _write(catalog, config, point, plans, reason="state-apply", name=name, target=target,
                  progress=progress)


def _changed_partitions(con: duckdb.DuckDBPyConnection, job: str, view: str,
                        table: TableVersion, point: RestorePoint,
                        ) -> tuple[Rewrite, TableRepair] | None:
    layout = table_layout(table.path, table.version)
    partition = layout.partition
    after, before = f"{ident(job)}.{ident(view)}", f"__statecore.{ident(view)}"
    fixed = [c for c in (KEY, partition) if c in layout.schema.names]
    moved = " OR ".join(f"a.{ident(c)} IS DISTINCT FROM b.{ident(c)}" for c in fixed)
    changed_keys = con.execute(f"SELECT count(*) FROM {after} a JOIN {before} b USING ({_ROW}) "
                               f"WHERE {moved}").fetchone()
    if changed_keys and changed_keys[0]:
        raise StateRepairError(
            f"the statements change the {' or '.join(fixed)} column of {changed_keys[0]} rows of "
            f"{job}.{view}: keys decide where state lives and cannot change; delete those rows "
            "instead. Nothing was written.")
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
        f"ORDER BY {_ROW}").to_arrow_table()
    groups = rows.column("__p").to_numpy(zero_copy_only=False)
    rows = rows.drop_columns(["__p"])
    try:
        rows = rows.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
        raise StateRepairError(
            f"{job}.{view}: the repaired rows no longer fit the state's schema: {exc}") from exc
    parts = {p: rows.filter(pa.array(groups == p)) for p in changed}
    rows_after = table.rows - sum(old.get(p, (0, 0))[1] for p in changed) + \
        int(np.count_nonzero(np.isin(groups, changed)))
    return (Rewrite(parts=sorted(parts.items()), replaced=frozenset(changed)),
            TableRepair(operator=table.operator, table_kind=table.table_kind, state=table.state,
                        partitions=tuple(int(p) for p in changed), rows_before=table.rows,
                        rows_after=rows_after))

