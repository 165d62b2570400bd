"""The month itself (``tests/airflow/month.py`` has the parts): lay out the input, start one
Airflow, backfill ``stateful_pipeline`` over the month in two halves (a scheduler restart and a
new kill point between them, a late day's input landing after its run skipped, a savepoint and
a rescale in the middle), run ``streaming_pipeline`` hourly beside the second half, with
``state_maintenance`` following every checkpoint (its Asset), while a DuckDB reader and a Delta
``readStream`` poll the outputs; then judge it all (:func:`judge`).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.points import checkpoint_point
from statecore.config import StatecoreConfig
from statecore.query.diff import checksums

from .month import (
    KILL_POINTS,
    DuckReader,
    Scheduler,
    StreamReader,
    airflow_database,
    input_rows,
    lay_out_input,
    month_environment,
    output_tables,
    pick_input_days,
    read_outputs,
    skip_reason,
    tree_size,
)

__all__ = ["MonthPlan", "MonthResult", "judge", "run_month"]


@dataclass(frozen=True, kw_only=True)
class MonthPlan:
    first: date = date(2026, 1, 1)
    days: int = 30
    input_every: int = 6
    """One day in this many has input (the others skip: "no input at ...")."""
    late_days: int = 1
    stream_hours: int = 3
    """Hourly runs of ``streaming_pipeline`` (two days: 48); the last one after new input
    landed, once the ``readStream`` runs."""
    users: int = 20
    events: int = 40
    kills: tuple[str | None, ...] = (None, "catalog:complete:after", None, "output:commit:after")
    """The kill point armed at each scheduler start (``None``: one drawn from ``KILL_POINTS``):
    the first half; the late day, savepoint and rescale; the second half and the stream's first
    hours; the stream's last hour, once the ``readStream`` runs. The second and fourth aim at
    the batch job's output (written after its checkpoint completes) and the stream's output
    commit (made before its checkpoint completes)."""
    seed: int = 33
    run_timeout: float = 1800


@dataclass
class MonthResult:
    plan: MonthPlan
    kill_points: list[str]
    fired: list[str]
    runs: list[dict[str, Any]]
    reasons: dict[str, str | None]
    batch_input: set[tuple[Any, ...]]
    stream_input: set[tuple[Any, ...]]
    outputs: dict[str, set[tuple[Any, ...]]]
    seen: dict[str, set[tuple[Any, ...]]]
    vanished: dict[str, set[tuple[Any, ...]]]
    reader_errors: list[str]
    reader_polls: int
    stream_reader: dict[str, Any]
    replays: dict[str, list[str]]
    sizes: dict[str, Any]
    seconds: dict[str, float] = field(default_factory=dict)


def _iso(day: date) -> str:
    return datetime(day.year, day.month, day.day).isoformat()


def run_month(home: Path, plan: MonthPlan) -> MonthResult:
    """The month ``plan`` describes, on ``home``, by an Airflow on a PostgreSQL metadata
    database of its own (dropped afterwards)."""
    with airflow_database() as database:
        return _run_month(home, plan, database)


def _run_month(home: Path, plan: MonthPlan, database: str) -> MonthResult:
    rng = random.Random(plan.seed)
    half = plan.first + timedelta(days=plan.days // 2 - 1)
    last = plan.first + timedelta(days=plan.days - 1)
    with_input, late = pick_input_days(
        plan.first,
        plan.days,
        every=plan.input_every,
        late=plan.late_days,
        late_before=half,
        seed=plan.seed,
    )
    on_time = [day for day in with_input if day not in late]
    folders = lay_out_input(home, on_time, users=plan.users, events=plan.events)
    points = [f"{point or rng.choice(KILL_POINTS)}:1" for point in plan.kills]
    scheduler = Scheduler(home, month_environment(home, database))
    reader = DuckReader(home)
    stream = StreamReader(home, scheduler.env)
    seconds: dict[str, float] = {}
    started = time.monotonic()
    try:
        reader.start()
        scheduler.start()
        scheduler.wait_parsed(["stateful_pipeline", "state_maintenance", "streaming_pipeline"])
        seconds["start"] = time.monotonic() - started
        scheduler.unpause("stateful_pipeline", "state_maintenance", "savepoint", "rescale")
        scheduler.backfill("stateful_pipeline", _iso(plan.first), _iso(half))
        scheduler.start_scheduler(fault=points[0] if points else None)
        scheduler.wait_idle(plan.run_timeout)
        scheduler.stop_scheduler()
        seconds["first half"] = time.monotonic() - started
        # the late days' input lands after their scheduled runs skipped: re-run those days,
        # beside a savepoint and a rescale
        folders.update(lay_out_input(home, late, users=plan.users, events=plan.events))
        for day in late:
            scheduler.backfill("stateful_pipeline", _iso(day), _iso(day), again=True)
        scheduler.trigger("savepoint", {"job": "clickstream", "name": "mid-month"})
        scheduler.trigger("rescale", {"job": "clickstream", "parallelism": 3})
        scheduler.start_scheduler(fault=points[1] if len(points) > 1 else None)
        scheduler.wait_idle(plan.run_timeout)
        scheduler.stop_scheduler()
        seconds["late days, savepoint, rescale"] = time.monotonic() - started
        scheduler.backfill("stateful_pipeline", _iso(half + timedelta(days=1)), _iso(last))
        if plan.stream_hours:
            scheduler.unpause("streaming_pipeline")
            begin = datetime(last.year, last.month, last.day) - timedelta(days=1)
            stream_end = begin + timedelta(hours=plan.stream_hours - 2)
            scheduler.backfill("streaming_pipeline", begin.isoformat(), stream_end.isoformat())

        def start_reader() -> None:
            tables = [
                path
                for name, (kind, path) in output_tables(home).items()
                if kind == "delta" and name not in BATCH_OUTPUTS
            ]
            if stream.process is None and tables:
                stream.start(tables[0])

        scheduler.start_scheduler(fault=points[2] if len(points) > 2 else None)
        scheduler.wait_idle(plan.run_timeout, each=start_reader)
        scheduler.stop_scheduler()
        seconds["second half, streams"] = time.monotonic() - started
        if plan.stream_hours:
            # a file for the stream only (after the month's last day), its last hour(s) with
            # the readStream running
            folders.update(
                lay_out_input(
                    home, [last + timedelta(days=1)], users=plan.users, events=plan.events
                )
            )
            start_reader()
            scheduler.backfill(
                "streaming_pipeline",
                (stream_end + timedelta(hours=1)).isoformat(),
                (begin + timedelta(hours=plan.stream_hours - 1)).isoformat(),
            )
            scheduler.start_scheduler(fault=points[3] if len(points) > 3 else None)
            scheduler.wait_idle(plan.run_timeout)
            seconds["stream's last hour"] = time.monotonic() - started
        time.sleep(10)  # the readers' last polls
    finally:
        try:
            reader.stop()
            ended = stream.stop()
        finally:  # whatever failed, no Airflow process of the test stays behind
            scheduler.stop()
    seconds["total"] = time.monotonic() - started
    runs = scheduler.runs()
    import duckdb

    con = duckdb.connect()
    con.execute("INSTALL delta; LOAD delta")
    outputs = read_outputs(con, home, reader.errors)
    config = StatecoreConfig.resolve(home=str(home), env={})
    return MonthResult(
        plan=plan,
        kill_points=points,
        fired=[p.read_text().strip() for p in sorted(home.glob("fault-*"))],
        runs=runs,
        reasons={
            f"{r['dag']}/{r['run']}": skip_reason(scheduler, r)
            for r in runs
            if any(state == "skipped" for state, _ in r["tasks"].values())
        },
        batch_input=input_rows({day: path for day, path in folders.items() if day <= last}),
        stream_input=input_rows(folders) if plan.stream_hours else set(),
        outputs=outputs,
        seen=reader.seen,
        vanished=reader.vanished,
        reader_errors=reader.errors,
        reader_polls=reader.polls,
        stream_reader={
            "table": stream.table.name if stream.table else None,
            "ended": ended,
            "rows": stream.rows(),
            "log": _tail(stream.log) if stream.log else "",
        },
        replays=replay_retained(config),
        sizes=sizes(home, config),
        seconds=seconds,
    )


def _tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return ""
    return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])


def replay_retained(config: StatecoreConfig) -> dict[str, list[str]]:
    """Per job, the retained completed checkpoints that do not replay to their rows: each
    state read at the checkpoint's versions (``statecore.query.diff.checksums``) holds the rows
    its catalog row records, or, for a changelog state (a snapshot table and a table of
    changes since), some rows when the catalog records some (``job/id: state recorded vs
    read``)."""
    wrong: dict[str, list[str]] = {}
    with Catalog.connect(config.catalog_url) as catalog:
        for job in catalog.list_jobs():
            wrong[job.name] = []
            for record in catalog.list_checkpoints(job.name):
                if record.status is not CheckpointStatus.COMPLETED:
                    continue
                recorded: dict[tuple[str, str], list[int]] = {}  # a state's table(s)
                for table in record.tables:
                    key = (table.operator, table.state)
                    recorded.setdefault(key, []).append(table.rows)
                point = checkpoint_point(catalog, job.name, record.checkpoint_id)
                for read in checksums(point):
                    rows = recorded.get((read.operator, read.state), [])
                    held = rows == [read.rows] if len(rows) < 2 else read.rows > 0 or not any(rows)
                    if not held:
                        wrong[job.name].append(
                            f"{record.checkpoint_id} {read.state}: recorded {rows}, "
                            f"read {read.rows}"
                        )
    return wrong


def sizes(home: Path, config: StatecoreConfig) -> dict[str, Any]:
    """Files and log entries of the warehouse and each output table; catalog rows per job."""
    out: dict[str, Any] = {"warehouse": tree_size(Path(config.warehouse))}
    for name, (_, path) in output_tables(home).items():
        out[f"output/{name}"] = tree_size(path)
    with Catalog.connect(config.catalog_url) as catalog:
        for job in catalog.list_jobs():
            records = catalog.list_checkpoints(job.name)
            out[f"catalog/{job.name}"] = {
                "checkpoints": len(records),
                "completed": sum(r.status is CheckpointStatus.COMPLETED for r in records),
            }
    return out


BATCH_OUTPUTS = ("clickstream", "clickstream_events")
"""The batch job's outputs: its day folders (Parquet) and its Delta output table."""


