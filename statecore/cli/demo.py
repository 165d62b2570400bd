"""The demo clickstream: small daily Parquet partitions (``user_id, event_type, amount, ts``)."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "EVENT_TYPES",
    "add_demo_day",
    "airflow_environment",
    "generate_clickstream",
    "next_steps",
    "run_demo",
]

EVENT_TYPES = ("view", "click", "add_to_cart", "purchase")
PYTHONWARNINGS = "ignore:GitWildMatchPattern:DeprecationWarning"
"""The warning filter of this project's Airflow processes (the Makefile's ``make up`` too)."""


def generate_clickstream(
    directory: str | Path,
    *,
    start: date = date(2026, 1, 1),
    days: int = 3,
    users: int = 200,
    events_per_day: int = 2_000,
    seed: int = 7,
) -> list[Path]:
    """Write ``days`` partitions ``date=YYYY-MM-DD/events.parquet``; the partition folders."""
    rng = random.Random(seed)
    out = []
    for d in range(days):
        day = start + timedelta(days=d)
        midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
        step = 86_400 / events_per_day
        ts = [midnight + timedelta(seconds=i * step) for i in range(events_per_day)]
        table = pa.table(
            {
                "user_id": [f"user-{rng.randrange(users)}" for _ in ts],
                "event_type": [rng.choice(EVENT_TYPES) for _ in ts],
                "amount": [round(rng.uniform(1, 200), 2) for _ in ts],
                "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            }
        )
        folder = Path(directory) / f"date={day.isoformat()}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / "events.parquet")
        out.append(folder)
    return out


def airflow_environment(project: Path, home: Path) -> dict[str, str]:
    """The environment the project's Airflow runs in: SQLite and state under ``home``.

    ``STATECORE_HOME``, ``AIRFLOW_HOME`` and the metadata database (SQLite in ``AIRFLOW_HOME``,
    never the PostgreSQL of ``make up``, whose URL an environment may carry) always follow
    ``home``; other settings already in the environment are kept, missing ones get the embedded
    defaults.
    """
    import json
    import os
    import sys

    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["STATECORE_HOME"] = str(home)
    env["AIRFLOW_HOME"] = str(home / "airflow")
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow' / 'airflow.db'}"
    defaults = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(project / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(project / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "2",
        # the Spark provider's import takes seconds of CPU; a busy machine must not fail the
        # DAG file for it (Airflow's default is 30 s)
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "180",
        # the bundled tasks are retried (statecore_airflow.RETRIED): 10 s after a failure, not
        # Airflow's 5 minutes, so `airflow dags test` of a failing task ends in under a minute
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "10",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # spark-submit's logging: Spark's warnings and errors, not its INFO (conf/spark/)
        "SPARK_CONF_DIR": str(project / "conf" / "spark"),
        # Airflow 3.3's .airflowignore reader builds pathspec's deprecated GitWildMatchPattern
        # for plugins/.airflowignore in every process (the task SDK's always, whatever
        # dag_ignore_file_syntax says): a DeprecationWarning in every task log
        "PYTHONWARNINGS": PYTHONWARNINGS,
    }
    for key, value in defaults.items():
        env.setdefault(key, value)
    if not env.get("PATH", "").startswith(bin_dir):
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def add_demo_day(home: Path, day: date) -> Path:
    """Write one more day of the demo's sample input under ``home`` (refused if it is there)."""
    from statecore.errors import ConfigError

    folder = home / "data" / "clickstream" / f"date={day.isoformat()}"
    if folder.exists():
        raise ConfigError(f"sample input for {day} is already there ({folder}); pick another --day")
    [written] = generate_clickstream(folder.parent, start=day, days=1, seed=day.toordinal())
    return written


def run_demo(
    *,
    project: Path,
    home: Path,
    days: int = 3,
    parallelism: int = 2,
    backend: str = "heap",
    start: date = date(2026, 1, 1),
) -> list[date]:
    """Generate the clickstream, then run ``stateful_pipeline`` once per day with ``dags test``."""
    import json
    import subprocess

    from statecore.errors import CheckpointCommitError

    data = home / "data" / "clickstream"
    if not data.exists():
        generate_clickstream(data, start=start, days=days)
    env = airflow_environment(project, home)
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    def airflow(args: list[str], log_name: str) -> None:
        log_file = logs / log_name
        with log_file.open("w") as out:
            done = subprocess.run(
                ["airflow", *args], env=env, stdout=out, stderr=subprocess.STDOUT, check=False
            )
        if done.returncode != 0:
            tail = "".join(log_file.read_text().splitlines(keepends=True)[-40:])
            raise CheckpointCommitError(
                f"`airflow {' '.join(args)}` failed (exit {done.returncode}); "
                f"log {log_file}:\n{tail}"
            )

    print("airflow: migrating the metadata database (SQLite) ...", flush=True)
    airflow(["db", "migrate"], "airflow-db-migrate.log")
    ran = []
    for d in range(days):
        day = start + timedelta(days=d)
        # The day is the run's `date` param, not its logical date: a run dated in the past
        # would start "then" and show a duration of months in the UI.
        conf = json.dumps({"date": day.isoformat(), "parallelism": parallelism, "backend": backend})
        print(f"airflow: dags test stateful_pipeline -c {conf} ...", flush=True)
        airflow(["dags", "test", "stateful_pipeline", "-c", conf], f"stateful_pipeline-{day}.log")
        ran.append(day)
    return ran


def next_steps(latest_checkpoint: int) -> str:
    """What to try after the demo: the commands of the README's tour on the demo's job (its
    latest checkpoint ``latest_checkpoint``), then ``make up`` for the Airflow UI."""
    return (
        'Next (the README\'s "A ten-minute tour" goes on from here):\n'
        '  .venv/bin/statecore sql "SELECT key, value FROM clickstream.total_amount'
        ' ORDER BY value DESC LIMIT 3"\n'
        f"  .venv/bin/statecore checkpoints show clickstream {latest_checkpoint} --key-groups\n"
        "  .venv/bin/statecore state get clickstream total_amount user-42\n"
        "  make up    # Airflow's UI on http://localhost:8080: trigger stateful_pipeline, read its"
        " task logs"
    )
