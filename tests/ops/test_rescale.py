"""Rescale: within the max parallelism nothing is rewritten; past it, key groups are recomputed
from the stored keys for keyed state and timers, and the state stays the same."""

from __future__ import annotations

import pytest

from statecore.catalog import Catalog
from statecore.checkpoint.points import RestorePoint, checkpoint_point
from statecore.config import StatecoreConfig
from statecore.errors import (
    CheckpointNotFoundError,
    ConfigError,
    MaintenanceLockedError,
    StateMismatchError,
)
from statecore.keygroups import assign_to_key_group
from statecore.ops.rescale import rescale, verify_rescale
from statecore.ops.savepoint import pin_savepoint, take_savepoint
from statecore.query import connect, delta_scan
from statecore.query.diff import checksums
from tests.ops.conftest import JOB, USERS, latest, tables
from tests.ops.statebuilder import (
    Table,
    catalog_snapshot,
    files_under,
    value_rows,
    write_checkpoint,
)


def sums(point: RestorePoint) -> list[tuple[str, str, int, int | None, str]]:
    return [(c.table_kind, c.state, c.rows, c.keys, c.checksum) for c in checksums(point)]


def test_within_max_parallelism_nothing_is_rewritten(job: StatecoreConfig) -> None:
    before = latest(job)
    files = files_under(f"{job.warehouse}/{JOB}")
    with Catalog.connect(job.catalog_url) as catalog:
        result = rescale(job, catalog, JOB, parallelism=3)
        assert catalog.get_job(JOB).parallelism == 3
        [savepoint] = catalog.list_savepoints(JOB)
    assert (result.parallelism_before, result.parallelism, result.keyed_bytes_rewritten) == (
        2,
        3,
        0,
    )
    assert result.savepoint == savepoint.name and savepoint.reason == "rescale"
    assert savepoint.kind == "pin"  # the checkpoint pinned, not copied
    assert latest(job) == before  # same checkpoint, same table versions
    assert files_under(f"{job.warehouse}/{JOB}") == files


def test_past_max_parallelism_key_groups_are_recomputed(job: StatecoreConfig) -> None:
    before = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        result = rescale(job, catalog, JOB, parallelism=3, max_parallelism=256)
        record = catalog.get_job(JOB)
        assert (record.parallelism, record.max_parallelism) == (3, 256)
        reasons = [s.reason for s in catalog.list_savepoints(JOB)]
    after = latest(job)
    assert after.checkpoint_id == result.checkpoint_id
    assert (after.max_parallelism, after.parallelism) == (256, 2)  # as operator state was written
    assert result.keyed_bytes_rewritten > 0 and reasons == ["rescale", "max-parallelism"]
    assert sums(after) == sums(before)
    con = connect()
    for table in after.tables:
        rows = con.execute(f"SELECT * FROM {delta_scan(table)}").to_arrow_table()
        if table.table_kind == "operator":
            assert table.key_groups.keys() == {0, 1}  # subtasks, copied as they were
            continue
        expected = [assign_to_key_group(k, 256) for k in rows.column("key").to_pylist()]
        assert rows.column("key_group").to_pylist() == expected, table.state
        assert max(table.key_groups) >= 128  # the new key groups are used
    old = {t.state: t for t in before.tables}
    assert {t.state: t.rows for t in after.tables} == {s: t.rows for s, t in old.items()}


def test_back_below_the_old_max_parallelism(job: StatecoreConfig) -> None:
    before = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        rescale(job, catalog, JOB, parallelism=2, max_parallelism=256)
        rescale(job, catalog, JOB, parallelism=1, max_parallelism=64)
    after = latest(job)
    assert after.max_parallelism == 64 and sums(after) == sums(before)
    assert max(k for t in after.tables if t.table_kind != "operator" for k in t.key_groups) < 64
    assert after.tables[0].key_groups != before.tables[0].key_groups


