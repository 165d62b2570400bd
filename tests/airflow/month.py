"""A month on one home: ``make up``'s own Airflow (its supervisor, its embedded PostgreSQL, its
configuration) running the bundled DAGs over past logical dates (backfills) while readers poll
the output tables; the harness of ``tests/airflow/test_month.py`` and ``benchmarks/month.py``.

:class:`MonthAirflow` starts Airflow with ``make up`` and stops it with ``make down``
(tests/airflow/test_own_airflow.py's ``Up``), in an environment whose only settings of its own
compress time (:func:`month_environment`); it drives it as a user does, by the CLI against it
(``make airflow``'s command) and the REST API, and reads make up's metadata database to wait for
runs and judge them. :class:`DuckReader` polls every output table with DuckDB (Parquet folders
and Delta tables) in a thread and keeps every row it saw; :class:`StreamReader` runs a Delta
``readStream`` of each Delta output table (the batch job's and the streams') in a Spark process
of its own (``tests/airflow/month_stream_reader.py``) into Parquet sinks; :func:`produce_day`
produces a day of clicks to the test Kafka broker for ``streaming_kafka``.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from statecore.cli.demo import airflow_environment, generate_clickstream
from tests.airflow.test_own_airflow import Up, scheduler_pid
from tests.airflow.test_standalone import free_port, stop

REPO = Path(__file__).resolve().parents[2]
DAGS = (
    "stateful_pipeline",
    "state_maintenance",
    "savepoint",
    "rescale",
    "streaming_pipeline",
    "streaming_query",
    "streaming_kafka",
)
KILL_POINTS = (
    "catalog:begin",
    "commit:keyed:total_amount:before",
    "commit:keyed:total_amount:after",
    "commit:operator:processed:after",
    "catalog:states",
    "catalog:complete:before",
    "catalog:complete:after",
    "output:commit:before",
    "output:commit:after",
)
"""The driver-side phases of a commit a run is SIGKILLed at (statecore.snapshot.faults)."""
SKIP_REASONS = (
    "no new input",
    "no input at",
    "no Kafka broker configured",
    "no-op:",
    "nothing to",
    "the catalog has: none",
)
"""How the bundled DAGs' logs say why a run skips its work."""


def month_environment(home: Path) -> dict[str, str]:
    """The environment ``make up`` is started in for the month: the project's
    (``airflow_environment``, as the Makefile's), ports of its own, and only settings that
    compress time, each with why."""
    env = airflow_environment(REPO, home)
    env.pop("AIRFLOW__API__HOST", None)  # the Makefile's default: loopback
    env.update(
        {
            "AIRFLOW__API__PORT": str(free_port()),
            # the scheduler's and triggerer's log servers (8793, 8794 by default, on every
            # interface): ports of their own, as another Airflow of the suite may run beside
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            # time compression: a killed task is retried 5 s later, not the 10 s of make up's
            # default (the month kills 4 to 5 tasks)
            "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
            # time compression: the DAG files never change; parsed once per start, not every
            # 30 s (a parse of the bundled DAGs is seconds of CPU on a 2-core machine), and the
            # folder listed every 5 s so they appear as soon as make up is up
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # time compression: a loop of the scheduler with nothing to do sleeps this long
            # (default 1 s). After a skipping check task, four loops (its event, its two
            # downstream tasks skipped, the run ended) and one more start the next run: on the
            # month's earlier harness an hourly run that skips took 5 s at 1 s on a quiet
            # machine (4 of them sleeping), 1.3 to 2.5 s at 0.1 s; the month's two days of
            # hourly runs took 856 to 948 s at 1 s against 401 s at 0.1 s (2026-11-28), more
            # than make test's jvm group can give it
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.1",
            # time compression: a SIGKILLed run's lease is taken over 5 s later, not after the
            # default timeout
            "STATECORE_LEASE_TIMEOUT": "5",
        }
    )
    return env


