"""The Delta logs of a long stream stay bounded: the run's retention cuts the ``_delta_log`` of
every table it writes (keyed, operator, timers, changes, output, late data) to what the retained
checkpoints need, and every retained checkpoint still opens (delta-rs, DuckDB) and restores, as
does a savepoint taken early. A cleanup killed midway leaves every needed version loadable.

The stream runs in-process (:mod:`tests.inprocess`: the driver and task steps of
``keyed_process`` on real Delta tables and a real catalog, without Spark), with the grace period
for young log entries set to zero so that the cut follows the retained checkpoints alone.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from duckdb_extensions import import_extension

from statecore.catalog import Catalog
from statecore.checkpoint.points import checkpoint_point
from statecore.checkpoint.retain import retain_checkpoints
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.ops.retention import apply_retention
from statecore.ops.savepoint import restore_savepoint, take_savepoint
from statecore.query.diff import checksums
from statecore.snapshot import SnapshotTable, write_key_group_file
from statecore.snapshot import log as delta_log
from statecore.snapshot.changelog import ChangelogConfig
from statecore.snapshot.log import LOG_CHECKPOINT_INTERVAL, cleanup_log, log_entries
from statecore.snapshot.output import OutputTable, OutputWriter, output_version_at
from statecore.snapshot.storage import open_table
from tests.checkpoint.test_long_stream import OUTPUT, CountWithTimeout, micro_batch, run_micro_batch
from tests.inprocess import run_checkpoint
from tests.snapshot.test_snapshot import ROWS, duck, rows

MICRO_BATCHES = 45
RETAIN = 4
NO_GRACE = timedelta(0)
CHANGELOG = ChangelogConfig(materialize_every=4, max_change_ratio=10.0)
JSON_BOUND = RETAIN + LOG_CHECKPOINT_INTERVAL
"""Commit files a table may keep (at most one commit per checkpoint): those of the retained
checkpoints, back to the log checkpoint at or below the oldest of them (fewer than one interval
more); 13 of them at most, measured. Without the cleanup a table keeps one per checkpoint."""


def commits(uri: str) -> int:
    """The commit files (``<version>.json``) in the table's log."""
    return sum(1 for name in log_entries(uri) if name.endswith(".json"))


def append(uri: str, rows: list[tuple[str, int]], checkpoint_id: int, app_id: str) -> None:
    writer = OutputWriter(uri, OUTPUT, checkpoint_id=checkpoint_id, subtask=0)
    writer.write(pa.RecordBatch.from_pylist([{"key": k, "count": c} for k, c in rows], OUTPUT))
    written = writer.close()
    OutputTable(uri, OUTPUT, app_id=app_id).commit(
        [] if written is None else [written], checkpoint_id=checkpoint_id
    )


def duck_rows(uri: str, version: int) -> int:
    """The rows of the table at ``version`` as DuckDB's ``delta_scan`` reads it."""
    con = duckdb.connect()
    import_extension("delta", con=con)
    [(count,)] = con.sql(
        f"SELECT count(*) FROM delta_scan('{uri}', version => {version})"
    ).fetchall()
    return int(count)


def content(uri: str, version: int) -> list[tuple[Any, ...]]:
    """The table at ``version`` as delta-rs reads it, in a stable order."""
    table = open_table(uri, version=version).to_pyarrow_table()
    return sorted(tuple(map(str, row.values())) for row in table.to_pylist())


def stream(config: StatecoreConfig, job: str, outputs: list[str]) -> dict[str, Any]:
    """Run the stream, each checkpoint followed by the run's retention; what it saw."""
    seen: dict[str, Any] = {"outputs": {}, "content": {}, "json": {}, "savepoint": None}
    with Catalog.connect(config.catalog_url) as catalog:
        for i in range(MICRO_BATCHES):
            out, record = run_micro_batch(config, catalog, job, i, changelog=CHANGELOG)
            seen["outputs"][i] = sorted(out)
            append(outputs[0], out, i, f"statecore:{job}/main")
            late = [(k, c) for k, c in out if c < 0]  # stands in for the late records
            append(outputs[1], late, i, f"statecore:{job}/main/late")
            if i == 2:  # a savepoint taken early: it has tables of its own
                seen["savepoint"] = take_savepoint(config, catalog, job, name="early")
                seen["savepoint_sums"] = checksums(seen["savepoint"])
            retain_checkpoints(catalog, job, retain=RETAIN, outputs=outputs, log_grace=NO_GRACE)
            uris = [t.path for t in record.tables] + outputs
            for uri in uris:
                seen["json"].setdefault(uri, []).append(commits(uri))
            if i >= MICRO_BATCHES - RETAIN:  # retained at the end: read back before any cut
                seen["content"][i] = {t.path: content(t.path, t.version) for t in record.tables}
                seen["content"][i].update(
                    {uri: content(uri, output_version_at(uri, i) or 0) for uri in outputs}
                )
        seen["tables"] = {t.path: t.table_kind for t in record.tables}
    return seen


