"""The two groups ``make test`` runs side by side (``pytest --group``, see
``tests/conftest.py``): ``jvm``, the tests whose fixtures reach what a test run starts once
(the local Spark session, the standalone cluster, the S3 server), and ``rest``, all the
others."""

from __future__ import annotations

import pytest

__all__ = ["GROUPS", "JVM_FIXTURES", "group_of", "jvm_group_only"]

GROUPS = ("jvm", "rest")
JVM_FIXTURES = frozenset({"spark", "cluster", "s3_server", "kafka_broker"})
"""The session fixtures owning what a test run starts once: the local Spark session
(``spark``), the standalone cluster (``tests/cluster``), the S3 server (``tests/object_store``),
the Kafka broker (``tests/kafka``)."""


def group_of(item: pytest.Item) -> str:
    """``jvm`` when the item's fixture closure holds one of :data:`JVM_FIXTURES`, else ``rest``."""
    return "jvm" if JVM_FIXTURES & set(getattr(item, "fixturenames", ())) else "rest"


def jvm_group_only(request: pytest.FixtureRequest) -> None:
    """Fail a ``--group=rest`` run that reached a fixture of :data:`JVM_FIXTURES` anyway (by
    ``request.getfixturevalue``): the jvm group running beside it has its own."""
    if request.config.getoption("--group", None) == "rest":
        pytest.fail(
            f"{request.fixturename} belongs to the jvm group (pytest --group=jvm): take it as "
            "an argument of the test or fixture, not by request.getfixturevalue"
        )
