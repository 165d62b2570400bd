"""What each ``statecore`` subcommand does: open the catalog, call the library, format the result.

Every function takes the parsed arguments and the resolved configuration and returns the text to
print on standard output; progress goes to standard error.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from statecore.catalog import Catalog, CheckpointRecord, CheckpointStatus
from statecore.checkpoint.points import checkpoint_point, resolve_point
from statecore.cli.output import (
    checkpoint_rows,
    format_rows,
    format_table,
    key_group_rows,
    latency_rows,
    pending_output_rows,
    point_rows,
    savepoint_rows,
    skipped_rows,
    table_rows,
)
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.progress import to_stderr

__all__ = [
    "check",
    "checkpoints",
    "demo",
    "demo_report",
    "diff",
    "materialize",
    "rescale",
    "retention",
    "savepoint",
    "savepoints",
    "sql",
    "state",
    "ttl_cleanup",
    "unlock",
]

DEMO_QUERY = """
SELECT t.key AS user_id, round(t.value, 2) AS total_amount, m.value AS max_amount,
       round(a.value.sum / a.value.count, 2) AS avg_amount, a.value.count AS events
FROM clickstream.total_amount t
JOIN clickstream.max_amount m USING (key)
JOIN clickstream.avg_amount a USING (key)
ORDER BY total_amount DESC LIMIT 5
"""


def _vacuum_after(args: argparse.Namespace) -> timedelta | None:
    if args.no_vacuum:
        return None
    return timedelta(hours=args.vacuum_retention_hours)


def _table_path(path: str) -> str:
    """A table's URI as given, a local path made absolute (as the job names its tables)."""
    return path if "://" in path else str(Path(path).resolve())


def checkpoints(args: argparse.Namespace, config: StatecoreConfig) -> str:
    with Catalog.connect(config.catalog_url) as catalog:
        if args.action in ("skip", "skipped"):
            if args.action == "skip":
                skips = [catalog.skip_checkpoint(args.job, args.checkpoint_id, reason=args.reason)]
            else:
                jobs = [args.job] if args.job else [j.name for j in catalog.list_jobs()]
                skips = [s for job in jobs for s in catalog.skipped_checkpoints(job)]
            return format_rows(skipped_rows(skips), args.format, empty=("job",))
        if args.action == "show":
            record = catalog.get_checkpoint(args.job, args.checkpoint_id)
            head = format_rows(checkpoint_rows([record]), args.format)
            head += _pending_output(catalog, [record], args.format)
            if args.latency or args.restore:
                rows = latency_rows(record) if args.latency else record.metrics.get("restore", [])
                what = "state latency" if args.latency else "restore"
                empty = (f"no {what} recorded (see docs/operations.md)",)
                return head + "\n\n" + format_rows(rows, args.format, empty=empty)
            if not record.tables:
                return head
            point = checkpoint_point(catalog, args.job, args.checkpoint_id)
            rows = key_group_rows(point) if args.key_groups else table_rows(point)
            return head + "\n\n" + format_rows(rows, args.format)
        jobs = [args.job] if args.job else [j.name for j in catalog.list_jobs()]
        records = [c for job in jobs for c in catalog.list_checkpoints(job)]
        listing = format_rows(checkpoint_rows(records), args.format, empty=("job",))
        return listing + _pending_output(catalog, records, args.format)


def _pending_output(catalog: Catalog, records: Sequence[CheckpointRecord], fmt: str) -> str:
    """A section on the output of ``records`` that completed but is not in its tables yet
    (empty when none is): below the table, or (CSV, JSON) on standard error, so that the
    listing stays one document."""
    done = (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED)
    completed = {(c.job, c.checkpoint_id): c.completed_at for c in records}
    pending = [
        p
        for job in sorted({c.job for c in records})
        for p, status in catalog.pending_outputs(job)
        if status in done and (job, p.checkpoint_id) in completed
    ]
    if not pending:
        return ""
    rows = pending_output_rows(pending, completed)
    title = (
        f"Pending output: {len(rows)} commit(s) of completed checkpoints not in their tables "
        "yet (the job's next run, `statecore catalog recover JOB` or the state_maintenance "
        "DAG's retention commits them)"
    )
    if fmt != "table":
        to_stderr(f"{title}:\n{format_rows(rows, 'table')}")
        return ""
    return f"\n\n{title}:\n{format_rows(rows, fmt)}"