def test_log_cleanup_keeps_every_table_of_a_long_stream_bounded(
    statecore_home: StatecoreConfig,
) -> None:
    job = "stream"
    outputs = [f"{statecore_home.warehouse}/out", f"{statecore_home.warehouse}/late"]
    seen = stream(statecore_home, job, outputs)
    assert set(seen["tables"].values()) == {"keyed", "operator", "timers", "changes"}

    # bounded: the commit files per table never pass a bound the stream's length does not
    # change, while every table was committed more often than that
    for uri, counts in seen["json"].items():
        head = open_table(uri).version()
        assert head + 1 > JSON_BOUND, uri
        assert max(counts) <= JSON_BOUND, (uri, counts)
        assert counts[-1] < head + 1, uri

    with Catalog.connect(statecore_home.catalog_url) as catalog:
        retained = [c.checkpoint_id for c in catalog.list_checkpoints(job) if c.tables]
        assert retained == list(range(MICRO_BATCHES - RETAIN, MICRO_BATCHES))
        # every retained checkpoint opens at its versions: delta-rs, and DuckDB (checksums)
        for checkpoint_id in retained:
            record = catalog.get_checkpoint(job, checkpoint_id)
            expected = seen["content"][checkpoint_id]
            for table in record.tables:
                assert content(table.path, table.version) == expected[table.path]
            for uri in outputs:
                version = output_version_at(uri, checkpoint_id)
                assert version is not None
                assert content(uri, version) == expected[uri]
                assert duck_rows(uri, version) == len(expected[uri])
            assert checksums(checkpoint_point(catalog, job, checkpoint_id))

        # the oldest retained checkpoint restores: a savepoint of it, the next micro-batch run
        # from it gives what the stream gave
        oldest = retained[0]
        point = take_savepoint(statecore_home, catalog, job, name="oldest", checkpoint_id=oldest)
        restore_savepoint(statecore_home, catalog, point.savepoint, force=True)
        out, _ = run_checkpoint(
            statecore_home,
            CountWithTimeout(),
            micro_batch(oldest + 1),
            job=job,
            checkpoint_id=MICRO_BATCHES,
            watermark=(oldest + 1) * 10 - 20,
            changelog=CHANGELOG,
            catalog=catalog,
        )
        assert sorted(out) == seen["outputs"][oldest + 1]

        # the savepoint taken at checkpoint 2 restores after all the cuts
        early = seen["savepoint"]
        restore_savepoint(statecore_home, catalog, early.savepoint, force=True)
        assert checksums(checkpoint_point(catalog, job)) == seen["savepoint_sums"]
        out, _ = run_checkpoint(
            statecore_home,
            CountWithTimeout(),
            micro_batch(3),
            job=job,
            checkpoint_id=MICRO_BATCHES + 1,
            watermark=3 * 10 - 20,
            changelog=CHANGELOG,
            catalog=catalog,
        )
        assert sorted(out) == seen["outputs"][3]


def snapshot_table(uri: str, commits: int) -> dict[int, list[tuple[Any, ...]]]:
    """A keyed table of ``commits`` checkpoints (one key group changed each); its content
    at every version."""
    table = SnapshotTable(uri, ROWS, label="job/main/last")
    version = None
    by_version = {}
    for cp in range(1, commits + 1):
        kg = cp % 4
        f = write_key_group_file(uri, kg, rows((f"k{kg}", [cp])), checkpoint_id=cp, subtask=0)
        version = table.commit(
            [f], changed_key_groups={kg}, base_version=version, app_id="a", checkpoint_id=cp
        )
        by_version[version] = content(uri, version)
    return by_version


class Killed(Exception):
    pass


class DiesAfter:
    """A filesystem that deletes ``deletes`` files, then dies (as a killed process would)."""

    def __init__(self, fs: pafs.FileSystem, deletes: int) -> None:
        self.fs, self.left = fs, deletes

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)

    def delete_file(self, path: str) -> None:
        if self.left == 0:
            raise Killed(path)
        self.left -= 1
        self.fs.delete_file(path)


