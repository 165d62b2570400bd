"""Window programs through real Spark jobs (``keyed_process`` with statecore's window
operator) against the model of Flink's ``WindowOperator`` (:mod:`.windows`), on both backends,
with a rescale and a kill (:mod:`.spark_runs`).

One job per window function (``process``, incremental ``reduce`` and ``aggregate``), each a
sample drawn once by a derandomized Hypothesis: a program per assigner family (tumbling,
sliding, session, global), each with its trigger (event time, count, purging), allowed
lateness and elements (key, value, event time, run), the watermark each run ends at, and the
record where the kill strikes. :class:`Windows` runs every program's operator in one keyed
function (its keys are ``"<program>:<key>"``). Each run's fired windows must equal the model's,
and the late side output table, after the last run, the model's late elements.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from pyspark.sql import types as T

from statecore.config import StatecoreConfig
from statecore.runtime import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from statecore.spark import SideOutput, keyed_process

from .spark_runs import OUT_OF_ORDERNESS, Run, carrier_time, draw, run_job
from .two_inputs import CARRIER, KillPoint, program_of
from .windows import ASSIGNERS, LATE, MAX, WindowModel, WindowSpec, operator, window_specs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

INPUT = "program int, key string, step long, ts long, value long"
OUTPUT = T.StructType(
    [
        T.StructField("program", T.IntegerType()),
        T.StructField("key", T.StringType()),
        T.StructField("start", T.LongType()),
        T.StructField("end", T.LongType()),
        T.StructField("result", T.StringType()),
    ]
)
LATE_SCHEMA = T.StructType(
    [
        T.StructField("program", T.IntegerType()),
        T.StructField("step", T.LongType()),
        T.StructField("value", T.LongType()),
    ]
)
SCHEDULES = {  # per window function: its runs, and the run killed
    "process": ((Run("heap", 1, 2), Run("rocksdb", 2), Run("heap", 3, 8)), 1),
    "reduce": ((Run("rocksdb", 3, 4), Run("heap", 1), Run("rocksdb", 2, 8)), 2),
    "aggregate": ((Run("heap", 2, 2), Run("rocksdb", 1, 4), Run("heap", 2)), 0),
}
RUNS = 3
POOL = 12

Element = tuple[str, int, int, int]
"""A program's element: key, value, event time, run."""


class WindowJob:
    """A sample: a program (spec and elements) per assigner, each run's watermark, the kill."""

    def __init__(
        self,
        programs: list[tuple[WindowSpec, list[Element]]],
        watermarks: tuple[int, int],
        kill: int,
    ) -> None:
        self.programs, self.watermarks, self.kill = programs, watermarks, kill

    def rows(self, run: int) -> list[tuple[Any, ...]]:
        """Run ``run``'s input rows, the watermark's record included (not in the last run)."""
        rows = [
            (p, f"{p}:{key}", step, ts, value)
            for p, (_, elements) in enumerate(self.programs)
            for step, (key, value, ts, at) in enumerate(elements)
            if at == run
        ]
        if run < RUNS - 1:
            rows.append((CARRIER, "~", -1, carrier_time(self.watermarks[run]), 0))
        return rows

    def kill_point(self, run: int, marker: Path) -> KillPoint:
        rows = [r for r in self.rows(run) if r[0] != CARRIER] or [(0, "", -2)]
        program, _, step = rows[self.kill % len(rows)][:3]
        return KillPoint(program, step, str(marker))

    def __repr__(self) -> str:
        lines = [f"watermarks {self.watermarks}, kill {self.kill}"]
        lines += [
            f"  program {p}: {spec}: {elements}" for p, (spec, elements) in enumerate(self.programs)
        ]
        return "\n".join(lines)


def on_model(job: WindowJob) -> tuple[list[list[tuple[Any, ...]]], list[tuple[int, int, int]]]:
    """Each run's fired windows, and the late elements, as the model has them."""
    models = [WindowModel(spec) for spec, _ in job.programs]
    outputs: list[list[tuple[Any, ...]]] = []
    for run in range(RUNS):
        fired: list[tuple[Any, ...]] = []
        rows = sorted((r for r in job.rows(run) if r[0] != CARRIER), key=lambda r: (r[3], r[2]))
        for p, key, step, ts, value in rows:  # within a key, event time then step
            fired += [(p, *f) for f in models[p].element(key, (p, step, value), ts)]
        watermark = job.watermarks[run] if run < RUNS - 1 else MAX
        for p, model in enumerate(models):
            fired += [(p, *f) for f in model.advance(watermark)]
        outputs.append(sorted(fired))
    return outputs, sorted(e for model in models for e in model.late)


