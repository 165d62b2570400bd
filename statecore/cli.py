"""The ``statecore`` command: demo, checkpoints, SQL.

    statecore demo [--days N] [--parallelism P] [--backend heap]
    statecore checkpoints list [--job J] [--format table|csv|json]
    statecore checkpoints show JOB CHECKPOINT_ID
    statecore sql "SELECT ..." [--job J] [--checkpoint N] [--format table|csv|json]

Errors print one line naming what is wrong and exit with status 2.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from statecore.catalog import Catalog, CheckpointRecord
from statecore.config import StatecoreConfig
from statecore.errors import StateError

__all__ = ["main", "format_table"]

DEMO_QUERY = """
SELECT t.key AS user_id, round(t.value, 2) AS total_amount, m.value AS max_amount,
       round(a.value.sum / a.value.count, 2) AS avg_amount, a.value.count AS events
FROM clickstream.total_amount t
JOIN clickstream.max_amount m USING (key)
JOIN clickstream.avg_amount a USING (key)
ORDER BY total_amount DESC LIMIT 5
"""


def format_table(table: pa.Table, fmt: str = "table") -> str:
    """Render rows as an aligned text table, CSV or JSON lines."""
    if fmt == "json":
        return "\n".join(json.dumps(row, default=_json_value) for row in table.to_pylist())
    if fmt == "csv":
        buf = io.BytesIO()
        pacsv.write_csv(table, buf)
        return buf.getvalue().decode()
    names = table.column_names
    rows = [["" if v is None else str(v) for v in row.values()] for row in table.to_pylist()]
    widths = [max([len(n), *(len(r[i]) for r in rows)]) for i, n in enumerate(names)]
    line = "  ".join(n.ljust(w) for n, w in zip(names, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _json_value(value: object) -> object:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _checkpoint_rows(records: Sequence[CheckpointRecord]) -> pa.Table:
    rows: list[dict[str, Any]] = [{
        "job": c.job, "checkpoint": c.checkpoint_id, "kind": c.kind.name,
        "status": c.status.name, "parallelism": c.parallelism,
        "max_parallelism": c.max_parallelism, "states": len(c.tables), "rows": c.total_rows,
        "bytes": c.total_bytes,
        "duration_s": round(c.duration.total_seconds(), 1) if c.duration else None,
        "completed_at": c.completed_at.strftime("%Y-%m-%d %H:%M:%S") if c.completed_at else None,
    } for c in records]
    return pa.Table.from_pylist(rows) if rows else pa.table({"job": pa.array([], pa.string())})


def _cmd_checkpoints(args: argparse.Namespace, config: StatecoreConfig) -> str:
    with Catalog.connect(config.catalog_url) as catalog:
        if args.action == "show":
            c = catalog.get_checkpoint(args.job, args.checkpoint_id)
            head = format_table(_checkpoint_rows([c]), args.format)
            tables = pa.Table.from_pylist([
                {"operator": t.operator, "state": t.state, "kind": t.table_kind,
                 "delta_version": t.version, "rows": t.rows, "bytes": t.bytes,
                 "key_groups": len(t.key_groups), "path": t.path} for t in c.tables
            ]) if c.tables else pa.table({"state": pa.array([], pa.string())})
            return head + "\n\n" + format_table(tables, args.format)
        jobs = [args.job] if args.job else [j.name for j in catalog.list_jobs()]
        records = [c for job in jobs for c in catalog.list_checkpoints(job)]
        return format_table(_checkpoint_rows(records), args.format)


def _cmd_sql(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.query import run_sql

    with Catalog.connect(config.catalog_url) as catalog:
        return format_table(run_sql(catalog, args.query, job=args.job,
                                    checkpoint_id=args.checkpoint), args.format)


def _cmd_demo(args: argparse.Namespace, config: StatecoreConfig) -> str:
    from statecore.demo import run_demo
    from statecore.query import run_sql

    run_demo(project=Path(args.project).absolute(), home=Path(config.home), days=args.days,
             parallelism=args.parallelism, backend=args.backend)
    with Catalog.connect(config.catalog_url) as catalog:
        listing = format_table(_checkpoint_rows(catalog.list_checkpoints("clickstream")))
        top = format_table(run_sql(catalog, DEMO_QUERY, job="clickstream"))
    return (f"\n$ statecore checkpoints list\n{listing}\n\n"
            f"$ statecore sql \"<top users by total amount>\"{DEMO_QUERY}\n{top}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="statecore", description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="STATECORE_HOME (default ./.statecore)")
    parser.add_argument("--catalog-url", help="SQLAlchemy URL of the checkpoint catalog")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the clickstream pipeline day by day via Airflow")
    demo.add_argument("--days", type=int, default=3)
    demo.add_argument("--parallelism", type=int, default=2)
    demo.add_argument("--backend", default="heap")
    demo.add_argument("--project", default=".", help="the folder holding dags/ and jobs/")
    demo.set_defaults(run=_cmd_demo)

    checkpoints = sub.add_parser("checkpoints", help="list or show checkpoints")
    cp_sub = checkpoints.add_subparsers(dest="action", required=True)
    cp_list = cp_sub.add_parser("list")
    cp_list.add_argument("--job")
    cp_show = cp_sub.add_parser("show")
    cp_show.add_argument("job")
    cp_show.add_argument("checkpoint_id", type=int)
    for p in (cp_list, cp_show):
        p.add_argument("--format", choices=("table", "csv", "json"), default="table")
        p.set_defaults(run=_cmd_checkpoints)

    sql = sub.add_parser("sql", help="SQL over the state of a checkpoint (views <job>.<state>)")
    sql.add_argument("query")
    sql.add_argument("--job")
    sql.add_argument("--checkpoint", type=int, help="checkpoint id (default: the latest)")
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")
    sql.set_defaults(run=_cmd_sql)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = StatecoreConfig.resolve(home=args.home, catalog_url=args.catalog_url)
        print(args.run(args, config))
    except StateError as exc:
        print(f"statecore: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
