"""A checkpoint's driver cost follows what changed: key-group sizes carried forward from the
base checkpoint, removes built from the kept table's files by key group (no listing).

Fake snapshot files (real Delta log entries, no Parquet behind them: the driver never reads
one), as in ``test_scale_simulation.py``, at a small max parallelism.
"""

from __future__ import annotations

import json
import random
import shutil
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from statecore.backends.base import snapshot_schema
from statecore.catalog import Catalog
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.checkpoint.state_tables import carried_sizes
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.keygroups import compute_key_group_range_for_operator_index
from statecore.runtime.task import StateSnapshotResult
from statecore.snapshot import SnapshotFile, SnapshotTable, open_tables
from statecore.snapshot.storage import open_table
from statecore.types import TypeInfo, schema_from_text, schema_to_text

MAX_PARALLELISM, PARALLELISM = 128, 4
JOB, OPERATOR, STATE = "prop", "main", "total"
DESCRIPTOR = ValueStateDescriptor(STATE, int)
SCHEMA = schema_to_text(snapshot_schema(TypeInfo.of(str), DESCRIPTOR))


def _files(key_groups: Iterable[int], checkpoint_id: int, rng: random.Random) -> list[SnapshotFile]:
    now = time.time_ns() // 1_000_000
    out = []
    for kg in key_groups:
        rows = rng.randrange(0, 50)
        out.append(
            SnapshotFile(
                path=f"key_group={kg}/cp-{checkpoint_id}-{uuid.uuid4().hex[:12]}.parquet",
                key_group=kg,
                rows=rows,
                size=1_000 + rows * 17,
                modification_time=now,
                stats=json.dumps({"numRecords": rows}),
            )
        )
    return out


def _results(files: list[SnapshotFile], changed: Iterable[int]) -> list[StateSnapshotResult]:
    """One result per subtask: its files and its changed key groups (some without a file:
    emptied)."""
    changed = set(changed)
    results = []
    for i in range(PARALLELISM):
        mine = compute_key_group_range_for_operator_index(MAX_PARALLELISM, PARALLELISM, i)
        results.append(
            StateSnapshotResult(
                state=STATE,
                schema=SCHEMA,
                descriptor=DESCRIPTOR.describe(),
                changed_key_groups=tuple(sorted(kg for kg in changed if kg in mine)),
                files=tuple(f for f in files if f.key_group in mine),
            )
        )
    return results


def _plan(coordinator: CheckpointCoordinator, checkpoint_id: int) -> Any:
    return coordinator.plan(
        checkpoint_id,
        parallelism=PARALLELISM,
        max_parallelism=MAX_PARALLELISM,
        default_parallelism=PARALLELISM,
    )


