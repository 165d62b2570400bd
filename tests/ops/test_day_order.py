"""Stateful days run in order, or not at all (issue 40): a daily job's run never completes a day
while an earlier day failed, or has input and no checkpoint, unless that day was skipped on
purpose with a recorded reason (``statecore checkpoints skip``). No input is a reason; a
failure is not. Real catalogs (SQLite, and PostgreSQL where the suite has it), real input
folders; the job file is run as Airflow's spark-submit runs it, and refuses before Spark starts.
"""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import pytest

from statecore.catalog import Catalog, CheckpointKind
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.errors import CheckpointGapError, CheckpointOrderError, ConfigError
from statecore.ops.runs import (
    SKIP,
    check_day_order,
    input_days,
    missing_days,
    plan_daily_run,
)
from tests.postgres import POSTGRES_ENV

JOB = "clickstream"


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "postgres",
            marks=pytest.mark.skipif(
                not os.environ.get(POSTGRES_ENV),
                reason=f"set {POSTGRES_ENV} to run against PostgreSQL (make test starts one)",
            ),
        ),
    ]
)
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Catalog:
    if request.param == "sqlite":
        return Catalog.connect(f"sqlite:///{tmp_path / 'catalog.db'}")
    catalog = Catalog.connect(os.environ[POSTGRES_ENV])
    job = f"clickstream_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**8}"
    request.node.job = job  # type: ignore[attr-defined]
    return catalog


@pytest.fixture
def job(request: pytest.FixtureRequest, catalog: Catalog) -> str:
    """The job's name: on the shared PostgreSQL catalog one of this test's own."""
    name = getattr(request.node, "job", JOB)
    catalog.ensure_job(name, parallelism=2, max_parallelism=128)
    return name


def day(n: int) -> date:
    return date(2026, 1, n)


def cid(n: int) -> int:
    return 20260100 + n


def complete(catalog: Catalog, job: str, *days: int) -> None:
    for n in days:
        catalog.begin_checkpoint(
            job, cid(n), kind=CheckpointKind.CHECKPOINT, parallelism=2, max_parallelism=128
        )
        catalog.complete_checkpoint(job, cid(n), tables=[])


def fail(catalog: Catalog, job: str, *days: int) -> None:
    for n in days:
        catalog.begin_checkpoint(
            job, cid(n), kind=CheckpointKind.CHECKPOINT, parallelism=2, max_parallelism=128
        )
        catalog.fail_checkpoint(job, cid(n), error="the run failed")


def lay_input(root: Path, *days: int) -> str:
    for n in days:
        part = root / f"date={day(n).isoformat()}"
        part.mkdir(parents=True, exist_ok=True)
        (part / "part-0.parquet").write_bytes(b"")
    return str(root)


def test_day_order_refuses_a_day_after_two_failed_days_naming_them(
    catalog: Catalog, job: str, tmp_path: Path
) -> None:
    """The user's report: days 5 and 6 failed, day 7 completed straight after day 4."""
    root = lay_input(tmp_path / "input", *range(1, 8))
    complete(catalog, job, 1, 2, 3, 4)
    fail(catalog, job, 5, 6)
    with pytest.raises(CheckpointGapError) as refused:
        plan_daily_run(catalog, job=job, day=day(7), input_root=root)
    message = str(refused.value)
    assert "2026-01-05, 2026-01-06" in message
    assert f"statecore checkpoints skip {job} 20260105" in message
    assert "latest completed is 20260104" in message
    assert isinstance(refused.value, CheckpointOrderError)


def test_day_order_refuses_days_with_input_that_never_ran(
    catalog: Catalog, job: str, tmp_path: Path
) -> None:
    """A day whose run never happened (a paused DAG, a backfill that skipped it) but whose input
    is there is missing too."""
    root = lay_input(tmp_path / "input", 1, 2, 3, 4)
    complete(catalog, job, 1)
    assert missing_days(catalog, job=job, day=day(4), input_root=root) == [day(2), day(3)]
    with pytest.raises(CheckpointGapError, match="2026-01-02, 2026-01-03"):
        check_day_order(catalog, job=job, day=day(4), input_root=root)