@st.composite
def window_jobs(draw_: st.DrawFn, function: str) -> WindowJob:
    elements = st.lists(
        st.tuples(
            st.sampled_from("ab"),
            st.integers(1, 9),
            st.integers(0, 60),
            st.integers(0, RUNS - 1),
        ),
        min_size=3,
        max_size=12,
    )
    programs = []
    for assigner in ASSIGNERS:
        spec = draw_(window_specs(function, (assigner,)))
        programs.append((spec, draw_(elements)))
    first = draw_(st.integers(5, 40))
    return WindowJob(
        programs, (first, draw_(st.integers(first + 1, 70))), draw_(st.integers(0, 99))
    )


def with_function(job: WindowJob, function: str) -> WindowJob:
    programs = [(dataclasses.replace(spec, function=function), e) for spec, e in job.programs]
    return WindowJob(programs, job.watermarks, job.kill)


def interest(job: WindowJob) -> tuple[int, int, int]:
    """How much a job shows: how many triggers its programs use, its late elements, then the
    windows it fires."""
    outputs, late = on_model(job)
    return len({spec.trigger for spec, _ in job.programs}), len(late), sum(map(len, outputs))


@functools.cache
def sample() -> dict[str, WindowJob]:
    """Per window function, the most interesting job of those drawn not yet chosen."""
    left = draw(window_jobs("process"), POOL)
    chosen = {}
    for function in SCHEDULES:
        best = max(left, key=interest)
        left.remove(best)
        chosen[function] = with_function(best, function)
    return chosen


class Windows(KeyedProcessFunction):
    """Every program's window operator in one function: a record goes to its program's, a
    timer to the operator of its key's program."""

    def __init__(self, specs: list[WindowSpec], kill: KillPoint) -> None:
        self.operators = [operator(spec) for spec in specs]
        self.kill = kill

    def open(self, runtime_context: RuntimeContext) -> None:
        for window_operator in self.operators:
            window_operator.open(runtime_context)

    def process_element(self, value: Any, ctx: Context) -> list[tuple[Any, ...]]:
        if value.program == CARRIER:
            return []
        self.kill.reached(value.program, value.step)
        element = (value.program, value.step, value.value)
        fired = self.operators[value.program].process_element(element, ctx) or ()
        return [(value.program, *f) for f in fired]

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> list[tuple[Any, ...]]:
        program = program_of(ctx.current_key)
        return [(program, *f) for f in self.operators[program].on_timer(timestamp, ctx) or ()]

    def close(self) -> None:
        for window_operator in self.operators:
            window_operator.close()


@pytest.mark.parametrize("function", SCHEDULES)
def test_reference_model_spark_window_operator(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Path, function: str
) -> None:
    schedule, kill_run = SCHEDULES[function]
    job = sample()[function]
    expected, late = on_model(job)
    marker = tmp_path / "killed"
    windows = Windows([spec for spec, _ in job.programs], job.kill_point(kill_run, marker))
    late_table = str(tmp_path / "late")

    def submit(n: int, run: Run, max_parallelism: int) -> Any:
        return keyed_process(
            spark.createDataFrame(job.rows(n), INPUT),
            key="key",
            function=windows,
            output_schema=OUTPUT,
            job="windows",
            checkpoint_id=n + 1,
            parallelism=run.parallelism,
            max_parallelism=run.max_parallelism if n == 0 else None,
            order_by=["step"],
            backend=run.backend,
            event_time="ts",
            allowed_lateness=OUT_OF_ORDERNESS,
            end_of_input=n == RUNS - 1,
            side_outputs={LATE: SideOutput(table=late_table, schema=LATE_SCHEMA)},
            input_fingerprint=f"run {n + 1}",
        )

    outputs = run_job(statecore_home, "windows", schedule, submit, kill_run=kill_run, marker=marker)
    for n, (got, want) in enumerate(zip(outputs, expected, strict=True)):
        assert sorted(got) == want, f"run {n + 1} of\n{job!r}"
    written = Path(late_table, "_delta_log").exists()
    rows = spark.read.format("delta").load(late_table).collect() if written else []
    assert sorted(tuple(r) for r in rows) == late, repr(job)