def _count_listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of the files each listing of a table returned (one entry per listing)."""
    listed: list[int] = []
    original = SnapshotTable._files

    def counting(self: SnapshotTable, *args: Any, **kwargs: Any) -> Any:
        files = original(self, *args, **kwargs)
        listed.append(len(files))
        return files

    monkeypatch.setattr(SnapshotTable, "_files", counting)
    return listed


def test_proportional_commit_carries_key_group_sizes_forward(
    statecore_home: StatecoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(35)
    listed = _count_listings(monkeypatch)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        coordinator = CheckpointCoordinator(statecore_home, catalog, job=JOB, operator=OPERATOR)
        planned = _plan(coordinator, 1)
        everything = range(MAX_PARALLELISM)
        record = coordinator.commit(planned, _results(_files(everything, 1, rng), everything))
        for checkpoint_id in range(2, 12):
            planned = _plan(coordinator, checkpoint_id)
            changed = rng.sample(range(MAX_PARALLELISM), 6)
            written = [kg for kg in changed if rng.random() < 0.7]  # the others emptied
            listed.clear()
            record = coordinator.commit(
                planned, _results(_files(written, checkpoint_id, rng), changed)
            )
            assert listed == []  # nothing listed: neither removes nor sizes
            (table,) = record.tables
            recount = SnapshotTable(
                table.path, schema_from_text(SCHEMA), label=STATE
            ).key_group_sizes(table.version)
            assert table.key_groups == recount
            assert table.rows == sum(r for r, _ in recount.values())
            assert table.bytes == sum(b for _, b in recount.values())
        # What the catalog holds is what was committed.
        (latest,) = catalog.latest_checkpoint(JOB).tables
        assert latest.key_groups == table.key_groups
        assert len(table.key_groups) < MAX_PARALLELISM  # some key groups were emptied


def test_proportional_commit_lists_no_unchanged_file(
    statecore_home: StatecoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(7)
    listed = _count_listings(monkeypatch)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        coordinator = CheckpointCoordinator(statecore_home, catalog, job=JOB, operator=OPERATOR)
        everything = range(MAX_PARALLELISM)
        first = coordinator.commit(
            _plan(coordinator, 1), _results(_files(everything, 1, rng), everything)
        )
        (table,) = first.tables
        uri = table.path

        # A driver that did not commit the table (a new process): one listing, then none.
        open_tables.forget(uri)
        planned = _plan(coordinator, 2)
        listed.clear()
        coordinator.commit(planned, _results(_files([3], 2, rng), [3]))
        assert listed == [MAX_PARALLELISM]
        listed.clear()
        planned = _plan(coordinator, 3)  # its restore plan too reads the kept files
        assert len(planned.restore.states[STATE].files) == MAX_PARALLELISM
        third = coordinator.commit(planned, _results(_files([5, 9], 3, rng), [5, 9]))
        assert listed == []
        # The commit removed exactly the changed key groups' files.
        (table,) = third.tables
        log = Path(uri) / "_delta_log" / f"{table.version:020d}.json"
        actions = [json.loads(line) for line in log.read_text().splitlines()]
        removed = sorted(a["remove"]["path"].split("/")[0] for a in actions if "remove" in a)
        assert removed == ["key_group=5", "key_group=9"]
        # What the driver's map says of that version is what the Delta log says.
        kept = SnapshotTable(uri, schema_from_text(SCHEMA), label=STATE).files(table.version)
        logged = SnapshotTable(uri, schema_from_text(SCHEMA), label=STATE)._files(
            open_table(uri, table.version)
        )
        assert sorted(kept, key=lambda f: f.path) == sorted(logged, key=lambda f: f.path)

        # A table whose log moved on behind the driver's back (a rollback's RESTORE) is
        # listed again, and its files are still right.
        for entry in (Path(uri) / "_delta_log").glob("*.json"):  # RESTORE wants the files
            for line in entry.read_text().splitlines():
                if "add" in (action := json.loads(line)):
                    (Path(uri) / action["add"]["path"]).parent.mkdir(exist_ok=True)
                    (Path(uri) / action["add"]["path"]).touch()
        SnapshotTable(uri, schema_from_text(SCHEMA), label=STATE).roll_back(table.version - 1)
        planned = _plan(coordinator, 4)
        listed.clear()
        fourth = coordinator.commit(planned, _results(_files([5], 4, rng), [5]))
        assert listed == [MAX_PARALLELISM]
        (table,) = fourth.tables
        files = SnapshotTable(uri, schema_from_text(SCHEMA), label=STATE).files(table.version)
        assert len(files) == MAX_PARALLELISM
        assert {f.key_group for f in files if f.path.startswith(f"key_group={f.key_group}/cp-4-")}
        assert table.key_groups == SnapshotTable(
            uri, schema_from_text(SCHEMA), label=STATE
        ).key_group_sizes(table.version)


def test_proportional_kept_table_deleted_and_created_again(tmp_path: Path) -> None:
    """A table deleted and created anew at the same place is opened afresh, not continued
    from the version the driver kept."""
    rng = random.Random(3)
    uri = str(tmp_path / "t")
    table = SnapshotTable(uri, schema_from_text(SCHEMA), label=STATE)

    def commit(kgs: list[int], base: int | None, checkpoint_id: int) -> int:
        return table.commit(
            _files(kgs, checkpoint_id, rng),
            changed_key_groups=kgs,
            base_version=base,
            app_id="prop",
            checkpoint_id=checkpoint_id,
        )

    version = commit([0, 1, 2], None, 1)
    for checkpoint_id in range(2, 5):
        version = commit([checkpoint_id % 3], version, checkpoint_id)
    shutil.rmtree(uri)
    assert commit([7], None, 1) == 1  # created (0) and written: not version 6 of the old one
    assert [f.key_group for f in table.files(1)] == [7]
    assert commit([8], 1, 2) == 2
    assert sorted(f.key_group for f in table.files(2)) == [7, 8]


@pytest.mark.parametrize("append", [False, True])
def test_proportional_sizes_equal_a_recount_after_commits(tmp_path: Path, append: bool) -> None:
    """``carried_sizes`` follows what ``SnapshotTable.commit`` commits, for a keyed table
    (changed key groups replaced) and a changes table (``append``: files added beside)."""
    rng = random.Random(11)
    table = SnapshotTable(str(tmp_path / "t"), schema_from_text(SCHEMA), label=STATE)
    files = _files(range(16), 1, rng)
    version = table.commit(
        files, changed_key_groups=range(16), base_version=None, app_id="p", checkpoint_id=1
    )
    sizes = carried_sizes(None, files, changed_key_groups=range(16))
    assert sizes == table.key_group_sizes(version)
    for checkpoint_id in range(2, 10):
        changed = rng.sample(range(16), 3)  # materialized (append) or replaced
        files = _files(rng.sample(range(20), 4), checkpoint_id, rng)
        version = table.commit(
            files,
            changed_key_groups=changed,
            base_version=version,
            app_id="p",
            checkpoint_id=checkpoint_id,
            append=append,
        )
        sizes = carried_sizes(sizes, files, changed_key_groups=changed, append=append)
        assert sizes == table.key_group_sizes(version)