def test_log_cleanup_killed_midway_leaves_every_needed_version_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "job" / "main" / "keyed" / "last")
    by_version = snapshot_table(uri, 3 * LOG_CHECKPOINT_INTERVAL + 5)
    needed = 2 * LOG_CHECKPOINT_INTERVAL + 3  # the oldest version a checkpoint names
    cut = 2 * LOG_CHECKPOINT_INTERVAL  # the newest log checkpoint at or below it
    real = delta_log.table_filesystem

    def dying(table_uri: str) -> tuple[Any, str]:
        fs, root = real(table_uri)
        return DiesAfter(fs, 7), root

    monkeypatch.setattr(delta_log, "table_filesystem", dying)
    with pytest.raises(Killed):
        cleanup_log(uri, needed, older_than=NO_GRACE)
    monkeypatch.setattr(delta_log, "table_filesystem", real)
    for version in range(cut, max(by_version) + 1):  # every version from the cut on opens
        assert content(uri, version) == by_version[version]
    assert duck(uri, needed) is not None

    # run again: it finishes the cut, then finds nothing more to delete
    done = cleanup_log(uri, needed, older_than=NO_GRACE)
    assert done.start == cut and done.files
    assert min(log_entries(uri).values()) == cut
    assert cleanup_log(uri, needed, older_than=NO_GRACE).files == ()
    for version in range(cut, max(by_version) + 1):
        assert content(uri, version) == by_version[version]
    with pytest.raises(Exception, match="log segment|not found|No files"):
        open_table(uri, version=cut - 1)
    # never past the needed version, even with a log checkpoint right above it
    assert cleanup_log(uri, cut + LOG_CHECKPOINT_INTERVAL - 1, older_than=NO_GRACE).files == ()


def test_log_cleanup_keeps_young_entries_and_tables_without_a_cut(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    snapshot_table(uri, LOG_CHECKPOINT_INTERVAL + 3)
    before = log_entries(uri)
    # the default grace keeps entries written a moment ago
    assert cleanup_log(uri, LOG_CHECKPOINT_INTERVAL + 3).files == ()
    # a needed version below the first log checkpoint: nothing to cut at
    assert cleanup_log(uri, LOG_CHECKPOINT_INTERVAL - 1, older_than=NO_GRACE).files == ()
    assert cleanup_log(uri, None, older_than=NO_GRACE).files == ()
    assert log_entries(uri) == before
    assert cleanup_log(str(tmp_path / "missing"), 5, older_than=NO_GRACE).files == ()


def test_log_cleanup_deletes_what_a_killed_logged_commit_left(tmp_path: Path) -> None:
    """A logged commit (statecore.snapshot.log_commit.write_commit) killed between writing its
    entry's temporary file and linking it in leaves ``.<v>.json.<id>.tmp`` in ``_delta_log``:
    readers ignore it, and the log cleanup deletes it once it is past the grace (with or without
    a cut), never a young one (a commit being written)."""
    uri = str(tmp_path / "t")
    by_version = snapshot_table(uri, 3)
    log = tmp_path / "t" / "_delta_log"
    old = log / f".{4:020d}.json.{'a' * 32}.tmp"
    young = log / f".{5:020d}.json.{'b' * 32}.tmp"
    for leftover in (old, young):
        leftover.write_text('{"commitInfo": {}}\n')
    os.utime(old, (1_000_000_000, 1_000_000_000))
    assert content(uri, max(by_version)) == by_version[max(by_version)]  # readers ignore them
    assert duck(uri, max(by_version)) is not None

    hour = timedelta(hours=1)
    assert cleanup_log(uri, None, older_than=hour, dry_run=True).files == (
        f"_delta_log/{old.name}",
    )
    assert old.exists()
    done = cleanup_log(uri, None, older_than=hour)
    assert done == delta_log.LogCleanup(uri, None, (f"_delta_log/{old.name}",))
    assert not old.exists() and young.exists()
    assert cleanup_log(uri, None, older_than=hour).files == ()
    assert content(uri, max(by_version)) == by_version[max(by_version)]


def test_log_cleanup_bad_input_errors_clearly(statecore_home: StatecoreConfig) -> None:
    run_checkpoint(statecore_home, CountWithTimeout(), micro_batch(0), job="j", checkpoint_id=0)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        for retain in (0, -3):
            with pytest.raises(ConfigError, match=f"job 'j': retain {retain} checkpoints"):
                retain_checkpoints(catalog, "j", retain=retain)
            with pytest.raises(ConfigError, match=f"retain {retain} checkpoints"):
                apply_retention(statecore_home, catalog, "j", retain=retain)
        with pytest.raises(ConfigError, match="log_grace -1 day.* is negative"):
            retain_checkpoints(catalog, "j", retain=1, log_grace=timedelta(seconds=-1))
        with pytest.raises(ConfigError, match="log_grace .* is negative"):
            apply_retention(statecore_home, catalog, "j", retain=1, log_grace=timedelta(-1))
    with pytest.raises(ConfigError, match="older_than .* is negative"):
        cleanup_log(f"{statecore_home.warehouse}/x", 3, older_than=timedelta(seconds=-1))
