"""The catalog's records, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from statecore.catalog import (
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
    StateRecord,
    TableVersion,
)
from statecore.errors import ConfigError


def _table(**overrides: object) -> TableVersion:
    args: dict[str, object] = {
        "operator": "count",
        "state": "total",
        "table_kind": "keyed",
        "path": "/wh/clicks/count/keyed/total",
        "version": 0,
        "rows": 3,
        "bytes": 30,
        "key_groups": {1: (3, 30)},
    }
    args.update(overrides)
    return TableVersion(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"table_kind": "sideways"}, "table_kind 'sideways' is not one of"),
        ({"version": -1}, "must be >= 0"),
        ({"path": ""}, "must not be empty"),
        ({"key_groups": {-1: (1, 1)}}, "key group -1"),
        ({"key_groups": {2: (1, -5)}}, r"key group 2 has a negative number: \(1, -5\)"),
    ],
)
def test_table_version_refuses_bad_values(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=f"state 'total' of operator 'count'.*{message}"):
        _table(**overrides)


def test_state_record_needs_names() -> None:
    with pytest.raises(ConfigError, match="kind must not be empty"):
        StateRecord(job="j", operator="o", name="s", kind="", descriptor={}, schema="")


def test_checkpoint_totals_and_duration() -> None:
    started = datetime(2025, 1, 1, tzinfo=UTC)
    record = CheckpointRecord(
        job="clicks",
        checkpoint_id=1,
        kind=CheckpointKind.CHECKPOINT,
        status=CheckpointStatus.COMPLETED,
        parallelism=1,
        max_parallelism=128,
        started_at=started,
        completed_at=started + timedelta(seconds=3),
        tables=(_table(), _table(state="other", rows=4, bytes=40)),
    )
    assert (record.total_rows, record.total_bytes) == (7, 70)
    assert record.duration == timedelta(seconds=3)
    in_progress = CheckpointRecord(
        job="clicks",
        checkpoint_id=2,
        kind=CheckpointKind.CHECKPOINT,
        status=CheckpointStatus.IN_PROGRESS,
        parallelism=1,
        max_parallelism=128,
        started_at=started,
    )
    assert (in_progress.duration, in_progress.total_rows) == (None, 0)
