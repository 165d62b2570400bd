"""The ``statecore`` command: run the demo, inspect, operate on and repair the state of jobs.

    statecore demo [--days N] [--parallelism P] [--backend heap] | demo --day YYYY-MM-DD
    statecore checkpoints list [--job J] | show JOB CHECKPOINT_ID [--key-groups]
    statecore checkpoints skip JOB CHECKPOINT_ID --reason TEXT | skipped [--job J]
    statecore savepoint JOB [--name N] [--checkpoint ID] [--export [--target DIR]]
    statecore savepoint adopt FOLDER|NAME --name N [--job J] [--from SAVEPOINT] [--max-problems N]
    statecore savepoints list [--job J] | show REF [--job J] [--key-groups]
                       | restore NAME|FOLDER [--job J] [--parallelism P] [--force]
                       | delete NAME --job J
    statecore rescale JOB --parallelism P [--max-parallelism M] [--savepoint NAME|FOLDER]
    statecore retention JOB --retain N [--vacuum-retention-hours H | --no-vacuum]
                       [--log-grace SECONDS] [--output PATH ...] [--dry-run]
    statecore ttl-cleanup JOB [--dry-run] [--no-compact] [--vacuum-retention-hours H | --no-vacuum]
    statecore materialize JOB
    statecore state get JOB STATE KEY [--namespace N] [--user-key K] [--checkpoint ID|--savepoint S]
    statecore state delete JOB --key K [--from REF] [--name N] [--target DIR]
    statecore state apply JOB --sql "UPDATE|DELETE ..." [--from REF] [--name N] [--target DIR]
    statecore diff JOB A B [--examples N]
    statecore check JOB --against REF [--function module:Class] [--allow-not-restored]
    statecore sql "SELECT ..." [--job J] [--checkpoint ID | --savepoint REF] [--engine spark]
    statecore catalog recover JOB [--dry-run]
    statecore unlock JOB

Every command takes ``--home PATH`` (before or after the command's name); without it the home is
``STATECORE_HOME``, else the nearest ``.statecore`` folder here or in a parent folder, else
``~/.statecore``. Only ``demo``, ``savepoints restore`` and ``catalog recover`` may create a
catalog; every other command fails, naming the paths it tried, when there is none.

REF is a checkpoint id, a savepoint name (of JOB) or a savepoint folder. Results print as
``--format table|csv|json``; progress goes to standard error. Errors print one line naming what
is wrong and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path

from statecore.cli import commands
from statecore.cli.output import FORMATS, format_table
from statecore.config import StatecoreConfig, check_name, homes_tried
from statecore.errors import ConfigError, StateError
from statecore.ops.retention import DEFAULT_VACUUM_GRACE
from statecore.snapshot.log import LOG_GRACE

__all__ = ["format_table", "main"]

_GRACE_HOURS = DEFAULT_VACUUM_GRACE.total_seconds() / 3600
_LOG_GRACE_SECONDS = LOG_GRACE.total_seconds()


def _formatted(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--format", choices=FORMATS, default="table")
    return parser


def _vacuum_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--vacuum-retention-hours",
        type=float,
        default=_GRACE_HOURS,
        help=f"vacuum only files older than this (default {_GRACE_HOURS:g})",
    )
    parser.add_argument("--no-vacuum", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="report, change nothing")


def _new_savepoint_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", help="savepoint name (default: job, reason, time)")
    parser.add_argument("--target", help="parent folder (default <warehouse>/_savepoints/<job>)")


def _inspection(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cps = sub.add_parser("checkpoints", help="list checkpoints or show one, sizes per state")
    cp_sub = cps.add_subparsers(dest="action", required=True)
    _formatted(cp_sub.add_parser("list")).add_argument("--job")
    show = _formatted(cp_sub.add_parser("show"))
    show.add_argument("job")
    show.add_argument("checkpoint_id", type=int)
    show.add_argument("--key-groups", action="store_true", help="sizes per key group")
    show.add_argument(
        "--latency", action="store_true", help="state-access latency percentiles (µs)"
    )
    show.add_argument("--restore", action="store_true", help="each subtask's restore")
    skip = _formatted(
        cp_sub.add_parser(
            "skip",
            help="record that the job's runs go past a checkpoint id (a day) on purpose, and why",
        )
    )
    skip.add_argument("job")
    skip.add_argument("checkpoint_id", type=int, help="e.g. 20260105 for a daily job's day")
    skip.add_argument("--reason", required=True, help="why (kept in the catalog for audit)")
    _formatted(
        cp_sub.add_parser("skipped", help="the skipped checkpoint ids, with their reasons")
    ).add_argument("--job")
    cps.set_defaults(run=commands.checkpoints)

    sps = sub.add_parser("savepoints", help="list, show, restore or delete savepoints")
    sp_sub = sps.add_subparsers(dest="action", required=True)
    _formatted(sp_sub.add_parser("list")).add_argument("--job")
    sp_show = _formatted(sp_sub.add_parser("show"))
    sp_show.add_argument("savepoint", help="savepoint folder, or name with --job")
    sp_show.add_argument("--job")
    sp_show.add_argument("--key-groups", action="store_true")
    restore = _formatted(
        sp_sub.add_parser(
            "restore",
            help="make a savepoint the job's latest checkpoint (an export's folder works on an "
            "empty catalog)",
        )
    )
    restore.add_argument("savepoint", help="savepoint name (with --job) or export folder")
    restore.add_argument("--job", help="default: the savepoint's job")
    restore.add_argument("--parallelism", type=int)
    restore.add_argument(
        "--force",
        action="store_true",
        help="restore even if that discards checkpoints completed after the savepoint's source",
    )
    delete = _formatted(
        sp_sub.add_parser(
            "delete", help="forget a savepoint: a pin's files become reclaimable by VACUUM"
        )
    )
    delete.add_argument("savepoint", help="savepoint name")
    delete.add_argument("--job", required=True)
    sps.set_defaults(run=commands.savepoints)

    diff = _formatted(sub.add_parser("diff", help="keys added, removed, changed per state"))
    diff.add_argument("job")
    diff.add_argument("a", help="checkpoint id, savepoint name or folder")
    diff.add_argument("b", help="checkpoint id, savepoint name or folder")
    diff.add_argument("--examples", type=int, default=5, help="keys shown per state")
    diff.set_defaults(run=commands.diff)

    check = _formatted(sub.add_parser("check", help="can the job restore from a savepoint?"))
    check.add_argument("job")
    check.add_argument("--against", required=True, help="savepoint name or folder, checkpoint id")
    check.add_argument(
        "--function",
        help="module:Class of the job's KeyedProcessFunction "
        "(default: the states the catalog registered last)",
    )
    check.add_argument("--operator", default="main")
    check.add_argument(
        "--allow-not-restored",
        action="store_true",
        help="accept states of the savepoint the job no longer has",
    )
    check.add_argument(
        "--parallelism",
        type=int,
        help="also estimate each subtask's restore time at this parallelism",
    )
    check.set_defaults(run=commands.check)

    sql = _formatted(
        sub.add_parser(
            "sql", help="read-only SQL over a checkpoint or savepoint (views <job>.<state>)"
        )
    )
    sql.add_argument("query")
    sql.add_argument("--job")
    sql.add_argument("--checkpoint", type=int, help="checkpoint id (default: the latest)")
    sql.add_argument("--savepoint", help="savepoint folder, or name with --job")
    sql.add_argument(
        "--engine",
        choices=("duckdb", "spark"),
        default="duckdb",
        help="duckdb (embedded, sandboxed; the default) or spark (Spark SQL with delta-spark, "
        "for states larger than one machine; needs the Delta JARs: make jars)",
    )
    sql.set_defaults(run=commands.sql)


def _operations(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    savepoint = _formatted(
        sub.add_parser("savepoint", help="pin a checkpoint of a job as a savepoint, or export it")
    )
    savepoint.add_argument("job", help="the job; or `adopt` to adopt edited state (LOCATION)")
    savepoint.add_argument(
        "location",
        nargs="?",
        help="adopt: the edited tables' folder (an export's, or a copy), or an export's name "
        "with --job",
    )
    _new_savepoint_options(savepoint)
    savepoint.add_argument("--job", dest="adopt_job", help="adopt: the job of a savepoint name")
    savepoint.add_argument(
        "--from",
        dest="source",
        help="adopt: the savepoint the folder was copied from, when it has no _savepoint.json",
    )
    savepoint.add_argument(
        "--max-problems", type=int, default=20, help="adopt: bad rows listed (all are counted)"
    )
    savepoint.add_argument("--checkpoint", type=int, help="default: the latest checkpoint")
    savepoint.add_argument(
        "--export",
        action="store_true",
        help="copy the state into a self-contained, relocatable folder (--target) instead of "
        "pinning it",
    )
    savepoint.set_defaults(run=commands.savepoint)

    rescale = _formatted(sub.add_parser("rescale", help="change a job's parallelism"))
    rescale.add_argument("job")
    rescale.add_argument("--parallelism", type=int, required=True)
    rescale.add_argument(
        "--max-parallelism",
        type=int,
        help="a new max parallelism: the state is rewritten with new key groups",
    )
    rescale.add_argument(
        "--savepoint", help="a savepoint (name or folder) of the latest checkpoint, if taken"
    )
    rescale.add_argument(
        "--dry-run",
        action="store_true",
        help="change nothing: print each subtask's estimated restore time at the new parallelism",
    )
    rescale.set_defaults(run=commands.rescale)

    retention = _formatted(
        sub.add_parser("retention", help="keep the last N checkpoints, expire the rest, VACUUM")
    )
    retention.add_argument("job")
    retention.add_argument("--retain", type=int, required=True)
    _vacuum_options(retention)
    retention.add_argument(
        "--log-grace",
        type=_seconds,
        default=_LOG_GRACE_SECONDS,
        metavar="SECONDS",
        help="keep _delta_log entries younger than this, for readers in progress "
        f"(default {_LOG_GRACE_SECONDS:g})",
    )
    retention.add_argument(
        "--output",
        dest="outputs",
        action="append",
        default=[],
        metavar="PATH",
        help="an output or late-data Delta table of the job, whose _delta_log is cut to the "
        "retained checkpoints too (repeatable; default: none)",
    )
    retention.set_defaults(run=commands.retention)

    cleanup = _formatted(sub.add_parser("ttl-cleanup", help="remove expired TTL state"))
    cleanup.add_argument("job")
    cleanup.add_argument("--no-compact", action="store_true")
    cleanup.add_argument("--now-ms", type=int, help="processing time to expire against")
    _vacuum_options(cleanup)
    cleanup.set_defaults(run=commands.ttl_cleanup)

    materialize = _formatted(
        sub.add_parser("materialize", help="apply pending changelog changes to the state tables")
    )
    materialize.add_argument("job")
    materialize.set_defaults(run=commands.materialize)

    state = sub.add_parser("state", help="look up one key; repair state into a new savepoint")
    st_sub = state.add_subparsers(dest="action", required=True)
    get = _formatted(st_sub.add_parser("get", help="one key's value, reading only its key group"))
    get.add_argument("job")
    get.add_argument("state")
    get.add_argument("key")
    get.add_argument("--namespace", default="")
    get.add_argument("--user-key", help="one entry of a map state")
    get.add_argument("--operator", help="when two operators have a state of that name")
    at = get.add_mutually_exclusive_group()
    at.add_argument("--checkpoint", type=int, help="a completed checkpoint (default: latest)")
    at.add_argument("--savepoint", help="a savepoint name or folder")
    at.add_argument(
        "--live",
        action="store_true",
        help="ask the running stream's task that holds the key (else the latest checkpoint)",
    )
    delete = _formatted(st_sub.add_parser("delete", help="erase one key from every state"))
    delete.add_argument("job")
    delete.add_argument("--key", required=True)
    apply = _formatted(st_sub.add_parser("apply", help="run UPDATE/DELETE statements"))
    apply.add_argument("job")
    apply.add_argument("--sql", required=True)
    for parser in (delete, apply):
        parser.add_argument(
            "--from",
            dest="source",
            help="checkpoint id, savepoint name or folder (default: latest)",
        )
        _new_savepoint_options(parser)
    state.set_defaults(run=commands.state)

    catalog = sub.add_parser("catalog", help="rebuild a job's catalog rows from its Delta tables")
    catalog_sub = catalog.add_subparsers(dest="action", required=True)
    recover = _formatted(catalog_sub.add_parser("recover", help="after a lost or old catalog"))
    recover.add_argument("job")
    recover.add_argument("--dry-run", action="store_true", help="report, record nothing")
    catalog.set_defaults(run=commands.catalog)

    unlock = sub.add_parser("unlock", help="release a maintenance lock left by a dead operation")
    unlock.add_argument("job")
    unlock.set_defaults(run=commands.unlock)

    demo = sub.add_parser("demo", help="run the clickstream pipeline day by day via Airflow")
    demo.add_argument("--days", type=int, default=3)
    demo.add_argument("--parallelism", type=int, default=2)
    demo.add_argument("--backend", default="heap")
    demo.add_argument("--project", default=".", help="the folder holding dags/ and jobs/")
    demo.add_argument(
        "--day",
        type=_iso_date,
        help="only write one more day of sample input (then trigger stateful_pipeline for it)",
    )
    demo.set_defaults(run=commands.demo)


def _seconds(text: str) -> float:
    """A grace period in seconds: a number, not negative."""
    try:
        seconds = float(text)
        timedelta(seconds=seconds)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not seconds >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text} seconds: a grace period cannot be negative")
    return seconds


def _iso_date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


_HOME_HELP = (
    "the statecore home (default: STATECORE_HOME, else the nearest .statecore folder here or "
    "in a parent folder, else ~/.statecore)"
)


def _global_options(parser: argparse.ArgumentParser, *, default: object = None) -> None:
    parser.add_argument("--home", default=default, help=_HOME_HELP)
    parser.add_argument(
        "--catalog-url", default=default, help="SQLAlchemy URL of the checkpoint catalog"
    )


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every (sub)command's own parser, so that the global options work after it too."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [parser]
    return [leaf for a in subs for p in a.choices.values() for leaf in _leaves(p)]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="statecore",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    _inspection(sub)
    _operations(sub)
    for leaf in _leaves(parser):
        _global_options(leaf, default=argparse.SUPPRESS)
    return parser


def _creates_catalog(args: argparse.Namespace) -> bool:
    """The commands that may start a catalog: the demo, restoring a savepoint into an empty
    one, and rebuilding a lost one from the Delta logs. Every other command reads or changes
    state that must exist already, so it never creates a catalog or a folder."""
    return args.command in ("demo", "catalog") or (
        args.command == "savepoints" and args.action == "restore"
    )


def _check_catalog_exists(args: argparse.Namespace, config: StatecoreConfig) -> None:
    prefix = "sqlite:///"
    if not config.catalog_url.startswith(prefix):  # a server: connecting creates nothing
        return
    path = Path(config.catalog_url[len(prefix) :])
    if path.is_file():
        return
    if args.catalog_url:
        where = f"the catalog {config.catalog_url} (--catalog-url) does not exist"
    elif args.home or os.environ.get("STATECORE_HOME"):
        given = "--home" if args.home else "STATECORE_HOME"
        where = f"no statecore catalog at {path} (home {config.home}, from {given})"
    else:
        where = f"no statecore home found: looked at {homes_tried()}"
    raise ConfigError(
        f"{where}. Run `statecore demo` (or `make demo`) to create one, or point at a home with "
        "--home PATH or STATECORE_HOME=PATH"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if getattr(args, "job", None) is not None:  # every command naming a job
            check_name("job", args.job)
        config = StatecoreConfig.resolve(home=args.home, catalog_url=args.catalog_url)
        if not _creates_catalog(args):
            _check_catalog_exists(args, config)
        print(args.run(args, config))
    except StateError as exc:
        print(f"statecore: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
