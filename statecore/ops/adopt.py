"""Adopt state edited by any engine as a savepoint (``statecore savepoint adopt``).

State tables are open Delta tables: a user may fix a savepoint's state with Spark SQL
(``DELETE``, ``UPDATE``, ``MERGE`` on ``delta.`<folder>```), with deltalake, or with any other
Delta writer, either in an exported savepoint's own folder or in a copy of it at another path.
:func:`adopt_savepoint` reads each table of the edited folder at its latest Delta version and
checks it against what statecore writes:

- **schema**: the partition column, and every column in order with the type the savepoint's
  table has (its state's serializer); no column added, dropped or retyped;
- **key groups**: every row's key group, recomputed from its key with statecore's assignment
  (:func:`~statecore.keygroups.arrow.assign_to_key_groups`) and the savepoint's max
  parallelism, is the partition the row lies in;
- **one row per key and namespace** (and ``user_key`` for map state; per timestamp and time
  domain for timers);
- **TTL columns**: present exactly where the state has TTL, never null nor negative, a list
  state's timestamps as many as its values;
- **values**: no null where statecore writes none, and pickled values (opt-in
  :data:`~statecore.types.PICKLED`) well-formed pickles, checked without unpickling them;
- **operator state**: subtasks within the savepoint's parallelism, the state's mode on every
  row, and a broadcast state's map the same on every subtask.

A table written with deletion vectors (or any other Delta reader feature statecore does not
read) is refused as a whole.

If anything is wrong, :class:`~statecore.errors.StateAdoptionError` lists the first
``max_problems`` bad rows (state, key, key group, expected key group, reason) with the count of
all of them, and nothing is registered. Otherwise the tables are **copied**, at the versions
that were validated, into a new savepoint folder (``<warehouse>/_savepoints/<job>/<name>``, as
an export: :func:`~statecore.ops.savepoint.write_savepoint`) and recorded in the catalog; files
another writer stored with another physical schema (delta-rs stores strings as string views,
Spark every column as nullable) are rewritten as statecore writes them, which a restore checks.
A copy, not a pin on the edited tables' versions: the edited folder is the user's, and their
later edits, VACUUM or deletion must not change what the savepoint restores. The adopted
savepoint keeps its source's checkpoint, watermark and source input, so restoring it
(``--savepoint NAME``, ``statecore savepoints restore NAME``) behaves as restoring the source.
"""

from __future__ import annotations

import pickletools
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statecore.catalog import Catalog, TableVersion
from statecore.checkpoint.lock import maintenance_lock
from statecore.checkpoint.points import (
    RestorePoint,
    is_savepoint_name,
    load_savepoint,
    savepoint_point,
    table_location,
)
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, StateAdoptionError
from statecore.keygroups.arrow import assign_to_key_groups
from statecore.ops.savepoint import Rewrite, TableRewriter, write_savepoint
from statecore.progress import Progress, silent
from statecore.snapshot import TIMERS
from statecore.snapshot.rewrite import (
    TableLayout,
    read_files,
    table_files,
    table_layout,
    table_reader_features,
    table_version,
)
from statecore.types import is_pickled

__all__ = ["AdoptProblem", "adopt_savepoint", "edited_point", "validate_edit"]

MAX_PROBLEMS = 20
"""How many bad rows a refusal lists by default (it counts them all)."""

TTL_COLUMN = "ttl_timestamp"
TIME_DOMAINS = frozenset({"event_time", "processing_time"})
OPERATOR_MODES = {
    "operator_list": "split_distribute",
    "union_list": "union",
    "broadcast": "broadcast",
}


