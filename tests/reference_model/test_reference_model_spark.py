"""A sample of reference-model programs through real Spark jobs (``keyed_process``).

Each program (the step language of :mod:`.keyed`) becomes input rows, one per state call: the
program's number, the key, the step index, the namespace of the state, the model's clock at
that step and the call itself. A :class:`ProgramFunction` applies each row's call to the
program's own copy of the states of :func:`.keyed.descriptors` (named ``<state>_<program>``, so
that programs with different TTL share a job) and emits the result; each partition is processed
in step order (``order_by=["step"]``). Every program is cut into three runs, each a checkpoint
(ids 1, 2, 3), with a parallelism change and a backend switch between runs; one of the two
schedules rescales past the max parallelism (:func:`statecore.ops.rescale.rescale`, 2 -> 8)
before its last run. Every emitted result and the state of the last checkpoint (read back by
DuckDB, :func:`statecore.query.run_sql`) must equal the model's.

The sample is drawn once by a derandomized Hypothesis from :func:`.keyed.steps` (the same
programs on every run): of the first programs drawn, those whose results show most (results TTL
changed, reads that found a value), two without TTL (every state, namespaces and their merges)
and one per TTL update type and visibility (a task's TTL clock is the clock of the record it
processes, :class:`RecordClock`). Half of them run in each of the two schedules' job.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pprint
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, cast

import pytest
from hypothesis import strategies as st
from pyspark.sql import types as T

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.keygroups import assign_to_key_group
from statecore.query import run_sql
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.spark import KeyedRun, keyed_process
from statecore.ttl import StateTtlConfig, StateVisibility, UpdateType

from .keyed import KINDS, call_model, call_real, descriptors, model_ttl, steps
from .model import KeyedModel
from .spark_runs import Run, draw, run_job

pytestmark = [pytest.mark.spark, pytest.mark.slow]

Program = list[tuple[Any, ...]]
Rows = list[tuple[Any, ...]]
JOB = "programs"
INPUT = "program int, key string, step long, now long, namespace string, call string, unset boolean"
OUTPUT = T.StructType(
    [
        T.StructField("program", T.IntegerType()),
        T.StructField("key", T.StringType()),
        T.StructField("step", T.LongType()),
        T.StructField("result", T.StringType()),
    ]
)
GETTERS = {
    "value": "get_state",
    "list": "get_list_state",
    "map": "get_map_state",
    "reducing": "get_reducing_state",
    "aggregating": "get_aggregating_state",
}


SCHEDULES = {
    "1-2-3-past-max-parallelism": (Run("heap", 1, 2), Run("rocksdb", 2), Run("heap", 3, 8)),
    "3-1-2": (Run("rocksdb", 3, 4), Run("heap", 1), Run("rocksdb", 2)),
}
TTL_CONFIGS = [
    StateTtlConfig(ttl=timedelta(milliseconds=10), update_type=update, visibility=visibility)
    for update in UpdateType
    for visibility in StateVisibility
]
PLAIN_PROGRAMS = 2
POOL = 30


# -- the sample --------------------------------------------------------------------------------
def interest(program: Program, ttl: StateTtlConfig | None) -> tuple[int, int]:
    """How much a program shows: its results that TTL changed (against a run without TTL),
    then its reads that found something."""
    run = SCHEDULES["3-1-2"]
    results = {k: v for r in on_model(0, program, ttl, run).results for k, v in r.items()}
    changed = 0
    if ttl is not None:
        plain = {k: v for r in on_model(0, program, None, run).results for k, v in r.items()}
        changed = sum(results[k] != plain[k] for k in results)
    found = sum(v not in ("None", "[]", "0", "False", "True", "(0, 0)") for v in results.values())
    return changed, found


def most_interesting(
    programs: list[Program], ttls: list[StateTtlConfig | None]
) -> list[tuple[Program, StateTtlConfig | None]]:
    """For each TTL of ``ttls`` in turn, the most interesting program not yet chosen (the
    first drawn on a tie)."""
    chosen: list[tuple[Program, StateTtlConfig | None]] = []
    left = list(programs)
    for ttl in ttls:
        best = max(left, key=lambda program: interest(program, ttl))
        left.remove(best)
        chosen.append((best, ttl))
    return chosen


def in_a_job(step: tuple[Any, ...]) -> bool:
    """Whether a function can take ``step``: not a ``keys`` step (every subtask's keys)."""
    return bool(step[0] != "keys")


@functools.cache
def sample() -> list[tuple[Program, StateTtlConfig | None]]:
    """The programs, each with its TTL (``None``: none)."""
    plain = st.lists(steps(merges=True).filter(in_a_job), min_size=50, max_size=80)
    ttl = st.lists(steps(merges=False, ttl=True).filter(in_a_job), min_size=50, max_size=80)
    return [
        *most_interesting(draw(plain, POOL), [None] * PLAIN_PROGRAMS),
        *most_interesting(draw(ttl, POOL), list(TTL_CONFIGS)),
    ]


# -- the Spark side ----------------------------------------------------------------------------
class RecordClock:
    """The TTL clock of a Spark task: the model's clock at the step of the record being
    processed (:class:`ProgramFunction` sets it before each call). A class attribute, so the
    clock pickled to the task's backend and the function share it in the Python worker."""

    now_ms = 0

    def current_timestamp(self) -> int:
        return RecordClock.now_ms


class Unset:
    """What :func:`.keyed.call_real` asks the model (whether a read of the value state returns
    a stored value), answered by the row: the driver asked the model."""

    def __init__(self, unset: bool) -> None:
        self.unset = unset

    def is_set(self, name: str) -> bool:
        return not self.unset


def program_descriptors(program: int, ttl: StateTtlConfig | None) -> dict[str, Any]:
    """The states of :func:`.keyed.descriptors`, named ``<state>_<program>``."""
    return {
        name: dataclasses.replace(descriptor, name=f"{name}_{program}")
        for name, descriptor in descriptors(ttl).items()
    }


class ProgramFunction(KeyedProcessFunction):
    """Each record is one call on one state of one program."""

    def __init__(self, ttls: dict[int, StateTtlConfig | None]) -> None:
        self.ttls = ttls

    def open(self, ctx: RuntimeContext) -> None:
        self.states = {
            (program, name): getattr(ctx, GETTERS[KINDS[name].kind])(descriptor)
            for program, ttl in self.ttls.items()
            for name, descriptor in program_descriptors(program, ttl).items()
        }

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        RecordClock.now_ms = value.now
        step = tuple(json.loads(value.call))
        state = self.states[value.program, step[0]]
        state.set_current_namespace(value.namespace)
        result = call_real(state, step, cast(KeyedModel, Unset(value.unset)))
        yield value.program, ctx.current_key, value.step, encode(result)


def encode(result: Any) -> str:
    """A result as text, a map's items in key order (a map has no order)."""
    if isinstance(result, dict):
        return repr(sorted(result.items(), key=lambda item: item[0]))
    return repr(result)


# -- the model side ----------------------------------------------------------------------------
@dataclasses.dataclass
class Expected:
    """A program run on the model, cut into runs: each run's input rows and results (by step),
    and the model after the last run."""

    rows: list[Rows]
    results: list[dict[int, str]]
    model: KeyedModel


def on_model(
    index: int, program: Program, ttl: StateTtlConfig | None, schedule: tuple[Run, ...]
) -> Expected:
    """Program ``index`` on the model; its state calls cut into ``len(schedule)`` runs of
    (nearly) equal length, a checkpoint and a restore at the run's parallelism and max
    parallelism between two runs."""
    calls = sum(step[0] in KINDS for step in program)
    first = schedule[0]
    assert first.max_parallelism is not None
    model = KeyedModel(KINDS, model_ttl(ttl), first.parallelism, first.max_parallelism)
    model.key = "a"
    namespaces = dict.fromkeys(KINDS, "")
    expected = Expected([[]], [{}], model)

    def next_run() -> None:
        run = schedule[len(expected.rows)]
        max_parallelism = run.max_parallelism or model.max_parallelism
        model.restore(model.checkpoint(), run.parallelism, max_parallelism)
        expected.rows.append([])
        expected.results.append({})

    done = 0
    for n, step in enumerate(program):
        op = step[0]
        if op == "key":
            model.key = step[1]
        elif op == "ns":
            namespaces[step[1]] = step[2]
        elif op == "advance":
            model.now += step[1]
        elif op in KINDS:
            while len(expected.rows) <= done * len(schedule) // calls:
                next_run()
            done += 1
            model.namespace[op] = namespaces[op]
            unset = step[1] == "append_unset" and not model.is_set(op)
            row = (index, model.key, n, model.now, namespaces[op], json.dumps(list(step)), unset)
            expected.rows[-1].append(row)
            expected.results[-1][n] = encode(call_model(model, step))
    while len(expected.rows) < len(schedule):
        next_run()
    return expected


def model_state(model: KeyedModel, ttl: bool) -> dict[str, Rows]:
    """Every state's entries as snapshot rows ``(key, namespace, user_key, value,
    ttl_timestamp)`` (a list's values and timestamps as lists), sorted."""
    out: dict[str, Rows] = {name: [] for name in KINDS}
    for subtask in model.subtasks:
        for name, table in subtask.items():
            kind = KINDS[name].kind
            for (key, namespace), stored in table.items():
                if kind == "list":
                    values, stamps = [v for v, _ in stored], [ts for _, ts in stored]
                    out[name].append((key, namespace, None, values, stamps if ttl else None))
                elif kind == "map":
                    for user_key, (v, ts) in stored.items():
                        out[name].append((key, namespace, user_key, v, ts if ttl else None))
                else:
                    out[name].append((key, namespace, None, stored[0], stored[1] if ttl else None))
    return {name: sorted(rows, key=repr) for name, rows in out.items()}


def spark_state(catalog: Catalog, program: int, max_parallelism: int) -> dict[str, Rows]:
    """A program's states in the job's latest checkpoint as :func:`model_state`'s rows; each
    row's key group checked."""
    out: dict[str, Rows] = {}
    for name in KINDS:
        rows = run_sql(catalog, f"SELECT * FROM {JOB}.{name}_{program}", job=JOB).to_pylist()
        for r in rows:
            assert r["key_group"] == assign_to_key_group(r["key"], max_parallelism), r
        out[name] = sorted(
            (
                (r["key"], r["namespace"], r.get("user_key"), r["value"], r.get("ttl_timestamp"))
                for r in rows
            ),
            key=repr,
        )
    return out


def describe(index: int, schedule: tuple[Run, ...]) -> str:
    program, ttl = sample()[index]
    lines = [f"  {n:3} {step!r}" for n, step in enumerate(program)]
    return "\n".join([f"program {index}, ttl={ttl}, runs={schedule}:", *lines])


# -- the test ----------------------------------------------------------------------------------
def run_differences(
    expected: dict[int, Expected], run: int, output: Rows, schedule: tuple[Run, ...]
) -> list[str]:
    """Each program whose results of ``run`` differ from the model's, with the differences."""
    emitted = {(i, key, step): result for i, key, step, result in output}
    failures = []
    for i, program in expected.items():
        keys = {row[2]: row[1] for row in program.rows[run]}
        differences = [
            f"  step {step} {sample()[i][0][step]!r} (key {keys[step]!r}): "
            f"Spark {emitted.get((i, keys[step], step), '<nothing>')}, model {want}"
            for step, want in sorted(program.results[run].items())
            if emitted.get((i, keys[step], step)) != want
        ]
        if differences:
            failures.append(describe(i, schedule) + "\n" + "\n".join(differences))
    return failures


def state_differences(
    catalog: Catalog, expected: dict[int, Expected], max_parallelism: int, schedule: tuple[Run, ...]
) -> list[str]:
    """Each program whose state in the job's latest checkpoint differs from the model's."""
    failures = []
    for i, program in expected.items():
        real = spark_state(catalog, i, max_parallelism)
        model = model_state(program.model, sample()[i][1] is not None)
        differences = [
            f"  {name}:\n    Spark {pprint.pformat(real[name])}\n"
            f"    model {pprint.pformat(model[name])}"
            for name in KINDS
            if real[name] != model[name]
        ]
        if differences:
            failures.append(f"{describe(i, schedule)}\nfinal state:\n" + "\n".join(differences))
    return failures


@pytest.mark.parametrize("name", SCHEDULES)
def test_reference_model_spark_sample(
    spark: Any, statecore_home: StatecoreConfig, name: str
) -> None:
    schedule = SCHEDULES[name]
    mine = range(list(SCHEDULES).index(name), len(sample()), len(SCHEDULES))
    expected = {i: on_model(i, *sample()[i], schedule) for i in mine}
    function = ProgramFunction({i: sample()[i][1] for i in mine})

    def submit(n: int, run: Run, max_parallelism: int) -> KeyedRun:
        rows = [row for program in expected.values() for row in program.rows[n]]
        return keyed_process(
            spark.createDataFrame(rows, INPUT),
            key="key",
            function=function,
            output_schema=OUTPUT,
            job=JOB,
            checkpoint_id=n + 1,
            parallelism=run.parallelism,
            max_parallelism=run.max_parallelism if n == 0 else None,
            order_by=["step"],
            backend=run.backend,
            processing_time=RecordClock(),
            input_fingerprint=f"run {n + 1}",
        )

    outputs = run_job(statecore_home, JOB, schedule, submit)
    for n, (run, output) in enumerate(zip(schedule, outputs, strict=True)):
        failures = run_differences(expected, n, output, schedule)
        assert not failures, f"run {n + 1} ({run}) of\n" + "\n".join(failures)
        assert len(output) == sum(len(program.rows[n]) for program in expected.values())
    max_parallelism = [run.max_parallelism for run in schedule if run.max_parallelism][-1]
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        failures = state_differences(catalog, expected, max_parallelism, schedule)
    assert not failures, "\n".join(failures)
