"""The operations DAGs on a real Airflow (``dag.test()``), on state made by the pipeline.

One Airflow interpreter runs, in order: the pipeline (day 1, parallelism 2), ``rescale`` to 3, the
pipeline (day 2, at the job's parallelism), ``rescale`` to 1, the pipeline (day 3), ``rescale`` to 2
with max parallelism 128 → 256, ``savepoint`` (an export), then ``state_maintenance`` for the
clickstream job and for a job with TTL state (written on Spark 3 hours apart). The effects are
checked against a reference run of the same days at parallelism 2 that never rescaled, and the
savepoint restores with a fresh catalog.

The Spark runs outside the DAGs (the reference, the TTL job, the restore) go to two subprocesses
with a local Spark of their own (:mod:`tests.airflow.ops_jobs`), before and after the DAGs: the
test takes no Spark session of the test run, so it stays out of the ``jvm`` group
(``tests/groups.py``), the long pole of ``make test``.
"""

from __future__ import annotations

import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.checkpoint.points import (
    RestorePoint,
    checkpoint_point,
    load_savepoint,
    resolve_point,
    tables_by_name,
)
from statecore.cli.demo import generate_clickstream
from statecore.config import StatecoreConfig
from statecore.keygroups import assign_to_key_group
from statecore.ops.retention import apply_retention
from statecore.ops.savepoint import delete_savepoint
from statecore.query import connect, delta_scan
from statecore.query.diff import checksums
from tests.airflow.dagrun import run_dags
from tests.airflow.ops_jobs import checkpoint_of, clickstream_day, run_steps, sessions_visits

# A chain of Airflow runs and a reference run: 30 minutes, as the demo and schedule tests get.
pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]

DAYS = [date(2026, 1, 1) + timedelta(days=i) for i in range(4)]
HOUR_MS = 3_600_000


def state_of(point: RestorePoint) -> dict[str, Any]:
    """What must not depend on the parallelism: rows, keys and checksum of each keyed state and
    the timers (their key groups aside); of the operator state, the events processed per
    checkpoint (split list state: its elements move between instances) and the distinct rules
    (broadcast state: one copy per instance)."""
    out: dict[str, Any] = {
        c.state: (c.rows, c.keys, c.checksum)
        for c in checksums(point)
        if c.table_kind != "operator"
    }
    tables = tables_by_name(point)
    con = connect()
    out["processed"] = con.execute(
        "SELECT value.checkpoint_id, sum(value.events) FROM "
        f"{delta_scan(tables['main', 'operator', 'processed'])} GROUP BY 1 ORDER BY 1"
    ).fetchall()
    out["rules"] = con.execute(
        f"SELECT DISTINCT user_key, value FROM {delta_scan(tables['main', 'operator', 'rules'])} "
        "ORDER BY 1"
    ).fetchall()
    return out


