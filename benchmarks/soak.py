"""A long stream of small micro-batches, in-process: do the files, the logs, the catalog and the
time per micro-batch stay flat (issue 21)?

    python -m benchmarks.soak --micro-batches 10000  # -> the RESULTS.md section
    python -m benchmarks.soak --micro-batches 300 --grace 10 --no-write

Each micro-batch is one checkpoint of the driver and task steps of ``keyed_process`` (real Delta
tables, a real SQLite catalog, no Spark; ``tests/inprocess.py``), the function and data of
``tests/checkpoint/test_long_stream.py`` (keyed, operator and timer state; 4 events over 24 keys
per micro-batch), then its output table's commit and the run's retention as the Spark runner
orders them (``statecore.spark.runner``: 10 checkpoints retained, the Delta logs of the state
tables and of the output table cut; ``run_checkpoint``'s own ``retain_checkpoints`` would cut
only the state tables' logs, with the 1-hour grace, so the soak calls the retention itself).
Every ``MAINTAIN_EVERY`` micro-batches, the maintenance the ``state_maintenance`` DAG schedules
(``statecore.ops.retention.apply_retention``: retention, the output's merge, VACUUM, log cleanup)
runs too, untimed: nothing else deletes data files.

The grace periods (log entries and data files younger than it are kept, tombstones younger
than it stay in log checkpoints) are ``--grace`` seconds instead of production's 1 hour (logs,
``delta.deletedFileRetentionDuration``) and 7 days (VACUUM), so that a run of under an hour
reaches the steady state. After each maintenance it records per table the Parquet data
files on disk and in the latest version, the ``_delta_log`` entries and the time to open the
table, and the catalog's rows; the section compares three of these samples (the start: the first
at least twice the grace into the stream; the middle; the end). ``--until`` stops the soak at
the first sample past a deadline, so that a run on a busy machine still reports.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from unittest import mock

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa
from deltalake import DeltaTable

from benchmarks.report import replace_section
from statecore.catalog import Catalog, CheckpointRecord
from statecore.catalog.engine import shared_engine
from statecore.checkpoint.retain import retain_checkpoints
from statecore.config import StatecoreConfig
from statecore.ops.retention import DEFAULT_VACUUM_GRACE, apply_retention
from statecore.snapshot.log import (
    LOG_CHECKPOINT_INTERVAL,
    LOG_GRACE,
    log_entries,
    log_replay_length,
)
from statecore.snapshot.storage import TABLE_PROPERTIES
from tests.checkpoint.test_long_stream import commit_output, run_micro_batch

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## Long-running stream (soak)"
JOB = "soak"
RETAIN = 10
MAINTAIN_EVERY = 100
OPENS = 5
TOMBSTONES = "delta.deletedFileRetentionDuration"


@dataclass(frozen=True)
class TableSample:
    """One table at one point of the stream."""

    files_on_disk: int
    files_live: int
    log_entries: int
    open_ms: float


@dataclass(frozen=True)
class Sample:
    """The tables (by label) and the catalog after micro-batch ``micro_batch``."""

    micro_batch: int
    elapsed_s: float
    tables: dict[str, TableSample]
    checkpoint_rows: int
    catalog_rows: int


@dataclass(frozen=True)
class Soak:
    """What a soak of ``planned`` micro-batches measured (``len(seconds)`` of them ran): the
    samples, and per micro-batch its time (checkpoint, output commit and the run's retention),
    wall-clock and the process's CPU time (every thread, delta-rs's included), and the most
    commits a reader replays to open a table."""

    planned: int
    grace: timedelta
    samples: dict[str, Sample]
    seconds: list[float]
    cpu_seconds: list[float]
    replays: list[int]
    maintenance_seconds: list[float]


def data_files(uri: str) -> int:
    """Parquet files below the table's folder, outside its ``_delta_log``."""
    root = Path(uri)
    return sum(1 for f in root.rglob("*.parquet") if "_delta_log" not in f.relative_to(root).parts)


def open_ms(uri: str) -> float:
    """Median time to open the table at its latest version (``DeltaTable(uri)``), in ms."""
    times = []
    for _ in range(OPENS):
        started = time.perf_counter()
        DeltaTable(uri)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def catalog_rows(url: str) -> int:
    """The rows of every table of the catalog."""
    engine = shared_engine(url)
    with engine.connect() as connection:
        return sum(
            connection.execute(sa.select(sa.func.count()).select_from(sa.table(name))).scalar_one()
            for name in sa.inspect(connection).get_table_names()
        )


