"""Two-input and broadcast programs through real Spark jobs (``keyed_co_process``,
``keyed_broadcast_process``) against their models (:mod:`.two_inputs`), on both backends, with a
rescale and a kill (:mod:`.spark_runs`).

Each test runs a sample drawn once by a derandomized Hypothesis: a few programs (keys
``"<program>:<key>"``), each element with its run, the watermark each run ends at (two inputs:
their timers fire by it) and the record where the kill strikes. Each run's output must equal
the model's. The broadcast program's elements are cut into the runs in order (a stream of
rules and events); the two-input program's go to any run, so that some are late.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from pyspark.sql import types as T

from statecore.backends.timers import MAX_WATERMARK
from statecore.config import StatecoreConfig
from statecore.spark import keyed_co_process
from statecore.spark.co_process import keyed_broadcast_process

from .spark_runs import OUT_OF_ORDERNESS, Rows, Run, carrier_time, draw, run_job
from .two_inputs import (
    CARRIER,
    BroadcastModel,
    Enrich,
    KillPoint,
    Record,
    Rules,
    TwoInputModel,
    broadcast_records,
    rules_descriptor,
    two_input_records,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

INPUT = "program int, key string, step long, ts long, op string, value long, delay long"
OUTPUT = T.StructType(
    [
        T.StructField("program", T.IntegerType()),
        T.StructField("key", T.StringType()),
        T.StructField("step", T.LongType()),
        T.StructField("result", T.StringType()),
    ]
)
RUNS = 3
PROGRAMS = 3
POOL = 10

Element = tuple[int, Record, int]
"""An element of a job: its input (1 or 2), the record, its run."""


@dataclass(frozen=True)
class Job:
    elements: list[Element]
    watermarks: tuple[int, int]
    kill: int

    def rows(self, run: int, side: int, *, watermark: bool = True) -> list[Record]:
        """Run ``run``'s records of input ``side``; the first input's with the record of the
        run's ``watermark`` (not in the last run)."""
        rows = [r for s, r, at in self.elements if at == run and s == side]
        if watermark and side == 1 and run < RUNS - 1:
            rows.append(Record(CARRIER, "~", -1, carrier_time(self.watermarks[run]), "", 0, 0))
        return rows

    def kill_point(self, run: int, marker: Path) -> KillPoint:
        records = [r for _, r, at in self.elements if at == run] or [Record(0, "", -2, 0, "", 0, 0)]
        record = records[self.kill % len(records)]
        return KillPoint(record.program, record.step, str(marker))

    def __repr__(self) -> str:
        lines = [f"watermarks {self.watermarks}, kill {self.kill}"]
        lines += [f"  run {at} input {side}: {record}" for side, record, at in self.elements]
        return "\n".join(lines)