def test_rescale_savepoint_and_maintenance_dags(tmp_path: Path) -> None:
    # the reference: the same days at parallelism 2, without any rescale
    data, reference_home = tmp_path / "reference" / "data", tmp_path / "reference" / "home"
    generate_clickstream(data, days=len(DAYS), users=30, events_per_day=120)
    home = tmp_path / "home"
    generate_clickstream(
        home / "data" / "clickstream", days=len(DAYS), users=30, events_per_day=120
    )
    config = StatecoreConfig.resolve(home=str(home), env={})
    # a job with TTL state (2 hours): the early users were last seen 3 hours ago
    now = int(time.time() * 1000)
    early, late = [f"u{i}" for i in range(10)], [f"u{i}" for i in range(5, 15)]
    run_steps(
        [
            *(clickstream_day(reference_home, data, day, parallelism=2) for day in DAYS),
            sessions_visits(home, early, "home", checkpoint_id=1, now=now - 3 * HOUR_MS),
            sessions_visits(home, late, "cart", checkpoint_id=2, now=now),
        ],
        tmp_path / "spark-before.log",
    )
    # the reference's state after days 3 and 4, each read at its checkpoint
    reference_config = StatecoreConfig.resolve(home=str(reference_home), env={})
    with Catalog.connect(reference_config.catalog_url) as catalog:
        reference = {
            day: state_of(checkpoint_point(catalog, "clickstream", checkpoint_of(day)))
            for day in DAYS[2:]
        }

    steps = run_dags(
        home,
        [
            ("stateful_pipeline", {"date": "2026-01-01", "parallelism": 2}),
            ("rescale", {"parallelism": 3}),
            ("stateful_pipeline", {"date": "2026-01-02"}),
            ("rescale", {"parallelism": 1}),
            ("stateful_pipeline", {"date": "2026-01-03"}),
            ("rescale", {"parallelism": 2, "max_parallelism": 256}),
            ("savepoint", {"name": "after-rescales", "export": True}),
            ("state_maintenance", {"retain": 2, "vacuum_retention_hours": 0}),
            ("state_maintenance", {"job": "sessions", "retain": 5, "vacuum_retention_hours": 0}),
        ],
    )
    rescales = [s["xcom"] for s in steps if s["dag"] == "rescale"]
    assert [r["rescale"]["parallelism"] for r in rescales] == [3, 1, 2]
    assert [r["rescale"]["keyed_bytes_rewritten"] > 0 for r in rescales] == [False, False, True]
    assert all(r["verify"]["keys"] > 0 and r["validate"] for r in rescales)
    # each rescale pinned the checkpoint before it (no copy); the verify read the pin back
    assert [r["savepoint"]["kind"] for r in rescales] == ["pin", "pin", "pin"]
    assert all(r["savepoint"]["path"] is None for r in rescales)

    with Catalog.connect(config.catalog_url) as catalog:
        days = {
            c.checkpoint_id: c
            for c in catalog.list_checkpoints("clickstream")
            if c.kind is CheckpointKind.CHECKPOINT
        }
        # each day ran at the parallelism the rescale before it set
        assert {i: (c.parallelism, c.max_parallelism) for i, c in days.items()} == {
            20260101: (2, 128),
            20260102: (3, 128),
            20260103: (1, 128),
        }
        latest = checkpoint_point(catalog, "clickstream")
        assert latest.max_parallelism == 256 and catalog.get_job("clickstream").parallelism == 2
        # state equal to the run that never rescaled: 2 -> 3 -> 1, then 128 -> 256
        assert state_of(latest) == reference[DAYS[2]]
        con = connect()
        for table in (t for t in latest.tables if t.table_kind != "operator"):
            rows = con.execute(f"SELECT key, key_group FROM {delta_scan(table)}").fetchall()
            assert all(kg == assign_to_key_group(key, 256) for key, kg in rows), table.state

        # retention kept the last two checkpoints; the rescales' pins kept the files of theirs
        retention = steps[7]["xcom"]["retention"]
        assert retention["expired"] == [20260101, 20260102] and retention["files_deleted"] == 0
        statuses = {c.checkpoint_id: c.status for c in catalog.list_checkpoints("clickstream")}
        assert statuses[20260101] is CheckpointStatus.EXPIRED
        assert state_of(checkpoint_point(catalog, "clickstream", 20260103))
        pins = [resolve_point(catalog, "clickstream", r["savepoint"]["name"]) for r in rescales]
        assert [p.checkpoint_id for p in pins] == [20260101, 20260102, 20260103]
        assert state_of(pins[2]) == reference[DAYS[2]]
        assert all(state_of(p) for p in pins)  # every file of the expired ones still read
        # deleting the pins releases them: the next retention reclaims their files
        for r in rescales:
            delete_savepoint(catalog, "clickstream", r["savepoint"]["name"])
        released = apply_retention(
            config, catalog, "clickstream", retain=2, vacuum_after=timedelta(0)
        )
        assert released.files_deleted > 0

        # TTL cleanup: what expired is gone, as a maintenance checkpoint
        cleanup = steps[8]["xcom"]["ttl_cleanup"]
        gone = [u for u in early if u not in late]
        assert cleanup["rows_reclaimed"] == 2 * len(gone)  # their last_page and pages rows
        assert cleanup["expired"] == len(gone) + len(early)  # ... and every "home" page
        assert cleanup["bytes_reclaimed"] > 0
        assert {k["state"] for k in cleanup["key_groups"]} == {"last_page", "pages"}
        sessions = checkpoint_point(catalog, "sessions")
        assert sessions.checkpoint_id == cleanup["checkpoint_id"]
        rows = {
            t.state: sorted(con.execute(f"SELECT key FROM {delta_scan(t)}").fetchall())
            for t in sessions.tables
        }
        assert rows["last_page"] == rows["pages"] == sorted((u,) for u in late)
        assert len(rows["visits"]) == 15

    # the savepoint restores with a fresh catalog, and the job goes on from it
    saved = steps[6]["xcom"]["savepoint"]
    assert load_savepoint(saved["path"]).max_parallelism == 256
    run_steps(
        [clickstream_day(tmp_path / "fresh", data, DAYS[3], restore_from=saved["path"])],
        tmp_path / "spark-after.log",
    )
    fresh = StatecoreConfig.resolve(home=str(tmp_path / "fresh"), env={})
    with Catalog.connect(fresh.catalog_url) as catalog:
        kinds = [c.kind for c in catalog.list_checkpoints("clickstream")]
        assert kinds == [CheckpointKind.CHECKPOINT, CheckpointKind.MAINTENANCE]
        assert state_of(checkpoint_point(catalog, "clickstream")) == reference[DAYS[3]]
