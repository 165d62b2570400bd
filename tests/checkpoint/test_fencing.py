"""Fencing on real Delta tables and a real catalog: a writer whose lease was taken over commits
nothing (neither rolling back nor adding to the new holder's table), and an output table's
commit (made after its checkpoint completed) is made once and refused to a stale writer."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from statecore.catalog import Catalog
from statecore.checkpoint.lock import hold_lease
from statecore.errors import ConcurrentRunError
from statecore.snapshot import Fence, SnapshotTable, write_key_group_file
from statecore.snapshot.output import OutputTable, OutputWriter

JOB = "clicks"
ROWS = pa.schema([("key", pa.string()), ("namespace", pa.string()), ("value", pa.int64())])


def _rows(key: str, value: int) -> pa.Table:
    return pa.table({"key": [key], "namespace": [""], "value": [value]}, schema=ROWS)


def _commit(table: SnapshotTable, checkpoint_id: int, key_group: int, value: int,
            base: int | None, fence: Fence | None) -> int:  # fmt: skip
    written = write_key_group_file(
        table.uri, key_group, _rows(f"k{key_group}", value), checkpoint_id=checkpoint_id,
        subtask=0,
    )  # fmt: skip
    return table.commit(
        [written], changed_key_groups={key_group}, base_version=base, app_id="clicks/main/total",
        checkpoint_id=checkpoint_id, fence=fence,
    )  # fmt: skip


def _values(uri: str) -> dict[str, int]:
    data = DeltaTable(uri).to_pyarrow_table()
    return dict(zip(data.column("key").to_pylist(), data.column("value").to_pylist(), strict=True))


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    opened = Catalog.connect(f"sqlite:///{tmp_path / 'catalog.db'}")
    opened.ensure_job(JOB, parallelism=1, max_parallelism=128)
    return opened


def test_fencing_a_taken_over_writer_does_not_roll_back_the_new_holder(
    tmp_path: Path, catalog: Catalog
) -> None:
    uri = str(tmp_path / "total")
    table = SnapshotTable(uri, ROWS, label="clicks/main/total")
    base = _commit(table, 1, 0, 10, None, None)  # checkpoint 1, completed by an earlier run
    with hold_lease(catalog, JOB, "run 2", timeout=timedelta(seconds=0.3)) as stale:
        stale_fence = Fence(JOB, stale.epoch, stale.check)
        stale._stop.set()  # a paused driver: it stops renewing
        time.sleep(0.4)
        with hold_lease(catalog, JOB, "run 2", timeout=timedelta(minutes=1)) as holder:
            assert holder.epoch == stale.epoch + 1
            fence = Fence(JOB, holder.epoch, holder.check)
            winner = _commit(table, 2, 1, 20, base, fence)
            assert _values(uri) == {"k0": 10, "k1": 20}
            # the stale writer commits checkpoint 2 on the same base: before fencing, it
            # restored the table to the base version, and the new holder's update vanished
            with pytest.raises(ConcurrentRunError, match="epoch 1 was lost"):
                _commit(table, 2, 2, 99, base, stale_fence)
            with pytest.raises(ConcurrentRunError, match="carries epoch 2 of a newer writer"):
                _commit(table, 2, 2, 99, base, Fence(JOB, stale.epoch))  # Delta's log alone
            assert DeltaTable(uri).version() == winner
            assert _values(uri) == {"k0": 10, "k1": 20}
            assert DeltaTable(uri).transaction_version(fence.app_id) == holder.epoch
            with pytest.raises(ConcurrentRunError):
                stale.check()


def _output(tmp_path: Path, checkpoint_id: int, value: int, table: OutputTable,
            fence: Fence | None = None) -> None:  # fmt: skip
    writer = OutputWriter(table.uri, table.schema, checkpoint_id=checkpoint_id, subtask=0)
    writer.write(pa.record_batch({"value": [value]}, schema=table.schema))
    written = writer.close()
    assert written is not None
    assert table.commit([written], checkpoint_id=checkpoint_id, fence=fence)


def _output_values(uri: str) -> list[int]:
    return sorted(DeltaTable(uri).to_pyarrow_table().column("value").to_pylist())


def test_roll_forward_output_commit_repeated_is_made_once(tmp_path: Path) -> None:
    """A roll-forward repeats a commit that may have been made: the application transaction
    makes it once, and the files (the committed ones) stay."""
    schema = pa.schema([("value", pa.int64())])
    table = OutputTable(str(tmp_path / "out"), schema, app_id="statecore:clicks/main")
    writer = OutputWriter(table.uri, schema, checkpoint_id=1, subtask=0)
    writer.write(pa.record_batch({"value": [1]}, schema=schema))
    written = writer.close()
    assert written is not None
    assert table.commit([written], checkpoint_id=1)
    assert not table.commit([written], checkpoint_id=1)
    assert _output_values(table.uri) == [1]
    _output(tmp_path, 2, 2, table)
    assert _output_values(table.uri) == [1, 2]


def test_fencing_output_a_stale_writer_commits_nothing_after_a_newer_one(
    tmp_path: Path, catalog: Catalog
) -> None:
    schema = pa.schema([("value", pa.int64())])
    table = OutputTable(str(tmp_path / "out"), schema, app_id="statecore:clicks/main")
    _output(tmp_path, 1, 1, table, Fence(JOB, 1))
    _output(tmp_path, 2, 2, table, Fence(JOB, 2))  # the next holder rolled checkpoint 2 forward
    with pytest.raises(ConcurrentRunError, match="carries epoch 2"):
        _output(tmp_path, 3, 3, table, Fence(JOB, 1))
    assert _output_values(table.uri) == [1, 2]
    assert "RESTORE" not in [c.get("operation") for c in DeltaTable(table.uri).history()]
