"""Key-group sizes stored compactly (schema version 10), converted from the JSON of earlier
catalogs, and loaded only where asked for; against SQLite and Postgres (see conftest.py)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus, TableVersion
from statecore.catalog.migrations import MIGRATIONS
from statecore.catalog.sizes import decode_sizes, encode_sizes

JOB = "clicks"
MAX_PARALLELISM = 32_768


def _sizes(seed: int, key_groups: int = MAX_PARALLELISM) -> dict[int, tuple[int, int]]:
    rng = random.Random(seed)
    return {kg: (rng.randrange(10**6), rng.randrange(10**9)) for kg in range(key_groups)}


def _table(state: str, sizes: dict[int, tuple[int, int]], version: int = 1) -> TableVersion:
    return TableVersion(
        operator="count",
        state=state,
        table_kind="keyed",
        path=f"/warehouse/{JOB}/count/keyed/{state}",
        version=version,
        rows=sum(r for r, _ in sizes.values()),
        bytes=sum(b for _, b in sizes.values()),
        key_groups=sizes,
    )


def test_proportional_sizes_survive_migration(catalog_url: str) -> None:
    """A catalog at schema version 9 (sizes as JSON objects) is migrated: every table row's
    sizes read back the same, and the JSON column is gone."""
    big, small = _sizes(1), {0: (3, 300), 7: (0, 0), 32767: (2**40, 2**50)}
    url = sa.make_url(catalog_url)
    if url.get_backend_name() == "sqlite":
        Path(str(url.database)).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(catalog_url)
    now = datetime.now(UTC)
    try:
        with engine.begin() as connection:  # a catalog at the version before compact sizes
            for step in MIGRATIONS:
                if step.version < 10:
                    step.apply(connection)
            meta = sa.MetaData()
            versions = sa.Table(
                "statecore_schema_version",
                meta,
                sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
                sa.Column("description", sa.String(200), nullable=False),
                sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
            )
            meta.create_all(connection)
            connection.execute(
                sa.insert(versions),
                [
                    {"version": m.version, "description": m.description, "applied_at": now}
                    for m in MIGRATIONS
                    if m.version < 10
                ],
            )
            reflected = sa.MetaData()
            reflected.reflect(connection)
            jobs, checkpoints, tables = (
                reflected.tables[f"statecore_{name}"]
                for name in ("jobs", "checkpoints", "checkpoint_tables")
            )
            job_pk = connection.execute(
                sa.insert(jobs)
                .returning(jobs.c.id)
                .values(
                    name=JOB,
                    parallelism=2,
                    max_parallelism=MAX_PARALLELISM,
                    created_at=now,
                    last_completion_seq=1,
                )
            ).scalar_one()
            checkpoint_pk = connection.execute(
                sa.insert(checkpoints)
                .returning(checkpoints.c.id)
                .values(
                    job_id=job_pk,
                    checkpoint_id=1,
                    kind="CHECKPOINT",
                    status="COMPLETED",
                    parallelism=2,
                    max_parallelism=MAX_PARALLELISM,
                    started_at=now,
                    completed_at=now,
                    completion_seq=1,
                )
            ).scalar_one()
            for state, sizes in (("total", big), ("seen", small), ("empty", {})):
                connection.execute(
                    sa.insert(tables).values(
                        checkpoint_pk=checkpoint_pk,
                        operator="count",
                        state=state,
                        table_kind="keyed",
                        path=f"/warehouse/{JOB}/count/keyed/{state}",
                        version=1,
                        rows=sum(r for r, _ in sizes.values()),
                        bytes=sum(b for _, b in sizes.values()),
                        key_groups={str(kg): [r, b] for kg, (r, b) in sizes.items()},
                    )
                )
    finally:
        engine.dispose()

    with Catalog.connect(catalog_url) as catalog:
        (checkpoint,) = catalog.list_checkpoints(JOB)
        by_state = {t.state: t for t in checkpoint.tables}
        assert by_state["total"].key_groups == big
        assert by_state["seen"].key_groups == small
        assert by_state["empty"].key_groups == {}
        # A checkpoint after the migration builds on the converted one.
        catalog.begin_checkpoint(
            JOB, 2, kind=CheckpointKind.CHECKPOINT, parallelism=2, max_parallelism=MAX_PARALLELISM
        )
        catalog.complete_checkpoint(JOB, 2, tables=[_table("total", small, version=2)])
        assert catalog.get_checkpoint(JOB, 2).tables[0].key_groups == small
    engine = sa.create_engine(catalog_url)
    try:
        columns = {c["name"] for c in sa.inspect(engine).get_columns("statecore_checkpoint_tables")}
    finally:
        engine.dispose()
    assert "sizes" in columns and "key_groups" not in columns


def test_proportional_sizes_loaded_only_where_asked(catalog: Catalog) -> None:
    catalog.ensure_job(JOB, parallelism=2, max_parallelism=MAX_PARALLELISM)
    sizes = _sizes(2, 1_000)
    for checkpoint_id in (1, 2):
        catalog.begin_checkpoint(
            JOB,
            checkpoint_id,
            kind=CheckpointKind.CHECKPOINT,
            parallelism=2,
            max_parallelism=MAX_PARALLELISM,
        )
        catalog.complete_checkpoint(
            JOB, checkpoint_id, tables=[_table("total", sizes, version=checkpoint_id)]
        )
    full = catalog.list_checkpoints(JOB)
    bare = catalog.list_checkpoints(JOB, with_sizes=False)
    assert [t.key_groups for c in full for t in c.tables] == [sizes, sizes]
    assert [t.key_groups for c in bare for t in c.tables] == [{}, {}]
    # Everything but the sizes is the same.
    assert [(t.version, t.rows, t.bytes) for c in bare for t in c.tables] == [
        (t.version, t.rows, t.bytes) for c in full for t in c.tables
    ]
    assert catalog.get_checkpoint(JOB, 1, with_sizes=False).tables[0].key_groups == {}
    assert catalog.get_checkpoint(JOB, 1).tables[0].key_groups == sizes
    latest = catalog.latest_checkpoint(JOB)
    assert latest is not None and latest.tables[0].key_groups == sizes
    completed = catalog.list_checkpoints(JOB, status=CheckpointStatus.COMPLETED, last=1)
    assert completed[0].tables[0].key_groups == sizes


def test_proportional_sizes_stored_compactly() -> None:
    sizes = _sizes(3)
    encoded = encode_sizes(sizes)
    as_json = json.dumps({str(kg): [r, b] for kg, (r, b) in sizes.items()})
    assert decode_sizes(encoded) == sizes
    assert len(encoded) < len(as_json) / 2, (len(encoded), len(as_json))
    sparse = {5: (1, 2), 9_000: (0, 7), 32_767: (3, 4)}
    assert decode_sizes(encode_sizes(sparse)) == sparse
    assert decode_sizes(encode_sizes({})) == {}