@st.composite
def jobs(draw_: st.DrawFn, broadcast: bool) -> Job:
    elements: list[Element] = []
    for program in range(PROGRAMS):
        records = draw_((broadcast_records if broadcast else two_input_records)(program))
        if broadcast:  # in order, cut into runs of (nearly) equal length
            runs = [n * RUNS // len(records) for n in range(len(records))]
        else:
            runs = draw_(
                st.lists(st.integers(0, RUNS - 1), min_size=len(records), max_size=len(records))
            )
        elements += [(side, record, at) for (side, record), at in zip(records, runs, strict=True)]
    first = draw_(st.integers(5, 30))
    return Job(elements, (first, draw_(st.integers(first + 1, 50))), draw_(st.integers(0, 99)))


def in_order(job: Job, run: int) -> list[tuple[int, Record]]:
    """Run ``run``'s elements in the order of a key's records on Spark: event time, step."""
    elements = [(side, r) for side, r, at in job.elements if at == run]
    return sorted(elements, key=lambda e: (e[1].ts, e[1].step))


def two_input_on_model(job: Job) -> list[Rows]:
    model = TwoInputModel()
    outputs = []
    for run in range(RUNS):
        out = [row for side, record in in_order(job, run) for row in model.element(side, record)]
        out += model.advance(job.watermarks[run] if run < RUNS - 1 else MAX_WATERMARK)
        outputs.append(sorted(out))
    return outputs


def broadcast_on_model(job: Job, schedule: tuple[Run, ...]) -> list[Rows]:
    first = schedule[0]
    assert first.max_parallelism is not None
    model = BroadcastModel(first.parallelism, first.max_parallelism)
    outputs = []
    for run, at in enumerate(schedule):
        if run > 0:
            model.restore(at.parallelism, at.max_parallelism or model.max_parallelism)
        out = [row for side, record in in_order(job, run) for row in model.element(side, record)]
        outputs.append(sorted(out))
    return outputs


TWO_INPUT_SCHEDULE = (Run("rocksdb", 2, 2), Run("heap", 1), Run("rocksdb", 3, 8))
BROADCAST_SCHEDULE = (Run("heap", 1, 4), Run("rocksdb", 3), Run("heap", 2, 8))


@functools.cache
def two_input_sample() -> Job:
    """The drawn job with the most outputs of the timers, then of all."""
    return max(
        draw(jobs(False), POOL),
        key=lambda job: (
            sum("'timer'" in r[3] for rows in two_input_on_model(job) for r in rows),
            sum(map(len, two_input_on_model(job))),
        ),
    )


@functools.cache
def broadcast_sample() -> Job:
    """The drawn job whose events found most rules, then whose visits found most keys."""
    return max(
        draw(jobs(True), POOL),
        key=lambda job: (
            sum(
                "'event'" in r[3] and not r[3].endswith("None)")
                for rows in broadcast_on_model(job, BROADCAST_SCHEDULE)
                for r in rows
            ),
            sum(
                "'visit'" in r[3]
                for rows in broadcast_on_model(job, BROADCAST_SCHEDULE)
                for r in rows
            ),
        ),
    )


def test_reference_model_spark_two_input(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    job, kill_run = two_input_sample(), 1
    marker = tmp_path / "killed"
    function = Enrich(job.kill_point(kill_run, marker))

    def submit(n: int, run: Run, max_parallelism: int) -> Any:
        return keyed_co_process(
            spark.createDataFrame(job.rows(n, 1), INPUT),
            spark.createDataFrame(job.rows(n, 2), INPUT),
            key="key",
            function=function,
            output_schema=OUTPUT,
            job="two_input",
            checkpoint_id=n + 1,
            event_time="ts",
            order_by=["step"],
            parallelism=run.parallelism,
            max_parallelism=run.max_parallelism if n == 0 else None,
            backend=run.backend,
            allowed_lateness=OUT_OF_ORDERNESS,
            end_of_input=n == RUNS - 1,
            input_fingerprint=f"run {n + 1}",
        )

    outputs = run_job(
        statecore_home, "two_input", TWO_INPUT_SCHEDULE, submit, kill_run=kill_run, marker=marker
    )
    for n, (got, want) in enumerate(zip(outputs, two_input_on_model(job), strict=True)):
        assert sorted(got) == want, f"run {n + 1} of\n{job!r}"


def test_reference_model_spark_broadcast_pattern(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    job, kill_run = broadcast_sample(), 2
    marker = tmp_path / "killed"
    function = Rules(job.kill_point(kill_run, marker))

    def submit(n: int, run: Run, max_parallelism: int) -> Any:
        return keyed_broadcast_process(
            spark.createDataFrame(job.rows(n, 1, watermark=False), INPUT),
            spark.createDataFrame(job.rows(n, 2), INPUT),
            key="key",
            function=function,
            states=[rules_descriptor(p) for p in range(PROGRAMS)],
            output_schema=OUTPUT,
            job="broadcast",
            checkpoint_id=n + 1,
            parallelism=run.parallelism,
            max_parallelism=max_parallelism,
            event_time="ts",
            order_by=["step"],
            backend=run.backend,
            input_fingerprint=f"run {n + 1}",
        )

    outputs = run_job(
        statecore_home, "broadcast", BROADCAST_SCHEDULE, submit, kill_run=kill_run, marker=marker
    )
    expected = broadcast_on_model(job, BROADCAST_SCHEDULE)
    for n, (got, want) in enumerate(zip(outputs, expected, strict=True)):
        assert sorted(got) == want, f"run {n + 1} of\n{job!r}"
