"""A month on one home: one Airflow with its real scheduler running the bundled DAGs over past
logical dates (backfills) while readers poll the output tables; the harness of
``tests/airflow/test_month.py`` and ``benchmarks/month.py``.

:class:`Scheduler` starts ``airflow dag-processor`` and ``airflow scheduler`` (LocalExecutor,
``AIRFLOW__CORE__PARALLELISM=2``) as subprocesses of their own process groups on a PostgreSQL
metadata database of their own (:func:`airflow_database`, as production's Airflow runs: SQLite
takes one writer at a time, and the CLI's ``backfill create`` failed with "database is locked"
beside the DAG processor), and reads that database directly to wait for runs and judge them.
:class:`DuckReader` polls every output table with DuckDB (Parquet folders and Delta tables) in
a thread and keeps every row it saw; :class:`StreamReader` runs a Delta ``readStream`` of
each Delta output table (the batch job's and the streams') in a Spark process of its own
(``tests/airflow/month_stream_reader.py``) into Parquet sinks; :func:`produce_day` produces a
day of clicks to the test Kafka broker for ``streaming_kafka``.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from statecore.cli.demo import airflow_environment, generate_clickstream

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


POSTGRES_URL = os.environ.get(
    "STATECORE_TEST_POSTGRES_URL",
    "postgresql+psycopg2://statecore:statecore@127.0.0.1:5432/statecore_test",
)
"""The PostgreSQL whose role creates the month's metadata databases (``make postgres``)."""


@contextmanager
def airflow_database(server_url: str = POSTGRES_URL) -> Iterator[str]:
    """A PostgreSQL database of its own for one month's Airflow (on ``server_url``'s server, by
    its role), dropped afterwards with whatever connection is still open to it: its URL."""
    url = sa.engine.make_url(server_url)
    name = f"airflow_month_{secrets.token_hex(4)}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as con:
            con.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as con:
                con.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def month_environment(home: Path, database: str, **extra: str) -> dict[str, str]:
    """The environment of the month's Airflow: ``airflow_environment`` on the metadata
    database ``database`` (a SQLAlchemy URL) plus the LocalExecutor's settings, an API server
    on a free port of 127.0.0.1, task retries (a killed run is retried as production's would
    be) and a short lease timeout (a killed run's lease is taken over seconds later)."""
    env = airflow_environment(REPO, home)
    port = _free_port()
    env.update(
        {
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            # the scheduler's and triggerer's log servers (8793, 8794 by default, on every
            # interface): ports of their own, as a make up of the suite may run beside
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(_free_port()),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": "2",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
            # the DAG files never change: parsed once, not every 30 s (Airflow 3 reads this in
            # [dag_processor], not [scheduler])
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "3600",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            # a loop with nothing to do sleeps this long (default 1 s): after a skipping check
            # task, four loops (its event, its two downstream tasks skipped, the run ended) and
            # one more to start the next run: an hourly run that skips took 5 s at 1 s on a
            # quiet machine (4 of them sleeping), 1.3 to 2.5 s at 0.1 s
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.1",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "1200",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            # the driver's REST calls (ending a finished backfill: Scheduler.end_backfills)
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "STATECORE_LEASE_TIMEOUT": "5",
            **extra,
        }
    )
    return env


@dataclass(frozen=True)
class Backfill:
    """A backfill of ``dag_id`` from ``start`` to ``end`` (inclusive), one run at a time;
    ``again``: re-run dates that already have a completed run; ``conf``: the runs' conf."""

    dag_id: str
    start: str
    end: str
    again: bool = False
    conf: dict[str, Any] | None = None

    def args(self) -> list[str]:
        args = ["backfill", "create", "--dag-id", self.dag_id, "--from-date", self.start]
        args += ["--to-date", self.end, "--max-active-runs", "1"]
        # the bundled job DAGs depend on the past: Airflow asks which existing runs to redo
        args += ["--reprocess-behavior", "completed" if self.again else "failed"]
        if self.conf:
            args += ["--dag-run-conf", json.dumps(self.conf)]
        return args


