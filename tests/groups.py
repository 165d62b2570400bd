"""The five groups ``make test`` runs side by side (``pytest --group``, see
``tests/conftest.py``): ``weeks`` and ``fortnight``, the tests marked ``weeks`` (what users run
for weeks, tested over weeks of logical days on ``make up``'s own Airflow): the month on one home
in ``weeks``, the fortnight (also marked ``fortnight``) in a group of its own, each 20 to 35
minutes mostly waiting on Airflow's scheduler and their Spark jobs, so the two wait side by side
instead of one after the other; ``jvm``, the tests whose fixtures reach what a test run starts
once (the local Spark session, the standalone cluster, the S3 server, the Kafka broker);
``airflow``, the other tests marked
``airflow`` (each runs DAGs in an Airflow of its own, mostly waiting on its Spark jobs); and
``rest``, all the others. Only the jvm group has a Spark session of the run: the others start
Spark, where they do, in the subprocesses they test. The weeks group starts a Kafka broker of
its own for the month (the jvm group's is busy with its own tests)."""

from __future__ import annotations

import pytest

__all__ = ["GROUPS", "JVM_FIXTURES", "group_of", "jvm_group_only"]

GROUPS = ("weeks", "fortnight", "jvm", "airflow", "rest")
JVM_FIXTURES = frozenset({"spark", "cluster", "s3_server", "kafka_broker"})
"""The session fixtures owning what a test run starts once: the local Spark session
(``spark``), the standalone cluster (``tests/cluster``), the S3 server (``tests/object_store``),
the Kafka broker (``tests/conftest.py``, ``scripts/kafka_broker.py``)."""


OWN_BROKER_GROUPS = frozenset({"weeks"})
"""Groups beside ``jvm`` that may start a Kafka broker of their own (``kafka_broker``)."""


def group_of(item: pytest.Item) -> str:
    """``fortnight`` for a test marked ``weeks`` and ``fortnight``, ``weeks`` for another test
    marked ``weeks``, else ``jvm`` when the item's fixture closure
    holds one of :data:`JVM_FIXTURES`, else ``airflow`` for a test marked ``airflow``, else
    ``rest``."""
    if item.get_closest_marker("weeks"):
        return "fortnight" if item.get_closest_marker("fortnight") else "weeks"
    if JVM_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "jvm"
    return "airflow" if item.get_closest_marker("airflow") else "rest"


def jvm_group_only(request: pytest.FixtureRequest) -> None:
    """Fail a run of another group that reached a fixture of :data:`JVM_FIXTURES` anyway (by
    ``request.getfixturevalue``): the jvm group running beside it has its own."""
    group = request.config.getoption("--group", None)
    if request.fixturename == "kafka_broker" and group in OWN_BROKER_GROUPS:
        return
    if group not in (None, "jvm"):
        pytest.fail(
            f"{request.fixturename} belongs to the jvm group (pytest --group=jvm), not to "
            f"--group={group}: take it as an argument of the test or fixture, not by "
            "request.getfixturevalue"
        )
