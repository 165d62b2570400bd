"""The owner of an output table, written into the table itself and checked before each commit.

The catalog binds an output table to one job and operator (:mod:`statecore.catalog.outputs`),
but a catalog only knows its own home: two homes (or a table spelled two ways before locations
were canonical) could still write one table. So the table names its writer itself, as the Delta
table property :data:`~statecore.snapshot.locations.OWNER_PROPERTY` (the writer's
:func:`~statecore.snapshot.locations.output_app_id`: home, job, operator, kind), set when
statecore creates the table or on its first commit there, and every output commit checks it
first (:func:`check_owner`): a table owned by another writer refuses the commit with
:class:`~statecore.errors.TableOwnedError`, before any file is put into its folder.

A table nobody owns is taken by its first statecore writer only when it holds no rows (created
empty, e.g. by ``CREATE TABLE`` to choose its properties, as Spark users do) or carries that
writer's own commits (written before owners were recorded). A table another tool filled is
refused: appending a stream's exactly-once output to someone else's rows is rarely meant. The
user says "take it" in the table, with any Delta tool, by setting the property to the writer the
error names (Spark SQL ``ALTER TABLE ... SET TBLPROPERTIES``, deltalake
``alter.set_table_properties``); the same hands a table over from a retired job or a moved home.
"""

from __future__ import annotations

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from statecore.errors import CheckpointCommitError, TableOwnedError
from statecore.snapshot.locations import (
    OWNER_PROPERTY,
    OWNER_WAREHOUSE_PROPERTY,
    home_identity,
    legacy_app_id,
    same_writer,
)
from statecore.snapshot.storage import storage_options

__all__ = [
    "check_job_owns",
    "check_owner",
    "claim",
    "describe_writer",
    "owner_properties",
]


def describe_writer(app_id: str, warehouse: str | None = None) -> str:
    """``app_id`` as a reader names it: the writer, and its home when known."""
    home = "" if warehouse is None else f", of the home whose warehouse is {warehouse}"
    return f"{app_id}{home}"


def owner_properties(app_id: str, warehouse: str | None) -> dict[str, str]:
    """The table properties that record ``app_id`` as the table's owner (none for an older
    statecore's id, which names no home)."""
    if legacy_app_id(app_id) is None:
        return {}
    properties = {OWNER_PROPERTY: app_id}
    if warehouse is not None:
        properties[OWNER_WAREHOUSE_PROPERTY] = warehouse
    return properties


def _take_it(uri: str, app_id: str) -> str:
    return (
        "Write to another table; or, to hand this table to this writer (the other one is "
        "retired, or the home moved), set its owner with any Delta tool and run again: "
        f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('{OWNER_PROPERTY}' = '{app_id}') "
        f"in Spark SQL, or DeltaTable('{uri}').alter.set_table_properties("
        f"{{'{OWNER_PROPERTY}': '{app_id}'}}, raise_if_not_exists=False) with deltalake"
    )


def check_owner(
    table: DeltaTable | None, uri: str, app_id: str, *, where: str, warehouse: str | None = None
) -> bool:
    """Raise :class:`TableOwnedError` unless ``app_id`` may commit to ``table`` (at ``uri``;
    ``None``: not created yet); whether it must first be claimed (:func:`claim`)."""
    if table is None:
        return False
    configuration = table.metadata().configuration
    owner = configuration.get(OWNER_PROPERTY)
    mine = describe_writer(app_id, warehouse)
    if owner is not None:
        if same_writer(owner, app_id):
            return False
        if owner == legacy_app_id(app_id):
            return True  # recorded without its home: recorded again with it
        theirs = describe_writer(owner, configuration.get(OWNER_WAREHOUSE_PROPERTY))
        raise TableOwnedError(
            f"{where} is owned by {theirs} (its table property {OWNER_PROPERTY!r}); this "
            f"writer is {mine}. One table has one writer: nothing was written to it. "
            + _take_it(uri, app_id)
        )
    legacy = legacy_app_id(app_id)
    if legacy is None:  # an older statecore's pending commit: it commits as it did
        return False
    if (
        table.transaction_version(app_id) is not None
        or table.transaction_version(legacy) is not None
    ):
        return True  # this writer's table, from before owners were recorded
    if not table.file_uris():
        return True  # created empty (CREATE TABLE): the first writer takes it
    raise TableOwnedError(
        f"{where} holds rows that no statecore writer owns (no {OWNER_PROPERTY!r} property: "
        f"another tool wrote it); this writer is {mine}, and appends to another writer's "
        "table only when told to: nothing was written to it. " + _take_it(uri, app_id)
    )


def claim(table: DeltaTable, app_id: str, *, where: str, warehouse: str | None = None) -> None:
    """Record ``app_id`` as the owner of ``table`` (a table :func:`check_owner` lets it take)."""
    try:
        table.alter.set_table_properties(
            owner_properties(app_id, warehouse), raise_if_not_exists=False
        )
        table.update_incremental()
    except (DeltaError, OSError) as exc:
        raise CheckpointCommitError(f"{where}: its owner cannot be recorded: {exc}") from exc


def check_job_owns(uri: str, *, warehouse: str, job: str, where: str) -> None:
    """Raise :class:`TableOwnedError` when the table at ``uri`` records an owner (its
    ``statecore.owner`` property) other than an output of ``job`` in the home of ``warehouse``
    (any of its operators, output or late-data): what statecore's own maintenance of a job's
    output tables (retention's compaction) checks before it commits to one. A table with no
    owner recorded (written before owners were) passes."""
    try:
        table = DeltaTable(uri, storage_options=storage_options(uri))
    except (DeltaError, OSError):
        return  # not a table: the caller says so
    configuration = table.metadata().configuration
    owner = configuration.get(OWNER_PROPERTY)
    if owner is None:
        return
    home = home_identity(warehouse)
    if owner.startswith(f"statecore:{home}:{job}/") or owner.startswith(f"statecore:{job}/"):
        return
    theirs = describe_writer(owner, configuration.get(OWNER_WAREHOUSE_PROPERTY))
    raise TableOwnedError(
        f"{where} is owned by {theirs} (its table property {OWNER_PROPERTY!r}), not by an "
        f"output of job {job!r} of this home ({warehouse}): statecore maintains only its own "
        "output tables; nothing was changed"
    )
