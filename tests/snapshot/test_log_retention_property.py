"""delta-rs's post-commit hook deletes ``_delta_log`` entries on its own: after every commit,
those older than the table's ``delta.logRetentionDuration`` (30 days by default) below the
newest log checkpoint, unless ``delta.enableExpiredLogCleanup`` is ``false``. That would take a
version a retained checkpoint still names (a weekly job retaining 7 checkpoints, a stream
stopped for a month) behind the catalog's back, so every table statecore creates has the
property ``false`` and every statecore commit turns the hook's cleanup off, also in a table an
older statecore created: only the catalog-aware cleanup (:func:`statecore.snapshot.log.cleanup_log`)
cuts the logs. The 30 days are simulated by moving the log entries' modification times back.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.ops.materialize import materialize_changes
from statecore.ops.savepoint import take_savepoint
from statecore.snapshot.changelog import ChangelogConfig
from statecore.snapshot.log import LOG_CHECKPOINT_INTERVAL, last_log_checkpoint, log_entries
from statecore.snapshot.storage import TABLE_PROPERTIES, TOMBSTONE_RETENTION, open_table
from tests.checkpoint.test_log_cleanup import append
from tests.checkpoint.test_long_stream import OUTPUT, run_micro_batch

PROPERTY = "delta.enableExpiredLogCleanup"
MONTH = 31 * 24 * 3600
"""Older than delta-rs's default ``delta.logRetentionDuration`` (30 days)."""
COMMITS = 12
"""Commits before the log entries age: a log checkpoint at version 10 below them."""


def age(uri: str, seconds: float) -> None:
    """Move the modification time of every entry of the table's log ``seconds`` back."""
    for name in log_entries(uri):
        path = Path(uri) / "_delta_log" / name
        then = path.stat().st_mtime - seconds
        os.utime(path, (then, then))


def versions(uri: str) -> list[int]:
    """The versions of the commit files in the table's log."""
    return sorted(v for name, v in log_entries(uri).items() if name.endswith(".json"))


def test_log_retention_every_kind_of_table_has_expired_log_cleanup_off(
    statecore_home: StatecoreConfig,
) -> None:
    """Keyed, operator, timers and changes tables of a run, the output and late-data tables,
    the tables materialization rewrites and a savepoint's copies all carry the property."""
    job = "stream"
    outputs = [f"{statecore_home.warehouse}/out", f"{statecore_home.warehouse}/late"]
    changelog = ChangelogConfig(materialize_every=100, max_change_ratio=100.0)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        for i in range(3):
            out, record = run_micro_batch(statecore_home, catalog, job, i, changelog=changelog)
            append(outputs[0], out, i, f"statecore:{job}/main")
            append(outputs[1], [], i, f"statecore:{job}/main/late")
        materialized = materialize_changes(catalog, job)
        assert materialized is not None
        saved = take_savepoint(statecore_home, catalog, job, name="sp")
    kinds = {t.table_kind for t in record.tables}
    assert kinds == {"keyed", "operator", "timers", "changes"}
    uris = [t.path for t in record.tables] + outputs + [t.path for t in saved.tables]
    assert all(t.path.startswith(str(saved.savepoint)) for t in saved.tables)
    for uri in uris:
        configuration = open_table(uri).metadata().configuration
        assert TABLE_PROPERTIES.items() <= configuration.items(), (uri, configuration)
    assert TABLE_PROPERTIES == {
        PROPERTY: "false",
        "delta.deletedFileRetentionDuration": "interval 3600 seconds",
    }


def tombstones(uri: str) -> list[int]:
    """The deletion timestamps (ms) of the ``remove`` actions in the table's newest log
    checkpoint."""
    last = last_log_checkpoint(uri)
    assert last is not None, uri
    checkpoint = pq.read_table(Path(uri) / "_delta_log" / f"{last:020d}.checkpoint.parquet")
    removes = checkpoint.column("remove").drop_null().to_pylist()
    return [r["deletionTimestamp"] for r in removes]


