"""A small job with every kind of keyed state, checkpointed in-process (no Spark): what the
statecore page in Airflow's UI is tested over (``tests/airflow/test_ui_page.py``) and what its
rows are tested on (``tests/ops/test_overview.py``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from statecore.catalog import Catalog, CheckpointRecord
from statecore.config import StatecoreConfig
from statecore.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statecore.ops.savepoint import take_savepoint
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.runtime.latency import LatencyTracking
from statecore.ttl import StateTtlConfig
from tests.inprocess import run_checkpoint

JOB = "shop"
USERS = 300


class Shop(KeyedProcessFunction):
    """Per user: the last item (with a time to live, one day by default), every item, counts
    per item, a total."""

    def __init__(self, ttl: timedelta = timedelta(days=1)) -> None:
        self.ttl = ttl

    def open(self, ctx: RuntimeContext) -> None:
        ttl = StateTtlConfig(ttl=self.ttl)
        self.last = ctx.get_state(ValueStateDescriptor("last", str, ttl=ttl))
        self.items = ctx.get_list_state(ListStateDescriptor("items", str))
        self.counts = ctx.get_map_state(MapStateDescriptor("counts", str, int))
        self.total = ctx.get_reducing_state(
            ReducingStateDescriptor("total", lambda a, b: a + b, int)
        )

    def process_element(self, value: Any, ctx: Context) -> list[Any]:
        self.last.update(value)
        self.items.add(value)
        self.counts.put(value, (self.counts.get(value) or 0) + 1)
        self.total.add(1)
        return []


def day_records(day: int) -> list[tuple[str, str]]:
    """The purchases of day ``day``: every user buys one item; user u1 buys a pen too."""
    return [(f"u{i}", f"item{(i + day) % 3}") for i in range(USERS)] + [("u1", "pen")]


def run_day(config: StatecoreConfig, day: int) -> CheckpointRecord:
    """Checkpoint ``202601DD`` (the ``date`` convention of the pipeline DAG) of day ``day``,
    with latency tracking on (every record sampled) and the restore timings recorded."""
    _, record = run_checkpoint(
        config,
        Shop(),
        day_records(day),
        job=JOB,
        checkpoint_id=20260100 + day,
        latency=LatencyTracking(sample_interval=1, history_size=64),
    )
    return record


def build_shop(config: StatecoreConfig) -> None:
    """Day 1's checkpoint and a savepoint ``before-deploy`` of it."""
    run_day(config, 1)
    with Catalog.connect(config.catalog_url) as catalog:
        take_savepoint(config, catalog, JOB, name="before-deploy")
