"""The rows of the statecore page in Airflow's UI (:mod:`statecore.ops.overview`), over a real
catalog and real Delta tables written in-process."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from statecore.backends.timers import MIN_WATERMARK
from statecore.catalog import Catalog, CheckpointRecord
from statecore.config import StatecoreConfig
from statecore.errors import CheckpointNotFoundError, ConfigError, JobNotFoundError
from statecore.keygroups import assign_to_key_group
from statecore.ops.overview import (
    DagRunRef,
    checkpoint_detail,
    checkpoint_row,
    checkpoints_overview,
    job_overview,
    jobs_overview,
    link_runs,
    lookup_row,
    savepoints_overview,
)
from tests.inprocess import MAX_P
from tests.ops.shopstate import JOB, build_shop, run_day


@pytest.fixture
def shop(tmp_path: Path) -> StatecoreConfig:
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    build_shop(config)
    run_day(config, 2)
    return config


def test_ui_page_rows_of_jobs_checkpoints_and_savepoints(shop: StatecoreConfig) -> None:
    with Catalog.connect(shop.catalog_url) as catalog:
        [job] = jobs_overview(catalog)
        assert job_overview(catalog, JOB) == job
        with pytest.raises(JobNotFoundError, match="nope"):
            job_overview(catalog, "nope")
        checkpoints = checkpoints_overview(catalog, JOB)
        savepoints = savepoints_overview(catalog)
        detail = checkpoint_detail(catalog, JOB, 20260102)
        with pytest.raises(CheckpointNotFoundError, match="20260109"):
            checkpoint_detail(catalog, JOB, 20260109)
        with pytest.raises(JobNotFoundError, match="nope"):
            checkpoints_overview(catalog, "nope")
    assert job["job"] == JOB and job["parallelism"] == 2 and job["max_parallelism"] == MAX_P
    assert job["latest_checkpoint"] == 20260102 and job["lease_holder"] is None
    ids = [c["checkpoint"] for c in checkpoints]
    assert 20260101 in ids and ids.index(20260102) < ids.index(20260101)  # newest first
    latest = checkpoints[ids.index(20260102)]
    assert latest["status"] == "COMPLETED" and latest["kind"] == "CHECKPOINT"
    assert latest["rows"] > 0 and latest["bytes"] > 0 and latest["duration_s"] >= 0
    assert latest["restore"]["subtasks"] == 2 and latest["restore"]["bytes"] > 0
    accesses = {(r["state"], r["access"]) for r in latest["latency"]}
    assert ("counts", "put") in accesses and ("total", "add") in accesses
    assert "watermark" in latest  # None until the catalog keeps one
    [savepoint] = savepoints
    assert savepoint["savepoint"] == "before-deploy" and savepoint["from_checkpoint"] == 20260101
    keyed = {t["state"]: t for t in detail["tables"] if t["table_kind"] == "keyed"}
    assert set(keyed) >= {"last", "items", "counts", "total"}
    total = keyed["total"]
    groups = {g["key_group"] for g in total["key_groups"]}
    assert groups == {assign_to_key_group(f"u{i}", MAX_P) for i in range(300)}
    assert sum(g["bytes"] for g in total["key_groups"]) == total["bytes"]
    assert sum(g["rows"] for g in total["key_groups"]) == total["rows"] == 300
    assert [s["subtask"] for s in detail["restore_subtasks"]] == [0, 1]
    json.dumps([job, checkpoints, savepoints, detail])  # JSON-able as they are


def test_ui_page_lookup_row_from_form_fields(shop: StatecoreConfig) -> None:
    row = lookup_row(shop, job=JOB, state="total", key="u1")
    assert (
        row["value"] == 4 and row["found"] and row["key_group"] == assign_to_key_group("u1", MAX_P)
    )
    assert 0 < row["bytes_read"] < row["state_bytes"]
    before = lookup_row(shop, job=JOB, state="counts", key="u1", user_key="pen", point="20260101")
    assert before["value"] == {"pen": 1}
    saved = lookup_row(shop, job=JOB, state="items", key="u2", point="before-deploy")
    assert saved["value"] == ["item0"] and "before-deploy" in saved["point"]
    live = lookup_row(shop, job=JOB, state="total", key="u1", live=True)  # a batch job
    assert live["value"] == 4 and not live["live"] and "live_lookups=True" in live["fallback"]
    json.dumps([row, before, saved, live])
    with pytest.raises(ConfigError, match="not a folder"):
        lookup_row(shop, job=JOB, state="total", key="u1", point="/etc")
    with pytest.raises(ConfigError, match="needs a job, a state and a key"):
        lookup_row(shop, job=JOB, state="total", key="")


def test_ui_page_links_each_dag_run_to_its_checkpoint(shop: StatecoreConfig) -> None:
    with Catalog.connect(shop.catalog_url) as catalog:
        records = {JOB: catalog.list_checkpoints(JOB)}
    by_id = {r.checkpoint_id: r for r in records[JOB]}
    done = by_id[20260102].completed_at
    assert done is not None
    run = DagRunRef(
        dag_id="pipeline",
        run_id="manual__1",
        job=JOB,
        started_at=done - timedelta(seconds=5),
        ended_at=done + timedelta(seconds=5),
    )
    runs = [
        replace(run, run_id="by-extra", extra={"checkpoint_id": 20260101}),
        replace(run, run_id="by-conf", conf_date="2026-01-01"),
        replace(run, run_id="by-logical", logical_date=datetime(2026, 1, 2, tzinfo=UTC)),
        replace(run, run_id="by-time"),
        replace(run, run_id="none", started_at=done + timedelta(hours=1), ended_at=None),
        replace(run, run_id="other-job", job="nope"),
    ]
    linked = {r["run_id"]: (r["checkpoint"], r["matched_by"]) for r in link_runs(runs, records)}
    assert linked == {
        "by-extra": (20260101, "asset event"),
        "by-conf": (20260101, "date"),
        "by-logical": (20260102, "date"),
        "by-time": (20260102, "time"),
        "none": (None, None),
        "other-job": (None, None),
    }


@dataclass(frozen=True, kw_only=True)
class _Watermarked(CheckpointRecord):
    """A record as catalogs with streaming support keep it (``watermark``, epoch ms)."""

    watermark: int | None = None


def test_ui_page_shows_the_watermark_when_the_catalog_keeps_one(shop: StatecoreConfig) -> None:
    with Catalog.connect(shop.catalog_url) as catalog:
        record = catalog.get_checkpoint(JOB, 20260102)
    fields = {k: v for k, v in asdict(record).items() if k != "watermark"}
    fields["tables"] = record.tables  # asdict turned them into dicts
    at = checkpoint_row(_Watermarked(**fields, watermark=1_767_312_000_000))
    assert (
        at["watermark"] == 1_767_312_000_000 and at["watermark_at"] == "2026-01-02T00:00:00+00:00"
    )
    initial = checkpoint_row(_Watermarked(**fields, watermark=MIN_WATERMARK))
    assert initial["watermark_at"] is None
