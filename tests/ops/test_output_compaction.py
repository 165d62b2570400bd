"""The scheduled maintenance merges an output table's small files (one per micro-batch) of the
checkpoints it no longer retains, and VACUUM deletes them once no retained checkpoint's
version needs them: the rows stay the same, each retained checkpoint's version still opens
with its rows, a retained checkpoint's rows can still be read back alone, a replay still
commits nothing twice, and a checkpoint committed but not completed blocks the merge. In
process, no Spark (``tests/inprocess.py``, the long stream's function and output)."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.checkpoint.retain import retain_checkpoints
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.ops.retention import apply_retention
from statecore.ops.savepoint import restore_savepoint, take_savepoint
from statecore.ops.ttl_cleanup import ttl_cleanup
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.snapshot.output import OutputTable, output_version_at, output_versions_at
from statecore.snapshot.output_compaction import compact_output
from statecore.snapshot.storage import open_table
from statecore.ttl import StateTtlConfig
from statecore.ttl.time import ManualTimeProvider
from tests.checkpoint.test_long_stream import OUTPUT, commit_output, run_micro_batch
from tests.inprocess import run_checkpoint

JOB = "compacted"
RETAIN = 5


def stream(config: StatecoreConfig, catalog: Catalog, output: str, ids: range) -> None:
    for i in ids:
        out, _ = run_micro_batch(config, catalog, JOB, i)
        commit_output(output, out, i)


def rows(uri: str, version: int | None = None) -> Counter[tuple[str, int]]:
    """The output's (key, count) rows at ``version`` (the latest by default), on any store."""
    table = open_table(uri, version).to_pyarrow_table()
    return Counter(zip(table.column("key").to_pylist(), table.column("count").to_pylist()))


def parquet_files(uri: str) -> set[str]:
    root = Path(uri)
    return {p.name for p in root.glob("*.parquet")}


def maintain(
    config: StatecoreConfig, catalog: Catalog, output: str, retain: int = RETAIN
) -> dict[str, object]:
    """The scheduled maintenance of ``JOB`` with ``output``: its report."""
    report = apply_retention(
        config,
        catalog,
        JOB,
        retain=retain,
        vacuum_after=timedelta(0),
        log_grace=None,
        outputs=[output],
    )
    return report.to_dict()


def test_output_compaction_merges_expired_checkpoints_files_and_keeps_every_row_once(
    statecore_home: StatecoreConfig,
) -> None:
    output = f"{statecore_home.warehouse}/out"
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        stream(statecore_home, catalog, output, range(30))
        before = rows(output)
        versions = output_versions_at(output, range(25, 30))
        assert versions == {i: output_version_at(output, i) for i in range(25, 30)}
        at = {i: rows(output, versions[i]) for i in range(25, 30)}
        assert len(DeltaTable(output).file_uris()) == 30

        report = maintain(statecore_home, catalog, output)
        assert report["retained"] == list(range(25, 30))
        assert report["compacted"] == [{"path": output, "files_merged": 25, "files_written": 1}]
        live = DeltaTable(output).file_uris()
        assert len(live) == 6 and rows(output) == before  # 1 merged + the 5 retained ones
        for i in range(25, 30):  # each retained checkpoint's version, and its rows alone
            assert rows(output, output_version_at(output, i)) == at[i]
            [own] = OutputTable(output, OUTPUT, app_id="statecore:stream/main").checkpoint_files(i)
            assert own in live
        assert len(parquet_files(output)) == 31  # the retained versions still need them

        # a replay of a completed checkpoint commits nothing again
        commit_output(output, [("k0", 99)], 27)
        assert rows(output) == before

        # five micro-batches on, no retained version needs the files of 0..24: VACUUM deletes them
        stream(statecore_home, catalog, output, range(30, 35))
        after = rows(output)
        report = maintain(statecore_home, catalog, output)
        assert report["compacted"] == [{"path": output, "files_merged": 6, "files_written": 1}]
        assert rows(output) == after
        live_names = {uri.rsplit("/", 1)[-1] for uri in DeltaTable(output).file_uris()}
        assert len(live_names) == 6  # merged again: the first merge and 25..29 into one
        kept = parquet_files(output) - live_names  # what the versions at 30..34 still read
        assert len(kept) == 6 and not any(f"cp{i:012d}" in n for n in kept for i in range(25))


def test_output_compaction_waits_for_a_committed_checkpoint_to_complete_or_roll_back(
    statecore_home: StatecoreConfig,
) -> None:
    output = f"{statecore_home.warehouse}/out"
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        stream(statecore_home, catalog, output, range(12))
        commit_output(output, [("k1", 1)], 12)  # its output committed, the checkpoint not
        done = compact_output(output, before=7, completed=11)
    assert done.removed == 0 and done.skipped == "checkpoint 12 is committed, not completed"
    assert len(DeltaTable(output).file_uris()) == 13