@dataclass(frozen=True, kw_only=True)
class AdoptProblem:
    """One bad row (or table) of an edit: the state, the row's key (an operator state's user key
    or value), the key group (an operator state's subtask) it lies in, the one it belongs in
    (``None`` when that is not the problem) and why it is refused."""

    operator: str
    state: str
    reason: str
    key: Any = None
    key_group: int | None = None
    expected_key_group: int | None = None

    def __str__(self) -> str:
        where = f"{self.operator}/{self.state}"
        if self.key is not None:
            where += f" key {self.key!r}"
        if self.key_group is not None:
            where += f" key group {self.key_group}"
        if self.expected_key_group is not None:
            where += f" (expected key group {self.expected_key_group})"
        return f"{where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "operator": self.operator,
            "state": self.state,
            "key": self.key,
            "key_group": self.key_group,
            "expected_key_group": self.expected_key_group,
            "reason": self.reason,
        }


@dataclass
class _Problems:
    limit: int
    found: list[AdoptProblem] = field(default_factory=list)
    total: int = 0

    def add(self, problem: AdoptProblem) -> None:
        self.total += 1
        if len(self.found) < self.limit:
            self.found.append(problem)


def _hashable(value: Any) -> Hashable:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value  # type: ignore[no-any-return]


def edited_point(
    catalog: Catalog, location: str, *, job: str | None = None, source: str | None = None
) -> tuple[RestorePoint, RestorePoint]:
    """The savepoint the edit started from and the edit itself: the tables below ``location``
    (an export's folder, or its name among ``job``'s savepoints; or a copy of one, whose
    ``_savepoint.json`` came with it or whose ``source`` savepoint is named) at their latest
    versions."""
    if is_savepoint_name(location):
        if job is None:
            raise ConfigError(f"savepoint {location!r} is a name: give its job (--job) too")
        record = catalog.get_savepoint(job, location)
        if record.pin is not None:
            raise ConfigError(
                f"savepoint {location!r} of job {job!r} is a pin: its tables are the job's own "
                "tables, which only the job writes; export it (`statecore savepoint JOB "
                "--export`), edit the export and adopt that"
            )
        folder = record.path.rstrip("/")
    else:
        folder = location.rstrip("/")
    if source is None:
        start = load_savepoint(folder)
    elif is_savepoint_name(source) and job is None:
        raise ConfigError(f"source savepoint {source!r} is a name: give its job (--job) too")
    else:
        start = savepoint_point(catalog, job or "", source)
    if job is not None and job != start.job:
        raise ConfigError(
            f"the tables in {folder} are the state of job {start.job!r}, not of job {job!r}"
        )
    tables = []
    for table in start.tables:
        uri = f"{folder}/{table_location(table.operator, table.table_kind, table.state)}"
        version = table_version(uri)  # a missing table: validate_edit refuses it
        tables.append(replace(table, path=uri, version=0 if version is None else version))
    edit = replace(start, savepoint=folder, pinned=False, tables=tuple(tables))
    return start, edit


def validate_edit(
    start: RestorePoint, edit: RestorePoint, *, max_problems: int = MAX_PROBLEMS
) -> tuple[list[AdoptProblem], int]:
    """The first ``max_problems`` problems of ``edit`` (the tables of ``start`` edited), and how
    many there are in all; ``([], 0)``: it can be adopted."""
    problems = _Problems(max_problems)
    for before, after in zip(start.tables, edit.tables, strict=True):
        _check_table(start, before, after, problems)
    return problems.found, problems.total


def _check_table(
    start: RestorePoint, before: TableVersion, after: TableVersion, problems: _Problems
) -> None:
    def table_problem(reason: str) -> None:
        problems.add(AdoptProblem(operator=after.operator, state=after.state, reason=reason))

    if table_version(after.path) is None:
        table_problem(f"table {after.path} is missing")
        return
    features = table_reader_features(after.path, after.version)
    if features:
        table_problem(
            f"table {after.path} uses Delta reader features {sorted(features)} (e.g. deletion "
            "vectors), which statecore does not read: rewrite it without them (Spark: "
            "ALTER TABLE ... SET TBLPROPERTIES ('delta.enableDeletionVectors' = false) then "
            "REORG TABLE ... APPLY (PURGE)) or edit a fresh export"
        )
        return
    expected = table_layout(before.path, before.version)
    actual = table_layout(after.path, after.version)
    if not _check_schema(expected, actual, table_problem):
        return
    files = table_files(after.path, after.version)
    if after.table_kind == "operator":
        _check_operator_rows(start, before, after, expected, files, problems)
    else:
        _check_keyed_rows(start, after, expected, files, problems)


