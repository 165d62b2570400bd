"""The scheduled maintenance merges an output table's small files (one per micro-batch) of the
checkpoints it no longer retains, and VACUUM deletes them once no retained checkpoint's
version needs them: the rows stay the same, each retained checkpoint's version still opens
with its rows, a retained checkpoint's rows can still be read back alone, a replay still
commits nothing twice, and a checkpoint committed but not completed blocks the merge. In
process, no Spark (``tests/inprocess.py``, the long stream's function and output)."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import timedelta
from pathlib import Path

from deltalake import DeltaTable
from deltalake.transaction import AddAction

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.ops.retention import apply_retention
from statecore.snapshot.output import OutputTable, output_version_at, output_versions_at
from statecore.snapshot.output_compaction import compact_output
from statecore.snapshot.storage import open_table
from tests.checkpoint.test_long_stream import OUTPUT, commit_output, run_micro_batch

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
