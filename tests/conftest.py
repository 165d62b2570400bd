"""Shared fixtures: one local Spark session and one Kafka broker per test run, and an isolated
statecore home.

``--group`` splits a run in five that ``make test`` runs side by side (``tests/groups.py``):
``weeks`` and ``fortnight``, the long Airflow scenarios (the month; the fortnight); ``jvm``, the
tests whose fixtures reach the in-process Spark session or another JVM or server the run starts
once; ``airflow``, the other Airflow tests; and ``rest``, all the others (Spark in subprocesses of
their own, the CLI, the backends, Helm...). Only the jvm group owns the Spark session, the
cluster, the S3 server and the Kafka broker, so each is still started once per run (the weeks
group starts a broker of its own for the month).
Without ``--group`` a run takes every test.

The Spark drivers of the run (every ``spark-submit``, the drivers of PySpark sessions included,
through ``SPARK_SUBMIT_OPTS``) start the way short-lived JVMs on a small machine start best:
compiled by C1 only, one garbage-collector thread, and Spark's classes mapped from the
class-data archive ``scripts/spark_cds.py`` writes before the groups start. The machine's two
cores are busy throughout ``make test``, and most of that is Spark drivers: the fault suite's
job over three checkpoints took 48.6 CPU-seconds with the JVM's defaults, 36.6 with C1 and the
serial collector, 26.5 with the archive too (docs/contributing.md).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statecore.config import StatecoreConfig
from tests.groups import GROUPS, group_of, jvm_group_only

REPO = Path(__file__).resolve().parents[1]
CDS_ARCHIVE = Path(os.environ.get("STATECORE_SPARK_CDS") or REPO / "build" / "spark-cds.jsa")
"""The class-data archive of Spark's driver (``scripts/spark_cds.py``)."""
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The JIT and collector of the run's Spark drivers (see the module)."""
_CDS_OPTIONS = (
    f"-XX:SharedArchiveFile={CDS_ARCHIVE} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--group",
        choices=GROUPS,
        default=None,
        help="only the tests of one group (tests/groups.py): weeks (marked weeks: the month), "
        "fortnight (marked weeks and fortnight), jvm (their fixtures reach spark, "
        "cluster, s3_server or kafka_broker), airflow (the other tests marked airflow) or rest "
        "(all the others); make test runs the five at once",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    group = config.getoption("--group")
    if group is None:
        return
    kept = [item for item in items if group_of(item) == group]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if group_of(item) != group])
        items[:] = kept


def _driver_options() -> None:
    """The run's driver options in ``SPARK_SUBMIT_OPTS``, the archive's once it is there (a JVM
    the archive does not fit starts without it, ``-Xshare:auto``)."""
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if DRIVER_JAVA_OPTIONS not in opts:
        opts = f"{opts} {DRIVER_JAVA_OPTIONS}"
    if _CDS_OPTIONS not in opts and CDS_ARCHIVE.is_file():
        opts = f"{opts} {_CDS_OPTIONS}"
    os.environ["SPARK_SUBMIT_OPTS"] = opts.strip()


_driver_options()

# Every process of the run reads and writes compiled bytecode in __pycache__, even where the
# environment says not to (PYTHONDONTWRITEBYTECODE=1): else each subprocess, Spark Python worker
# and Airflow task compiles Airflow, PySpark and pandas from source again (the Makefile unexports
# it too).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_runtest_setup(item: pytest.Item) -> None:
    _driver_options()  # the archive, when written after this process started


@pytest.fixture
def statecore_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StatecoreConfig:
    """A fresh STATECORE_HOME (SQLite catalog, local warehouse) for one test."""
    home = tmp_path / "statecore"
    monkeypatch.setenv("STATECORE_HOME", str(home))
    monkeypatch.delenv("STATECORE_CATALOG_URL", raising=False)
    monkeypatch.delenv("STATECORE_WAREHOUSE", raising=False)
    return StatecoreConfig.resolve(env={"STATECORE_HOME": str(home)})


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The one Spark session of the test run (``local[2]``, statecore's session builder: Delta
    Lake when ``make jars`` has run, loopback), its workers on this interpreter. Delta rebuilds
    a table's snapshot (the state at a version) in 2 partitions instead of its default 50, as
    shuffles take 2: the tests' tables are small, and a 2-core machine ran 50 tasks per
    ``VERSION AS OF`` read. Delta's ``VACUUM`` lists and compares a table's files in
    ``spark.sql.sources.parallelPartitionDiscovery.parallelism`` partitions, 10,000 by
    default: each VACUUM of a test's small table ran 10,000 tasks (about 5 minutes here), in
    2 it runs 2."""
    jvm_group_only(request)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
    )
    from statecore.spark.session import build_session

    session = build_session(
        master="local[2]",
        app_name="statecore-tests",
        config={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
            "spark.driver.memory": "2g",
        },
        log_level="ERROR",
    )
    yield session
    session.stop()


_topics = itertools.count()


@pytest.fixture(scope="session")
def kafka_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """The one Kafka broker of the test run (:mod:`scripts.kafka_broker`, the broker ``make
    kafka`` starts: KRaft, on 127.0.0.1), stopped at the session's end."""
    jvm_group_only(request)
    from scripts import kafka_broker as kafka_broker_module

    broker = kafka_broker_module.start(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def new_topic(kafka_broker: Any) -> Callable[[int], str]:
    """``new_topic(partitions)``: a topic of its own for the test, created on the broker."""
    from kafka.admin import NewTopic

    def create(partitions: int = 3) -> str:
        name = f"t{next(_topics)}"
        admin = kafka_broker.admin()
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            admin.close()
        return name

    return create