def _check_schema(expected: TableLayout, actual: TableLayout, problem: Any) -> bool:
    ok = True
    if actual.partition != expected.partition:
        problem(f"partitioned by {actual.partition!r}, not by {expected.partition!r}")
        return False
    want = {f.name: f.type for f in expected.rows_schema}
    have = {f.name: f.type for f in actual.rows_schema}
    for name in want.keys() - have.keys():
        problem(f"column {name!r} ({want[name]}) is missing")
        ok = False
    for name in have.keys() - want.keys():
        problem(f"column {name!r} ({have[name]}) is not a column of this state")
        ok = False
    for name in want.keys() & have.keys():
        if want[name] != have[name]:
            problem(f"column {name!r} is {have[name]}, the state's serializer writes {want[name]}")
            ok = False
    if ok and list(have) != list(want):
        problem(f"columns are in the order {list(have)}, statecore writes {list(want)}")
        ok = False
    return ok


def _null_problems(
    rows: pa.Table, schema: pa.Schema, report: Any, keys: list[Any], part: int
) -> list[bool]:
    """Report rows with a null where ``schema`` has none; which rows are good."""
    good = [True] * rows.num_rows
    for f in schema:
        if f.nullable or not rows.column(f.name).null_count:
            continue
        for i, null in enumerate(pc.is_null(rows.column(f.name)).to_pylist()):
            if null:
                good[i] = False
                report(keys[i], part, None, f"column {f.name!r} is null; statecore writes none")
    return good