def sample_tables(tables: dict[str, str]) -> dict[str, TableSample]:
    """Each table of ``{label: uri}`` as it is now."""
    return {
        label: TableSample(
            files_on_disk=data_files(uri),
            files_live=len(DeltaTable(uri).file_uris()),
            log_entries=len(log_entries(uri)),
            open_ms=open_ms(uri),
        )
        for label, uri in tables.items()
    }


def table_labels(record: CheckpointRecord, output: str) -> dict[str, str]:
    """``{label: uri}`` of the tables ``record`` names, and of the output table."""
    tables = sorted(record.tables, key=lambda t: (t.table_kind, t.state or ""))
    labels = {
        ("timers" if t.table_kind == "timers" else f"{t.table_kind} `{t.state}`"): t.path
        for t in tables
    }
    return labels | {"output": output}


def micro_batch_step(
    config: StatecoreConfig, catalog: Catalog, i: int, output: str, grace: timedelta
) -> CheckpointRecord:
    """Micro-batch ``i``: its checkpoint, its output's commit, then the run's retention of
    ``RETAIN`` checkpoints with the Delta log cleanup of the state and output tables (what
    ``statecore.spark.runner`` does once the coordinator committed both)."""
    out, record = run_micro_batch(config, catalog, JOB, i)
    commit_output(output, out, i)
    retain_checkpoints(catalog, JOB, retain=RETAIN, outputs=[output], log_grace=grace)
    return record


def maintain(config: StatecoreConfig, catalog: Catalog, output: str, grace: timedelta) -> float:
    """The scheduled maintenance (retention, VACUUM, log cleanup, with ``grace`` for both);
    the seconds it took."""
    started = time.perf_counter()
    apply_retention(
        config,
        catalog,
        JOB,
        retain=RETAIN,
        vacuum_after=grace,
        log_grace=grace,
        outputs=[output],
    )
    return time.perf_counter() - started


def soak(
    micro_batches: int,
    grace: timedelta,
    deadline: float | None = None,
    progress: Callable[[str], None] = print,
) -> Soak:
    """Run ``micro_batches`` micro-batches in a fresh home (deleted afterwards), fewer when the
    clock (``time.time()``) passes ``deadline``; see the module docstring."""
    tombstones = {TOMBSTONES: f"interval {int(grace.total_seconds())} seconds"}
    with (
        tempfile.TemporaryDirectory(prefix="statecore-soak-") as home,
        mock.patch.dict(TABLE_PROPERTIES, tombstones),
    ):
        config = StatecoreConfig.resolve(env={"STATECORE_HOME": home})
        with Catalog.connect(config.catalog_url) as catalog:
            return stream(config, catalog, micro_batches, grace, deadline, progress)


def stream(
    config: StatecoreConfig,
    catalog: Catalog,
    micro_batches: int,
    grace: timedelta,
    deadline: float | None,
    progress: Callable[[str], None],
) -> Soak:
    """The micro-batches, each ``MAINTAIN_EVERY``-th followed by the maintenance and a sample,
    up to the last one or the first sample past ``deadline``."""
    output = f"{config.warehouse}/soak_out"
    seconds: list[float] = []
    cpu_seconds: list[float] = []
    replays: list[int] = []
    maintenance: list[float] = []
    samples: list[Sample] = []
    began = time.monotonic()
    for i in range(micro_batches):
        started, cpu = time.perf_counter(), time.process_time()
        record = micro_batch_step(config, catalog, i, output, grace)
        seconds.append(time.perf_counter() - started)
        cpu_seconds.append(time.process_time() - cpu)
        tables = table_labels(record, output)
        replays.append(max(log_replay_length(uri) for uri in tables.values()))
        if (i + 1) % MAINTAIN_EVERY and i != micro_batches - 1:
            continue
        maintenance.append(maintain(config, catalog, output, grace))
        samples.append(
            Sample(
                micro_batch=i,
                elapsed_s=time.monotonic() - began,
                tables=sample_tables(tables),
                checkpoint_rows=len(catalog.list_checkpoints(JOB, with_tables=False)),
                catalog_rows=catalog_rows(config.catalog_url),
            )
        )
        progress(
            f"micro-batch {i}: {samples[-1].elapsed_s:.0f} s, median of the last "
            f"{MAINTAIN_EVERY} {median_ms(seconds[-MAINTAIN_EVERY:]):.0f} ms"
        )
        if deadline is not None and time.time() > deadline:
            break
    return Soak(
        micro_batches, grace, pick(samples, grace), seconds, cpu_seconds, replays, maintenance
    )


