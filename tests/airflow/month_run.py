"""The month itself (``tests/airflow/month.py`` has the parts): lay out the input, start one
Airflow, backfill ``stateful_pipeline`` over the month in two halves (a scheduler restart and a
new kill point between them, a late day's input landing after its run skipped, a savepoint and
a rescale in the middle), run ``streaming_pipeline`` and ``streaming_kafka`` hourly beside it
all (input landing a few times among their hours: the hours between skip), with
``state_maintenance`` following every checkpoint (its Asset), while a DuckDB reader and a Delta
``readStream`` poll the outputs; then judge it all (:func:`judge`).
"""

from __future__ import annotations

import random
import time
from collections import Counter
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
    Backfill,
    DuckReader,
    MonthAirflow,
    StreamReader,
    create_topic,
    input_rows,
    lay_out_input,
    month_environment,
    output_tables,
    pick_input_days,
    produce_day,
    read_outputs,
    skip_reason,
    tree_size,
)

__all__ = ["MonthPlan", "MonthResult", "judge", "run_counts", "run_month", "stream_segments"]


@dataclass(frozen=True, kw_only=True)
class MonthPlan:
    first: date = date(2026, 1, 1)
    days: int = 30
    input_every: int = 6
    """One day in this many has input (the others skip: "no input at ...")."""
    late_days: int = 1
    stream_hours: int = 48
    """Hourly runs of each streaming DAG (``streaming_pipeline``; ``streaming_kafka`` too when
    the month has a broker): two days are 48."""
    stream_landings: int = 4
    """Input for the streams lands this many times, evenly over their hours (a day's file for
    ``streaming_pipeline``, a day's clicks produced to the topic for ``streaming_kafka``); the
    hours between find nothing new and skip. The streams' hours run beside the month's phases,
    one segment (a landing and the hours until the next) in each: the first half, the late
    days, the second half, and the rest after it."""
    users: int = 20
    events: int = 40
    kills: tuple[str | None, ...] = (None, "catalog:complete:after", None, "output:commit:after")
    """The kill point armed at each scheduler start (``None``: one drawn from ``KILL_POINTS``),
    firing in the first task that reaches it: the first half; the late day, savepoint and
    rescale; the second half; the streams' last hours, once the ``readStream`` runs. The second
    and fourth aim at a job's output (the batch job's written after its checkpoint completes, a
    stream's commit made before its checkpoint completes)."""
    kill_scheduler: bool = True
    """SIGKILL make up's scheduler once, while a day of the second half runs its Spark task
    (make up's supervisor starts another)."""
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
    stream_inputs: dict[str, set[tuple[Any, ...]]]
    """Per streaming output table, the records its stream was given."""
    outputs: dict[str, set[tuple[Any, ...]]]
    seen: dict[str, set[tuple[Any, ...]]]
    vanished: dict[str, set[tuple[Any, ...]]]
    reader_errors: list[str]
    reader_polls: int
    stream_reader: dict[str, Any]
    replays: dict[str, list[str]]
    sizes: dict[str, Any]
    queued_at_restarts: list[int]
    """Runs queued when each restart of make up with backfills stopped it (each must run after
    it)."""
    killed_scheduler: list[int]
    """The pid of the scheduler SIGKILLed mid-run (none if no day's Spark task ran)."""
    consoles: list[str]
    """Each make up's console."""
    seconds: dict[str, float] = field(default_factory=dict)


def _iso(day: date) -> str:
    return datetime(day.year, day.month, day.day).isoformat()


def run_month(home: Path, plan: MonthPlan, *, kafka: str | None = None) -> MonthResult:
    """The month ``plan`` describes, on ``home``, by ``make up``'s own Airflow; ``kafka``: the
    bootstrap servers of a broker ``streaming_kafka`` reads a topic of its own on (else it does
    not run)."""
    return _run_month(home, plan, kafka)


def stream_segments(hours: int, landings: int) -> list[tuple[int, int]]:
    """The streams' hours ``0..hours-1`` in ``landings`` runs of consecutive hours, input
    landing before each: ``(first, last)`` hour of each."""
    landings = max(1, min(landings, hours))
    starts = [round(i * hours / landings) for i in range(landings)]
    return [(a, b - 1) for a, b in zip(starts, [*starts[1:], hours], strict=True)]


