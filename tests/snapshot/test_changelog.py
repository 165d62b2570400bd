"""Change files and the changes table: rows and tombstones, the merge rule, appends that keep
the key group's earlier change files, and the materialization policy."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from statecore.errors import ConfigError
from statecore.snapshot import SnapshotTable, write_key_group_files
from statecore.snapshot.changelog import (
    ChangelogConfig,
    apply_changes,
    change_rows,
    changes_schema,
)

ROWS = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("user_key", pa.string(), nullable=False),
        pa.field("value", pa.int64()),
    ]
)


def rows(*items: tuple[str, str, int]) -> pa.Table:
    return pa.table(
        {
            "key": [k for k, _, _ in items],
            "namespace": ["" for _ in items],
            "user_key": [u for _, u, _ in items],
            "value": [v for _, _, v in items],
        },
        schema=ROWS,
    )


def test_changelog_latest_change_of_a_key_replaces_all_its_rows() -> None:
    state = rows(("a", "x", 1), ("a", "y", 2), ("b", "x", 3), ("c", "x", 4))
    first = change_rows(rows(("a", "x", 10)), ["b"], checkpoint_id=5)
    second = change_rows(rows(("b", "z", 30)), ["c"], checkpoint_id=6)
    merged = apply_changes(state, [second, first])  # any order: the checkpoint decides
    assert sorted(merged.to_pylist(), key=lambda r: r["key"]) == [
        {"key": "a", "namespace": "", "user_key": "x", "value": 10},
        {"key": "b", "namespace": "", "user_key": "z", "value": 30},
    ]
    assert merged.schema == ROWS
    assert apply_changes(state, []) is state
    tombstones = first.filter(first.column("tombstone"))
    assert tombstones.column("user_key").null_count == 1  # only the key is kept
    assert changes_schema(ROWS).field("user_key").nullable


def test_changelog_changes_table_appends_and_removes_materialized_key_groups(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "changes" / "pages")
    schema = changes_schema(ROWS)
    table = SnapshotTable(uri, schema, label="j/main/pages")

    versions: list[int] = []

    def commit(checkpoint_id: int, parts: dict[int, pa.Table], removed: set[int]) -> int:
        files = write_key_group_files(
            uri, sorted(parts.items()), checkpoint_id=checkpoint_id, subtask=0
        )
        versions.append(
            table.commit(
                files,
                changed_key_groups=removed,
                base_version=versions[-1] if versions else None,
                app_id="j/main/pages",
                checkpoint_id=checkpoint_id,
                append=True,
            )
        )
        return versions[-1]

    one = change_rows(rows(("a", "x", 1)), [], checkpoint_id=1)
    v0 = commit(1, {3: one, 4: one}, set())
    v1 = commit(2, {3: change_rows(rows(("a", "x", 2)), [], checkpoint_id=2)}, set())
    assert sorted(f.key_group for f in table.files(v1)) == [3, 3, 4]  # appended
    v2 = commit(3, {}, {3})  # key group 3 materialized: its change files go
    assert sorted(f.key_group for f in table.files(v2)) == [4]
    assert v0 < v1 < v2
    assert sorted(f.key_group for f in table.files(v0)) == [3, 4]


def test_changelog_config_policy_and_bad_values() -> None:
    assert ChangelogConfig.of(True) == ChangelogConfig()
    assert ChangelogConfig.of(False) is None and ChangelogConfig.of(None) is None
    custom = ChangelogConfig(materialize_every=1)
    assert ChangelogConfig.of(custom) is custom
    assert custom.materializes(pending_files=0, pending_rows=0, changed_keys=1, state_rows=10)
    fresh = ChangelogConfig()
    assert fresh.materializes(pending_files=0, pending_rows=0, changed_keys=1, state_rows=0)
    with pytest.raises(ConfigError, match="materialize_every"):
        ChangelogConfig(materialize_every=0)
    with pytest.raises(ConfigError, match="max_change_ratio"):
        ChangelogConfig(max_change_ratio=0)
    with pytest.raises(ConfigError, match="changelog="):
        ChangelogConfig.of("yes")  # type: ignore[arg-type]
