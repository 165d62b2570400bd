"""`statecore checkpoints` and `statecore sql` over checkpoints of the clickstream job, made in
process by the runtime's driver and task steps (no Spark)."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs import clickstream
from statecore.catalog import Catalog
from statecore.cli import main
from statecore.cli.demo import generate_clickstream
from statecore.config import StatecoreConfig
from statecore.errors import CheckpointNotFoundError, JobNotFoundError, UnknownStateError
from statecore.query import run_sql
from tests.inprocess import run_checkpoint

Event = namedtuple("Event", ["user_id", "event_type", "amount", "ts"])


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> StatecoreConfig:
    """Two daily checkpoints of ``clickstream`` (120 events each), at parallelism 2."""
    root = tmp_path_factory.mktemp("cli")
    config = StatecoreConfig.resolve(home=str(root / "home"), env={})
    days = generate_clickstream(root / "in", days=2, users=30, events_per_day=120)
    for i, day in enumerate(days):
        rows = pq.read_table(day).sort_by("ts").select(list(Event._fields)).to_pylist()
        events = [Event(**row) for row in rows]
        run_checkpoint(
            config,
            clickstream.UserActivity(),
            [(e.user_id, e) for e in events],
            job=clickstream.JOB,
            checkpoint_id=i + 1,
            parallelism=2,
        )
    return config


def cli(home: StatecoreConfig, *args: str) -> int:
    return main(["--home", home.home, *args])


def test_sql_over_latest_and_older_checkpoint(home, capsys) -> None:  # type: ignore[no-untyped-def]
    query = "SELECT sum(value.count) AS events FROM clickstream.avg_amount"
    assert cli(home, "sql", query, "--format", "json") == 0
    assert json.loads(capsys.readouterr().out) == {"events": 240}
    assert cli(home, "sql", query, "--checkpoint", "1", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out) == {"events": 120}
    assert cli(home, "checkpoints", "list") == 0
    listing = capsys.readouterr().out
    assert "COMPLETED" in listing and "(2 rows)" in listing
    assert cli(home, "checkpoints", "show", "clickstream", "2", "--format", "csv") == 0
    assert "event_counts" in capsys.readouterr().out


def test_views_expose_every_state_and_the_checkpoints(home) -> None:  # type: ignore[no-untyped-def]
    with Catalog.connect(home.catalog_url) as catalog:
        counts = run_sql(catalog, "SELECT count(*) AS n FROM statecore.checkpoints")
        assert counts.to_pylist() == [{"n": 2}]
        t = run_sql(
            catalog,
            "SELECT key, user_key, value FROM clickstream.event_counts "
            "ORDER BY key, user_key LIMIT 1",
        )
        assert t.column_names == ["key", "user_key", "value"]


def test_unknown_job_checkpoint_or_state_are_clear_errors(home, capsys) -> None:  # type: ignore[no-untyped-def]
    with Catalog.connect(home.catalog_url) as catalog:
        with pytest.raises(JobNotFoundError, match="'nope'.*clickstream"):
            run_sql(catalog, "SELECT 1", job="nope")
        with pytest.raises(CheckpointNotFoundError, match="99.*clickstream"):
            run_sql(catalog, "SELECT 1", job="clickstream", checkpoint_id=99)
        with pytest.raises(UnknownStateError, match="clickstream.total_amount"):
            run_sql(catalog, "SELECT * FROM clickstream.nope")
    assert cli(home, "sql", "SELECT 1", "--job", "nope") == 2
    assert "statecore: error: " in capsys.readouterr().err


def test_sql_without_any_checkpoint(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    Catalog.connect(StatecoreConfig.resolve(home=str(tmp_path), env={}).catalog_url).close()
    assert main(["--home", str(tmp_path), "sql", "SELECT 1"]) == 2
    assert "no job has been checkpointed yet" in capsys.readouterr().err