def savepoints(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.ops.savepoint import delete_savepoint, restore_savepoint

    with Catalog.connect(config.catalog_url) as catalog:
        if args.action == "list":
            return format_rows(
                savepoint_rows(catalog.list_savepoints(args.job)), args.format, empty=("job",)
            )
        if args.action == "show":
            point = resolve_point(catalog, args.job or "", args.savepoint)
            rows = key_group_rows(point) if args.key_groups else table_rows(point)
            return (
                format_rows(point_rows(point), args.format)
                + "\n\n"
                + format_rows(rows, args.format)
            )
        if args.action == "delete":
            deleted = delete_savepoint(catalog, args.job, args.savepoint, progress=to_stderr)
            return format_rows(savepoint_rows([deleted]), args.format)
        record = restore_savepoint(
            config,
            catalog,
            args.savepoint,
            job=args.job,
            parallelism=args.parallelism,
            force=args.force,
            progress=to_stderr,
        )
        return format_rows(checkpoint_rows([record]), args.format)


def savepoint(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.ops.savepoint import pin_savepoint, take_savepoint

    if args.job == "adopt" and args.location is not None:
        return adopt(args, config)
    if args.location is not None:
        raise ConfigError(
            f"savepoint of job {args.job!r}: {args.location!r} is not an argument of a "
            "savepoint; `statecore savepoint adopt LOCATION --name N` adopts edited state"
        )
    if args.target is not None and not args.export:
        raise ConfigError(
            f"savepoint of job {args.job!r}: --target {args.target} is an export's folder; a "
            "pin has none: add --export to copy the state there"
        )
    with Catalog.connect(config.catalog_url) as catalog:
        if not args.export:
            point = pin_savepoint(
                config,
                catalog,
                args.job,
                name=args.name,
                checkpoint_id=args.checkpoint,
                progress=to_stderr,
            )
            return format_rows(point_rows(point), args.format)
        point = take_savepoint(
            config,
            catalog,
            args.job,
            name=args.name,
            target=args.target,
            checkpoint_id=args.checkpoint,
            progress=to_stderr,
        )
        return format_rows(point_rows(point), args.format)


def adopt(args: argparse.Namespace, config: StatecoreConfig) -> str:
    """``statecore savepoint adopt LOCATION --name N``: validated edited state as a savepoint."""
    from statecore.ops.adopt import adopt_savepoint

    if args.name is None:
        raise ConfigError("savepoint adopt: give the new savepoint's name (--name)")
    if args.checkpoint is not None or args.export or args.target is not None:
        raise ConfigError(
            "savepoint adopt: --checkpoint, --export and --target are for taking a savepoint; "
            "an adopted one is always copied to <warehouse>/_savepoints/<job>/<name>"
        )
    with Catalog.connect(config.catalog_url) as catalog:
        point = adopt_savepoint(
            config,
            catalog,
            args.location,
            name=args.name,
            job=args.adopt_job,
            source=args.source,
            max_problems=args.max_problems,
            progress=to_stderr,
        )
        return format_rows(point_rows(point), args.format)


def rescale(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.ops.rescale import rescale as run

    if args.dry_run:
        return _estimate(config, args.job, "latest", args.parallelism, args.max_parallelism, args)
    with Catalog.connect(config.catalog_url) as catalog:
        result = run(
            config,
            catalog,
            args.job,
            parallelism=args.parallelism,
            max_parallelism=args.max_parallelism,
            savepoint=args.savepoint,
            progress=to_stderr,
        )
        return format_rows([result.to_dict()], args.format)


def retention(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.ops.retention import apply_retention

    with Catalog.connect(config.catalog_url) as catalog:
        report = apply_retention(
            config,
            catalog,
            args.job,
            retain=args.retain,
            vacuum_after=_vacuum_after(args),
            log_grace=timedelta(seconds=args.log_grace),
            outputs=[_table_path(path) for path in args.outputs],
            dry_run=args.dry_run,
            progress=to_stderr,
        )
        summary = {k: v for k, v in report.to_dict().items() if k != "tables"}
        return format_rows([summary], args.format)


def ttl_cleanup(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.ops.ttl_cleanup import ttl_cleanup as run
    from statecore.ttl.time import ManualTimeProvider

    with Catalog.connect(config.catalog_url) as catalog:
        clock = ManualTimeProvider(args.now_ms) if args.now_ms is not None else None
        report = run(
            config,
            catalog,
            args.job,
            time_provider=clock,
            compact=not args.no_compact,
            vacuum_after=_vacuum_after(args),
            dry_run=args.dry_run,
            progress=to_stderr,
        )
        summary = {k: v for k, v in report.to_dict().items() if k not in ("key_groups",)}
        vacuumed = summary["vacuum"]
        summary["vacuum"] = f"{vacuumed['files']} files, {vacuumed['bytes']} bytes"
        return (
            format_rows(report.rows(), args.format, empty=("state", "key_group"))
            + "\n\n"
            + format_rows([summary], args.format)
        )


def state(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.ops.repair import apply_sql, delete_key

    if args.action == "get":
        return _lookup(args, config)
    with Catalog.connect(config.catalog_url) as catalog:
        if args.action == "delete":
            result = delete_key(
                config,
                catalog,
                args.job,
                args.key,
                source=args.source,
                name=args.name,
                target=args.target,
                progress=to_stderr,
            )
        else:
            result = apply_sql(
                config,
                catalog,
                args.job,
                args.sql,
                source=args.source,
                name=args.name,
                target=args.target,
                progress=to_stderr,
            )
        changes = [
            dict(c, partitions=", ".join(map(str, c["partitions"])))
            for c in result.to_dict()["changes"]
        ]
        tail = (
            f"savepoint: {result.savepoint}"
            if result.savepoint
            else "nothing changed: no savepoint written"
        )
        return format_rows(changes, args.format, empty=("state",)) + "\n" + tail


def diff(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.query.diff import diff_points

    with Catalog.connect(config.catalog_url) as catalog:
        a = resolve_point(catalog, args.job, args.a)
        b = resolve_point(catalog, args.job, args.b)
        rows = [d.to_dict() for d in diff_points(a, b, examples=args.examples)]
        return format_rows(rows, args.format, empty=("state",))


def check(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.ops.preflight import (
        check_compatibility,
        function_states,
        load_function,
        raise_if_incompatible,
    )

    with Catalog.connect(config.catalog_url) as catalog:
        against = resolve_point(catalog, args.job, args.against)
        if args.function:
            current = function_states(
                load_function(args.function), against, job=args.job, operator=args.operator
            )
        else:
            current = catalog.list_states(args.job)
        checks = check_compatibility(current, against)
        print(format_rows([c.to_dict() for c in checks], args.format, empty=("state",)))
        raise_if_incompatible(checks, against, allow_not_restored=args.allow_not_restored)
    if args.parallelism:
        print(_estimate(config, args.job, args.against, args.parallelism, None, args))
    return f"job {args.job!r} can restore {against.label}"


def _estimate(
    config: StatecoreConfig,
    job: str,
    ref: str,
    parallelism: int,
    max_parallelism: int | None,
    args: argparse.Namespace,
) -> str:
    """The estimated restore time of each subtask of ``parallelism``, and the slowest."""
    from statecore.ops.estimate import estimate_restore

    with Catalog.connect(config.catalog_url) as catalog:
        point = resolve_point(catalog, job, None if ref == "latest" else ref)
        estimate = estimate_restore(catalog, point, parallelism, max_parallelism=max_parallelism)
    table = format_rows(estimate.rows(), args.format)
    return table if args.format != "table" else f"{table}\n{estimate.summary()}"


def sql(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.query.sql import run_sql

    points = {"job": args.job, "checkpoint_id": args.checkpoint, "savepoint": args.savepoint}
    with Catalog.connect(config.catalog_url) as catalog:
        if getattr(args, "engine", "duckdb") == "spark":
            from statecore.spark.session import build_session, local_query_conf
            from statecore.spark.sql import run_spark_sql

            spark = build_session(
                app_name="statecore-sql", config=local_query_conf(), warehouse=config.warehouse
            )
            rows = run_spark_sql(spark, catalog, args.query, **points)
        else:
            rows = run_sql(catalog, args.query, **points)
        return format_table(rows, args.format)


def catalog(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.checkpoint.recover import recover_catalog

    with Catalog.connect(config.catalog_url) as opened:
        found = recover_catalog(config, opened, args.job, dry_run=args.dry_run, progress=to_stderr)
        return format_rows(found.rows(), args.format)


def materialize(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.ops.materialize import materialize_changes

    with Catalog.connect(config.catalog_url) as catalog:
        catalog.get_job(args.job)  # JobNotFoundError names the known jobs
        record = materialize_changes(catalog, args.job, progress=to_stderr)
        if record is None:
            return f"job {args.job!r}: no pending changes; nothing materialized"
        changes = [t for t in record.tables if t.table_kind == "changes"]
        return format_rows(
            [
                {
                    "checkpoint_id": record.checkpoint_id,
                    "states": ", ".join(sorted(t.state for t in changes)),
                }
            ],
            args.format,
        )


def unlock(args: argparse.Namespace, config: StatecoreConfig) -> str:
    with Catalog.connect(config.catalog_url) as catalog:
        lock = catalog.release_maintenance_lock(args.job)
        if lock is None:
            return f"job {args.job!r} was not held by any maintenance operation"
        return (
            f"released job {args.job!r} from {lock.operation!r} ({lock.owner}, since "
            f"{lock.acquired_at:%Y-%m-%d %H:%M:%S} UTC)"
        )


def demo(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.cli.demo import add_demo_day, run_demo

    if args.day is not None:
        folder = add_demo_day(Path(config.home), args.day)
        return (
            f"wrote one day of sample input: {folder}\n"
            f'Trigger stateful_pipeline with {{"date": "{args.day.isoformat()}"}} to '
            f"process it (checkpoint {args.day.strftime('%Y%m%d')})."
        )
    run_demo(
        project=Path(args.project).absolute(),
        home=Path(config.home),
        days=args.days,
        parallelism=args.parallelism,
        backend=args.backend,
    )
    return demo_report(config)


def demo_report(config: StatecoreConfig) -> str:
    """What ``statecore demo`` prints once its runs are done: the demo job's checkpoints, its top
    users by SQL, and what to try next."""
    from statecore.cli.demo import next_steps
    from statecore.query.sql import run_sql

    with Catalog.connect(config.catalog_url) as catalog:
        completed = catalog.list_checkpoints("clickstream")
        listing = format_rows(checkpoint_rows(completed))
        top = format_table(run_sql(catalog, DEMO_QUERY, job="clickstream"))
    return (
        f"\n$ statecore checkpoints list\n{listing}\n\n"
        f'$ statecore sql "<top users by total amount>"{DEMO_QUERY}\n{top}\n\n'
        f"{next_steps(max(c.checkpoint_id for c in completed))}"
    )


def _lookup(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.query.lookup import lookup

    found = lookup(
        args.job,
        args.state,
        args.key,
        namespace=args.namespace,
        user_key=args.user_key,
        checkpoint=args.checkpoint,
        savepoint=args.savepoint,
        operator=args.operator,
        config=config,
        live=args.live,
    )
    if found.fallback is not None:
        print(
            f"statecore: live lookup fell back to {found.point}: {found.fallback}", file=sys.stderr
        )
    row = found.to_dict()
    if isinstance(row["key"], bytes):
        row["key"] = row["key"].decode("utf-8", "backslashreplace")
    if args.format == "json":
        return json.dumps([row], default=_json_default)
    row["value"] = json.dumps(row["value"], default=_json_default)
    return format_rows([row], args.format)


def _json_default(value: object) -> object:
    """Bytes (a binary or ``PICKLED`` value, never unpickled) as base64 text."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)
