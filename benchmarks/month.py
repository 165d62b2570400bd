"""A month on one home, longer than the suite's (issue 33): the harness of
``tests/airflow/test_month.py`` (``tests/airflow/month_run.py``) with more input days and two
days of the hourly streaming DAGs, its result written to RESULTS.md.

    python -m benchmarks.month                       # -> the RESULTS.md section
    python -m benchmarks.month --days 30 --input-every 6 --stream-landings 3 --no-write  # ~test

``make up``'s own Airflow (its supervisor, embedded PostgreSQL and configuration; only time
compressed, ``tests/airflow/month.py``'s ``month_environment``) runs ``stateful_pipeline`` by
backfills over ``--days`` past logical days (input
on one day in ``--input-every``, one day's input late), ``state_maintenance`` on every
checkpoint's Asset event, a savepoint and a rescale mid-month, and ``streaming_pipeline`` and
``streaming_kafka`` hourly over ``--stream-hours`` hours (input landing ``--stream-landings``
times among them: a file, and a day of clicks produced to a local Kafka broker the benchmark
starts, ``scripts/kafka_broker.py``; ``--no-kafka`` leaves ``streaming_kafka`` out), while a
DuckDB reader and a Delta ``readStream`` poll the output tables, four runs are SIGKILLed at
commit phases (one per start of make up, see ``MonthPlan.kills``; each next phase's runs queued
over the restart) and make up's scheduler once mid-run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import replace_section
from scripts import kafka_broker
from tests.airflow.month_run import MonthPlan, MonthResult, judge, run_counts, run_month

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADING = "## A month on one home (issue 33)"


def render(result: MonthResult, failed: list[str]) -> str:
    plan = result.plan
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    sizes = [
        f"| {name} | {', '.join(f'{k} {v}' for k, v in size.items())} |"
        for name, size in result.sizes.items()
    ]
    kafka = "clickstream_kafka" in result.stream_inputs
    streams = "`streaming_pipeline` and `streaming_kafka`" if kafka else "`streaming_pipeline`"
    read = " + ".join(
        f"{len(rows)} ({name})" for name, rows in sorted(result.stream_reader["rows"].items())
    )
    return "\n".join(
        [
            HEADING,
            "",
            f"`python -m benchmarks.month --days {plan.days} --stream-hours {plan.stream_hours} "
            f"--stream-landings {plan.stream_landings} --input-every {plan.input_every}"
            f"{'' if kafka else ' --no-kafka'}` ({time.strftime('%Y-%m-%d')}, commit {commit}, "
            f"2 shared cores): {plan.days} logical days of `stateful_pipeline` (input on a day in "
            f"{plan.input_every}, {plan.late_days} late; {plan.users} users, {plan.events} "
            f"events a day), {plan.stream_hours} hourly runs of {streams} (input landing "
            f"{plan.stream_landings} times among them), "
            "`state_maintenance` on every checkpoint, a savepoint and a rescale, on "
            "`make up`'s own Airflow (restarted with runs queued, its scheduler SIGKILLed "
            f"{len(result.killed_scheduler)} time(s)); a DuckDB reader polled the outputs "
            f"{result.reader_polls} times and a Delta `readStream` read {read} rows. Killed at: "
            f"{', '.join(result.kill_points) or 'none'}; fired: "
            f"{'; '.join(result.fired) or 'none'}.",
            "",
            "| DAG | runs | ended | retries |",
            "|---|---:|---|---:|",
            *(f"| {dag} | {cells} |" for dag, cells in run_counts(result)),
            "",
            "| phase | seconds since start |",
            "|---|---:|",
            *(f"| {name} | {value:.0f} |" for name, value in result.seconds.items()),
            "",
            "| at the end | |",
            "|---|---|",
            *sizes,
            "",
            "Every check held."
            if not failed
            else "Checks that failed:\n\n" + "\n".join(f"- {line}" for line in failed),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--input-every", type=int, default=4)
    parser.add_argument("--stream-hours", type=int, default=48)
    parser.add_argument("--stream-landings", type=int, default=4)
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    plan = MonthPlan(
        days=args.days,
        input_every=args.input_every,
        stream_hours=args.stream_hours,
        stream_landings=args.stream_landings,
        seed=args.seed,
        run_timeout=4 * 3600,
    )
    with tempfile.TemporaryDirectory(prefix="statecore-month-") as tmp:
        (Path(tmp) / "kafka").mkdir()
        broker = None if args.no_kafka else kafka_broker.start(Path(tmp) / "kafka")
        try:
            servers = None if broker is None else broker.bootstrap_servers
            result = run_month(Path(tmp) / "home", plan, kafka=servers)
        finally:
            if broker is not None:
                broker.stop()
        failed = judge(result)
    section = render(result, failed)
    print(section)
    if not args.no_write:
        RESULTS.write_text(replace_section(RESULTS.read_text(), HEADING, section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