def test_output_compaction_leaves_a_concurrent_append_committable(tmp_path: Path) -> None:
    """A stream's commit prepared on the version before a merge still commits after it."""
    output = str(tmp_path / "out")
    for i in range(4):
        commit_output(output, [(f"k{i}", i)], i)
    stale = DeltaTable(output)
    assert compact_output(output, before=3, completed=3).removed == 3
    shutil.copy(next(Path(output).glob("part-cp000000000003-*.parquet")), f"{output}/x.parquet")
    size = Path(f"{output}/x.parquet").stat().st_size
    stale.create_write_transaction(  # as a stream's append prepared before the merge
        [AddAction("x.parquet", size, {}, 0, True, "{}")], "append", stale.schema()
    )
    assert len(DeltaTable(output).file_uris()) == 3  # the merged file, cp 3's, the append
    assert rows(output)[("k3", 3)] == 2 and sum(rows(output).values()) == 5


DAY_MS = 86_400_000
FIRST_DAY = 20260101


class DailyCount(KeyedProcessFunction):
    """Counts a day's events per key, in a state that expires a day after its last write."""

    def open(self, ctx: RuntimeContext) -> None:
        ttl = StateTtlConfig(ttl=timedelta(days=1))
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0, ttl=ttl))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[str, int]]:
        self.count.update(self.count.value() + 1)
        yield ctx.current_key, self.count.value()


def test_output_compaction_of_a_daily_job_with_ttl_cleanup_keeps_retained_checkpoints_files(
    statecore_home: StatecoreConfig,
) -> None:
    """A daily job (checkpoint ids are dates) followed by its TTL cleanup (a MAINTENANCE
    checkpoint, numbered from 10^18), six days, then retention of 3: the bounds of the merge are
    the retained CHECKPOINTs' ids, not the maintenance checkpoints' (it merged every file)."""
    output = f"{statecore_home.warehouse}/daily_out"
    job = "daily"
    every: Counter[tuple[str, int]] = Counter()
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        for day in range(6):
            checkpoint_id = FIRST_DAY + day
            out, _ = run_checkpoint(
                statecore_home,
                DailyCount(),
                [(f"d{day}k{k}", k) for k in range(4)],
                job=job,
                checkpoint_id=checkpoint_id,
                clock=ManualTimeProvider(day * DAY_MS),
                catalog=catalog,
            )
            commit_output(output, out, checkpoint_id)
            every.update(out)
            ttl_cleanup(
                statecore_home,
                catalog,
                job,
                time_provider=ManualTimeProvider(day * DAY_MS + DAY_MS + 1),
                vacuum_after=None,
            )
        done = catalog.list_checkpoints(job, status=CheckpointStatus.COMPLETED)
        assert sum(c.kind is CheckpointKind.MAINTENANCE for c in done) == 6
        report = apply_retention(
            statecore_home,
            catalog,
            job,
            retain=3,
            vacuum_after=timedelta(0),
            log_grace=timedelta(0),
            outputs=[output],
        )
        kinds = {c.checkpoint_id: c.kind for c in done}
        retained = [i for i in report.retained if kinds[i] is CheckpointKind.CHECKPOINT]
    assert retained == [FIRST_DAY + 5]
    table = OutputTable(output, OUTPUT, app_id="statecore:stream/main")
    for checkpoint_id in retained:  # its own rows, read back by its id
        [own] = table.checkpoint_files(checkpoint_id)
        fs, path = pafs.FileSystem.from_uri(own)
        assert pq.read_table(path, filesystem=fs).num_rows == 4
    assert rows(output) == every  # every row once
    assert rows(output, output_version_at(output, FIRST_DAY + 5)) == every  # its version opens
    assert report.to_dict()["compacted"] == [
        {"path": output, "files_merged": 5, "files_written": 1}  # days 0..4's files
    ]
    commit_output(output, [("late", 1)], FIRST_DAY + 6)  # committed, its checkpoint not complete
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        again = apply_retention(statecore_home, catalog, job, retain=3, outputs=[output])
    assert again.compacted[0].skipped == f"checkpoint {FIRST_DAY + 6} is committed, not completed"


def test_retention_keeps_the_row_that_makes_a_replay_of_the_last_run_a_no_op(
    statecore_home: StatecoreConfig,
) -> None:
    """A run's retention of 1 after a daily run and two maintenance checkpoints (TTL cleanup, a
    restore): the run's row is the second newest EXPIRED one but stays, so a retry of the day
    (Airflow's) replays as a no-op instead of counting the day again."""
    job = "daily"
    records = [(f"k{k}", k) for k in range(4)]
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        out, _ = run_checkpoint(
            statecore_home,
            DailyCount(),
            records,
            job=job,
            checkpoint_id=FIRST_DAY,
            clock=ManualTimeProvider(0),
            catalog=catalog,
        )
        assert len(out) == 4
        ttl_cleanup(
            statecore_home,
            catalog,
            job,
            time_provider=ManualTimeProvider(DAY_MS + 1),
            vacuum_after=None,
        )
        taken = take_savepoint(statecore_home, catalog, job)
        restore_savepoint(statecore_home, catalog, taken.savepoint or "")
        retain_checkpoints(catalog, job, retain=1, log_grace=None)
        assert catalog.highest_completed_id(job) == FIRST_DAY
        again, record = run_checkpoint(
            statecore_home,
            DailyCount(),
            records,
            job=job,
            checkpoint_id=FIRST_DAY,
            clock=ManualTimeProvider(0),
            catalog=catalog,
        )
    assert again == [] and record.status is CheckpointStatus.EXPIRED