def pick(samples: Sequence[Sample], grace: timedelta) -> dict[str, Sample]:
    """The samples compared: the start (the first at least twice the grace into the stream,
    not after the middle), the middle (the one nearest half of the micro-batches run) and the
    end."""
    half = (samples[-1].micro_batch + 1) / 2
    middle = min(samples, key=lambda s: abs(s.micro_batch + 1 - half))
    past = [s for s in samples if s.elapsed_s >= 2 * grace.total_seconds()] or [middle]
    start = min(past[0], middle, key=lambda s: s.micro_batch)
    return {"start": start, "middle": middle, "end": samples[-1]}


def median_ms(seconds: Sequence[float]) -> float:
    """The median of ``seconds``, in ms."""
    return statistics.median(seconds) * 1000


def windows(seconds: Sequence[float]) -> dict[str, Sequence[float]]:
    """The 50-micro-batch windows compared: 1-50 (0 creates the tables), middle, last."""
    half = len(seconds) // 2
    return {
        "1-50": seconds[1:51],
        "middle 50": seconds[half - 25 : half + 25],
        "last 50": seconds[-50:],
    }


def ratio(seconds: Sequence[float]) -> float:
    """The median of the last 50 micro-batches over the median of the middle 50."""
    parts = windows(seconds)
    return median_ms(parts["last 50"]) / median_ms(parts["middle 50"])


def verdict(result: Soak) -> str:
    """Whether the state tables' files, every log and the catalog stayed flat from the start
    sample to the end, and whether the last 50 micro-batches are within 10 % of the middle 50:
    in CPU time, which the machine's other load barely moves (the wall-clock ratio is given
    too)."""
    start, end = result.samples["start"], result.samples["end"]
    grown = [
        f"{label} {measure} {getattr(start.tables[label], measure)} -> "
        f"{getattr(end.tables[label], measure)}"
        for label in start.tables
        for measure in ("files_on_disk", "log_entries")
        if getattr(end.tables[label], measure) > 1.1 * getattr(start.tables[label], measure) + 2
    ]
    for name in ("checkpoint_rows", "catalog_rows"):
        if getattr(end, name) > getattr(start, name):
            grown.append(f"{name} {getattr(start, name)} -> {getattr(end, name)}")
    cpu, wall = ratio(result.cpu_seconds), ratio(result.seconds)
    flat = (
        "The counts stayed flat from the start sample to the end (every table's data files "
        "and `_delta_log` within 10 % + 2, the catalog's rows not above the start's)"
        if not grown
        else f"**The counts grew**: {'; '.join(grown)}"
    )
    if abs(cpu - 1) <= 0.10:
        within = "within 10 %"
    else:
        within = f"**not within 10 %** ({'slower' if cpu > 1 else 'faster'} at the end)"
    return (
        f"{flat}; last / middle 50 = {cpu:.2f} in CPU time, {within} (wall clock {wall:.2f}, "
        "which the shared machine's load moves)."
    )


def measure_rows(samples: Sequence[Sample]) -> list[tuple[str, list[str]]]:
    """The rows (measure, values at the samples) of the section's first table."""
    rows = [
        ("micro-batch", [f"{s.micro_batch}" for s in samples]),
        ("minutes into the stream", [f"{s.elapsed_s / 60:.1f}" for s in samples]),
    ]
    for label in samples[0].tables:
        at = [s.tables[label] for s in samples]
        rows += [
            (f"{label}: data files on disk", [f"{t.files_on_disk}" for t in at]),
            (f"{label}: data files of the latest version", [f"{t.files_live}" for t in at]),
            (f"{label}: `_delta_log` entries", [f"{t.log_entries}" for t in at]),
            (f"{label}: open (median of {OPENS}), ms", [f"{t.open_ms:.1f}" for t in at]),
        ]
    return rows + [
        (f"catalog: checkpoints (retain {RETAIN})", [f"{s.checkpoint_rows}" for s in samples]),
        ("catalog: rows of all its tables", [f"{s.catalog_rows}" for s in samples]),
    ]


