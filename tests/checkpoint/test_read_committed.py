"""What a reader of the output tables sees, and what the catalog's schemas say, at every point of
a checkpoint's commit phase (no Spark: the coordinator of :mod:`.test_participants`).

At each fault point of the commit phase (:mod:`statecore.snapshot.faults`) a DuckDB reader reads
the output and late-data tables, and the checkpoint fails there (an error in place of the kill).
Whatever point fails, a reader never sees a row of a checkpoint that had not completed when it
read, never sees a row vanish, and the tables' logs hold no RESTORE."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from duckdb_extensions import import_extension

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.checkpoint.lock import hold_lease
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import ConcurrentRunError, OutputCommitPendingError
from statecore.runtime.task import StateSnapshotResult
from statecore.snapshot import faults, write_key_group_file
from statecore.types import schema_to_text

from .test_participants import JOB, LATE, OPERATOR, STATE, STATE_ROWS, Injected, Run

COMMIT_PHASE = [
    "catalog:pending",
    "commit:keyed:total:before",
    "commit:keyed:total:after",
    "catalog:states",
    "catalog:complete:before",
    "catalog:complete:after",
    "output:commit:before",
    "output:commit:after",
]
"""Every fault point from the tasks' files being reported to the output committed."""


@pytest.fixture
def config(tmp_path: Path) -> StatecoreConfig:
    return StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "statecore")})


@pytest.fixture
def catalog(config: StatecoreConfig) -> Iterator[Catalog]:
    opened = Catalog.connect(config.catalog_url)
    opened.ensure_job(JOB, parallelism=1, max_parallelism=128)
    yield opened
    opened.close()


_DUCKDB: list[duckdb.DuckDBPyConnection] = []


def _read_all(*uris: str) -> list[list[int]]:
    """The values in each Delta table of ``uris``, as DuckDB reads them in one query (none
    before a table exists)."""
    if not _DUCKDB:  # one connection for the module: loading the extension takes a while
        _DUCKDB.append(duckdb.connect())
        import_extension("delta", con=_DUCKDB[0])
    parts = [
        f"SELECT {i} AS t, value FROM delta_scan('{uri}')"
        for i, uri in enumerate(uris)
        if Path(uri, "_delta_log").exists()
    ]
    found: list[list[int]] = [[] for _ in uris]
    if parts:
        for table, value in _DUCKDB[0].execute(" UNION ALL ".join(parts)).fetchall():
            found[table].append(value)
    return [sorted(values) for values in found]


def _read(uri: str) -> list[int]:
    return _read_all(uri)[0]


class Reader:
    """Reads both tables at every fault point reached (and fails the checkpoint at ``failing``),
    checking each reading against the checkpoints complete in the catalog at that moment."""

    def __init__(self, run: Run, failing: str | None) -> None:
        self.run, self.failing = run, failing
        self.seen: dict[str, list[int]] = {"output": [], "late-data": []}
        self.points: list[str] = []
        self.reading = False

    def __call__(self, name: str) -> None:
        self.points.append(name)
        if self.reading:
            self.read(name)
        if name == self.failing:
            self.failing = None  # once
            raise Injected(f"failed at {name}")

    def read(self, name: str) -> None:
        complete = {
            c.checkpoint_id
            for c in self.run.catalog.list_checkpoints(JOB, with_tables=False)
            if c.status is CheckpointStatus.COMPLETED
        }
        output, late = _read_all(self.run.output.uri, self.run.late.uri)
        for kind, values, offset in (("output", output, 0), ("late-data", late, LATE)):
            ids = {v - offset for v in values}
            assert ids <= complete, f"at {name}: the {kind} shows {ids - complete}, not complete"
            assert len(values) == len(set(values)), f"at {name}: the {kind} doubled {values}"
            vanished = set(self.seen[kind]) - set(values)
            assert not vanished, f"at {name}: rows {vanished} vanished from the {kind}"
            self.seen[kind] = values


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Callable[[Run, str | None], Reader]:
    def arm(run: Run, failing: str | None) -> Reader:
        hook = Reader(run, failing)
        monkeypatch.setattr(faults, "_ARMED", "reader")
        monkeypatch.setattr(faults, "_reach", hook)
        return hook

    return arm


def _no_restore(uri: str) -> None:
    operations = [c.get("operation") for c in DeltaTable(uri).history()]
    assert "RESTORE" not in operations, operations


