"""The catalog's stores and their one-row lookups, against SQLite and Postgres (conftest.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus, TableVersion
from statecore.catalog.engine import shared_engine
from statecore.catalog.models import CheckpointRow, CheckpointTableRow, JobRow
from statecore.errors import CheckpointCommitError, CheckpointNotFoundError

JOB = "clicks"
CHECKPOINT = CheckpointKind.CHECKPOINT


def _completed(catalog: Catalog, checkpoint_id: int, *, kind: CheckpointKind = CHECKPOINT) -> None:
    catalog.begin_checkpoint(JOB, checkpoint_id, kind=kind, parallelism=2, max_parallelism=128)
    catalog.complete_checkpoint(JOB, checkpoint_id, tables=[])


@pytest.fixture
def job_catalog(catalog: Catalog) -> Catalog:
    catalog.ensure_job(JOB, parallelism=2, max_parallelism=128)
    return catalog


def test_catalog_store_latent_an_expired_checkpoint_cannot_fail(job_catalog: Catalog) -> None:
    # begin_checkpoint replays an EXPIRED checkpoint as it replays a COMPLETED one; failing it
    # would turn a replay into a retry that runs its input a second time.
    _completed(job_catalog, 1)
    _completed(job_catalog, 2)
    [expired] = job_catalog.expire_checkpoints(JOB, [1])
    with pytest.raises(CheckpointCommitError, match="checkpoint 1 of job 'clicks' is EXPIRED"):
        job_catalog.fail_checkpoint(JOB, 1, error="late failure")
    assert job_catalog.get_checkpoint(JOB, 1) == expired
    replay = job_catalog.begin_checkpoint(
        JOB, 1, kind=CHECKPOINT, parallelism=2, max_parallelism=128
    )
    assert replay.status is CheckpointStatus.EXPIRED


def test_catalog_store_find_job_and_has_job_read_one_row(catalog: Catalog) -> None:
    assert catalog.find_job(JOB) is None
    assert not catalog.has_job(JOB)
    job = catalog.ensure_job(JOB, parallelism=2, max_parallelism=128)
    catalog.ensure_job("other", parallelism=1, max_parallelism=128)
    assert catalog.find_job(JOB) == job == catalog.get_job(JOB)
    assert catalog.has_job(JOB)
    assert not catalog.has_job("click")


def test_catalog_store_checkpoint_status_names_one_checkpoint(job_catalog: Catalog) -> None:
    assert job_catalog.checkpoint_status(JOB, 1) is None
    assert job_catalog.checkpoint_status("unknown", 1) is None
    job_catalog.begin_checkpoint(JOB, 1, kind=CHECKPOINT, parallelism=2, max_parallelism=128)
    assert job_catalog.checkpoint_status(JOB, 1) is CheckpointStatus.IN_PROGRESS
    job_catalog.complete_checkpoint(JOB, 1, tables=[])
    assert job_catalog.checkpoint_status(JOB, 1) is CheckpointStatus.COMPLETED
    job_catalog.begin_checkpoint(JOB, 2, kind=CHECKPOINT, parallelism=2, max_parallelism=128)
    job_catalog.fail_checkpoint(JOB, 2, error="executor lost")
    assert job_catalog.checkpoint_status(JOB, 2) is CheckpointStatus.FAILED
    assert job_catalog.checkpoint_status(JOB, 3) is None


def test_catalog_store_each_latest_has_its_own_name(job_catalog: Catalog) -> None:
    catalog = job_catalog
    assert catalog.latest_restorable(JOB) is None
    assert catalog.latest_completed_id(JOB) is None
    assert catalog.highest_completed_id(JOB) is None
    assert catalog.highest_checkpoint_id(JOB) is None
    _completed(catalog, 10)
    _completed(catalog, 7)  # completed last, with a smaller id
    _completed(catalog, 20, kind=CheckpointKind.SAVEPOINT)  # no run restores from it
    restorable = catalog.latest_restorable(JOB)
    assert restorable is not None and restorable.checkpoint_id == 7
    assert catalog.latest_checkpoint(JOB) == restorable  # the old name, same meaning
    assert catalog.latest_completed_id(JOB) == 20  # of any kind: never expired
    assert catalog.highest_completed_id(JOB) == 10  # a new run's id floor
    assert catalog.latest_checkpoint_id(JOB) == 10  # the old name, same meaning
    catalog.expire_checkpoints(JOB, [10])
    assert catalog.highest_completed_id(JOB) == 10  # an expired id still replays
    catalog.begin_checkpoint(JOB, 30, kind=CHECKPOINT, parallelism=2, max_parallelism=128)
    assert catalog.highest_checkpoint_id(JOB) == 30
    assert catalog.highest_completed_id(JOB) == 10


def test_catalog_store_list_checkpoints_last_keeps_the_largest_ids(job_catalog: Catalog) -> None:
    for checkpoint_id in (3, 1, 4, 2):
        _completed(job_catalog, checkpoint_id)
    last = job_catalog.list_checkpoints(JOB, last=2)
    assert [c.checkpoint_id for c in last] == [3, 4]
    assert [c.checkpoint_id for c in job_catalog.list_checkpoints(JOB)] == [1, 2, 3, 4]


HISTORY = 10_000
BOUND = 50  # rows a lookup may read, whatever the history


def _insert_history(engine: sa.Engine, job: str) -> None:
    """``HISTORY`` checkpoints of ``job``, in bulk: every tenth FAILED, the last ten COMPLETED
    (with two tables each), the rest EXPIRED, in id order of completion."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    checkpoints, completed = [], []
    seq = 0
    with engine.begin() as connection:
        job_pk = connection.scalar(sa.select(JobRow.id).where(JobRow.name == job))
        for checkpoint_id in range(1, HISTORY + 1):
            if checkpoint_id % 10 == 3:
                status = CheckpointStatus.FAILED
            elif checkpoint_id > HISTORY - 10:
                status = CheckpointStatus.COMPLETED
                completed.append(checkpoint_id)
            else:
                status = CheckpointStatus.EXPIRED
            done = status is not CheckpointStatus.FAILED
            seq += done
            checkpoints.append(
                {
                    "job_id": job_pk,
                    "checkpoint_id": checkpoint_id,
                    "kind": CHECKPOINT.name,
                    "status": status.name,
                    "parallelism": 2,
                    "max_parallelism": 128,
                    "started_at": at,
                    "completed_at": at if done else None,
                    "completion_seq": seq if done else None,
                }
            )
        connection.execute(sa.insert(CheckpointRow), checkpoints)
        connection.execute(
            sa.update(JobRow).where(JobRow.id == job_pk).values(last_completion_seq=seq)
        )
        pks = connection.execute(
            sa.select(CheckpointRow.id).where(
                CheckpointRow.job_id == job_pk, CheckpointRow.checkpoint_id.in_(completed)
            )
        ).scalars()
        connection.execute(
            sa.insert(CheckpointTableRow),
            [
                {
                    "checkpoint_pk": pk,
                    "operator": "count",
                    "state": state,
                    "table_kind": "keyed",
                    "path": f"/warehouse/{job}/count/keyed/{state}",
                    "version": 1,
                    "rows": 1,
                    "bytes": 1,
                    "key_groups": {"0": [1, 1]},
                }
                for pk in pks
                for state in ("total", "last")
            ],
        )


