"""SQL over snapshots: DuckDB with its bundled Delta extension, one view per job and state.

Each table of a checkpoint or savepoint (keyed state, operator state, timers) is a view
``<job>.<state>`` over ``delta_scan(path, version => v)`` at the Delta version it names, so a
query sees exactly that checkpoint (time travel); the timers of an operator are ``<job>.timers``.
Where two tables share a name, the view is ``<job>."<operator>.<state>"``. The catalog's
checkpoints are the table ``statecore.checkpoints``, its savepoints ``statecore.savepoints``, the
state-access latency percentiles recorded with checkpoints ``statecore.state_latency``.
Queries are read-only, and the guarantee is DuckDB's own: once the views exist, the connection
is sandboxed (:func:`sandbox`): external access off, file access only to the folders of the
tables the views read, no extension installed or loaded, and the configuration locked, so
``read_csv('/etc/passwd')``, ``COPY ... TO``, ``ATTACH``, ``INSTALL``/``LOAD`` and ``SET`` fail in
DuckDB. Only ``SELECT`` statements (and ``EXPLAIN`` without ``ANALYZE``) run: that check, on
DuckDB's own parser and tokenizer, also refuses writes inside the tables' folders, which DuckDB's
access control allows alike for reading and writing.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
from duckdb_extensions import import_extension

from statecore.catalog import Catalog, TableVersion
from statecore.checkpoint.points import (
    RestorePoint,
)
from statecore.errors import (
    ConfigError,
    CorruptSnapshotError,
    UnknownStateError,
)
from statecore.query.views import (
    CATALOG_SCHEMA,
    catalog_listings,
    checkpoint_points,
    query_points,
    state_views_of,
    view_names,
)
from statecore.snapshot.changelog import CHANGE_CHECKPOINT, TOMBSTONE
from statecore.snapshot.rewrite import missing_log_entries
from statecore.snapshot.storage import S3Settings, throttling_hint

__all__ = [
    "StateViews",
    "connect",
    "delta_scan",
    "ident",
    "keywords",
    "open_point_views",
    "open_views",
    "read_only_statements",
    "run_sql",
    "sandbox",
    "scan_errors",
    "state_scan",
    "view_names",
]


_WORD = re.compile(r"\w+")
_SECRETS = re.compile(r"\b(duckdb_secrets|which_secret)\b", re.IGNORECASE)


def ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the Delta extension loaded (not yet sandboxed), and
    the S3 settings of the environment as its S3 secret when there are any."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    import_extension("delta", con=con)  # installs the bundled build, offline
    con.execute("LOAD delta")  # now: the sandbox forbids loading it later
    _s3_secret(con)
    return con


def _s3_secret(con: duckdb.DuckDBPyConnection) -> None:
    """httpfs and an S3 secret from :class:`~statecore.snapshot.storage.S3Settings` (DuckDB's
    Delta extension reads ``s3://`` tables with it), when the environment configures S3."""
    try:
        settings = S3Settings.from_env()
    except ConfigError:  # S3 misconfigured: reading an s3:// table says so (storage.py)
        return
    if not (settings.access_key_id or settings.endpoint_url):
        return
    import_extension("httpfs", con=con)
    con.execute("LOAD httpfs")
    # Throttled (503 SlowDown) and failed requests of the data files: the attempts of the
    # snapshot tables' other clients (storage.py), with exponential backoff from 100 ms.
    con.execute(f"SET http_retries = {settings.max_attempts - 1}")
    con.execute("SET http_retry_wait_ms = 100")
    con.execute("SET http_retry_backoff = 2")
    options = {"REGION": settings.region}
    if settings.access_key_id and settings.secret_access_key:
        options.update(KEY_ID=settings.access_key_id, SECRET=settings.secret_access_key)
        if settings.session_token:
            options["SESSION_TOKEN"] = settings.session_token
    if settings.endpoint_host:
        options.update(ENDPOINT=settings.endpoint_host, URL_STYLE="path")
    body = ", ".join(f"{k} {_literal(v)}" for k, v in options.items())
    con.execute(
        f"CREATE SECRET statecore_s3 (TYPE s3, {body}, USE_SSL {str(settings.use_ssl).lower()})"
    )


def _folder(path: str) -> str:
    return path.rstrip("/") + "/"


def sandbox(
    con: duckdb.DuckDBPyConnection, folders: Iterable[str], *, temp_directory: str | None = None
) -> None:
    """Lock ``con`` down: DuckDB may then touch only files under ``folders`` (the snapshot
    tables its views read; the Delta extension reads their logs itself), and
    ``temp_directory`` (where it spills; none when ``None``). External access, extension
    loading and every later ``SET`` are refused by DuckDB. Create the views first: they bind
    when queried, under the sandbox."""
    allowed = sorted({_folder(folder) for folder in folders})
    con.execute("SET temp_directory = ?", [temp_directory or ""])
    con.execute("SET allowed_directories = ?", [allowed])
    con.execute("SET allowed_paths = []")
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET allow_community_extensions = false")
    con.execute("SET lock_configuration = true")


def read_only_statements(query: str) -> list[duckdb.Statement]:
    """The statements of ``query`` as DuckDB parses them; :class:`ConfigError` unless each is a
    ``SELECT`` or an ``EXPLAIN`` that does not run its statement (no ``ANALYZE``)."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise ConfigError(f"SQL error: {exc}") from exc
    if not statements:
        raise ConfigError("the query holds no statement")
    for statement in statements:
        kind = statement.type.name
        if statement.type == duckdb.StatementType.EXPLAIN and _analyzes(statement.query):
            kind = "EXPLAIN ANALYZE"  # it runs the statement it explains
        if kind not in ("SELECT", "EXPLAIN"):
            raise ConfigError(
                f"statecore sql is read-only: {kind} is not allowed "
                "(repair state with `statecore state apply`, which writes a new savepoint)"
            )
    return statements


def keywords(query: str) -> list[str]:
    """The keywords of ``query``, upper case, by DuckDB's tokenizer (comments and string
    literals are not keywords).

    >>> keywords("/* UPDATE x */ EXPLAIN analyze SELECT 'DELETE'")
    ['EXPLAIN', 'ANALYZE', 'SELECT']
    """
    return [
        word.group(0).upper()
        for start, kind in duckdb.tokenize(query)
        if kind == duckdb.token_type.keyword and (word := _WORD.match(query, start))
    ]


def _analyzes(query: str) -> bool:
    return bool({"ANALYZE", "ANALYSE"} & set(keywords(query)))


def delta_scan(table: TableVersion) -> str:
    """The SQL table expression reading ``table`` at its version."""
    return f"delta_scan({_literal(table.path)}, version => {int(table.version)})"


def _corrupt(tables: Sequence[TableVersion], exc: duckdb.Error) -> CorruptSnapshotError | None:
    """The table (version and file) that ``exc``, an error of DuckDB reading Delta tables, is
    about; ``None`` when it is not about reading one of ``tables``."""
    message = str(exc).split("\n")[0]
    for table in tables:
        root = table.path.rstrip("/") + "/"
        if root in message:
            found = re.search(re.escape(root) + r"[^'\"]*", message)
            file = found.group(0)[len(root) :] if found else "?"
            return CorruptSnapshotError(f"{_where(table)}: file {file} cannot be read: {message}")
    if "DeltaKernel" not in message:
        return None
    for table in tables:
        missing = missing_log_entries(table.path, table.version)
        if missing:
            return CorruptSnapshotError(
                f"{_where(table)}: file {', '.join(missing)} is missing: {message}"
            )
    probe = connect()
    try:
        for table in tables:
            try:
                probe.execute(f"DESCRIBE SELECT * FROM {delta_scan(table)}")
            except duckdb.Error:
                return CorruptSnapshotError(
                    f"{_where(table)}: its Delta log cannot be read: {message}"
                )
    finally:
        probe.close()
    return None


def _where(table: TableVersion) -> str:
    return (
        f"snapshot table {table.path} (state {table.state!r} of operator {table.operator!r}) "
        f"version {table.version}"
    )


@contextmanager
def scan_errors(tables: Sequence[TableVersion]) -> Iterator[None]:
    """Turn DuckDB's errors reading a missing or corrupt file of ``tables`` (a data file or a
    ``_delta_log`` entry) into :class:`CorruptSnapshotError` naming the table, version and file."""
    try:
        yield
    except (duckdb.IOException, duckdb.InvalidInputException) as exc:
        corrupt = _corrupt(tables, exc)
        if corrupt is None:
            raise
        raise corrupt from exc


@dataclass(frozen=True)
class StateViews:
    """An in-memory DuckDB connection with the views of some checkpoints or savepoints."""

    connection: duckdb.DuckDBPyConnection
    points: dict[str, RestorePoint]
    views: tuple[str, ...]
    temp_directory: str | None = field(default=None, repr=False)

    @property
    def checkpoints(self) -> dict[str, RestorePoint]:
        """The restore point shown for each job (kept for callers of the first version)."""
        return self.points

    def sql(self, query: str) -> pa.Table:
        """Run a read-only ``query``; its rows."""
        read_only_statements(query)
        if _SECRETS.search(query):
            raise ConfigError("statecore sql does not show the connection's S3 secret")
        tables = [t for p in self.points.values() for t in p.tables]
        try:
            with scan_errors(tables):
                return self.connection.sql(query).to_arrow_table()
        except AttributeError:
            raise ConfigError(f"the statement returns no rows: {query!r}") from None
        except duckdb.CatalogException as exc:
            raise UnknownStateError(
                f"{exc}; the views are: {', '.join(self.views) or 'none'} and "
                "statecore.checkpoints, statecore.savepoints, statecore.state_latency"
            ) from exc
        except duckdb.PermissionException as exc:
            raise ConfigError(
                f"statecore sql reads only the state tables of its views: {exc}"
            ) from exc
        except duckdb.Error as exc:
            raise ConfigError(
                f"SQL error: {exc}{throttling_hint(exc)} (views: {', '.join(self.views)})"
            ) from exc

    def close(self) -> None:
        self.connection.close()
        if self.temp_directory is not None:
            shutil.rmtree(self.temp_directory, ignore_errors=True)


def state_scan(table: TableVersion, changes: TableVersion | None) -> str:
    """The SQL query reading a state's rows: ``table`` at its version, with the pending changes
    of its changes table applied when it has one (changelog checkpoints: the rows of a key's
    latest change replace its materialized rows, a tombstone deletes them)."""
    if changes is None:
        return f"SELECT * FROM {delta_scan(table)}"
    return (
        f"WITH _changes AS (SELECT *, max({CHANGE_CHECKPOINT}) OVER (PARTITION BY key) AS _last "
        f"FROM {delta_scan(changes)}) "
        f"SELECT * FROM {delta_scan(table)} WHERE key NOT IN (SELECT key FROM _changes) "
        f"UNION ALL BY NAME "
        f"SELECT * EXCLUDE ({CHANGE_CHECKPOINT}, {TOMBSTONE}, _last) FROM _changes "
        f"WHERE {CHANGE_CHECKPOINT} = _last AND NOT {TOMBSTONE}"
    )


def _add_views(con: duckdb.DuckDBPyConnection, point: RestorePoint) -> list[str]:
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {ident(point.job)}")
    views = state_views_of(point)
    for view in views:
        con.execute(
            f"CREATE OR REPLACE VIEW {ident(view.schema)}.{ident(view.name)} AS "
            f"{state_scan(view.table, view.pending)}"
        )
    return [view.qualified for view in views]


def open_point_views(points: Sequence[RestorePoint], catalog: Catalog | None = None) -> StateViews:
    """Views of every table of ``points`` (one per job), plus the catalog's listings."""
    con = connect()
    try:
        return _open_point_views(con, points, catalog)
    except BaseException:
        con.close()
        raise


