"""Spark SQL over state (delta-spark): the views of ``statecore sql``, for states larger than
one machine.

:func:`state_views` registers in a Spark session the views DuckDB's engine
(:mod:`statecore.query.sql`) has, planned by :mod:`statecore.query.views`: ``<job>.<state>`` for
each table of a checkpoint or savepoint (``<job>.timers``, operator and broadcast state alike),
read with delta-spark at the exact Delta versions the catalog names (``VERSION AS OF``), the
pending changes of changelog checkpoints merged in; ``statecore.checkpoints``,
``statecore.savepoints`` and ``statecore.state_latency``. Each job is a database of the
session's catalog holding views only (with a Hive metastore they would outlive the session:
use a session without Hive support).

The session needs Delta Lake (:func:`statecore.spark.session.build_session` adds it when the
JARs are there); without it :class:`~statecore.errors.ConfigError` says how to get them.
:func:`run_spark_sql` (``statecore sql --engine spark``) runs one read-only query: Spark's own
parser must find no command (no ``INSERT``, ``DELETE``, ``SET``, ``CREATE``...) in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from statecore.catalog import Catalog, TableVersion
from statecore.checkpoint.points import RestorePoint
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, UnknownStateError
from statecore.query.views import (
    CATALOG_SCHEMA,
    Listing,
    catalog_listings,
    query_points,
    state_views_of,
)
from statecore.snapshot.changelog import CHANGE_CHECKPOINT, TOMBSTONE
from statecore.spark.session import require_delta

__all__ = [
    "SparkStateViews",
    "delta_source",
    "listing_sql",
    "open_spark_views",
    "read_only",
    "run_spark_sql",
    "spark_scan",
    "state_views",
]

_FORBIDDEN_PLANS = (
    "org.apache.spark.sql.catalyst.plans.logical.Command",
    "org.apache.spark.sql.catalyst.plans.logical.ParsedStatement",
)


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def delta_source(table: TableVersion) -> str:
    """The Spark SQL relation reading ``table`` at its version."""
    return f"delta.{_ident(table.path)} VERSION AS OF {int(table.version)}"


def _columns(spark: SparkSession, table: TableVersion) -> dict[str, str]:
    schema = spark.read.format("delta").option("versionAsOf", table.version).load(table.path)
    return {f.name: f.dataType.simpleString() for f in schema.schema.fields}


def spark_scan(spark: SparkSession, table: TableVersion, changes: TableVersion | None) -> str:
    """The Spark SQL query reading a state's rows, as :func:`statecore.query.sql.state_scan`
    does in DuckDB: ``table`` at its version, the rows of a key's latest pending change in
    place of its rows, a tombstone deleting them. Columns by name: the table's, then those
    only the changes have (``NULL`` where a side lacks one), as DuckDB's ``UNION ALL BY NAME``.
    """
    if changes is None:
        return f"SELECT * FROM {delta_source(table)}"
    left = _columns(spark, table)
    right = {
        k: v for k, v in _columns(spark, changes).items() if k not in (CHANGE_CHECKPOINT, TOMBSTONE)
    }
    names = list(left) + [k for k in right if k not in left]

    def select(have: dict[str, str]) -> str:
        return ", ".join(
            _ident(n) if n in have else f"CAST(NULL AS {(left | right)[n]}) AS {_ident(n)}"
            for n in names
        )

    change, tomb = _ident(CHANGE_CHECKPOINT), _ident(TOMBSTONE)
    return (
        f"WITH _changes AS (SELECT *, max({change}) OVER (PARTITION BY key) AS _last "
        f"FROM {delta_source(changes)}) "
        f"SELECT {select(left)} FROM {delta_source(table)} "
        f"WHERE key NOT IN (SELECT key FROM _changes) "
        f"UNION ALL "
        f"SELECT {select(right)} FROM _changes WHERE {change} = _last AND NOT {tomb}"
    )


_SPARK_TYPES = {
    pa.string(): "STRING",
    pa.int64(): "BIGINT",
    pa.int32(): "INT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
}


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "TIMESTAMP"
    return _SPARK_TYPES.get(t, "STRING")


def _value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return _string(value.isoformat(sep=" "))
    if isinstance(value, float) and not math.isfinite(value):
        return _string(str(value).upper() if math.isinf(value) else "NaN")
    return _string(str(value))


def listing_sql(listing: Listing) -> str:
    """A ``SELECT`` of ``listing``'s rows as literals (metadata: no file to read)."""
    fields = list(listing.rows.schema)
    casts = ", ".join(
        f"CAST({_ident(f.name)} AS {_spark_type(f.type)}) AS {_ident(f.name)}" for f in fields
    )
    if listing.rows.num_rows == 0:
        nulls = ", ".join(f"NULL AS {_ident(f.name)}" for f in fields)
        return f"SELECT {casts} FROM (SELECT {nulls}) WHERE false"
    rows = ", ".join(
        "(" + ", ".join(_value(v) for v in row.values()) + ")" for row in listing.rows.to_pylist()
    )
    names = ", ".join(_ident(f.name) for f in fields)
    return f"SELECT {casts} FROM VALUES {rows} AS _rows({names})"