def age_tombstones(uri: str, seconds: float) -> None:
    """Move the deletion time of every ``remove`` action in the table's commit files
    ``seconds`` back."""
    for name in log_entries(uri):
        if not name.endswith(".json"):
            continue
        path = Path(uri) / "_delta_log" / name
        actions = [json.loads(line) for line in path.read_text().splitlines() if line]
        for action in actions:
            if "remove" in action:
                action["remove"]["deletionTimestamp"] -= int(seconds * 1000)
        path.write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_log_retention_log_checkpoints_drop_tombstones_older_than_an_hour(
    statecore_home: StatecoreConfig,
) -> None:
    """A stream's commits replace the files of the key groups they write; the log checkpoint
    after them keeps the tombstones of the last hour only (``TOMBSTONE_RETENTION``), not
    Delta's 7 days, so a long stream's log checkpoints stop growing. The hour is simulated by
    moving the removes' deletion times back 2 hours."""
    job = "tombstones"
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        for i in range(LOG_CHECKPOINT_INTERVAL + 2):
            _, record = run_micro_batch(statecore_home, catalog, job, i)
        uris = [t.path for t in record.tables]
        before = {uri: tombstones(uri) for uri in uris}
        assert sum(map(len, before.values())) > 0, before
        for uri in uris:
            age_tombstones(uri, 2 * 3600)
        for i in range(LOG_CHECKPOINT_INTERVAL + 2, 2 * LOG_CHECKPOINT_INTERVAL + 2):
            _, record = run_micro_batch(statecore_home, catalog, job, i)
    hour_ago_ms = (time.time() - TOMBSTONE_RETENTION.total_seconds()) * 1000
    for uri in uris:
        kept = tombstones(uri)
        assert all(deleted > hour_ago_ms for deleted in kept), uri
        assert len(kept) < len(before[uri]) + LOG_CHECKPOINT_INTERVAL * 30, uri


def test_log_retention_delta_rs_hook_deletes_month_old_entries_by_default(
    tmp_path: Path,
) -> None:
    """What statecore guards against, pinned: a table without the property loses its log
    entries older than 30 days below the newest log checkpoint at the next commit (no
    checkpoint of the hook's own needed), and its versions before that checkpoint no longer
    open."""
    uri = str(tmp_path / "plain")
    data = pa.table({"n": pa.array([0], pa.int64())})
    for _ in range(COMMITS):
        write_deltalake(uri, data, mode="append")
    DeltaTable(uri).create_checkpoint()  # at version 11, as statecore's every 10 commits
    age(uri, MONTH)
    write_deltalake(uri, data, mode="append")
    assert versions(uri) == [11, 12]
    assert DeltaTable(uri, version=11).to_pyarrow_table().num_rows == 12
    try:
        DeltaTable(uri, version=5)
    except Exception:  # delta-rs's error for a version whose log is gone
        pass
    else:
        raise AssertionError("version 5 still opens: delta-rs no longer cleans up its log")


def test_log_retention_statecore_commits_keep_month_old_entries(tmp_path: Path) -> None:
    """A statecore table (here an output table) and a table created before the property
    existed, committed by statecore: month-old entries stay, every version opens."""
    created = str(tmp_path / "out")
    older = str(tmp_path / "older")
    DeltaTable.create(older, OUTPUT)  # as an older statecore created it: no property
    assert PROPERTY not in open_table(older).metadata().configuration
    for uri in (created, older):
        for checkpoint_id in range(1, COMMITS + 1):
            append(uri, [("u", checkpoint_id)], checkpoint_id, "statecore:j/main")
        age(uri, MONTH)
        append(uri, [("u", COMMITS + 1)], COMMITS + 1, "statecore:j/main")
        assert versions(uri) == list(range(COMMITS + 2)), uri
        for version in range(1, COMMITS + 2):
            assert open_table(uri, version=version).to_pyarrow_table().num_rows == version