@dataclass(frozen=True)
class Backfill:
    """A backfill of ``dag_id`` from ``start`` to ``end`` (inclusive), as docs/airflow.md writes
    one (``--reprocess-behavior failed``); ``again``: re-run dates that already have a completed
    run; ``conf``: the runs' conf."""

    dag_id: str
    start: str
    end: str
    again: bool = False
    conf: dict[str, Any] | None = None

    def args(self) -> list[str]:
        args = ["backfill", "create", "--dag-id", self.dag_id, "--from-date", self.start]
        args += ["--to-date", self.end]
        args += ["--reprocess-behavior", "completed" if self.again else "failed"]
        if self.conf:
            args += ["--dag-run-conf", json.dumps(self.conf)]
        return args


@dataclass
class MonthAirflow:
    """``make up``'s own Airflow on the month's home (``month_environment``), started with
    ``make up`` and stopped with ``make down`` (tests/airflow/test_own_airflow.py's ``Up``),
    driven by the CLI against it (``make airflow``'s command) and its REST API. Its metadata
    database (make up's PostgreSQL) is read to wait for runs and judge them."""

    home: Path
    env: dict[str, str]
    up: Up | None = None
    starts: int = 0
    consoles: list[str] = field(default_factory=list)
    _engine: sa.engine.Engine | None = None

    @property
    def airflow_home(self) -> Path:
        return Path(self.env["AIRFLOW_HOME"])

    def start(self, *, fault: str | None = None, dags: Iterable[str] = ()) -> None:
        """``make up``; ``fault`` arms a kill point (``STATECORE_FAULT_POINT``) in make up's
        environment, which its supervisor passes to every component and so to every task,
        firing once (its marker file); waits until ``dags`` are parsed."""
        env = dict(self.env)
        self.starts += 1
        if fault is not None:
            env["STATECORE_FAULT_POINT"] = fault
            marker = f"fault-{self.starts}-{fault.replace(':', '_')}"
            env["STATECORE_FAULT_MARKER"] = str(self.home / marker)
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.up = Up(env, logs / f"make-up-{self.starts}.log")
        for dag_id in dags:
            self.wait(f"{dag_id} parsed", lambda d=dag_id: self.api("GET", f"/api/v2/dags/{d}"))

    def stop(self) -> None:
        """``make down`` (everything stopped and PostgreSQL shut down within 15 s)."""
        if self.up is None:
            return
        up, self.up = self.up, None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        try:
            down, _ = up.down()
            assert down.returncode == 0, down.stdout + down.stderr
        finally:
            if up.process.poll() is None:  # make down failed: leave nothing running
                stop(up.process, up.log)
            self.consoles.append(up.console())

    def api(self, method: str, path: str, body: Any = None) -> Any:
        assert self.up is not None, "make up is not running"
        return self.up.api.call(method, path, body)

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 600) -> Any:
        assert self.up is not None, "make up is not running"
        return self.up.api.wait(what, check, timeout, self.up.process)

    def cli(self, *commands: list[str], timeout: float = 300) -> list[str]:
        """Airflow CLI ``commands`` against the running make up (``make airflow``'s command,
        ``scripts/airflow_up cli``, whose arguments a shell does not split), side by side
        (each a few seconds of starting Airflow on a loaded machine): their outputs."""
        started = [
            subprocess.Popen(
                [sys.executable, str(REPO / "scripts" / "airflow_up"), "cli", *args],
                cwd=REPO,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for args in commands
        ]
        outputs = []
        for args, process in zip(commands, started, strict=True):
            try:
                out, err = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
            assert process.returncode == 0, (args, out[-3000:], err[-3000:])
            outputs.append(out)
        return outputs

    def query(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        """``sql`` on make up's metadata database (its URL as ``airflow config`` tells it)."""
        if self._engine is None:
            (url,) = self.cli(["config", "get-value", "database", "sql_alchemy_conn"])
            self._engine = sa.create_engine(url.strip())
        with self._engine.connect() as con:
            return [tuple(row) for row in con.execute(sa.text(sql), params)]

    def pause(self, *dag_ids: str) -> None:
        self._toggle("pause", dag_ids)

    def unpause(self, *dag_ids: str) -> None:
        self._toggle("unpause", dag_ids)

    def _toggle(self, how: str, dag_ids: Iterable[str]) -> None:
        pattern = f"^({'|'.join(dag_ids)})$"
        self.cli(["dags", how, "--treat-dag-id-as-regex", "--yes", pattern])

    def backfill(self, *backfills: Backfill) -> None:
        """Create ``backfills`` (of different DAGs: a DAG takes one at a time), side by side."""
        if backfills:
            self.cli(*(backfill.args() for backfill in backfills))

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> None:
        """A run of ``dag_id`` now, as the UI's trigger form makes one (the REST API)."""
        self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})

    def queued(self) -> int:
        """Runs queued."""
        return len(self.query("SELECT run_id FROM dag_run WHERE state = 'queued'"))

    def pending(self) -> list[tuple[Any, ...]]:
        """Runs queued or running, asset events no run consumed yet, and backfills the
        scheduler has not marked complete (a DAG takes one backfill at a time)."""
        return (
            self.query(
                "SELECT dag_id, run_id, state FROM dag_run WHERE state NOT IN ('success', 'failed')"
            )
            + self.query("SELECT target_dag_id, asset_id, 'asset event' FROM asset_dag_run_queue")
            + self.query("SELECT dag_id, id, 'backfill' FROM backfill WHERE completed_at IS NULL")
        )

    def end_backfills(self) -> None:
        """End each backfill whose runs all ended, by the REST API's cancel (it fails the
        backfill's queued runs: it has none), as the scheduler does only every 30 s
        (``_mark_backfills_complete``): a DAG takes its next backfill after it."""
        ended = self.query(
            "SELECT b.id FROM backfill b WHERE b.completed_at IS NULL"
            " AND EXISTS (SELECT 1 FROM backfill_dag_run d WHERE d.backfill_id = b.id)"
            " AND NOT EXISTS (SELECT 1 FROM dag_run r WHERE r.backfill_id = b.id"
            " AND r.state IN ('queued', 'running'))"
        )
        for (backfill_id,) in ended:
            try:
                self.api("PUT", f"/api/v2/backfills/{backfill_id}/cancel")
            except urllib.error.HTTPError as exc:
                if exc.code != 409:  # 409: the scheduler marked it complete meanwhile
                    raise

    def wait_idle(
        self, timeout: float, *, settle: float = 2, each: Callable[[], None] = lambda: None
    ) -> None:
        """Until nothing is pending (twice, ``settle`` s apart); ``each`` runs at each poll."""
        assert self.up is not None, "make up is not running"
        deadline = time.monotonic() + timeout
        quiet = 0
        while time.monotonic() < deadline:
            assert self.up.process.poll() is None, "make up exited: " + self.up.console()[-3000:]
            each()
            self.end_backfills()
            quiet = 0 if self.pending() else quiet + 1
            if quiet >= 2:
                return
            time.sleep(settle / 2)
        raise AssertionError(f"runs still pending after {timeout} s: {self.pending()[:10]}")

    def kill_scheduler(self) -> int:
        """SIGKILL make up's scheduler (its supervisor starts another): its pid."""
        assert self.up is not None, "make up is not running"
        pid = scheduler_pid(self.up.group)
        os.kill(pid, signal.SIGKILL)
        return pid

    def runs(self) -> list[dict[str, Any]]:
        """Every DAG run with its tasks' states and tries."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for dag_id, run_id, state, run_type, logical in self.query(
            "SELECT dag_id, run_id, state, run_type, logical_date FROM dag_run"
        ):
            out[dag_id, run_id] = {
                "dag": dag_id,
                "run": run_id,
                "state": state,
                "type": run_type,
                "logical": logical,
                "tasks": {},
            }
        for dag_id, run_id, task_id, state, tries in self.query(
            "SELECT dag_id, run_id, task_id, state, try_number FROM task_instance"
        ):
            out[dag_id, run_id]["tasks"][task_id] = (state, tries)
        return list(out.values())

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        folder = self.airflow_home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        return "".join(
            path.read_text(errors="replace")
            for path in sorted((folder / f"task_id={task_id}").glob("attempt=*.log"))
        )


def skip_reason(airflow: MonthAirflow, run: dict[str, Any]) -> str | None:
    """The reason a run with skipped tasks gave in a task's log: an ``AirflowSkipException``'s
    message, or what a deciding task (``state_maintenance``'s ``jobs``) says it found."""
    for task_id in run["tasks"]:
        log = airflow.task_log(run["dag"], run["run"], task_id)
        for marker in SKIP_REASONS:
            at = log.find(marker)
            if at >= 0:
                return log[at : log.find("\n", at)][:200]
    return None


def lay_out_input(home: Path, days: list[date], *, users: int, events: int) -> dict[date, Path]:
    """One ``date=`` partition per day (seeded by the day): the day's input folder."""
    root = home / "data" / "clickstream"
    return {
        day: generate_clickstream(
            root, start=day, days=1, users=users, events_per_day=events, seed=day.toordinal()
        )[0]
        for day in days
    }


def pick_input_days(
    first: date, count: int, *, every: int, late: int, late_before: date, seed: int
) -> tuple[list[date], list[date]]:
    """Days with input (one in ``every``, seeded), and ``late`` of them before ``late_before``
    (never the first) whose input lands only after their scheduled run was skipped."""
    rng = random.Random(seed)
    all_days = [first + timedelta(days=i) for i in range(count)]
    with_input = sorted(rng.sample(all_days, max(1, count // every)))
    early = [day for day in with_input[1:] if day <= late_before]
    return with_input, sorted(rng.sample(early, min(late, len(early))))


def create_topic(servers: str, partitions: int = 2) -> str:
    """A topic of its own for the month's ``streaming_kafka`` on the brokers ``servers``."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    name = f"month-{secrets.token_hex(4)}"
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def produce_day(
    home: Path, servers: str, topic: str, day: date, *, users: int, events: int
) -> set[tuple[Any, ...]]:
    """A day of clicks (as :func:`lay_out_input` makes them, under ``home/kafka-input``)
    produced to ``topic`` as ``streaming_kafka`` reads them (key the user, value the event type
    and amount, the Kafka timestamp the event time): their ``(user_id, ts)`` keys."""
    import duckdb

    from tests.kafka.kafka_job import send_records

    [folder] = generate_clickstream(
        home / "kafka-input",
        start=day,
        days=1,
        users=users,
        events_per_day=events,
        seed=-day.toordinal(),
    )
    rows = (
        duckdb.connect()
        .execute(f"SELECT user_id, event_type, amount, epoch_ms(ts) FROM '{folder}/*.parquet'")
        .fetchall()
    )
    send_records(
        servers,
        topic,
        [(user, {"event_type": kind, "amount": amount}, ms) for user, kind, amount, ms in rows],
    )
    return {(user, ms * 1000) for user, _, _, ms in rows}


class DuckReader(threading.Thread):
    """Polls the output tables with DuckDB every ``interval`` s; keeps every row key seen, the
    rows a poll no longer saw after an earlier one did (``vanished``, even if a later poll saw
    them again) and every error (a reader must never fail on a statecore commit)."""

    def __init__(self, home: Path, interval: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.home = home
        self.interval = interval
        self.seen: dict[str, set[tuple[Any, ...]]] = {}
        self.vanished: dict[str, set[tuple[Any, ...]]] = {}
        self.errors: list[str] = []
        self.polls = 0
        self._halt = threading.Event()

    def run(self) -> None:
        import duckdb

        con = duckdb.connect()
        con.execute("INSTALL delta; LOAD delta")
        while not self._halt.wait(self.interval):
            for name, rows in read_outputs(con, self.home, self.errors).items():
                seen = self.seen.setdefault(name, set())
                if seen - rows:
                    self.vanished.setdefault(name, set()).update(seen - rows)
                seen.update(rows)
            self.polls += 1

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=60)


def output_tables(home: Path) -> dict[str, tuple[str, Path]]:
    """Every output table of the home: name -> (format, path)."""
    out: dict[str, tuple[str, Path]] = {}
    root = home / "output"
    if not root.is_dir():
        return out
    for path in sorted(root.iterdir()):
        if (path / "_delta_log").is_dir():
            out[path.name] = ("delta", path)
        elif path.is_dir() and any(path.glob("date=*/*.parquet")):
            out[path.name] = ("parquet", path)
    return out


def read_outputs(con: Any, home: Path, errors: list[str]) -> dict[str, set[tuple[Any, ...]]]:
    """Each output table's rows as ``(user_id, ts)`` keys (one event each)."""
    found: dict[str, set[tuple[Any, ...]]] = {}
    for name, (kind, path) in output_tables(home).items():
        scan = (
            f"delta_scan('{path}')"
            if kind == "delta"
            else f"read_parquet('{path}/date=*/*.parquet')"
        )
        try:
            rows = con.execute(f"SELECT user_id, epoch_us(ts) FROM {scan}").fetchall()
        except Exception as exc:
            if kind == "parquet" and "No files found" in str(exc):
                continue  # a day's folder being overwritten: Spark's write, not statecore's
            errors.append(f"{name}: {type(exc).__name__}: {exc}"[:500])
            continue
        found[name] = set(rows)
        if len(rows) != len(found[name]):
            errors.append(f"{name}: {len(rows) - len(found[name])} duplicate rows")
    return found


def input_rows(days: dict[date, Path]) -> set[tuple[Any, ...]]:
    import duckdb

    con = duckdb.connect()
    keys: set[tuple[Any, ...]] = set()
    for folder in days.values():
        keys.update(
            con.execute(f"SELECT user_id, epoch_us(ts) FROM '{folder}/*.parquet'").fetchall()
        )
    return keys


class StreamReader:
    """A Delta ``readStream`` of each of some output tables, in one Spark process of its own,
    each into a Parquet sink of its own (``month_stream_reader.py``); started once the tables
    exist."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env
        self.tables: list[Path] = []
        self.sinks = home / "readers"
        self.process: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None

    def start(self, tables: list[Path]) -> None:
        self.tables = tables
        self.log = self.home / "logs" / "readstream.log"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).with_name("month_stream_reader.py")),
                    str(self.sinks),
                    *map(str, tables),
                ],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> str:
        """Stop it (SIGTERM, then SIGKILL); how it ended: ``running`` or its exit code."""
        if self.process is None:
            return "not started"
        ended = self.process.poll()
        how = "running" if ended is None else f"exited {ended}"
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=30)
        return how

    def rows(self) -> dict[str, set[tuple[Any, ...]]]:
        """Per table, the rows its readStream read."""
        return {name: set(rows) for name, rows in self._read().items()}

    def duplicates(self) -> dict[str, int]:
        """Per table, the rows its readStream read more than once (a commit it took for new
        data that was not: a rewrite of rows it had read)."""
        return {name: len(rows) - len(set(rows)) for name, rows in self._read().items()}

    def _read(self) -> dict[str, list[tuple[Any, ...]]]:
        import duckdb

        out: dict[str, list[tuple[Any, ...]]] = {}
        for table in self.tables:
            sink = self.sinks / table.name
            out[table.name] = (
                duckdb.connect()
                .execute(f"SELECT user_id, epoch_us(ts) FROM '{sink}/*.parquet'")
                .fetchall()
                if any(sink.glob("*.parquet"))
                else []
            )
        return out


def tree_size(path: Path) -> dict[str, int]:
    """Files, and ``_delta_log`` entries (JSON commits), under ``path``."""
    files = logs = 0
    for item in path.rglob("*"):
        if item.is_file():
            files += 1
            if item.parent.name == "_delta_log" and item.suffix == ".json":
                logs += 1
    return {"files": files, "log_entries": logs}