@pytest.mark.parametrize("point", COMMIT_PHASE)
def test_read_committed_duckdb_never_sees_a_checkpoint_that_did_not_complete(
    config: StatecoreConfig,
    catalog: Catalog,
    tmp_path: Path,
    reader: Callable[[Run, str | None], Reader],
    point: str,
) -> None:
    run = Run(config, catalog, tmp_path)
    hook = reader(run, None)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    assert set(COMMIT_PHASE) <= set(hook.points)  # every point is read at
    hook.failing, hook.reading = point, True
    with pytest.raises((Injected, OutputCommitPendingError)):
        run.checkpoint(2)
    status = catalog.get_checkpoint(JOB, 2).status
    completed_first = COMMIT_PHASE.index(point) >= COMMIT_PHASE.index("catalog:complete:after")
    assert status is (CheckpointStatus.COMPLETED if completed_first else CheckpointStatus.FAILED)
    hook.read("after the failure")
    assert run.checkpoint(3) is CheckpointStatus.COMPLETED  # rolls 2 forward, or not
    hook.read("after the next run")
    expected = [1, 2, 3] if completed_first else [1, 3]
    assert _read(run.output.uri) == expected
    assert _read(run.late.uri) == [c + LATE for c in expected]
    _no_restore(run.output.uri)
    _no_restore(run.late.uri)


def test_read_committed_a_failed_checkpoint_leaves_no_file_behind(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, reader: Any
) -> None:
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    before = {p.name for p in Path(run.output.uri).glob("*.parquet")}
    reader(run, "catalog:complete:before")
    with pytest.raises(Injected):
        run.checkpoint(2)
    assert {p.name for p in Path(run.output.uri).glob("*.parquet")} == before
    assert catalog.pending_outputs(JOB) == []


def _state_result(checkpoint_id: int, uri: str, rows: pa.Schema, descriptor: Any) -> Any:
    key_group = checkpoint_id % 128
    written = write_key_group_file(
        uri,
        key_group,
        pa.table(
            {"key": [f"k{checkpoint_id}"], "namespace": [""], "value": [checkpoint_id]},
            schema=rows,
        ),
        checkpoint_id=checkpoint_id,
        subtask=0,
    )
    return StateSnapshotResult(
        state=STATE,
        schema=schema_to_text(rows),
        descriptor=descriptor.describe(),
        changed_key_groups=(key_group,),
        files=(written,),
        replace_all=True,
    )


def test_register_states_fenced_the_catalog_schema_stays_at_the_tables(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint migrates its state's schema (int64 to float64) and commits its state
    tables, then its lease is taken over before it completes: the catalog's schema stays the
    one of the tables' completed checkpoint."""
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    registered = [(s.name, s.schema) for s in catalog.list_states(JOB)]
    assert registered == [(STATE, schema_to_text(STATE_ROWS))]
    migrated = pa.schema([("key", pa.string(), False), ("namespace", pa.string(), False),
                          ("value", pa.float64())])  # fmt: skip

    def take_over(name: str) -> None:
        if name == "catalog:states":  # the state tables committed: another writer takes over
            catalog.release_maintenance_lock(JOB)
            catalog.acquire_lease(JOB, operation="run 3", owner="elsewhere:1")

    monkeypatch.setattr(faults, "_ARMED", "take-over")
    monkeypatch.setattr(faults, "_reach", take_over)
    with hold_lease(catalog, JOB, "run 2", timeout=timedelta(minutes=1)) as lease:
        coordinator = CheckpointCoordinator(
            config, catalog, job=JOB, operator=OPERATOR, lease=lease
        )
        planned = coordinator.plan(2, parallelism=1, max_parallelism=128, default_parallelism=1)
        result = _state_result(
            2, coordinator.table_uri(STATE), migrated, ValueStateDescriptor(STATE, float)
        )
        with pytest.raises(ConcurrentRunError):
            coordinator.commit(planned, [result])
        assert [(s.name, s.schema) for s in catalog.list_states(JOB)] == registered


def test_register_states_a_failed_completion_leaves_the_catalog_schema_at_the_tables(
    config: StatecoreConfig, catalog: Catalog, tmp_path: Path, reader: Any
) -> None:
    run = Run(config, catalog, tmp_path)
    assert run.checkpoint(1) is CheckpointStatus.COMPLETED
    registered = [(s.name, s.schema, s.descriptor) for s in catalog.list_states(JOB)]
    migrated = pa.schema([("key", pa.string(), False), ("namespace", pa.string(), False),
                          ("value", pa.float64())])  # fmt: skip
    reader(run, "catalog:complete:before")
    with run.coordinator() as coordinator:
        planned = coordinator.plan(2, parallelism=1, max_parallelism=128, default_parallelism=1)
        result = _state_result(
            2, coordinator.table_uri(STATE), migrated, ValueStateDescriptor(STATE, float)
        )
        with pytest.raises(Injected):
            coordinator.commit(planned, [result])
    assert [(s.name, s.schema, s.descriptor) for s in catalog.list_states(JOB)] == registered
    assert run.checkpoint(3) is CheckpointStatus.COMPLETED  # restores with the stored schema
