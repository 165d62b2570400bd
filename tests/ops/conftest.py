"""A job with every kind of table, written straight from Arrow rows (no Spark)."""

from __future__ import annotations

import pytest

from statecore.catalog import Catalog
from statecore.checkpoint.points import RestorePoint, checkpoint_point
from statecore.config import StatecoreConfig
from tests.ops.statebuilder import (
    Table,
    list_rows,
    operator_rows,
    timer_rows,
    value_rows,
    write_checkpoint,
)

JOB = "clicks"
USERS = {f"user-{i}": float(i) for i in range(40)}
TTL_MS = 1_000


def tables(values: dict[str, float], stamp: int) -> dict[str, Table]:
    """A value state and a list state with TTL, timers, and an operator list state."""
    return {
        "total": Table(
            value_rows(values, {k: stamp + i for i, k in enumerate(values)}), ttl_ms=TTL_MS
        ),
        "seen": Table(
            list_rows(
                {k: ["view", "click"] for k in values},
                {k: [stamp - 5_000, stamp + i] for i, k in enumerate(values)},
            ),
            kind="list",
            ttl_ms=TTL_MS,
        ),
        "plain": Table(value_rows(values)),
        "timers": Table(
            timer_rows({k: 60_000 for k in list(values)[:10]}), kind="timers", table_kind="timers"
        ),
        "offsets": Table(
            operator_rows({0: ["a"], 1: ["b", "c"]}), kind="operator_list", table_kind="operator"
        ),
    }


@pytest.fixture
def job(statecore_home: StatecoreConfig) -> StatecoreConfig:
    """Job ``clicks`` with checkpoints 1 and 2 (2: one user changed, one added)."""
    write_checkpoint(statecore_home, JOB, 1, tables(USERS, 10_000))
    later = dict(USERS, **{"user-0": 100.0, "user-new": 5.0})
    write_checkpoint(statecore_home, JOB, 2, tables(later, 20_000))
    return statecore_home


def latest(config: StatecoreConfig, job: str = JOB) -> RestorePoint:
    with Catalog.connect(config.catalog_url) as catalog:
        return checkpoint_point(catalog, job)