def _open_point_views(
    con: duckdb.DuckDBPyConnection, points: Sequence[RestorePoint], catalog: Catalog | None
) -> StateViews:
    views: list[str] = []
    for point in points:
        with scan_errors(point.tables):
            views += _add_views(con, point)
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {CATALOG_SCHEMA}")
    for listing in catalog_listings(catalog):
        con.register(f"_{listing.name}", listing.rows)
        con.execute(f"CREATE VIEW {CATALOG_SCHEMA}.{listing.name} AS SELECT * FROM _{listing.name}")
    spill = tempfile.mkdtemp(prefix="statecore-sql-")
    sandbox(con, [t.path for p in points for t in p.tables], temp_directory=spill)
    return StateViews(con, {p.job: p for p in points}, tuple(views), spill)


def open_views(
    catalog: Catalog, *, jobs: Sequence[str] | None = None, checkpoint_id: int | None = None
) -> StateViews:
    """Views for ``jobs`` (all when ``None``) at their latest or the given checkpoint."""
    return open_point_views(checkpoint_points(catalog, jobs, checkpoint_id), catalog)


def run_sql(
    catalog: Catalog,
    query: str,
    *,
    job: str | None = None,
    checkpoint_id: int | None = None,
    savepoint: str | None = None,
) -> pa.Table:
    """Run ``query`` over the views of ``job`` (or every job) at a checkpoint, or over a
    savepoint (a name of ``job``'s or a folder)."""
    points = query_points(catalog, job=job, checkpoint_id=checkpoint_id, savepoint=savepoint)
    views = open_point_views(points, catalog)
    try:
        return views.sql(query)
    finally:
        views.close()