def judge(result: MonthResult) -> list[str]:
    """Every check of the month; what failed (empty: all held)."""
    failed = []
    for run in result.runs:
        name = f"{run['dag']}/{run['run']}"
        if run["state"] != "success":
            failed.append(f"run {name} {run['state']}: {run['tasks']}")
        elif name in result.reasons and result.reasons[name] is None:
            failed.append(f"run {name} skipped without a reason in its log: {run['tasks']}")
    for name in BATCH_OUTPUTS:
        batch = result.outputs.get(name, set())
        if batch != result.batch_input:
            failed.append(
                f"batch output {name}: {len(result.batch_input - batch)} input records "
                f"missing, {len(batch - result.batch_input)} not in the input"
            )
    streams = {name for name in result.outputs if name not in BATCH_OUTPUTS}
    if result.plan.stream_hours and not streams:
        failed.append("no output table of streaming_pipeline")
    for name in sorted(streams):
        stream = result.outputs[name]
        if stream != result.stream_input:
            failed.append(
                f"stream output {name}: {len(result.stream_input - stream)} input records "
                f"missing, {len(stream - result.stream_input)} not in the input"
            )
    if not result.seen.get("clickstream") or result.reader_polls < 10:
        failed.append(f"the DuckDB reader saw too little to judge ({result.reader_polls} polls)")
    for name, seen in result.seen.items():
        gone = seen - result.outputs.get(name, set())
        if gone:
            failed.append(f"{name}: {len(gone)} rows a DuckDB reader saw are not in the end")
    for name, vanished in result.vanished.items():
        failed.append(f"{name}: {len(vanished)} rows a DuckDB reader saw were gone at a later poll")
    failed += [f"DuckDB reader: {error}" for error in result.reader_errors[:5]]
    if result.plan.stream_hours:
        if result.stream_reader["ended"] != "running":
            failed.append(
                f"Delta readStream {result.stream_reader['ended']}: {result.stream_reader['log']}"
            )
        table = result.stream_reader["table"]
        vanished = result.stream_reader["rows"] - result.outputs.get(table, set())
        if not result.stream_reader["rows"]:
            failed.append(f"the Delta readStream of {table} read nothing")
        if vanished:
            failed.append(f"Delta readStream: {len(vanished)} rows it read later vanished")
    for job, wrong in result.replays.items():
        failed += [f"checkpoint of {job} does not replay to its rows: {w}" for w in wrong[:5]]
    for name, size in result.sizes.items():
        if name.startswith("catalog/") and size["checkpoints"] > 2 * 10 + 4:
            failed.append(f"{name}: {size['checkpoints']} checkpoint rows (unbounded?)")
        if name.startswith("output/") and size["log_entries"] > 60:
            failed.append(f"{name}: {size['log_entries']} log entries (unbounded?)")
    return failed