def time_rows(result: Soak) -> list[tuple[str, str]]:
    """The rows (measure, value) of the section's second table."""
    wall, cpu = windows(result.seconds), windows(result.cpu_seconds)
    return [
        (
            "micro-batch 0 (creates the tables), ms: wall / CPU",
            f"{result.seconds[0] * 1000:.0f} / {result.cpu_seconds[0] * 1000:.0f}",
        ),
        *(
            (
                f"median of micro-batches {n}, ms: wall / CPU",
                f"{median_ms(xs):.0f} / {median_ms(cpu[n]):.0f}",
            )
            for n, xs in wall.items()
        ),
        (
            "last 50 / middle 50: wall / CPU",
            f"{ratio(result.seconds):.2f} / {ratio(result.cpu_seconds):.2f}",
        ),
        (
            f"maintenance, ms (median of {len(result.maintenance_seconds)}; not in the above)",
            f"{median_ms(result.maintenance_seconds):.0f}",
        ),
        (
            f"commits replayed to open a table (max; log checkpoint every "
            f"{LOG_CHECKPOINT_INTERVAL})",
            f"{max(result.replays)}",
        ),
    ]


def production(grace: timedelta, trigger_s: int = 5) -> str:
    """What production's grace periods mean for the counts (this soak's: ``grace``), with a
    ``trigger_s`` trigger."""
    commits = int(LOG_GRACE.total_seconds()) // trigger_s
    return (
        f"Production keeps the defaults: log entries younger than "
        f"{LOG_GRACE.total_seconds() / 3600:g} hour (`LOG_GRACE`) and data files younger than "
        f"{DEFAULT_VACUUM_GRACE.days} days (VACUUM) stay, instead of {grace.total_seconds():g} s "
        f"here. With a {trigger_s}-second trigger a table's log then also holds the last "
        f"hour's commits (about {commits}) and their {commits // LOG_CHECKPOINT_INTERVAL} log "
        f"checkpoints, each log checkpoint the last hour's tombstones "
        f"(`delta.deletedFileRetentionDuration`, {grace.total_seconds():g} s here), and its "
        f"folder the files its commits of the last "
        f"{DEFAULT_VACUUM_GRACE.days} days replaced: constants, not growth. The output table's "
        "files of checkpoints no longer retained are merged by the maintenance "
        "(`statecore.snapshot.output_compaction`) and its log is cut like the state tables'."
    )


def ran(result: Soak) -> str:
    """How many micro-batches ran, when the deadline stopped the soak before the planned ones."""
    done = len(result.seconds)
    if done == result.planned:
        return ""
    return f"**stopped by its deadline (`--until`) after {done:,} micro-batches** "


def render(result: Soak) -> str:
    """The RESULTS.md section."""
    samples = [result.samples[p] for p in ("start", "middle", "end")]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    grace = f"{result.grace.total_seconds():g} s"
    return "\n".join(
        [
            HEADING,
            "",
            f"`python -m benchmarks.soak --micro-batches {result.planned}` "
            + ran(result)
            + f"({time.strftime('%Y-%m-%d')}, commit {commit}, 2 shared cores; in-process, no "
            "Spark: the per-micro-batch work of statecore itself). Each micro-batch: a "
            "checkpoint, the output table's commit and the run's retention (10 checkpoints, "
            "Delta log cleanup of the state and output tables). Every "
            f"{MAINTAIN_EVERY} micro-batches the scheduled maintenance (`apply_retention`: "
            f"the output's merge, VACUUM and log cleanup) runs, untimed. Grace of the log "
            "cleanup and of VACUUM: "
            f"{grace}. Samples are taken just after a maintenance; the start one is the first "
            f"past twice the grace.",
            "",
            "| | start | middle | end |",
            "|---|---:|---:|---:|",
            *(f"| {name} | {' | '.join(values)} |" for name, values in measure_rows(samples)),
            "",
            "| time per micro-batch | |",
            "|---|---:|",
            *(f"| {name} | {value} |" for name, value in time_rows(result)),
            "",
            verdict(result),
            "",
            production(result.grace),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-batches", type=int, default=1000)
    parser.add_argument(
        "--grace", type=float, default=60, help="seconds (log cleanup and VACUUM); default 60"
    )
    parser.add_argument(
        "--until",
        type=datetime.fromisoformat,
        help="stop at the first sample after this time (ISO, e.g. 2026-11-26T11:58+00:00)",
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if args.micro_batches < 2 * MAINTAIN_EVERY:
        parser.error(f"--micro-batches: at least {2 * MAINTAIN_EVERY}")
    deadline = None if args.until is None else args.until.timestamp()
    result = soak(args.micro_batches, timedelta(seconds=args.grace), deadline)
    section = render(result)
    print(section)
    if not args.no_write:
        RESULTS.write_text(replace_section(RESULTS.read_text(), HEADING, section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