@pytest.mark.parametrize(
    "parallelism, max_parallelism, message",
    [
        (0, None, "parallelism 0 must be at least 1"),
        (
            129,
            None,
            "parallelism 129 is above the max parallelism 128; to go past it, pass a "
            "larger --max-parallelism",
        ),
        (300, 256, "parallelism 300 is above the max parallelism 256$"),
        (2, 40000, "max parallelism 40000 must be in 1..32768"),
    ],
)
def test_bad_rescales_change_nothing(
    job: StatecoreConfig, parallelism: int, max_parallelism: int | None, message: str
) -> None:
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(ConfigError, match=message):
            rescale(job, catalog, JOB, parallelism=parallelism, max_parallelism=max_parallelism)
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_rescale_while_another_operation_holds_the_job(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        catalog.acquire_maintenance_lock(JOB, operation="ttl-cleanup", owner="other")
        before, files = catalog_snapshot(job), files_under(job.warehouse)
        with pytest.raises(MaintenanceLockedError, match="'ttl-cleanup'"):
            rescale(job, catalog, JOB, parallelism=3, max_parallelism=256)
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_a_job_without_checkpoints_only_changes_its_parallelism(
    statecore_home: StatecoreConfig,
) -> None:
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        catalog.ensure_job("empty", parallelism=2, max_parallelism=128)
        result = rescale(statecore_home, catalog, "empty", parallelism=4, max_parallelism=512)
        assert result.savepoint is None and result.checkpoint_id is None
        record = catalog.get_job("empty")
        assert (record.parallelism, record.max_parallelism) == (4, 512)
        assert catalog.list_checkpoints("empty") == []


def test_verify_rescale_within_and_past_the_max_parallelism(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        within = rescale(job, catalog, JOB, parallelism=3)
        assert within.savepoint is not None
        check = verify_rescale(
            catalog, JOB, savepoint=within.savepoint, parallelism=3, max_parallelism=128
        )
        past = rescale(job, catalog, JOB, parallelism=2, max_parallelism=256)
        assert past.savepoint is not None
        again = verify_rescale(
            catalog, JOB, savepoint=past.savepoint, parallelism=2, max_parallelism=256
        )
    # 41 users in total, seen and plain, 10 timers, 3 operator-state elements
    assert (check.states, check.keys, check.rows) == (5, 3 * 41 + 10, 3 * 41 + 10 + 3)
    assert check.checkpoint_id == 2 and again.checkpoint_id == past.checkpoint_id
    assert (again.states, again.keys, again.rows) == (check.states, check.keys, check.rows)
    assert again.to_dict()["max_parallelism"] == 256


def test_verify_rescale_names_the_states_that_differ(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        result = rescale(job, catalog, JOB, parallelism=3)
    assert result.savepoint is not None
    changed = dict(USERS, **{"user-0": 100.0, "user-new": 5.0, "user-7": -1.0})
    write_checkpoint(job, JOB, 3, tables(changed, 20_000), parallelism=3)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(StateMismatchError) as raised:
            verify_rescale(
                catalog, JOB, savepoint=result.savepoint, parallelism=3, max_parallelism=128
            )
    message = str(raised.value)
    assert f"job {JOB!r}: the state of checkpoint 3 differs from pinned savepoint" in message
    assert "main/keyed/plain: before 41 rows, 41 keys, checksum" in message
    assert "main/keyed/total" in message
    assert "main/keyed/seen" not in message and "main/operator/offsets" not in message


def test_verify_rescale_checks_the_parallelism_and_the_savepoint(job: StatecoreConfig) -> None:
    write_checkpoint(job, "other", 1, {"plain": Table(value_rows({"a": 1.0}))})
    with Catalog.connect(job.catalog_url) as catalog:
        result = rescale(job, catalog, JOB, parallelism=3)
        other = rescale(job, catalog, "other", parallelism=1)
        assert result.savepoint is not None and other.savepoint is not None
        with pytest.raises(
            StateMismatchError,
            match="parallelism 3 and max parallelism 128 .*not at 4 and 128 as rescaled",
        ):
            verify_rescale(
                catalog, JOB, savepoint=result.savepoint, parallelism=4, max_parallelism=128
            )
        with pytest.raises(StateMismatchError, match="its checkpoint 2: 128.*not at 3 and 256"):
            verify_rescale(
                catalog, JOB, savepoint=result.savepoint, parallelism=3, max_parallelism=256
            )
        with pytest.raises(CheckpointNotFoundError, match="job 'clicks' has no savepoint named"):
            verify_rescale(  # a pin's name is one of its job's
                catalog, JOB, savepoint=other.savepoint, parallelism=3, max_parallelism=128
            )


def test_verify_rescale_of_the_checkpoint_it_left_holds_after_a_later_run(
    job: StatecoreConfig,
) -> None:
    """The rescale DAG's ``verify`` once compared the savepoint with the job's latest checkpoint:
    a run of the job that completed between ``rescale`` and ``verify`` (the month on one home's
    late day did) failed a rescale that kept every state."""
    with Catalog.connect(job.catalog_url) as catalog:
        result = rescale(job, catalog, JOB, parallelism=3)
    assert result.savepoint is not None and result.checkpoint_id is None  # within: checkpoint 2
    changed = dict(USERS, **{"user-0": 100.0, "user-new": 5.0})
    write_checkpoint(job, JOB, 3, tables(changed, 20_000), parallelism=3)  # the later run
    with Catalog.connect(job.catalog_url) as catalog:
        check = verify_rescale(
            catalog,
            JOB,
            savepoint=result.savepoint,
            parallelism=3,
            max_parallelism=128,
            checkpoint_id=2,
        )
    assert check.checkpoint_id == 2 and check.keys == 3 * 41 + 10


def test_fenced_maintenance_rescale_from_a_savepoint_a_later_run_outdated(
    job: StatecoreConfig,
) -> None:
    """A savepoint of checkpoint 1, then checkpoint 2 completed (a run of the job between the
    rescale DAG's savepoint and its rescale): the rescale once refused ("take a new one"); now
    it pins checkpoint 2 under its lease and rescales that, never checkpoint 1's older state."""
    with Catalog.connect(job.catalog_url) as catalog:
        old = pin_savepoint(job, catalog, JOB, name="before-run", checkpoint_id=1)
        result = rescale(
            job, catalog, JOB, parallelism=3, max_parallelism=256, savepoint="before-run"
        )
        pins = {s.name: s.source_checkpoint for s in catalog.list_savepoints(JOB)}
    assert old.checkpoint_id == 1 and result.savepoint_checkpoint_id == 2
    assert pins["before-run"] == 1 and pins[result.savepoint or ""] == 2  # both kept
    with Catalog.connect(job.catalog_url) as catalog:
        after = checkpoint_point(catalog, JOB)
        two, one = (checkpoint_point(catalog, JOB, i) for i in (2, 1))
        check = verify_rescale(
            catalog, JOB, savepoint=result.savepoint or "", parallelism=3, max_parallelism=256
        )
    assert after.checkpoint_id == result.checkpoint_id == check.checkpoint_id
    assert sums(after) == sums(two) != sums(one)  # checkpoint 2's state, not rewound to 1's


def test_bad_input_rescale_from_another_jobs_savepoint_is_refused(job: StatecoreConfig) -> None:
    write_checkpoint(job, "other", 1, tables(USERS, 10_000))
    with Catalog.connect(job.catalog_url) as catalog:
        theirs = take_savepoint(job, catalog, "other", name="theirs").savepoint or ""
        before, files = catalog_snapshot(job), files_under(job.warehouse)
        with pytest.raises(ConfigError, match="savepoint .*theirs is of .*'other'.*take a new one"):
            rescale(job, catalog, JOB, parallelism=3, savepoint=theirs)
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files