@contextmanager
def _rows_read(engine: sa.Engine) -> Iterator[Callable[[], int]]:
    """Count the rows the catalog's SELECTs yield inside the block: each statement seen is run
    again afterwards as ``SELECT count(*)`` over it, with its parameters (an upper bound of the
    rows fetched: a ``scalar()`` fetches only the first)."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    counted: list[int] = []
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield lambda: counted[0]
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    with engine.connect() as connection:
        counted.append(
            sum(
                int(
                    connection.exec_driver_sql(
                        f"SELECT count(*) FROM ({statement}) AS counted", parameters
                    ).scalar_one()
                )
                for statement, parameters in seen
            )
        )


def test_catalog_store_a_long_history_is_read_in_bounded_rows(
    catalog_url: str, job_catalog: Catalog
) -> None:
    engine = shared_engine(catalog_url)
    _insert_history(engine, JOB)
    catalog = job_catalog
    last = HISTORY
    table = TableVersion(
        operator="count",
        state="total",
        table_kind="keyed",
        path=f"/warehouse/{JOB}/count/keyed/total",
        version=2,
        rows=1,
        bytes=1,
        key_groups={0: (1, 1)},
    )
    with _rows_read(engine) as rows:  # what a run reads when it opens the job
        assert catalog.has_job(JOB)
        job = catalog.find_job(JOB)
        assert job is not None and job.parallelism == 2
        restorable = catalog.latest_restorable(JOB)
        assert restorable is not None and restorable.checkpoint_id == last
        assert len(restorable.tables) == 2
        assert catalog.latest_completed_id(JOB) == last
        assert catalog.highest_completed_id(JOB) == last
        assert catalog.highest_checkpoint_id(JOB) == last
        assert catalog.checkpoint_status(JOB, 5) is CheckpointStatus.EXPIRED
        assert catalog.checkpoint_status(JOB, 13) is CheckpointStatus.FAILED
        assert catalog.checkpoint_status(JOB, last) is CheckpointStatus.COMPLETED
        assert catalog.checkpoint_status(JOB, last + 1) is None
        assert catalog.get_checkpoint(JOB, last - 1).status is CheckpointStatus.COMPLETED
    assert rows() <= BOUND, f"{rows()} rows read to open a job of {HISTORY} checkpoints"
    with _rows_read(engine) as rows:  # its checkpoints, and what operations read
        assert [c.checkpoint_id for c in catalog.list_checkpoints(JOB, last=3)] == [
            last - 2,
            last - 1,
            last,
        ]
        replay = catalog.begin_checkpoint(
            JOB, 7, kind=CHECKPOINT, parallelism=2, max_parallelism=128, increasing=True
        )
        assert replay.status is CheckpointStatus.EXPIRED
        catalog.begin_checkpoint(
            JOB, last + 1, kind=CHECKPOINT, parallelism=2, max_parallelism=128, increasing=True
        )
        done = catalog.complete_checkpoint(JOB, last + 1, tables=[table])
        catalog.expire_checkpoints(JOB, [last - 1])
        with pytest.raises(CheckpointNotFoundError, match="latest 20 checkpoints"):
            catalog.get_checkpoint(JOB, last + 5)
    assert done.completed_at is not None
    assert rows() <= BOUND, f"{rows()} rows read to checkpoint a job of {HISTORY} checkpoints"
    # the count is real: the full listing reads the whole history
    with _rows_read(engine) as rows:
        assert len(catalog.list_checkpoints(JOB, with_tables=False)) == HISTORY + 1
    assert rows() > HISTORY


def test_catalog_store_list_checkpoints_after_an_id(job_catalog: Catalog) -> None:
    for checkpoint_id in (1, 2, 3, 4):
        _completed(job_catalog, checkpoint_id)
    after = job_catalog.list_checkpoints(JOB, after=2, with_tables=False)
    assert [c.checkpoint_id for c in after] == [3, 4]
    assert job_catalog.list_checkpoints(JOB, after=4) == []


@contextmanager
def _selects(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    """The SELECT statements (with their parameters) run on ``engine`` inside the block."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def test_catalog_store_lookups_search_an_index_on_sqlite(
    catalog_url: str, job_catalog: Catalog
) -> None:
    if not catalog_url.startswith("sqlite"):
        pytest.skip("SQLite's query plans")
    engine = shared_engine(catalog_url)
    _insert_history(engine, JOB)
    with _selects(engine) as statements:
        job_catalog.find_job(JOB)
        job_catalog.latest_restorable(JOB)
        job_catalog.latest_completed_id(JOB)
        job_catalog.highest_completed_id(JOB)
        job_catalog.highest_checkpoint_id(JOB)
        job_catalog.checkpoint_status(JOB, 5)
        job_catalog.list_checkpoints(JOB, last=3)
    with engine.connect() as connection:
        for statement, parameters in statements:
            plan = [
                row[-1]
                for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            ]
            assert not [step for step in plan if step.startswith("SCAN")], (statement, plan)
            if any(step.startswith("SEARCH statecore_checkpoints ") for step in plan):
                # ordered by the index itself, so LIMIT stops at the first rows
                assert not [step for step in plan if "TEMP B-TREE" in step], (statement, plan)


def test_catalog_store_a_deleted_catalog_folder_is_made_again_on_the_next_open(
    tmp_path: Path,
) -> None:
    """The process keeps one engine per catalog URL: a SQLite catalog whose folder was deleted
    since its first open (a job's home removed and started again) opens as a fresh catalog
    again, instead of failing on "unable to open database file"."""
    url = f"sqlite:///{tmp_path / 'home' / 'catalog.db'}"
    with Catalog.connect(url) as first:
        first.ensure_job(JOB, parallelism=1, max_parallelism=8)
        assert first.has_job(JOB)
    shutil.rmtree(tmp_path / "home")
    with Catalog.connect(url) as again:
        assert not again.has_job(JOB)
        again.ensure_job(JOB, parallelism=1, max_parallelism=8)
        assert again.has_job(JOB)