def _run_month(home: Path, plan: MonthPlan, kafka: str | None) -> MonthResult:
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
    airflow = MonthAirflow(home, month_environment(home))
    reader = DuckReader(home)
    stream = StreamReader(home, airflow.env)
    streams = ["streaming_pipeline", *(["streaming_kafka"] if kafka else [])]
    stream_tables = ["clickstream_stream", *(["clickstream_kafka"] if kafka else [])]
    streamed = [*STREAMED_BATCH_OUTPUTS, *(stream_tables if plan.stream_hours else [])]
    topic = create_topic(kafka) if kafka else None
    produced: set[tuple[Any, ...]] = set()
    seconds: dict[str, float] = {}
    queued: list[int] = []
    killed: list[int] = []
    started = time.monotonic()
    ended = "not started"
    runs: list[dict[str, Any]] = []
    reasons: dict[str, str | None] = {}
    segments = stream_segments(plan.stream_hours, plan.stream_landings)
    # the DAGs the month backfills, paused while a make up restart's runs are queued
    backfilled = ["stateful_pipeline", *(streams if segments else [])]
    try:
        reader.start()
        airflow.start(
            fault=points[0] if points else None,
            dags=["stateful_pipeline", "state_maintenance", *streams],
        )
        seconds["start"] = time.monotonic() - started
        # unpausing a streaming DAG makes its scheduled run of the latest hour
        airflow.unpause("stateful_pipeline", "state_maintenance", "savepoint", "rescale")
        if segments:
            airflow.unpause(*streams)
        begin = datetime(last.year, last.month, last.day) - timedelta(days=1)
        conf = {"bootstrap_servers": kafka, "topic": topic}

        def stream_segment(i: int) -> list[Backfill]:
            """Input for the streams lands (a day after the month's last: the batch job's
            days are not its); the backfills of segment ``i``'s hours of each streaming DAG."""
            if i >= len(segments):
                return []
            day = last + timedelta(days=1 + i)
            folders.update(lay_out_input(home, [day], users=plan.users, events=plan.events))
            if kafka and topic:
                produced.update(
                    produce_day(home, kafka, topic, day, users=plan.users, events=plan.events)
                )
            first, end = ((begin + timedelta(hours=h)).isoformat() for h in segments[i])
            return [
                Backfill(dag_id, first, end, conf=conf if dag_id == "streaming_kafka" else None)
                for dag_id in streams
            ]

        def start_reader() -> None:
            paths = [home / "output" / name for name in streamed]
            if stream.process is None and all((p / "_delta_log").is_dir() for p in paths):
                stream.start(paths)

        def restart_with(backfills: list[Backfill], fault: str | None) -> None:
            """The next phase's ``backfills`` created with their DAGs paused (their runs
            queued), ``make down``, ``make up`` with the next kill point armed, the DAGs
            unpaused: the queued runs run after the restart."""
            airflow.pause(*backfilled)
            if backfills:  # none: a month without late days
                airflow.backfill(*backfills)
                queued.append(airflow.queued())
            airflow.stop()
            airflow.start(fault=fault, dags=backfilled)
            airflow.unpause(*backfilled)

        # the streams' hours run beside the batch days, a segment of them per phase, input
        # landing before each; the readStream starts once every Delta output table exists
        airflow.backfill(
            Backfill("stateful_pipeline", _iso(plan.first), _iso(half)), *stream_segment(0)
        )
        airflow.wait_idle(plan.run_timeout, each=start_reader)
        seconds["first half"] = time.monotonic() - started
        # the late days' input lands after their scheduled runs skipped: re-run those days,
        # queued over a restart of make up; then, the job idle, a savepoint and a rescale (the
        # rescale DAG's savepoint must still be the job's latest checkpoint when its rescale
        # runs: a run of the job completing in between fails it, "take a new one")
        folders.update(lay_out_input(home, late, users=plan.users, events=plan.events))
        restart_with(
            [Backfill("stateful_pipeline", _iso(day), _iso(day), again=True) for day in late],
            points[1] if len(points) > 1 else None,
        )
        airflow.wait_idle(plan.run_timeout, each=start_reader)
        airflow.trigger("savepoint", {"job": "clickstream", "name": "mid-month"})
        airflow.trigger("rescale", {"job": "clickstream", "parallelism": 3})
        airflow.backfill(*stream_segment(1))
        airflow.wait_idle(plan.run_timeout, each=start_reader)
        seconds["late days, savepoint, rescale"] = time.monotonic() - started
        # the second half, queued over a restart of make up; its scheduler SIGKILLed while a
        # day's Spark task runs (make up's supervisor starts another)

        def kill_mid_run() -> None:
            start_reader()
            if (
                plan.kill_scheduler
                and not killed
                and airflow.query(
                    "SELECT 1 FROM task_instance WHERE dag_id = 'stateful_pipeline'"
                    " AND task_id = 'clickstream' AND state = 'running'"
                )
            ):
                killed.append(airflow.kill_scheduler())

        restart_with(
            [
                Backfill("stateful_pipeline", _iso(half + timedelta(days=1)), _iso(last)),
                *stream_segment(2),
            ],
            points[2] if len(points) > 2 else None,
        )
        airflow.wait_idle(plan.run_timeout, each=kill_mid_run)
        seconds["second half"] = time.monotonic() - started
        if len(segments) > 3:
            # the streams' last hours, input landing between them, the readStream running
            restart_with(stream_segment(3), points[3] if len(points) > 3 else None)
            airflow.wait_idle(plan.run_timeout, each=start_reader)
            for i in range(4, len(segments)):
                airflow.backfill(*stream_segment(i))
                airflow.wait_idle(plan.run_timeout, each=start_reader)
            seconds["streams' last hours"] = time.monotonic() - started
        time.sleep(10)  # the readers' last polls
        runs = airflow.runs()
        reasons = {
            f"{r['dag']}/{r['run']}": skip_reason(airflow, r)
            for r in runs
            if any(state == "skipped" for state, _ in r["tasks"].values())
        }
    finally:
        try:
            reader.stop()
            ended = stream.stop()
        finally:  # whatever failed, no Airflow process of the test stays behind
            airflow.stop()
    seconds["total"] = time.monotonic() - started
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
        reasons=reasons,
        batch_input=input_rows({day: path for day, path in folders.items() if day <= last}),
        stream_inputs=(
            {"clickstream_stream": input_rows(folders)}
            | ({"clickstream_kafka": produced} if kafka else {})
            if plan.stream_hours
            else {}
        ),
        outputs=outputs,
        seen=reader.seen,
        vanished=reader.vanished,
        reader_errors=reader.errors,
        reader_polls=reader.polls,
        stream_reader={
            "ended": ended,
            "rows": stream.rows(),
            "duplicates": stream.duplicates(),
            "log": _tail(stream.log) if stream.log else "",
        },
        replays=replay_retained(config),
        sizes=sizes(home, config),
        queued_at_restarts=queued,
        killed_scheduler=killed,
        consoles=airflow.consoles,
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
STREAMED_BATCH_OUTPUTS = ("clickstream_events",)
"""The batch job's outputs the Delta ``readStream`` reads too: its Delta output table, which only
ever gets appends (a checkpoint's rows) and the maintenance's merges (``dataChange`` false). Not
the day folders: Parquet files, no Delta log to stream, each day's folder overwritten by the
job's run of that day (a replay rewrites it), which a file stream source would read as new
files, the day's rows twice."""