def _as_written(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with the columns' types as statecore writes them: another writer's files may
    store a string as a string view, or as a large string, the same type in Delta's schema."""
    loose = pa.schema([f.with_nullable(True) for f in schema])
    return rows.select(schema.names).cast(loose)


def _bad_pickle(value: bytes) -> str | None:
    try:
        for _ in pickletools.genops(value):
            pass
    except Exception as exc:
        return str(exc) or type(exc).__name__
    return None


def _check_values(
    rows: pa.Table, schema: pa.Schema, report: Any, keys: list[Any], part: int
) -> None:
    """Pickled columns (or list elements) hold well-formed pickles; TTL timestamps are
    consistent with the values."""
    for f in schema:
        if not is_pickled(f):
            continue
        for i, value in enumerate(rows.column(f.name).to_pylist()):
            for item in value if isinstance(value, list) else [value]:
                reason = None if item is None else _bad_pickle(item)
                if reason is not None:
                    report(keys[i], part, None, f"{f.name!r} is not a value pickle wrote: {reason}")
    if TTL_COLUMN not in schema.names:
        return
    stamps = rows.column(TTL_COLUMN).to_pylist()
    values = rows.column("value").to_pylist() if "value" in schema.names else None
    for i, stamp in enumerate(stamps):
        if isinstance(stamp, list):
            if any(s is None or s < 0 for s in stamp):
                report(keys[i], part, None, f"{TTL_COLUMN} {stamp} has a null or negative entry")
            elif values is not None and len(stamp) != len(values[i] or []):
                report(
                    keys[i],
                    part,
                    None,
                    f"{len(stamp)} {TTL_COLUMN} entries for {len(values[i] or [])} values",
                )
        elif stamp is not None and stamp < 0:
            report(keys[i], part, None, f"{TTL_COLUMN} {stamp} is negative")


def _check_keyed_rows(
    start: RestorePoint,
    table: TableVersion,
    layout: TableLayout,
    files: list[Any],
    problems: _Problems,
) -> None:
    schema = layout.rows_schema
    if table.table_kind == TIMERS:
        identity = ["key", "namespace", "timestamp", "time_domain"]
    else:
        identity = ["key", "namespace"] + (["user_key"] if "user_key" in schema.names else [])
    seen: dict[tuple[Hashable, ...], int] = {}

    def report(key: Any, part: int, expected: int | None, reason: str) -> None:
        problems.add(
            AdoptProblem(
                operator=table.operator,
                state=table.state,
                key=key,
                key_group=part,
                expected_key_group=expected,
                reason=reason,
            )
        )

    for file, stored in read_files(table.path, files):
        rows = _as_written(stored, schema)
        part = file.key_group
        keys = rows.column("key").to_pylist()
        good = _null_problems(rows, schema, report, keys, part)
        present = [k is not None for k in keys]
        present_keys = rows.column("key").filter(pa.array(present, pa.bool_()))
        groups = iter(assign_to_key_groups(present_keys, start.max_parallelism))
        for i, key in enumerate(keys):
            if key is None:
                continue
            expected = int(next(groups))
            if expected != part:
                good[i] = False
                report(
                    key,
                    part,
                    expected,
                    f"key hashes to key group {expected} (max parallelism "
                    f"{start.max_parallelism}), not the partition it lies in",
                )
        if table.table_kind == TIMERS:
            for i, domain in enumerate(rows.column("time_domain").to_pylist()):
                if domain is not None and domain not in TIME_DOMAINS:
                    report(
                        keys[i],
                        part,
                        None,
                        f"time_domain {domain!r} is not one of {sorted(TIME_DOMAINS)}",
                    )
        _check_values(rows, schema, report, keys, part)
        columns = [[_hashable(v) for v in rows.column(c).to_pylist()] for c in identity]
        for i, ident in enumerate(zip(*columns, strict=True)):
            if not good[i]:
                continue
            if ident in seen:
                report(
                    keys[i],
                    part,
                    None,
                    f"more than one row for {', '.join(identity)} = {ident!r} (also in key group "
                    f"{seen[ident]})",
                )
            else:
                seen[ident] = part


def _source_mode(before: TableVersion) -> str | None:
    """The mode the savepoint's table stored its rows with, if it holds any."""
    files = table_files(before.path, before.version)
    modes = {
        m for _, rows in read_files(before.path, files) for m in rows.column("mode").to_pylist()
    }
    return modes.pop() if len(modes) == 1 else None


def _check_operator_rows(
    start: RestorePoint,
    before: TableVersion,
    table: TableVersion,
    layout: TableLayout,
    files: list[Any],
    problems: _Problems,
) -> None:
    schema = layout.rows_schema
    state = start.state(table)
    mode = _source_mode(before) or (None if state is None else OPERATOR_MODES.get(state.kind))
    entries: dict[int, dict[Hashable, Hashable]] = {}

    def report(key: Any, part: int, expected: int | None, reason: str) -> None:
        problems.add(
            AdoptProblem(
                operator=table.operator,
                state=table.state,
                key=key,
                key_group=part,
                expected_key_group=expected,
                reason=reason,
            )
        )

    for file, stored in read_files(table.path, files):
        rows = _as_written(stored, schema)
        part = file.key_group
        column = "user_key" if "user_key" in schema.names else "value"
        keys = rows.column(column).to_pylist()
        if not 0 <= part < start.parallelism:
            for key in keys:
                report(
                    key,
                    part,
                    None,
                    f"subtask {part} is outside the savepoint's "
                    f"parallelism {start.parallelism} (subtasks 0..{start.parallelism - 1})",
                )
            continue
        good = _null_problems(rows, schema, report, keys, part)
        if mode is not None:
            for i, stored in enumerate(rows.column("mode").to_pylist()):
                if stored is not None and stored != mode:
                    good[i] = False
                    report(
                        keys[i],
                        part,
                        None,
                        f"mode {stored!r}; state {table.state!r} stores mode {mode!r}",
                    )
        _check_values(rows, schema, report, keys, part)
        if column != "user_key":
            continue
        values = rows.column("value").to_pylist()
        mine = entries.setdefault(part, {})
        for i, key in enumerate(keys):
            if not good[i]:
                continue
            if _hashable(key) in mine:
                report(key, part, None, f"more than one row for user_key {key!r} in subtask {part}")
            mine[_hashable(key)] = _hashable(values[i])
    if (
        mode == "broadcast"
        and len({tuple(sorted(m.items(), key=repr)) for m in entries.values()}) > 1
    ):
        reference = min(entries)
        for part, mine in sorted(entries.items()):
            for key in sorted(mine.keys() ^ entries[reference].keys(), key=repr):
                report(
                    key,
                    part,
                    None,
                    f"broadcast state differs between subtasks {reference} and "
                    f"{part}: every subtask holds the same map",
                )
            for key in sorted(mine.keys() & entries[reference].keys(), key=repr):
                if mine[key] != entries[reference][key]:
                    report(
                        key,
                        part,
                        None,
                        f"broadcast value differs from subtask {reference}'s: "
                        "every subtask holds the same map",
                    )


def adopt_savepoint(
    config: StatecoreConfig,
    catalog: Catalog,
    location: str,
    *,
    name: str,
    job: str | None = None,
    source: str | None = None,
    max_problems: int = MAX_PROBLEMS,
    progress: Progress = silent,
) -> RestorePoint:
    """Validate the state tables below ``location`` (edited by any engine) and register them as
    savepoint ``name`` of their job, copied at the validated versions into a new savepoint
    folder; :class:`StateAdoptionError` (the first ``max_problems`` bad rows and their count)
    and nothing registered if they are not state statecore restores.

    ``location`` is an exported savepoint's folder edited in place (or its name, with ``job``),
    or a copy of one: with its ``_savepoint.json``, or with ``source`` naming the savepoint it
    was copied from (a name with ``job``, or a folder)."""
    start, edit = edited_point(catalog, location, job=job, source=source)
    if not catalog.has_job(start.job):
        catalog.ensure_job(
            start.job, parallelism=start.parallelism, max_parallelism=start.max_parallelism
        )
    with maintenance_lock(catalog, start.job, "adopt", wait=config.lease_wait):
        progress(f"adopt {name}: validating {len(edit.tables)} table(s) in {edit.savepoint}")
        found, total = validate_edit(start, edit, max_problems=max_problems)
        if total:
            lines = "\n".join(f"  {p}" for p in found)
            more = f"\n  ... and {total - len(found)} more" if total > len(found) else ""
            raise StateAdoptionError(
                f"job {start.job!r}: the state in {edit.savepoint} was not adopted as savepoint "
                f"{name!r}, {total} problem(s):\n{lines}{more}",
                tuple(found),
                total,
            )
        layouts = {
            (t.operator, t.table_kind, t.state): table_layout(t.path, t.version)
            for t in start.tables
        }
        return write_savepoint(
            catalog,
            config,
            edit,
            reason="adopt",
            name=name,
            rewrite=_as_statecore_writes(layouts),
            progress=progress,
        )


def _as_statecore_writes(layouts: dict[tuple[str, str, str], TableLayout]) -> TableRewriter:
    """Copy each table, rewriting the partitions with a file whose stored schema is not the one
    statecore writes (delta-rs stores strings as string views, Spark every column as nullable
    and in ``key_group=N/`` folders): a restore checks the schema."""

    def rewrite(table: TableVersion, layout: TableLayout) -> Rewrite | None:
        expected = layouts[(table.operator, table.table_kind, table.state)]
        files = table_files(table.path, table.version)
        stray = frozenset(
            file.key_group
            for file, rows in read_files(table.path, files)
            if not rows.schema.equals(expected.rows_schema)
        )
        if not stray and layout == expected:
            return None
        parts = (
            (file.key_group, rows.select(expected.rows_schema.names).cast(expected.rows_schema))
            for file, rows in read_files(table.path, [f for f in files if f.key_group in stray])
        )
        return Rewrite(parts=parts, replaced=stray, layout=expected)

    return rewrite