@dataclass
class Scheduler:
    """``airflow api-server`` (the tasks' Execution API), ``airflow dag-processor`` and
    ``airflow scheduler`` on the metadata database of ``env`` (``month_environment``)."""

    home: Path
    env: dict[str, str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    scheduler: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _engine: sa.engine.Engine | None = None
    _token: str | None = None

    @property
    def airflow_home(self) -> Path:
        return Path(self.env["AIRFLOW_HOME"])

    def cli(self, *args: str, timeout: float = 300) -> str:
        return self.clis([*args], timeout=timeout)[0]

    def clis(self, *commands: list[str], timeout: float = 300) -> list[str]:
        """Airflow CLI ``commands`` run side by side (each a few seconds of starting Airflow on
        a loaded machine): their outputs."""
        started = [
            subprocess.Popen(
                ["airflow", *args],
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

    def start(self) -> None:
        """Migrate the database, start the API server and the DAG processor."""
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        self.cli("db", "migrate", timeout=600)
        for component in ("api-server", "dag-processor"):
            self.processes.append(self._spawn(component, self.env))

    def start_scheduler(self, *, fault: str | None = None) -> None:
        """Start the scheduler; ``fault`` arms a kill point (``STATECORE_FAULT_POINT``) in every
        task it runs, firing once (its marker file)."""
        env = dict(self.env)
        if fault is not None:
            env["STATECORE_FAULT_POINT"] = fault
            self.starts += 1
            marker = f"fault-{self.starts}-{fault.replace(':', '_')}"
            env["STATECORE_FAULT_MARKER"] = str(self.home / marker)
        self.scheduler = self._spawn("scheduler", env)

    def stop_scheduler(self) -> None:
        """Stop the scheduler (its LocalExecutor workers with it): the month's phases are
        planned (unpause, backfill, trigger) while no run is going."""
        if self.scheduler is not None:
            _stop_group(self.scheduler)
            self.scheduler = None

    def _spawn(self, component: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / f"{component}.log").open("ab") as log:
            return subprocess.Popen(
                ["airflow", component],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        """Stop every component."""
        self.stop_scheduler()
        for process in self.processes:
            _stop_group(process)
        self.processes = []
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def alive(self) -> None:
        for process in [*self.processes, *([self.scheduler] if self.scheduler else [])]:
            assert process.poll() is None, f"{process.args} exited ({process.returncode})"

    def query(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        if self._engine is None:
            self._engine = sa.create_engine(self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        with self._engine.connect() as con:
            return [tuple(row) for row in con.execute(sa.text(sql), params)]

    def wait_parsed(self, dag_ids: Iterable[str], timeout: float = 600) -> None:
        wanted = set(dag_ids)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.alive()
            try:
                found = {row[0] for row in self.query("SELECT dag_id FROM dag")}
            except sa.exc.ProgrammingError:  # before ``db migrate`` made the table
                found = set()
            if wanted <= found:
                return
            time.sleep(2)
        errors = self.query("SELECT filename, stacktrace FROM import_error")
        raise AssertionError(f"DAGs not parsed in {timeout} s: {wanted - found}; {errors}")

    def unpause(self, *dag_ids: str) -> None:
        pattern = f"^({'|'.join(dag_ids)})$"
        self.cli("dags", "unpause", "--treat-dag-id-as-regex", "--yes", pattern)

    def backfill(self, *backfills: Backfill) -> None:
        """Create ``backfills`` (of different DAGs: a DAG takes one at a time), side by side."""
        self.clis(*(backfill.args() for backfill in backfills))

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> None:
        import json

        self.cli("dags", "trigger", dag_id, "--conf", json.dumps(conf))

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
                self._api("PUT", f"/api/v2/backfills/{backfill_id}/cancel")
            except urllib.error.HTTPError as exc:
                if exc.code != 409:  # 409: the scheduler marked it complete meanwhile
                    raise

    def _api(self, method: str, path: str) -> Any:
        base = self.env["AIRFLOW__API__BASE_URL"]
        if self._token is None:
            with urllib.request.urlopen(f"{base}/auth/token", timeout=30) as response:
                self._token = json.loads(response.read())["access_token"]
        request = urllib.request.Request(
            base + path, method=method, headers={"Authorization": f"Bearer {self._token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def wait_idle(
        self, timeout: float, *, settle: float = 2, each: Callable[[], None] = lambda: None
    ) -> None:
        """Until nothing is pending (twice, ``settle`` s apart); ``each`` runs at each poll."""
        deadline = time.monotonic() + timeout
        quiet = 0
        while time.monotonic() < deadline:
            self.alive()
            each()
            self.end_backfills()
            quiet = 0 if self.pending() else quiet + 1
            if quiet >= 2:
                return
            time.sleep(settle / 2)
        raise AssertionError(f"runs still pending after {timeout} s: {self.pending()[:10]}")

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


def _stop_group(process: subprocess.Popen[bytes], grace: float = 30) -> None:
    """SIGTERM the process's group (started in a session of its own), SIGKILL it ``grace`` s
    later if still there."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


def skip_reason(scheduler: Scheduler, run: dict[str, Any]) -> str | None:
    """The reason a run with skipped tasks gave in a task's log: an ``AirflowSkipException``'s
    message, or what a deciding task (``state_maintenance``'s ``jobs``) says it found."""
    for task_id in run["tasks"]:
        log = scheduler.task_log(run["dag"], run["run"], task_id)
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
