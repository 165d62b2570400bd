"""Versioned migrations of the catalog's database schema.

``statecore_schema_version`` holds one row per applied migration. :data:`MIGRATIONS` is the
ordered list of steps; :func:`migrate` applies each missing step once, in its own transaction
together with its version row, so a crash leaves the schema at a whole version. Concurrent
callers (a Spark driver and a CLI starting together) are serialized: a transaction-scoped
advisory lock on Postgres, ``BEGIN IMMEDIATE`` on SQLite.

A step's DDL is frozen: it describes the tables as they were at that version and never follows
later edits of :mod:`statecore.catalog.models`; a change of schema is a new step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from statecore.catalog.engine import WRITE, redacted
from statecore.catalog.sizes import encode_sizes
from statecore.errors import ConfigError

__all__ = [
    "MIGRATIONS",
    "NAMING_CONVENTION",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_TABLE",
    "Migration",
    "current_version",
    "migrate",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Constraint names, so that a later migration can alter a constraint by name."""

SCHEMA_VERSION_TABLE = "statecore_schema_version"

_PG_LOCK_ID = 0x5374_4361_7461  # "StCata": the advisory lock that serializes migrations

_version_metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
_schema_version = sa.Table(
    SCHEMA_VERSION_TABLE,
    _version_metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("description", sa.String(200), nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True, kw_only=True)
class Migration:
    """One step of the schema: ``apply`` runs inside the step's transaction."""

    version: int
    description: str
    apply: Callable[[sa.Connection], None]


def _id_type() -> sa.types.TypeEngine[int]:
    # SQLite only autoincrements an INTEGER PRIMARY KEY.
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _v1_initial(connection: sa.Connection) -> None:
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    utc = sa.DateTime(timezone=True)
    sa.Table(
        "statecore_jobs",
        metadata,
        sa.Column("id", _id_type(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("parallelism", sa.Integer, nullable=False),
        sa.Column("max_parallelism", sa.Integer, nullable=False),
        sa.Column("created_at", utc, nullable=False),
        sa.Column("last_completion_seq", sa.BigInteger, nullable=False),
    )
    sa.Table(
        "statecore_states",
        metadata,
        sa.Column("id", _id_type(), primary_key=True),
        sa.Column("job_id", _id_type(), sa.ForeignKey("statecore_jobs.id"), nullable=False),
        sa.Column("operator", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("descriptor", sa.JSON, nullable=False),
        sa.Column("schema", sa.Text, nullable=False),
        sa.Column("ttl", sa.JSON, nullable=True),
        sa.Column("registered_at", utc, nullable=False),
        sa.UniqueConstraint("job_id", "operator", "name"),
    )
    sa.Table(
        "statecore_checkpoints",
        metadata,
        sa.Column("id", _id_type(), primary_key=True),
        sa.Column("job_id", _id_type(), sa.ForeignKey("statecore_jobs.id"), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("parallelism", sa.Integer, nullable=False),
        sa.Column("max_parallelism", sa.Integer, nullable=False),
        sa.Column("started_at", utc, nullable=False),
        sa.Column("completed_at", utc, nullable=True),
        sa.Column("completion_seq", sa.BigInteger, nullable=True),
        sa.Column("restored_from", sa.BigInteger, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.UniqueConstraint("job_id", "checkpoint_id"),
        sa.UniqueConstraint("job_id", "completion_seq"),
        sa.Index(None, "job_id", "status", "completion_seq"),
    )
    sa.Table(
        "statecore_checkpoint_tables",
        metadata,
        sa.Column("id", _id_type(), primary_key=True),
        sa.Column(
            "checkpoint_pk",
            _id_type(),
            sa.ForeignKey("statecore_checkpoints.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("operator", sa.String(200), nullable=False),
        sa.Column("state", sa.String(200), nullable=False),
        sa.Column("table_kind", sa.String(16), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("key_groups", sa.JSON, nullable=False),
        sa.UniqueConstraint("checkpoint_pk", "operator", "state", "table_kind"),
    )
    metadata.create_all(connection)


def _v2_savepoints_and_maintenance_locks(connection: sa.Connection) -> None:
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    sa.Table("statecore_jobs", metadata, sa.Column("id", _id_type(), primary_key=True))
    utc = sa.DateTime(timezone=True)
    sa.Table(
        "statecore_savepoints",
        metadata,
        sa.Column("id", _id_type(), primary_key=True),
        sa.Column("job_id", _id_type(), sa.ForeignKey("statecore_jobs.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("source_checkpoint", sa.BigInteger, nullable=True),
        sa.Column("parallelism", sa.Integer, nullable=False),
        sa.Column("max_parallelism", sa.Integer, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("created_at", utc, nullable=False),
        sa.UniqueConstraint("job_id", "name"),
    )
    sa.Table(
        "statecore_maintenance_locks",
        metadata,
        sa.Column(
            "job_id",
            _id_type(),
            sa.ForeignKey("statecore_jobs.id"),
            primary_key=True,
            autoincrement=False,
        ),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("acquired_at", utc, nullable=False),
    )
    metadata.create_all(
        connection,
        tables=[
            metadata.tables["statecore_savepoints"],
            metadata.tables["statecore_maintenance_locks"],
        ],
    )


def _v3_leases_and_input_identity(connection: sa.Connection) -> None:
    # The maintenance lock becomes the job's lease: runs hold it too, with a fencing epoch that
    # increases per acquisition (counted on the job) and an expiry. Checkpoints record the epoch
    # that began them and the identity of their input.
    utc = sa.DateTime(timezone=True).compile(dialect=connection.dialect)
    bigint = sa.BigInteger().compile(dialect=connection.dialect)
    text = sa.Text().compile(dialect=connection.dialect)
    for statement in (
        f"ALTER TABLE statecore_jobs ADD COLUMN lease_epoch {bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE statecore_maintenance_locks ADD COLUMN epoch {bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE statecore_maintenance_locks ADD COLUMN expires_at {utc}",
        f"ALTER TABLE statecore_checkpoints ADD COLUMN epoch {bigint}",
        f"ALTER TABLE statecore_checkpoints ADD COLUMN input_identity {text}",
    ):
        connection.exec_driver_sql(statement)


def _v4_checkpoint_metrics(connection: sa.Connection) -> None:
    # What a checkpoint measured besides its tables: state-access latency percentiles and each
    # subtask's restore (bytes, seconds), as one JSON document.
    json = sa.JSON().compile(dialect=connection.dialect)
    connection.exec_driver_sql(f"ALTER TABLE statecore_checkpoints ADD COLUMN metrics {json}")


def _v5_checkpoint_watermark(connection: sa.Connection) -> None:
    # The event-time watermark belongs to the checkpoint (epoch ms; NULL: none known, or a
    # checkpoint written before this version), so a stream or a batch run continues from it.
    bigint = sa.BigInteger().compile(dialect=connection.dialect)
    connection.exec_driver_sql(f"ALTER TABLE statecore_checkpoints ADD COLUMN watermark {bigint}")


def _v6_live_endpoints(connection: sa.Connection) -> None:
    # Live lookups: a job's token for its tasks' endpoints, and where the tasks of its latest
    # run serve their state (key-group range -> address, as Flink's KvStateLocationOracle).
    connection.exec_driver_sql("ALTER TABLE statecore_jobs ADD COLUMN live_token VARCHAR(64)")
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    sa.Table("statecore_jobs", metadata, sa.Column("id", _id_type(), primary_key=True))
    sa.Table(
        "statecore_live_endpoints",
        metadata,
        sa.Column(
            "job_id",
            _id_type(),
            sa.ForeignKey("statecore_jobs.id"),
            primary_key=True,
            autoincrement=False,
        ),
        sa.Column("operator", sa.String(200), primary_key=True),
        sa.Column("subtask", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("key_group_start", sa.Integer, nullable=False),
        sa.Column("key_group_end", sa.Integer, nullable=False),
        sa.Column("address", sa.String(200), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    metadata.create_all(connection, tables=[metadata.tables["statecore_live_endpoints"]])


def _v7_checkpoint_id_index(connection: sa.Connection) -> None:
    # The largest completed (or expired) CHECKPOINT id of a job, a new run's floor, read as the
    # first entry of one index range per status, however many checkpoints the job has expired.
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    checkpoints = sa.Table(
        "statecore_checkpoints",
        metadata,
        sa.Column("job_id", _id_type()),
        sa.Column("kind", sa.String(16)),
        sa.Column("status", sa.String(16)),
        sa.Column("checkpoint_id", sa.BigInteger),
    )
    index = sa.Index(
        None,
        checkpoints.c.job_id,
        checkpoints.c.kind,
        checkpoints.c.status,
        checkpoints.c.checkpoint_id,
    )
    index.create(connection)


def _v8_pending_outputs_and_output_owners(connection: sa.Connection) -> None:
    # Output after completion: the output and late-data files of a checkpoint, recorded as its
    # pending output commits and committed to their tables only once it completed (rolled
    # forward by the next run or a recovery when that commit did not happen). And one writer
    # per output table: each table bound to the job, operator and kind that first wrote it.
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    utc = sa.DateTime(timezone=True)
    sa.Table("statecore_jobs", metadata, sa.Column("id", _id_type(), primary_key=True))
    sa.Table(
        "statecore_pending_outputs",
        metadata,
        sa.Column("id", _id_type(), primary_key=True),
        sa.Column("job_id", _id_type(), sa.ForeignKey("statecore_jobs.id"), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger, nullable=False),
        sa.Column("uri", sa.String(1000), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("app_id", sa.String(500), nullable=False),
        sa.Column("table_schema", sa.Text, nullable=False),
        sa.Column("files", sa.JSON, nullable=False),
        sa.Column("epoch", sa.BigInteger),
        sa.Column("recorded_at", utc, nullable=False),
        sa.Column("committed_at", utc),
        sa.UniqueConstraint("job_id", "checkpoint_id", "uri"),
    )
    sa.Table(
        "statecore_output_owners",
        metadata,
        sa.Column("uri", sa.String(1000), primary_key=True),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("operator", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("bound_at", utc, nullable=False),
    )
    metadata.create_all(
        connection,
        tables=[
            metadata.tables["statecore_pending_outputs"],
            metadata.tables["statecore_output_owners"],
        ],
    )


def _v9_pinned_savepoints(connection: sa.Connection) -> None:
    # A savepoint may be a pin on a completed checkpoint's table versions instead of a copy:
    # the pinned state's description as one JSON document (NULL: an export, a folder at path).
    json = sa.JSON().compile(dialect=connection.dialect)
    connection.exec_driver_sql(f"ALTER TABLE statecore_savepoints ADD COLUMN pin {json}")


def _v10_compact_key_group_sizes(connection: sa.Connection) -> None:
    # A table version's key-group sizes as three compressed integer arrays
    # (:mod:`statecore.catalog.sizes`) instead of a JSON object of every key group: each row's
    # JSON converted, then the JSON column dropped (SQLite 3.35 or later).
    blob = sa.LargeBinary().compile(dialect=connection.dialect)
    connection.exec_driver_sql(f"ALTER TABLE statecore_checkpoint_tables ADD COLUMN sizes {blob}")
    tables = sa.table(
        "statecore_checkpoint_tables",
        sa.column("id", sa.BigInteger),
        sa.column("key_groups", sa.JSON),
        sa.column("sizes", sa.LargeBinary),
    )
    last = -1
    while True:  # in batches, so a large catalog is not read into memory at once
        batch = connection.execute(
            sa.select(tables.c.id, tables.c.key_groups)
            .where(tables.c.id > last)
            .order_by(tables.c.id)
            .limit(_V10_BATCH)
        ).all()
        if not batch:
            break
        connection.execute(
            sa.update(tables).where(tables.c.id == sa.bindparam("row_id")),
            [
                {
                    "row_id": row_id,
                    "sizes": encode_sizes(
                        {int(kg): (int(r), int(b)) for kg, (r, b) in (key_groups or {}).items()}
                    ),
                }
                for row_id, key_groups in batch
            ],
        )
        last = batch[-1][0]
    connection.exec_driver_sql("ALTER TABLE statecore_checkpoint_tables DROP COLUMN key_groups")


_V10_BATCH = 500


def _v11_skipped_checkpoints(connection: sa.Connection) -> None:
    # Stateful intervals run in order, or not at all: a checkpoint id the job's runs go past on
    # purpose (a day whose input is broken) is recorded with its reason, so the next run does
    # not refuse the gap and the skip stays auditable.
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    sa.Table("statecore_jobs", metadata, sa.Column("id", _id_type(), primary_key=True))
    sa.Table(
        "statecore_skipped_checkpoints",
        metadata,
        sa.Column("id", _id_type(), primary_key=True),
        sa.Column("job_id", _id_type(), sa.ForeignKey("statecore_jobs.id"), nullable=False),
        sa.Column("checkpoint_id", sa.BigInteger, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("skipped_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("job_id", "checkpoint_id"),
    )
    metadata.create_all(connection, tables=[metadata.tables["statecore_skipped_checkpoints"]])


def _v12_pending_output_errors(connection: sa.Connection) -> None:
    # Pending output has a voice: why the last attempt to commit it failed (NULL: none failed),
    # for `statecore checkpoints list|show`.
    connection.exec_driver_sql("ALTER TABLE statecore_pending_outputs ADD COLUMN last_error TEXT")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        version=1,
        description="jobs, states, checkpoints and checkpoint tables",
        apply=_v1_initial,
    ),
    Migration(
        version=2,
        description="savepoints and maintenance locks",
        apply=_v2_savepoints_and_maintenance_locks,
    ),
    Migration(
        version=3,
        description="job leases (epoch, expiry) and checkpoints' epoch and input identity",
        apply=_v3_leases_and_input_identity,
    ),
    Migration(
        version=4,
        description="checkpoints' metrics (latency percentiles, restore timings)",
        apply=_v4_checkpoint_metrics,
    ),
    Migration(
        version=5,
        description="checkpoints' event-time watermark",
        apply=_v5_checkpoint_watermark,
    ),
    Migration(
        version=6,
        description="live lookups: jobs' live token, tasks' live endpoints",
        apply=_v6_live_endpoints,
    ),
    Migration(
        version=7,
        description="checkpoints indexed by job, kind, status and id",
        apply=_v7_checkpoint_id_index,
    ),
    Migration(
        version=8,
        description="checkpoints' pending output commits; output tables bound to their writer",
        apply=_v8_pending_outputs_and_output_owners,
    ),
    Migration(
        version=9,
        description="pinned savepoints",
        apply=_v9_pinned_savepoints,
    ),
    Migration(
        version=10,
        description="checkpoint tables' key-group sizes as compressed integer arrays",
        apply=_v10_compact_key_group_sizes,
    ),
    Migration(
        version=11,
        description="skipped checkpoints: ids a job's runs go past on purpose, with the reason",
        apply=_v11_skipped_checkpoints,
    ),
    Migration(
        version=12,
        description="pending output commits' last error",
        apply=_v12_pending_output_errors,
    ),
)
"""Every schema step in order; append, never edit a released step."""

SCHEMA_VERSION = MIGRATIONS[-1].version
"""The schema version this code reads and writes."""


def current_version(connection: sa.Connection) -> int:
    """The catalog's schema version; 0 for an empty database."""
    if not sa.inspect(connection).has_table(SCHEMA_VERSION_TABLE):
        return 0
    version = connection.execute(sa.select(sa.func.max(_schema_version.c.version))).scalar()
    return int(version or 0)


def migrate(engine: sa.Engine) -> int:
    """Apply every missing step; return the schema version reached.

    Raises :class:`~statecore.errors.ConfigError` when the catalog was written by a newer
    statecore than this one.
    """
    with engine.connect() as connection:  # the usual case, one read: nothing to apply
        version = current_version(connection)
    _refuse_newer(engine, version)
    if version >= MIGRATIONS[-1].version:
        return version
    locked = engine.execution_options(**WRITE)
    for step in MIGRATIONS:
        with locked.begin() as connection:
            _lock(connection)
            _version_metadata.create_all(connection, checkfirst=True)
            version = current_version(connection)
            _refuse_newer(engine, version)
            if version >= step.version:
                continue
            step.apply(connection)
            connection.execute(
                _schema_version.insert().values(
                    version=step.version,
                    description=step.description,
                    applied_at=datetime.now(UTC),
                )
            )
    with engine.connect() as connection:
        version = current_version(connection)
    _refuse_newer(engine, version)
    return version


def _lock(connection: sa.Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_LOCK_ID)))
    # SQLite: a WRITE transaction began with BEGIN IMMEDIATE (see engine.py).


def _refuse_newer(engine: sa.Engine, version: int) -> None:
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"checkpoint catalog {redacted(engine.url)} is at schema "
            f"version {version}, newer than this statecore's {SCHEMA_VERSION}: upgrade statecore"
        )
