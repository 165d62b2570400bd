"""PySpark's worker contract for a stream's function that runs in a warm state host
(:mod:`statecore.spark.host_context`), on the shared ``local[2]`` session: accumulators, a
captured broadcast variable, ``TaskContext.get()`` and the function's exceptions behave as in a
plain task."""

from __future__ import annotations

import functools
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark import TaskContext

from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.keygroups import assign_to_key_group
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.spark import keyed_stream
from statecore.spark.executor import run_task
from statecore.spark.host import hosted

from .test_stream import completed, delta_rows, spec, totals
from .test_warm_host import OUTPUT, USERS, write_batches
from .test_warm_state import Totals, events
from .test_warm_state import run as run_task_here

hosted_task = functools.partial(hosted, fallback=run_task)
"""A task in its warm state host, run in the worker when the host is not to be trusted."""

pytestmark = pytest.mark.spark


class Counting(KeyedProcessFunction):
    """The running total per user; counts records in an accumulator, adds a broadcast bonus to
    what it emits, or emits its task's partition id (by ``mode``)."""

    def __init__(self, mode: str, shared: Any = None) -> None:
        self.mode, self.shared = mode, shared

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        self.total.update(self.total.value() + value.amount)
        if self.mode == "accumulator":
            self.shared.add(1)
        if self.mode == "broadcast":
            yield ctx.current_key, self.total.value() + self.shared.value["bonus"]
        elif self.mode == "task_context":
            yield ctx.current_key, TaskContext.get().partitionId()  # type: ignore[union-attr]
        else:
            yield ctx.current_key, self.total.value()


def run(spark: Any, s: dict[str, Any], function: KeyedProcessFunction) -> None:
    """Every file of the input, one micro-batch each, at parallelism 2, warm hosts on."""
    stream = spark.readStream.schema("user string, ts long, amount long")
    query = keyed_stream(
        stream.option("maxFilesPerTrigger", 1).json(s["input"]),
        key="user",
        function=function,
        output_schema=OUTPUT,
        job=s["job"],
        checkpoint_location=s["checkpoint_location"],
        output_table=s["output_table"],
        parallelism=2,
        trigger={"availableNow": True},
    )
    query.awaitTermination()


def hosted_runs(config: StatecoreConfig, job: str) -> list[int]:
    """The warm tasks of each micro-batch after the first (all: the hosts ran them)."""
    return [c.metrics["warm_tasks"] for c in completed(config, job)[1:]]


def test_worker_contract_accumulators_the_function_adds_to_reach_the_driver(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    s = spec(tmp_path, job="contract_acc")
    write_batches(Path(s["input"]), 0, 3)
    records = spark.sparkContext.accumulator(0)
    run(spark, s, Counting("accumulator", records))
    assert records.value == 3 * USERS
    assert hosted_runs(statecore_home, "contract_acc") == [2, 2]


def test_worker_contract_a_captured_broadcast_variable_is_read_in_the_host(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    s = spec(tmp_path, job="contract_bc")
    write_batches(Path(s["input"]), 0, 3)
    bonus = spark.sparkContext.broadcast({"bonus": 1000})
    try:
        run(spark, s, Counting("broadcast", bonus))
    finally:
        bonus.unpersist()
    out = delta_rows(Path(s["output_table"]))
    assert sorted(set(out)) == sorted(
        {(f"u{k}", 1000 + t) for k in range(USERS) for t in (1, 3, 6)}
    )
    assert hosted_runs(statecore_home, "contract_bc") == [2, 2]
    assert totals(statecore_home, "contract_bc") == {f"u{k}": 6 for k in range(USERS)}


def test_worker_contract_task_context_get_is_the_task_s_context(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    s = spec(tmp_path, job="contract_tc")
    write_batches(Path(s["input"]), 0, 2)
    run(spark, s, Counting("task_context"))
    out = delta_rows(Path(s["output_table"]))
    subtask = {f"u{k}": assign_to_key_group(f"u{k}", 128) * 2 // 128 for k in range(USERS)}
    assert len(out) == 2 * USERS
    assert all(partition == subtask[user] for user, partition in out), out
    assert hosted_runs(statecore_home, "contract_tc") == [2]


class Failing(Totals):
    """:class:`Totals` that fails on key ``k3``, from a ``KeyError`` (its cause)."""

    def process_element(self, value: Any, ctx: Any) -> Iterator[tuple[Any, ...]]:
        if ctx.current_key == "k3":
            try:
                {}["missing"]
            except KeyError as exc:
                raise ValueError(f"no rate for {ctx.current_key}") from exc
        yield from super().process_element(value, ctx)


def test_worker_contract_the_function_s_error_keeps_its_type_message_traceback_and_cause(
    statecore_home: StatecoreConfig, host_dir: Path
) -> None:
    """The task's error, raised in its host, is raised in the worker as the same type with the
    same message, its cause chained, and the host's traceback (the function's line) in a note:
    what Spark reports of the task."""
    run_task_here(
        statecore_home, events(1), job="contract_err", checkpoint_id=1, runner=hosted_task
    )
    with pytest.raises(ValueError) as failed:
        run_task_here(
            statecore_home,
            events(2),
            job="contract_err",
            checkpoint_id=2,
            runner=hosted_task,
            function=Failing(),
        )
    assert type(failed.value) is ValueError and str(failed.value) == "no rate for k3"
    cause = failed.value.__cause__
    assert type(cause) is KeyError and str(cause) == "'missing'"
    shown = "".join(traceback.format_exception(failed.value))
    assert "In the task's warm state host" in shown
    assert 'raise ValueError(f"no rate for {ctx.current_key}") from exc' in shown
    assert "The above exception was the direct cause" in shown