def test_day_order_days_without_input_are_no_gap(
    catalog: Catalog, job: str, tmp_path: Path
) -> None:
    """No input is a reason: days 2 to 6 have none, so day 7 runs after day 1."""
    root = lay_input(tmp_path / "input", 1, 7)
    complete(catalog, job, 1)
    plan = plan_daily_run(catalog, job=job, day=day(7), input_root=root)
    assert plan.runs and plan.checkpoint_id == cid(7)


def test_day_order_a_failed_day_is_missing_even_without_input(
    catalog: Catalog, job: str, tmp_path: Path
) -> None:
    """A failure is not a reason, even once its input is gone."""
    root = lay_input(tmp_path / "input", 1, 3)
    complete(catalog, job, 1)
    fail(catalog, job, 2)
    assert missing_days(catalog, job=job, day=day(3), input_root=root) == [day(2)]


def test_day_order_goes_past_a_day_skipped_with_its_reason(
    catalog: Catalog, job: str, tmp_path: Path
) -> None:
    root = lay_input(tmp_path / "input", *range(1, 8))
    complete(catalog, job, 1, 2, 3, 4)
    fail(catalog, job, 5)
    catalog.skip_checkpoint(job, cid(5), reason="input corrupt (ticket 12)")
    with pytest.raises(CheckpointGapError, match=r"leave 2026-01-06 out") as refused:
        plan_daily_run(catalog, job=job, day=day(7), input_root=root)
    assert "2026-01-05" not in str(refused.value).split("out of its state")[0]
    catalog.skip_checkpoint(job, cid(6), reason="a holiday: input is test data")
    assert plan_daily_run(catalog, job=job, day=day(7), input_root=root).runs
    skipped = catalog.skipped_checkpoints(job)
    assert [(s.checkpoint_id, s.reason) for s in skipped] == [
        (cid(5), "input corrupt (ticket 12)"),
        (cid(6), "a holiday: input is test data"),
    ]
    assert all(s.skipped_at is not None for s in skipped)


def test_day_order_retried_failed_day_closes_the_gap(
    catalog: Catalog, job: str, tmp_path: Path
) -> None:
    """How the user resumes: the failed day run again (a retry begins the same id again) and
    completed, then the next day runs."""
    root = lay_input(tmp_path / "input", 1, 2, 3)
    complete(catalog, job, 1)
    fail(catalog, job, 2)
    with pytest.raises(CheckpointGapError):
        plan_daily_run(catalog, job=job, day=day(3), input_root=root)
    assert plan_daily_run(catalog, job=job, day=day(2), input_root=root).runs
    complete(catalog, job, 2)
    assert plan_daily_run(catalog, job=job, day=day(3), input_root=root).runs


def test_day_order_a_completed_day_replays_as_a_noop_without_a_gap_check(
    catalog: Catalog, job: str, tmp_path: Path
) -> None:
    root = lay_input(tmp_path / "input", 1, 2, 3)
    complete(catalog, job, 1, 3)  # day 2 went by before this check existed
    plan = plan_daily_run(catalog, job=job, day=day(3), input_root=root)
    assert plan.action == SKIP and plan.reason.startswith("no-op")


def test_day_order_a_day_without_input_is_skipped_before_any_gap_check(
    catalog: Catalog, job: str, tmp_path: Path
) -> None:
    """A scheduled run ahead of its data skips ("no input"), gap or not: it changes nothing."""
    root = lay_input(tmp_path / "input", 1, 2)
    complete(catalog, job, 1)
    fail(catalog, job, 2)
    plan = plan_daily_run(catalog, job=job, day=day(3), input_root=root)
    assert plan.action == SKIP and plan.reason.startswith("no input at")