@dataclass(frozen=True)
class SparkStateViews:
    """The views registered in ``spark`` for some checkpoints or savepoints."""

    spark: SparkSession
    points: dict[str, RestorePoint]
    views: tuple[str, ...]
    databases: tuple[str, ...]

    def sql(self, query: str) -> pa.Table:
        """Run a read-only ``query``; its rows."""
        read_only(self.spark, query)
        try:
            return self.spark.sql(query).toArrow()
        except AnalysisException as exc:
            if exc.getCondition() in ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND"):
                raise UnknownStateError(
                    f"{exc}; the views are: {', '.join(self.views) or 'none'} and "
                    "statecore.checkpoints, statecore.savepoints, statecore.state_latency"
                ) from exc
            raise ConfigError(f"SQL error: {exc} (views: {', '.join(self.views)})") from exc

    def close(self) -> None:
        """Drop the views, and the databases they were alone in."""
        for view in self.views + tuple(f"{CATALOG_SCHEMA}.{n}" for n in _LISTINGS):
            schema, name = view.split(".", 1)
            self.spark.sql(f"DROP VIEW IF EXISTS {_ident(schema)}.{_ident(name)}")
        for database in self.databases:
            try:  # RESTRICT: kept when something else is in it
                self.spark.sql(f"DROP DATABASE IF EXISTS {_ident(database)} RESTRICT")
            except AnalysisException:
                pass


_LISTINGS = ("checkpoints", "savepoints", "state_latency")


def _class(jvm: Any, name: str) -> Any:
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    return jvm.java.lang.Class.forName(name, False, loader)


def read_only(spark: SparkSession, query: str) -> None:
    """:class:`ConfigError` unless Spark's parser finds a query and no command in ``query``."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(query)
    except Exception as exc:
        raise ConfigError(f"SQL error: {str(exc).splitlines()[0]}") from exc
    forbidden = [_class(jvm, name) for name in _FORBIDDEN_PLANS]
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        if any(cls.isInstance(node) for cls in forbidden):
            raise ConfigError(
                f"statecore sql is read-only: {node.nodeName()} is not allowed "
                "(repair state with `statecore state apply`, which writes a new savepoint)"
            )
        children = node.children()
        nodes += [children.apply(i) for i in range(children.size())]


def open_spark_views(
    spark: SparkSession, points: Sequence[RestorePoint], catalog: Catalog | None = None
) -> SparkStateViews:
    """Views of every table of ``points`` (one per job), plus the catalog's listings."""
    require_delta(spark)
    existing = {d.name for d in spark.catalog.listDatabases()}
    created: list[str] = []
    views: list[str] = []

    def database(name: str) -> None:
        if name not in existing and name not in created:
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {_ident(name)}")
            created.append(name)

    opened = SparkStateViews(spark, {p.job: p for p in points}, (), ())
    try:
        for point in points:
            database(point.job)
            for view in state_views_of(point):
                spark.sql(
                    f"CREATE OR REPLACE VIEW {_ident(view.schema)}.{_ident(view.name)} AS "
                    f"{spark_scan(spark, view.table, view.pending)}"
                )
                views.append(view.qualified)
        database(CATALOG_SCHEMA)
        for listing in catalog_listings(catalog):
            spark.sql(
                f"CREATE OR REPLACE VIEW {CATALOG_SCHEMA}.{_ident(listing.name)} AS "
                f"{listing_sql(listing)}"
            )
    except BaseException:
        SparkStateViews(spark, opened.points, tuple(views), tuple(created)).close()
        raise
    return SparkStateViews(spark, opened.points, tuple(views), tuple(created))


def state_views(
    spark: SparkSession,
    job: str | None = None,
    checkpoint: int | None = None,
    *,
    savepoint: str | None = None,
    catalog: Catalog | None = None,
    config: StatecoreConfig | None = None,
) -> SparkStateViews:
    """Register in ``spark`` the views of ``job`` (every job when ``None``) at ``checkpoint``
    (default: the latest completed one) or at ``savepoint`` (a name of ``job``'s or a
    folder), as ``statecore sql`` has them; query them with ``spark.sql``. ``catalog``: an
    open catalog (default: the configured one's, opened for this call)."""
    if catalog is not None:
        points = query_points(catalog, job=job, checkpoint_id=checkpoint, savepoint=savepoint)
        return open_spark_views(spark, points, catalog)
    config = config or StatecoreConfig.resolve()
    with Catalog.connect(config.catalog_url) as opened:
        return state_views(
            spark, job, checkpoint, savepoint=savepoint, catalog=opened, config=config
        )


def run_spark_sql(
    spark: SparkSession,
    catalog: Catalog,
    query: str,
    *,
    job: str | None = None,
    checkpoint_id: int | None = None,
    savepoint: str | None = None,
) -> pa.Table:
    """``statecore sql --engine spark``: run a read-only ``query`` over the views, as
    :func:`statecore.query.sql.run_sql` does in DuckDB; the views are dropped after."""
    views = state_views(spark, job, checkpoint_id, savepoint=savepoint, catalog=catalog)
    try:
        return views.sql(query)
    finally:
        views.close()