def run_counts(result: MonthResult) -> list[tuple[str, str]]:
    """Per DAG: runs, how they ended, and task tries beyond the first (retries)."""
    rows = []
    for dag in sorted({run["dag"] for run in result.runs}):
        runs = [run for run in result.runs if run["dag"] == dag]
        states = Counter(
            "skipped"
            if run["state"] == "success"
            and all(state == "skipped" for state, _ in run["tasks"].values())
            else run["state"]
            for run in runs
        )
        retries = sum(max(0, tries - 1) for run in runs for _, tries in run["tasks"].values())
        ended = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        rows.append((dag, f"{len(runs)} | {ended} | {retries}"))
    return rows


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
    for name, given in sorted(result.stream_inputs.items()):
        stream = result.outputs.get(name)
        if stream is None:
            failed.append(f"no output table {name}")
        elif stream != given:
            failed.append(
                f"stream output {name}: {len(given - stream)} input records "
                f"missing, {len(stream - given)} not in the input"
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
    if result.stream_reader["ended"] != "running":
        failed.append(
            f"Delta readStream {result.stream_reader['ended']}: {result.stream_reader['log']}"
        )
    read = result.stream_reader["rows"]
    for name in sorted({*STREAMED_BATCH_OUTPUTS, *result.stream_inputs}):
        if not read.get(name):
            failed.append(f"the Delta readStream of {name} read nothing")
        vanished = read.get(name, set()) - result.outputs.get(name, set())
        if vanished:
            failed.append(f"Delta readStream of {name}: {len(vanished)} rows later vanished")
    for name, twice in sorted(result.stream_reader["duplicates"].items()):
        if twice:
            failed.append(f"Delta readStream of {name}: {twice} rows read twice")
    for i, queued in enumerate(result.queued_at_restarts):
        if not queued:
            failed.append(f"no run was queued when make up restarted ({i + 1})")
    deaths = [
        line for console in result.consoles for line in console.splitlines() if " died" in line
    ]
    expected = [
        f"the scheduler (pid {pid}) died: killed by SIGKILL" for pid in result.killed_scheduler
    ]
    if result.plan.kill_scheduler and not result.killed_scheduler:
        failed.append("no day's Spark task ran in the second half: the scheduler was not killed")
    if [d for d in deaths if not any(e in d for e in expected)] or len(deaths) != len(expected):
        failed.append(f"make up's components died: {deaths} (killed: {expected})")
    for console in result.consoles:
        if "Airflow is up in" not in console:
            failed.append(f"a make up never came up: {console[-2000:]}")
    restarts = sum("restarting the scheduler" in console for console in result.consoles)
    if restarts != len(result.killed_scheduler):
        failed.append(f"the killed scheduler was restarted {restarts} times")
    for job, wrong in result.replays.items():
        failed += [f"checkpoint of {job} does not replay to its rows: {w}" for w in wrong[:5]]
    for name, size in result.sizes.items():
        if name.startswith("catalog/") and size["checkpoints"] > 2 * 10 + 4:
            failed.append(f"{name}: {size['checkpoints']} checkpoint rows (unbounded?)")
        if name.startswith("output/") and size["log_entries"] > 60:
            failed.append(f"{name}: {size['log_entries']} log entries (unbounded?)")
    return failed