def test_day_order_first_run_of_a_job_refuses_only_its_failed_days(
    catalog: Catalog, tmp_path: Path
) -> None:
    """Without a completed checkpoint the job's first day is not known: earlier input is no
    gap, an earlier failed day is."""
    root = lay_input(tmp_path / "input", 1, 2, 3)
    name = f"fresh_{abs(hash(str(tmp_path))) % 10**8}"
    assert plan_daily_run(catalog, job=name, day=day(3), input_root=root).runs
    catalog.ensure_job(name, parallelism=1, max_parallelism=128)
    fail(catalog, name, 1)
    with pytest.raises(CheckpointGapError, match="2026-01-01"):
        plan_daily_run(catalog, job=name, day=day(3), input_root=root)


def test_day_order_ignores_jobs_whose_ids_are_not_days(catalog: Catalog, tmp_path: Path) -> None:
    name = f"batches_{abs(hash(str(tmp_path))) % 10**8}"
    catalog.ensure_job(name, parallelism=1, max_parallelism=128)
    catalog.begin_checkpoint(
        name, 7, kind=CheckpointKind.CHECKPOINT, parallelism=1, max_parallelism=128
    )
    catalog.complete_checkpoint(name, 7, tables=[])
    root = lay_input(tmp_path / "input", 1, 2, 3)
    assert missing_days(catalog, job=name, day=day(3), input_root=root) == []


def test_day_order_skip_is_refused_without_a_reason_on_a_completed_day_and_behind_the_job(
    catalog: Catalog, job: str
) -> None:
    complete(catalog, job, 1, 4)
    with pytest.raises(ConfigError, match="needs a reason"):
        catalog.skip_checkpoint(job, cid(5), reason="  ")
    with pytest.raises(ConfigError, match="COMPLETED"):
        catalog.skip_checkpoint(job, cid(4), reason="oops")
    with pytest.raises(CheckpointOrderError, match="past it already"):
        catalog.skip_checkpoint(job, cid(2), reason="too late")
    assert catalog.skipped_checkpoints(job) == []


def test_day_order_input_days_lists_the_partitions(tmp_path: Path) -> None:
    root = lay_input(tmp_path / "input", 3, 1, 2)
    (tmp_path / "input" / "date=not-a-day").mkdir()
    (tmp_path / "input" / "_SUCCESS").write_text("")
    assert input_days(root) == [day(1), day(2), day(3)]
    assert input_days(str(tmp_path / "nowhere")) == []


def test_day_order_skip_from_the_command_line(
    statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        catalog.ensure_job(JOB, parallelism=1, max_parallelism=128)
        complete(catalog, JOB, 4)
    argv = ["checkpoints", "skip", JOB, "20260105", "--reason", "input corrupt"]
    assert main(argv) == 0
    assert "SKIPPED" in capsys.readouterr().out
    assert main(["checkpoints", "skipped", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert '"clickstream",20260105,"SKIPPED","input corrupt"' in out
    assert main(["checkpoints", "skip", JOB, "20260104", "--reason", "x"]) == 2
    assert "cannot be skipped" in capsys.readouterr().err


def test_day_order_job_file_refuses_the_gap_before_spark_starts(
    statecore_home: StatecoreConfig, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``jobs/clickstream.py`` checks the order itself (a spark-submit outside Airflow too),
    before it builds a Spark session."""
    import jobs.clickstream as clickstream

    root = lay_input(tmp_path / "input", 1, 2, 3)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        catalog.ensure_job(JOB, parallelism=1, max_parallelism=128)
        complete(catalog, JOB, 1)
        fail(catalog, JOB, 2)

    def no_spark(**_: object) -> None:
        raise AssertionError("Spark started before the day order was checked")

    monkeypatch.setattr(clickstream, "build_session", no_spark)
    with pytest.raises(CheckpointGapError, match="2026-01-02"):
        clickstream.main(["--date", "2026-01-03", "--input", root])
